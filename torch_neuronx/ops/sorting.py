"""Sorting and order statistics: sort, topk, kthvalue, median/nanmedian, mode, cummax/cummin,
searchsorted/bucketize, and randperm.

PyTorch's order: NaN is larger than everything (+inf included), -0.0 equals 0.0. Every comparison
sort here runs on an integer key with exactly that order (`_order_key`: floats by their bits, NaN and
-0.0 made canonical first), so one stable integer sort serves every dtype, and descending order is the
bitwise complement of the key (equal elements keep their original order either way).

Ties: `sort` is stable (PyTorch's `sort.default` is not, for rows longer than 16; its values match,
its indices among equal values are unspecified). topk/kthvalue/median pick the lowest index among
equal values, the CPU kernels' nth_element/partial_sort leave that unspecified (topk with k=1
matches). searchsorted/bucketize replay the CPU kernel's binary search step by step, so they agree
with it even on unsorted boundaries and NaNs.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..runtime.lazy_jax import jax, jnp, lax
from .dtypes import cast, is_low_precision, to_numpy_dtype
from ._registry import aten, lower, require
from .promotion import result_dtype

_I32 = np.dtype(np.int32)
_I64 = np.dtype(np.int64)
_F32 = np.dtype(np.float32)
_BOOL = np.dtype(np.bool_)


# ---------------------------------------------------------------------------------------------
# helpers


def _order_key(x, descending: bool = False):
    """A signed-integer array ordered as PyTorch orders `x` (NaN largest, -0.0 == 0.0); its bitwise
    complement orders descending. Equal keys <=> equal values (all NaNs equal)."""
    dt = np.dtype(x.dtype)
    if dt == _BOOL:
        key = x.astype(_I32)
    elif dt.kind == "f" or is_low_precision(dt):
        if dt.itemsize < 4:
            x = x.astype(_F32)  # exact
        wide = np.dtype(x.dtype).itemsize == 8
        ity = _I64 if wide else _I32
        x = jnp.where(x == 0, jnp.zeros((), x.dtype), x)  # -0.0 -> 0.0
        x = jnp.where(jnp.isnan(x), jnp.full((), np.nan, x.dtype), x)  # one NaN, positive
        bits = lax.bitcast_convert_type(x, ity)
        mask = np.array(np.iinfo(ity).max, ity)
        key = jnp.where(bits < 0, bits ^ mask, bits)
    elif dt.kind == "u":
        if dt.itemsize <= 2:
            key = x.astype(_I32)
        elif dt.itemsize == 4:
            key = x.astype(_I64)
        else:  # uint64: flip the top bit, then reinterpret
            key = lax.bitcast_convert_type(x ^ np.uint64(1 << 63), _I64)
    elif dt.kind == "i":
        key = x
    else:
        raise TypeError(f"sort: dtype {dt} is not supported")
    return ~key if descending else key


def _is_float(dt) -> bool:
    dt = np.dtype(dt)
    return dt.kind == "f" or is_low_precision(dt)


def _isnan(x):
    return jnp.isnan(x) if _is_float(x.dtype) else jnp.zeros(x.shape, _BOOL)


def _moved(x, dim):
    """x with `dim` moved last (0-d viewed as 1-d), and the function putting a result back."""
    if x.ndim == 0:
        return x.reshape(1), lambda y: y.reshape(()) if y.size == 1 else y
    d = dim % x.ndim
    return jnp.moveaxis(x, d, -1), lambda y: jnp.moveaxis(y, -1, d)


def _stable_sort_last(x, descending=False):
    """(values, int64 indices) of x sorted along its last axis, stably, in PyTorch's order."""
    iota = lax.broadcasted_iota(_I64, x.shape, x.ndim - 1)
    if x.shape[-1] <= 1:
        return x, iota
    key = _order_key(x, descending)
    _, vals, idx = lax.sort((key, x, iota), dimension=x.ndim - 1, num_keys=1, is_stable=True)
    return vals, idx


