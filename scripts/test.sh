#!/usr/bin/env bash
# Quick start, second command: set up what is missing, then run the default test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(bash scripts/setup.sh | tail -n 1)
exec "$PY" -m pytest -q -p no:cacheprovider "$@"
