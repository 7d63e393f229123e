#!/usr/bin/env bash
# Really stop the worker: after SIGTERM a Prefect 3.9 process worker keeps running (and even
# starts the next scheduled run) until a second signal, so send SIGTERM, wait, SIGINT, wait,
# then SIGKILL, each to the worker's whole process group (its flow-run processes included).
set -euo pipefail
source "$(dirname "$0")/common.sh"
stop_pid "$RUN_DIR/worker.pid" "prefect worker"
