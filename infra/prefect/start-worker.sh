#!/usr/bin/env bash
# Start a process worker for the pool, from the repository root (flows run from this checkout).
# Stop it with stop-worker.sh: a plain SIGTERM is not enough (see README.md).
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$REPO"
if [ -f "$RUN_DIR/worker.pid" ] && kill -0 "$(cat "$RUN_DIR/worker.pid")" 2>/dev/null; then
  echo "worker already running (pid $(cat "$RUN_DIR/worker.pid"))"; exit 0
fi
setsid "$PREFECT" worker start --pool "$POOL" ${WORKER_ARGS:-} >"$RUN_DIR/worker.log" 2>&1 &
echo $! >"$RUN_DIR/worker.pid"
echo "worker started (pid $!, pool $POOL, log: $RUN_DIR/worker.log)"
