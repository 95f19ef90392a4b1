"""The lowering table: pure jax functions, one per ATen overload, grouped by op family.

Importing this package fills `LOWERINGS`; it does not import jax (the families use the lazy
proxies of `torch_neuronx.runtime.lazy_jax`), so it is cheap enough for `import torch`'s autoload.

The families (FAMILIES, one module each, its docstring saying what it covers): copy, elementwise
(arithmetic, math, activations, comparisons, bitwise ops and shifts), reduction (reductions, scans,
softmax, segment_reduce, hash_tensor), linalg (matrix products, trace), linalg_decomp (matrix
decompositions and solvers), norm (batch/layer/group norm), shape (copying shape ops), views,
indexing (gathers, scatters, embeddings), sorting, histogram, conv (convolution, im2col/col2im),
pooling, resample (upsampling, padding, grid sampling), distance (cdist/pdist), fft, loss
(ctc_loss), factory, random, attention, special (torch.special's functions), optim (the `_foreach_*`
family, the fused optimizers, GradScaler's ops).

Modules with no lowerings, shared by the families: _registry (the table, `lower`, `require`),
dtypes (PyTorch's conversion and compute-dtype rules), promotion (type promotion), dims (dim
arguments), windows (sliding-window arithmetic of conv and pooling), cephes (Cephes' series
evaluators and coefficient tables), decompositions (what is decomposed rather than lowered),
cpu_reductions (reductions lowered without unit dims on XLA's CPU backend).
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
    "histogram",
    "conv",
    "pooling",
    "resample",
    "distance",
    "fft",
    "loss",
    "factory",
    "random",
    "attention",
    "special",
    "optim",  # last: its foreach rule maps the other families' per-tensor lowerings
)

from ..runtime.lazy_jax import deferring
from . import cpu_reductions  # noqa: F401  (its lowering rules, registered when jax loads)

with deferring():
    for _family in FAMILIES:
        importlib.import_module(f"{__name__}.{_family}")

__all__ = ["LOWERINGS", "Lowering", "lower", "normalize", "FAMILIES"]
