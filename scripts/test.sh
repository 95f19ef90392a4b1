#!/usr/bin/env bash
# Quick start, second command: set up what is missing, then run the default test suite.
#   bash scripts/test.sh [pytest arguments]          the default suite (CI runs this)
#   bash scripts/test.sh --warm [pytest arguments]   the warm-cache sweep (tests/warm_cache.py): the op sweep
#                                                    (or the tests given) run twice in new processes over one
#                                                    cache folder; the second pass must load every executable
#                                                    the first compiled, compile none and match it bit for bit
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(bash scripts/setup.sh | tail -n 1)
if [ "${1:-}" = "--warm" ]; then
  shift
  exec "$PY" tests/warm_cache.py "$@"
fi
# two workers (pytest-xdist), one per core; a file's tests stay together (module fixtures run once)
exec "$PY" -m pytest -q -p no:cacheprovider -n 2 --dist loadfile "$@"
