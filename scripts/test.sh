#!/usr/bin/env bash
# Sets up and runs every check: lint, types, contract export, then the test suite.
# KAIROS_TEST_BROKER=apache|tansu|external picks the broker (default: apache if Java+Maven).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

"$VENV/bin/ruff" check schemas streams api kairos tests
"$VENV/bin/mypy" --no-error-summary
"$VENV/bin/lint-imports" --no-cache
"$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
