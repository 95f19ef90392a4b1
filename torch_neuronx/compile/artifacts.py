"""Debug artifacts of compiled graphs: with TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS=1 each graph's
FX code and StableHLO text are written to TORCH_NEURONX_DEBUG_DIR (default ./neuron_debug)."""
from __future__ import annotations

import os
import re

PRESERVE_ENV = "TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS"
DIR_ENV = "TORCH_NEURONX_DEBUG_DIR"


def enabled() -> bool:
    return os.environ.get(PRESERVE_ENV, "0").lower() in ("1", "true", "yes")


def directory() -> str:
    return os.environ.get(DIR_ENV, os.path.join(os.getcwd(), "neuron_debug"))


def save(graph_name: str, version: int, gm, lowered) -> list[str]:
    """Write `<graph>.<n>.fx.py` and `<graph>.<n>.stablehlo.mlir`; returns the paths written."""
    if not enabled():
        return []
    root = directory()
    os.makedirs(root, exist_ok=True)
    stem = os.path.join(root, re.sub(r"[^A-Za-z0-9_.-]", "_", f"{graph_name}.{version}"))
    paths = []
    for suffix, text in ((".fx.py", gm.print_readable(print_output=False)), (".stablehlo.mlir", lowered.as_text())):
        path = stem + suffix
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)  # readers never see half a file
        paths.append(path)
    return paths
