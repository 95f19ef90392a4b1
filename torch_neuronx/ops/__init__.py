"""The lowering library: pure jax functions, one per ATen overload, grouped by op family.

Importing this package fills `LOWERINGS`; it does not import jax (the families use the lazy
proxies of `torch_neuronx.runtime.lazy_jax`), so it is cheap enough for `import torch`'s autoload.
"""
import importlib

from ._registry import LOWERINGS, Lowering, lower, normalize

FAMILIES = (
    "copy",
    "elementwise",
    "reduction",
    "linalg",
    "linalg_decomp",
    "norm",
    "shape",
    "views",
    "indexing",
    "sorting",
    "conv",
    "pooling",
    "resample",
    "factory",
    "random",
    "attention",
    "fft",
    "histogram",
    "loss",
    "distance",
    "special",
)

from ..runtime.lazy_jax import deferring

with deferring():
    for _family in FAMILIES:
        importlib.import_module(f"{__name__}.{_family}")

__all__ = ["LOWERINGS", "Lowering", "lower", "normalize", "FAMILIES"]
