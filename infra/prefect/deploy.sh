#!/usr/bin/env bash
# Create the process work pool (if missing) and deploy every deployment in prefect.yaml.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$REPO"
"$PREFECT" work-pool inspect "$POOL" >/dev/null 2>&1 || "$PREFECT" work-pool create "$POOL" --type process
"$PREFECT" --no-prompt deploy --all