def _take_last(x, pos):
    """x[..., pos] for a per-row position array `pos` of shape x.shape[:-1]."""
    return jnp.take_along_axis(x, pos[..., None], axis=-1, mode="promise_in_bounds")[..., 0]


def _reduce_result(vals, idx, x_ndim, dim, keepdim):
    """Results of an order statistic along `dim` (moved last and removed): keepdim restores it."""
    if x_ndim == 0:
        return vals.reshape(()), idx.reshape(())
    if keepdim:
        d = dim % x_ndim
        return jnp.expand_dims(vals, d), jnp.expand_dims(idx, d)
    return vals, idx


def _check_k(k, n, op):
    if not 1 <= k <= max(n, 1):
        raise IndexError(f"{op}(): selected number k out of range for dimension")


# ---------------------------------------------------------------------------------------------
# lowerings, alphabetical


def _bisect(boundaries, values, right: bool, sorter):
    """PyTorch's searchsorted kernel (cus_lower_bound / cus_upper_bound), replayed for every value
    at once: the same midpoints and the same comparisons, so unsorted rows and NaNs agree too."""
    n = boundaries.shape[-1]
    if boundaries.ndim == 1:
        bd = boundaries.reshape(1, n)
        st = None if sorter is None else sorter.reshape(1, n)
        vals = values.reshape(1, -1)
    else:
        rows = math.prod(boundaries.shape[:-1])
        bd = boundaries.reshape(rows, n)
        st = None if sorter is None else sorter.reshape(rows, n)
        vals = values.reshape(rows, -1)
    start = jnp.zeros(vals.shape, _I64)
    end = jnp.full(vals.shape, n, _I64)
    if n > 0:
        for _ in range(n.bit_length()):
            active = start < end
            mid = start + ((end - start) >> 1)
            at = jnp.minimum(mid, n - 1)
            if st is not None:
                at = jnp.take_along_axis(st, at, axis=1, mode="promise_in_bounds")
            mid_val = jnp.take_along_axis(bd, at, axis=1, mode="promise_in_bounds")
            go_right = ~(mid_val > vals) if right else ~(mid_val >= vals)
            start = jnp.where(active & go_right, mid + 1, start)
            end = jnp.where(active & ~go_right, mid, end)
    return start.reshape(values.shape)


def _searchsorted(sorted_sequence, self, out_int32, right, side, sorter):
    if side is not None:
        if side not in ("left", "right"):
            raise ValueError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
        right = side == "right"
    dt = result_dtype(sorted_sequence, self)
    bd = cast(sorted_sequence, dt)
    vals = cast(jnp.asarray(self), dt)
    if sorter is not None:
        n = sorted_sequence.shape[-1]
        require(jnp.all((sorter >= 0) & (sorter < n)), RuntimeError,
                "torch.searchsorted(): sorter index out of range")
    out = _bisect(bd, vals, bool(right), sorter)
    return out.astype(_I32 if out_int32 else _I64)


# bucketize.Tensor(Tensor self, Tensor boundaries, *, bool out_int32=False, bool right=False) -> Tensor
# bucketize.Scalar(Scalar self, Tensor boundaries, *, bool out_int32=False, bool right=False) -> Tensor
@lower(aten.bucketize.Tensor, aten.bucketize.Scalar)
def bucketize(self, boundaries, out_int32, right):
    return _searchsorted(boundaries, self, out_int32, right, None, None)


