#!/usr/bin/env bash
# Quick start, second command: set up what is missing, then run the default test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(bash scripts/setup.sh | tail -n 1)
# two workers (pytest-xdist), one per core; a file's tests stay together (module fixtures run once)
exec "$PY" -m pytest -q -p no:cacheprovider -n 2 --dist loadfile "$@"
