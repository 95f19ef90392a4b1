"""Window arithmetic shared by the convolution family (conv.py's im2col/col2im) and pooling.py:
per-dimension arguments broadcast to the spatial dims (`expand`), the strided slice a kernel offset
sees (`window_slice`), overlap-add, the transpose of reading windows (`overlap_add`), and the
dtype and precision their sums run in (`accumulation_dtype`, `is_inexact`, `precision`).
No lowerings here.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..runtime.lazy_jax import jnp, lax
from .dtypes import is_low_precision

__all__ = ["expand", "accumulation_dtype", "is_inexact", "precision", "window_slice", "overlap_add"]

_F32 = np.dtype(np.float32)
_I64 = np.dtype(np.int64)


def expand(v, n: int, name: str = "") -> tuple:
    """An int or int list broadcast to n spatial dims (PyTorch accepts one value for all)."""
    if isinstance(v, int):
        return (v,) * n
    v = tuple(int(x) for x in v)
    if len(v) == 1 and n != 1:
        return v * n
    return v


def accumulation_dtype(dtype):
    """The dtype sums run in: float32 for 16-bit floats, int64 for integers, else the dtype."""
    dtype = np.dtype(dtype)
    if is_low_precision(dtype):
        return _F32
    if jnp.issubdtype(dtype, np.integer) or dtype == np.bool_:
        return _I64
    return dtype


def is_inexact(dtype) -> bool:
    """A floating or complex dtype."""
    return bool(jnp.issubdtype(np.dtype(dtype), np.inexact))


def precision(dtype):
    """The dot/conv precision of a dtype: HIGHEST (true float32, no bf16 passes) for inexact ones."""
    return lax.Precision.HIGHEST if is_inexact(dtype) else None


def window_slice(xp, off, s, d, o):
    """The strided slice of the (padded) input seen by kernel offset `off` at every output."""
    nsp = len(off)
    nb = xp.ndim - nsp
    start = (0,) * nb + tuple(oi * di for oi, di in zip(off, d))
    limit = tuple(xp.shape[:nb]) + tuple(oi * di + (on - 1) * si + 1 for oi, di, si, on in zip(off, d, s, o))
    return lax.slice(xp, start, limit, (1,) * nb + tuple(s))


def overlap_add(blocks, n, k, s, p, d, o, zero):
    """Sum over kernel offsets of `blocks(off)` (..., *o), each output placed at the input
    position o*s - p + off*d; positions outside [0, n) are dropped. -> (..., *n).
    The transpose of reading windows: col2im, and the backward of average pooling."""
    nsp = len(n)
    total = None
    for off in itertools.product(*(range(ki) for ki in k)):
        b = blocks(off)
        cfg = [(0, 0, 0)] * (b.ndim - nsp)
        for i in range(nsp):
            lo = off[i] * d[i] - p[i]
            hi = n[i] - lo - (o[i] - 1) * s[i] - 1
            cfg.append((lo, hi, s[i] - 1))
        placed = lax.pad(b, zero, cfg)
        total = placed if total is None else total + placed
    return total
