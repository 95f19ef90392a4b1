#!/usr/bin/env bash
# Installs what is missing for torch-neuronx into the current Python 3.11 and builds the C++ shim
# against the torch that is installed. Safe to run again: it only does what is not done yet.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for cand in python3.11 python3 python; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      PY=$cand; break
    fi
  done
fi
[ -n "$PY" ] || { echo "setup: Python 3.11 is required" >&2; exit 1; }

# Pinned: torch 2.13.0 is the CPU build that lies on this machine's disk; pinning it keeps pip from
# fetching a CUDA build. Everything else comes from the package index by name.
# expecttest: torch.testing._internal (OpInfo) imports it; pytest-timeout: a hung test fails;
# pytest-xdist: the default test run uses both cores (scripts/test.sh); accelerate: diffusers'
# tensor-parallel from_pretrained loads on the meta device, which needs it (tests/test_tensor_parallel.py);
# peft: diffusers' LoRA adapters and their hot-swap (tests/test_lora_hotswap.py).
# ml_dtypes 0.6.0: 0.7.0 takes 0.7-0.9 s to import (jax imports it on the first device use), 0.6.0 0.07 s.
PINS=(torch==2.13.0 jax==0.10.2 jaxlib==0.10.2 "numpy>=1.26" ml_dtypes==0.6.0 "pytest>=8"
      expecttest==0.3.0 pytest-timeout==2.4.0 pytest-xdist==3.8.0
      diffusers==0.42.1 transformers==5.23.0 accelerate==1.15.0 peft==0.21.2 "setuptools>=64" wheel ninja)
if ! "$PY" - "${PINS[@]}" <<'PYEOF'
import sys
from importlib.metadata import version, PackageNotFoundError
import re
for pin in sys.argv[1:]:
    name, op, want = re.match(r"([A-Za-z0-9_.-]+)(==|>=)?(.*)", pin).groups()
    try:
        have = version(name)
    except PackageNotFoundError:
        sys.exit(1)
    if op == "==" and have.split("+")[0] != want:
        sys.exit(1)
PYEOF
then
  echo "setup: installing dependencies" >&2
  "$PY" -m pip install --quiet "${PINS[@]}"
fi

# Build the shim (again) when it is missing or its sources changed, and register the package
# (metadata and the torch.backends entry point) without letting pip touch its dependencies.
stamp=build/.shim-stamp
sum=$(cat csrc/* setup.py pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$sum" ] || ! ls torch_neuronx/_C*.so >/dev/null 2>&1 \
   || ! "$PY" -c 'import importlib.metadata as m; m.version("torch-neuronx")' >/dev/null 2>&1 \
   || ! "$PY" -P -c 'import importlib.util as u, os, sys
s = u.find_spec("torch_neuronx")  # the install must point at this checkout (it may have moved); -P skips the cwd
sys.exit(s is None or not s.origin.startswith(os.getcwd() + "/"))' >/dev/null 2>&1; then
  echo "setup: building the C++ shim and installing torch-neuronx (editable)" >&2
  "$PY" -m pip install --quiet --no-build-isolation --no-deps -e .
  mkdir -p build && echo "$sum" > "$stamp"
fi
echo "$PY"