def _cum_extreme(self, dim, is_max):
    """cummax/cummin as the CPU kernel: the value so far, and the LAST index holding it (ties move
    the index forward); a NaN sticks once seen, its index moving to each later NaN."""
    x, undo = _moved(self, dim)
    if x.shape[-1] == 0:
        return undo(x), undo(jnp.zeros(x.shape, _I64))
    dt = np.dtype(x.dtype)
    xc = x.astype(np.uint8) if dt == _BOOL else x
    axis = xc.ndim - 1
    nan = _isnan(xc)
    if _is_float(dt):
        fill = jnp.full((), np.inf if is_max else -np.inf, xc.dtype)
        run = (lax.cummax if is_max else lax.cummin)(jnp.where(nan, fill, xc), axis=axis)
        seen_nan = lax.cummax(nan.astype(np.uint8), axis=axis).astype(_BOOL)
        vals = jnp.where(seen_nan, jnp.full((), np.nan, xc.dtype), run)
    else:
        vals = (lax.cummax if is_max else lax.cummin)(xc, axis=axis)
    iota = lax.broadcasted_iota(_I64, xc.shape, axis)
    hit = (xc == vals) | nan
    idx = lax.cummax(jnp.where(hit, iota, 0), axis=axis)
    return undo(vals.astype(dt)), undo(idx)


# cummax(Tensor self, int dim) -> (Tensor values, Tensor indices)
@lower(aten.cummax.default)
def cummax(self, dim):
    return _cum_extreme(self, dim, True)


# cummin(Tensor self, int dim) -> (Tensor values, Tensor indices)
@lower(aten.cummin.default)
def cummin(self, dim):
    return _cum_extreme(self, dim, False)


# kthvalue(Tensor self, SymInt k, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)
@lower(aten.kthvalue.default)
def kthvalue(self, k, dim, keepdim):
    x, _ = _moved(self, dim)
    _check_k(k, x.shape[-1], "kthvalue")
    vals, idx = _stable_sort_last(x)
    return _reduce_result(vals[..., k - 1], idx[..., k - 1], self.ndim, dim, keepdim)


