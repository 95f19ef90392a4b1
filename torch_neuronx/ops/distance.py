"""Pairwise distances: _cdist_forward (torch.cdist) and _pdist_forward (F.pdist), the p-norms of
row differences as ATen's cdist/pdist kernels define them for each p (0: the count of nonzeros,
inf: the max).

`_cdist_forward` follows the CPU's two algorithms: for p=2 with compute_mode 1, or compute_mode
0/None and more than 25 rows on either side, the matrix-product form of `_euclidean_dist`
(||a||^2 - 2ab + ||b||^2, clamped at 0, then sqrt); otherwise the distances of the differences.
`_pdist_forward` enumerates the pairs i < j in row-major order on the device (no n^2 constants).
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime.lazy_jax import jnp, lax
from ._registry import aten, lower

_I64 = np.dtype(np.int64)
_F64 = np.dtype(np.float64)


def _pair_norm(diff, p: float, axis: int = -1):
    """The p-norm over `axis` of differences, as ATen's cdist/pdist kernels define it for each p."""
    a = jnp.abs(diff)
    if p == 0:
        return jnp.sum((a != 0).astype(diff.dtype), axis=axis)
    if p == 1:
        return jnp.sum(a, axis=axis)
    if p == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=axis))
    if math.isinf(p):
        return jnp.max(a, axis=axis)
    return jnp.sum(a**p, axis=axis) ** (1.0 / p)


def _upper_pairs(n: int, count: int):
    """(i, j) of the k-th pair i < j in row-major order, for k < count = n(n-1)/2, computed on the
    device (no n^2 constants): the row from the closed form, then corrected by one if rounding
    put it off."""
    k = jnp.arange(count, dtype=_I64)
    disc = (4 * n * (n - 1) - 7 - 8 * k).astype(_F64)
    i = n - 2 - jnp.floor(jnp.sqrt(disc) / 2 - 0.5).astype(_I64)
    start = lambda r: r * n - r * (r + 1) // 2  # noqa: E731  (index of pair (r, r+1))
    i = jnp.where(k < start(i), i - 1, jnp.where(k >= start(i + 1), i + 1, i))
    j = k - start(i) + i + 1
    return i, j


def _dot_t(a, b):
    """a (..., n, k) @ b (..., m, k)^T in true float precision."""
    nb = a.ndim - 2
    batch = tuple(range(nb))
    return lax.dot_general(a, b, (((a.ndim - 1,), (b.ndim - 1,)), (batch, batch)), precision=lax.Precision.HIGHEST)


# ---------------------------------------------------------------------------------------------
# lowerings, alphabetical


# _cdist_forward(Tensor x1, Tensor x2, float p, int? compute_mode) -> Tensor
@lower(aten._cdist_forward.default)
def _cdist_forward(x1, x2, p, compute_mode):
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    mode = 0 if compute_mode is None else int(compute_mode)
    if not 0 <= mode <= 2:
        raise RuntimeError(f"possible modes: 0, 1, 2, but was: {mode}")
    batch = tuple(jnp.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]))
    r1, c = x1.shape[-2:]
    r2 = x2.shape[-2]
    out_shape = batch + (r1, r2)
    if r1 == 0 or r2 == 0 or math.prod(batch) == 0 or c == 0:
        return jnp.zeros(out_shape, x1.dtype)
    a = jnp.broadcast_to(x1, batch + (r1, c))
    b = jnp.broadcast_to(x2, batch + (r2, c))
    if p == 2 and (mode == 1 or (mode == 0 and (r1 > 25 or r2 > 25))):
        # _euclidean_dist: [-2a, |a|^2, 1] @ [b, 1, |b|^2]^T, clamped at 0, sqrt
        an = jnp.sum(a * a, axis=-1, keepdims=True)
        bn = jnp.sum(b * b, axis=-1, keepdims=True)
        a_ = jnp.concatenate([a * -2, an, jnp.ones_like(an)], axis=-1)
        b_ = jnp.concatenate([b, jnp.ones_like(bn), bn], axis=-1)
        return jnp.sqrt(jnp.maximum(_dot_t(a_, b_), 0))
    return _pair_norm(a[..., :, None, :] - b[..., None, :, :], p)


# _pdist_forward(Tensor self, float p=2.) -> Tensor
@lower(aten._pdist_forward.default)
def _pdist_forward(self, p):
    n, m = self.shape
    if n <= 1:
        return jnp.zeros((0,), self.dtype)
    count = n * (n - 1) // 2
    if m == 0:
        return jnp.zeros((count,), self.dtype)
    i, j = _upper_pairs(n, count)
    rows = lambda r: self.at[r].get(mode="promise_in_bounds")  # noqa: E731
    return _pair_norm(rows(i) - rows(j), p)
