#!/usr/bin/env bash
# Sets up and runs every check: lint, types, contract export, then the test suite.
# KAIROS_TEST_BROKER=apache|tansu|external picks the broker (default: apache if Java+Maven).
# `--tests-only` skips the static checks (they do not depend on the broker); any other
# arguments go to pytest, e.g. `bash scripts/test.sh --tests-only -q tests/integration`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

if [[ "${1:-}" == "--tests-only" ]]; then
    shift
else
    "$VENV/bin/ruff" check schemas streams api kairos tests
    "$VENV/bin/ruff" format --check --quiet schemas streams api kairos tests bench scripts
    "$VENV/bin/mypy" --no-error-summary
    "$VENV/bin/lint-imports" --no-cache
fi
"$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
