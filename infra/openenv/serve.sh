#!/usr/bin/env bash
# Serve an OpenEnv environment over HTTP/WebSocket with uvicorn, for OpenEnvClient.
# Usage: ./serve.sh [MODULE:APP] [PORT]   (default: twinkle's number_guess env on 127.0.0.1:8001)
# Env: HOST (127.0.0.1), WORKERS (1: sessions live in the process, so never more than one).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"; [ -x "$PY" ] || PY="$(command -v python3)"
APP="${1:-twinkle.envs.openenv_envs.number_guess.server:app}"
exec "$PY" -m uvicorn "$APP" --host "${HOST:-127.0.0.1}" --port "${2:-8001}" --workers 1
