#!/usr/bin/env bash
# Start a Prefect server in the background and wait until it answers.
# Env: PREFECT_HOST (127.0.0.1), PREFECT_PORT (4200), PREFECT_HOME (state, default ~/.prefect),
#      TWINKLE_RUN_DIR (pid and log files).
set -euo pipefail
source "$(dirname "$0")/common.sh"
if [ -f "$RUN_DIR/server.pid" ] && kill -0 "$(cat "$RUN_DIR/server.pid")" 2>/dev/null; then
  echo "server already running (pid $(cat "$RUN_DIR/server.pid"))"; exit 0
fi
setsid "$PREFECT" server start --host "$HOST" --port "$PORT" >"$RUN_DIR/server.log" 2>&1 &
echo $! >"$RUN_DIR/server.pid"
for _ in $(seq 1 120); do
  if curl -fsS "http://$HOST:$PORT/api/health" >/dev/null 2>&1; then
    echo "Prefect server up: http://$HOST:$PORT (log: $RUN_DIR/server.log)"
    echo "export PREFECT_API_URL=http://$HOST:$PORT/api"
    exit 0
  fi
  kill -0 "$(cat "$RUN_DIR/server.pid")" 2>/dev/null || { cat "$RUN_DIR/server.log" >&2; exit 1; }
  sleep 0.5
done
echo "server did not answer in 60 s (log: $RUN_DIR/server.log)" >&2; exit 1
