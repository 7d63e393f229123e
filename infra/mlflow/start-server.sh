#!/usr/bin/env bash
# A lean MLflow tracking server: one worker, no job runner (the defaults start ~15 processes
# and ~3 GB RSS; this ~2 processes and ~0.5 GB), SQLite store, absolute artifact root.
# Env: MLFLOW_DATA (state dir, default ./mlflow-data), MLFLOW_HOST (127.0.0.1), MLFLOW_PORT (5000).
set -euo pipefail
DATA="$(mkdir -p "${MLFLOW_DATA:-./mlflow-data}" && cd "${MLFLOW_DATA:-./mlflow-data}" && pwd)"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
MLFLOW="${MLFLOW:-$REPO/.venv/bin/mlflow}"; [ -x "$MLFLOW" ] || MLFLOW="$(command -v mlflow)"
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false MLFLOW_ENABLE_TELEMETRY=false
exec "$MLFLOW" server \
  --backend-store-uri "sqlite:///$DATA/mlflow.db" \
  --default-artifact-root "$DATA/mlruns" \
  --host "${MLFLOW_HOST:-127.0.0.1}" --port "${MLFLOW_PORT:-5000}" \
  --workers 1
