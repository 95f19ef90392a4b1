#!/usr/bin/env bash
# Quick start, first command: set up what is missing, then run the demo on the neuron device.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(bash scripts/setup.sh | tail -n 1)
exec "$PY" examples/demo.py "$@"
