"""Debug artifacts of compiled graphs, as TorchNeuron keeps them: with
TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS=1 each graph's FX code, its StableHLO text, the optimized HLO
XLA compiled and the serialized executable (ours stands where TorchNeuron's NEFF does) are written to
TORCH_NEURONX_DEBUG_DIR (default /tmp/neuron_backend, TorchNeuron's)."""
from __future__ import annotations

import os
import re

from ..runtime import config, executables

PRESERVE_ENV = "TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS"
DIR_ENV = "TORCH_NEURONX_DEBUG_DIR"


def enabled() -> bool:
    return config.settings.preserve_compilation_artifacts


def directory() -> str:
    return os.path.abspath(config.settings.debug_dir)


def save(graph_name: str, version: int, gm, lowered, compiled=None) -> list[str]:
    """Write `<graph>.<n>.fx.py`, `.stablehlo.mlir`, and given the `compiled` executable `.hlo.txt` (XLA's
    optimized module) and `.executable` (its serialized bytes, as the disk cache stores them; left out for
    one that cannot be serialized: it calls back into Python); returns the paths written."""
    if not enabled():
        return []
    root = directory()
    os.makedirs(root, exist_ok=True)
    stem = os.path.join(root, re.sub(r"[^A-Za-z0-9_.-]", "_", f"{graph_name}.{version}"))
    parts = [(".fx.py", gm.print_readable(print_output=False)), (".stablehlo.mlir", lowered.as_text())]
    if compiled is not None:
        parts.append((".hlo.txt", compiled.as_text()))
        try:
            parts.append((".executable", executables.serialize(compiled)))
        except executables.NotSerializable:
            pass
    paths = []
    for suffix, content in parts:
        path = stem + suffix
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "wb" if isinstance(content, bytes) else "w") as f:
            f.write(content)
        os.replace(tmp, path)  # readers never see half a file
        paths.append(path)
    return paths