def _median_along_last(x, ignore_nan: bool):
    """(value, index) of the lower median of each row; NaN rows: median gives the first NaN,
    nanmedian the median of the other values (the first NaN if there are none)."""
    n = x.shape[-1]
    vals, idx = _stable_sort_last(x)
    n_nan = jnp.sum(_isnan(x), axis=-1, dtype=_I64)
    if ignore_nan:
        pos = jnp.maximum(n - n_nan - 1, 0) // 2
    else:
        pos = jnp.where(n_nan > 0, n - n_nan, (n - 1) // 2)
    return _take_last(vals, pos), _take_last(idx, pos)


def _median_all(self, ignore_nan):
    if self.size == 0:
        return cast(jnp.full((), np.nan, _F32), self.dtype)
    v, _ = _median_along_last(self.reshape(-1), ignore_nan)
    return v


def _median_dim(self, dim, keepdim, ignore_nan):
    x, _ = _moved(self, dim)
    if x.shape[-1] == 0:
        raise IndexError(f"median(): Expected reduction dim {dim} to have non-zero size.")
    v, i = _median_along_last(x, ignore_nan)
    return _reduce_result(v, i, self.ndim, dim, keepdim)


# median(Tensor self) -> Tensor
@lower(aten.median.default)
def median(self):
    return _median_all(self, False)


# median.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)
@lower(aten.median.dim)
def median_dim(self, dim, keepdim):
    return _median_dim(self, dim, keepdim, False)


# mode(Tensor self, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)
@lower(aten.mode.default)
def mode(self, dim, keepdim):
    """The most frequent value of each row (the smallest one on a tie of counts) and the last index
    holding it, as the CPU kernel's sort-and-count (exact where rows hold no NaN)."""
    x, _ = _moved(self, dim)
    n = x.shape[-1]
    if n == 0:
        raise IndexError(f"mode(): Expected reduction dim {dim} to have non-zero size.")
    vals, idx = _stable_sort_last(x)
    axis = vals.ndim - 1
    iota = lax.broadcasted_iota(_I64, vals.shape, axis)
    differs = vals[..., 1:] != vals[..., :-1]  # NaN != NaN: every NaN is a run of its own
    true_col = jnp.ones(vals.shape[:-1] + (1,), _BOOL)
    starts = jnp.concatenate([true_col, differs], axis=-1)
    ends = jnp.concatenate([differs, true_col], axis=-1)
    run_start = lax.cummax(jnp.where(starts, iota, 0), axis=axis)
    freq = jnp.where(ends, iota - run_start + 1, 0)
    pos = jnp.argmax(freq, axis=-1)  # first maximal run: the smallest value
    return _reduce_result(_take_last(vals, pos), _take_last(idx, pos), self.ndim, dim, keepdim)


# nanmedian(Tensor self) -> Tensor
@lower(aten.nanmedian.default)
def nanmedian(self):
    return _median_all(self, True)


# nanmedian.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)
@lower(aten.nanmedian.dim)
def nanmedian_dim(self, dim, keepdim):
    return _median_dim(self, dim, keepdim, True)


def _randperm(n, dtype, key):
    perm = jax.random.permutation(key, jnp.arange(n, dtype=_I64))
    if isinstance(dtype, torch.dtype):
        return cast(perm, to_numpy_dtype(dtype))
    return perm  # the schema default (a ScalarType number, int64): the caller casts to PyTorch's dtype


# randperm(SymInt n, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
# (no Generator in the schema: the key comes from the default generator, rng=True)
@lower(aten.randperm.default, rng=True)
def randperm(n, dtype, layout, device, pin_memory, key):
    return _randperm(n, dtype, key)


# randperm.generator(SymInt n, *, Generator? generator, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.randperm.generator)
def randperm_generator(n, generator, dtype, layout, device, pin_memory):
    return _randperm(n, dtype, generator)


# The out= forms take their dtype from `out` (a factory's out variant drops dtype=, so the variant
# rule does not derive them). `torch.randperm(n, generator=g)` reaches generator_out, and so does a
# DataLoader's RandomSampler given a neuron generator.
# randperm.out(SymInt n, *, Tensor(a!) out) -> Tensor(a!)
@lower(aten.randperm.out, rng=True)
def randperm_out(n, out, key):
    return _randperm(n, None, key).astype(out.dtype)


# randperm.generator_out(SymInt n, *, Generator? generator, Tensor(a!) out) -> Tensor(a!)
@lower(aten.randperm.generator_out)
def randperm_generator_out(n, generator, out):
    return _randperm(n, None, generator).astype(out.dtype)


# searchsorted.Tensor(Tensor sorted_sequence, Tensor self, *, bool out_int32=False, bool right=False, str? side=None, Tensor? sorter=None) -> Tensor
# searchsorted.Scalar(Tensor sorted_sequence, Scalar self, *, bool out_int32=False, bool right=False, str? side=None, Tensor? sorter=None) -> Tensor
@lower(aten.searchsorted.Tensor, aten.searchsorted.Scalar)
def searchsorted(sorted_sequence, self, out_int32, right, side, sorter):
    return _searchsorted(sorted_sequence, self, out_int32, right, side, sorter)


def _sort(self, dim, descending):
    x, undo = _moved(self, dim)
    vals, idx = _stable_sort_last(x, bool(descending))
    return undo(vals), undo(idx)


# sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)
@lower(aten.sort.default)
def sort(self, dim, descending):
    return _sort(self, dim, descending)


# sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)
@lower(aten.sort.stable)
def sort_stable(self, stable, dim, descending):
    return _sort(self, dim, descending)


# topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)
@lower(aten.topk.default)
def topk(self, k, dim, largest, sorted):
    """The k largest (smallest) in PyTorch's order, sorted, equal values by lowest index first."""
    x, undo = _moved(self, dim)
    n = x.shape[-1]
    if not 0 <= k <= n:
        raise IndexError("topk(): selected index k out of range")
    if k == 0:
        shape = x.shape[:-1] + (0,)
        return undo(jnp.zeros(shape, x.dtype)), undo(jnp.zeros(shape, _I64))
    key = _order_key(x, descending=not largest)
    _, pos = lax.top_k(key, k)
    pos = pos.astype(_I64)
    vals = jnp.take_along_axis(x, pos, axis=-1, mode="promise_in_bounds")
    return undo(vals), undo(pos)
