# Shared settings for the Prefect scripts (sourced, not run).
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PREFECT="${PREFECT:-$REPO/.venv/bin/prefect}"
[ -x "$PREFECT" ] || PREFECT="$(command -v prefect)"
RUN_DIR="${TWINKLE_RUN_DIR:-${XDG_RUNTIME_DIR:-/tmp}/twinkle-prefect}"
HOST="${PREFECT_HOST:-127.0.0.1}"
PORT="${PREFECT_PORT:-4200}"
POOL="${TWINKLE_POOL:-twinkle-pool}"
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_API_URL="${PREFECT_API_URL:-http://$HOST:$PORT/api}"
export COLUMNS=200   # prefect's tables truncate to the terminal width otherwise
mkdir -p "$RUN_DIR"

# stop_pid PIDFILE NAME: SIGTERM, wait, SIGINT, wait, SIGKILL, each to the whole process group.
stop_pid() {
  local pidfile="$1" name="$2" pid
  [ -f "$pidfile" ] || { echo "$name: not running (no $pidfile)"; return 0; }
  pid="$(cat "$pidfile")"
  for sig in TERM INT KILL; do
    kill -0 "$pid" 2>/dev/null || break
    echo "$name: sending SIG$sig to process group $pid"
    kill -s "$sig" -- "-$pid" 2>/dev/null || kill -s "$sig" "$pid" 2>/dev/null || true
    for _ in $(seq 1 "${STOP_WAIT_SECONDS:-5}0"); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
  if kill -0 "$pid" 2>/dev/null; then echo "$name: still alive after SIGKILL" >&2; return 1; fi
  rm -f "$pidfile"
  echo "$name: stopped"
}
