#!/usr/bin/env bash
# Stop the server started by start-server.sh (it exits within a few seconds of SIGTERM).
set -euo pipefail
source "$(dirname "$0")/common.sh"
stop_pid "$RUN_DIR/server.pid" "prefect server"
