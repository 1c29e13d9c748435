#!/usr/bin/env bash
# Sets up and runs the whole Kairos stack on this machine: `bash scripts/dev.sh [--reset]`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec "$VENV/bin/kairos" dev "$@"
