#!/usr/bin/env bash
# Run the local E2B-compatible sandbox server in the foreground (Ctrl-C or SIGTERM stops it
# and kills every sandbox). Settings come from the environment:
#   E2B_API_KEY          required: the key clients must send
#   SANDBOX_PORT         port to listen on            [49983]
#   SANDBOX_HOST         interface                    [127.0.0.1]; keep it on loopback
#   SANDBOX_TEMPLATES    YAML/JSON templates file     [infra/sandbox/templates.example.yaml]
#   SANDBOX_ROOT         directory for sandbox files  [a fresh temporary directory]
#   TWINKLE_PYTHON       interpreter with twinkle installed [.venv/bin/python]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
: "${E2B_API_KEY:?set E2B_API_KEY to the key clients will send}"
python="${TWINKLE_PYTHON:-$repo/.venv/bin/python}"
args=(--port "${SANDBOX_PORT:-49983}" --host "${SANDBOX_HOST:-127.0.0.1}"
      --templates "${SANDBOX_TEMPLATES:-$here/templates.example.yaml}")
if [[ -n "${SANDBOX_ROOT:-}" ]]; then
  args+=(--root "$SANDBOX_ROOT")
fi
command -v bwrap >/dev/null || { echo "bubblewrap is missing: apt-get install -y bubblewrap" >&2; exit 1; }
exec "$python" -m twinkle sandbox serve "${args[@]}"
