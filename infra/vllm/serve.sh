#!/usr/bin/env bash
# vLLM as an OpenAI-compatible policy server, in its OWN virtualenv: vLLM pins fastapi<0.137,
# pillow>=13 and torch==2.14, which conflict with Prefect (fastapi>=0.139) and openenv.
# Usage: ./serve.sh MODEL [PORT]     e.g. ./serve.sh Qwen/Qwen3-8B 8000      (needs a GPU)
# Env: VLLM_VENV (default ~/.venvs/vllm), VLLM_VERSION (0.33.0), VLLM_API_KEY (optional), HOST.
set -euo pipefail
MODEL="${1:?usage: serve.sh MODEL [PORT]}"
VENV="${VLLM_VENV:-$HOME/.venvs/vllm}"
if [ ! -x "$VENV/bin/vllm" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "vllm==${VLLM_VERSION:-0.33.0}"
fi
ARGS=(serve "$MODEL" --host "${HOST:-127.0.0.1}" --port "${2:-8000}"
      --enable-auto-tool-choice --tool-call-parser hermes)
[ -n "${VLLM_API_KEY:-}" ] && ARGS+=(--api-key "$VLLM_API_KEY")
exec "$VENV/bin/vllm" "${ARGS[@]}"
