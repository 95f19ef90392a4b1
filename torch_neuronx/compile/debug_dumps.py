"""Debug artifacts of compiled graphs: with TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS=1 each graph's
FX code and StableHLO text are written to TORCH_NEURONX_DEBUG_DIR (default ./neuron_debug)."""
from __future__ import annotations

import os
import re

from ..runtime import config

PRESERVE_ENV = "TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS"
DIR_ENV = "TORCH_NEURONX_DEBUG_DIR"


def enabled() -> bool:
    return config.settings.preserve_compilation_artifacts


def directory() -> str:
    return os.path.abspath(config.settings.debug_dir)


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
