"""Histograms: histc, histogram (bin_ct, bins_tensor) and histogramdd's _histogramdd_bin_edges,
_histogramdd_from_bin_cts, _histogramdd_from_bin_tensors (aten/src/ATen/native/Histogram.cpp,
cpu/HistogramKernel.cpp).

- histogram/histogramdd follow ATen's CPU kernel: outer edges from each dimension's min and max (or
  `range`), widened by 0.5 each side when equal, [0, 1] for empty input, an error when not finite;
  edges by ATen's linspace in the input dtype (`_hist_edges`, the one bin-edge computation: the
  bin_ct lowerings and _histogramdd_bin_edges all take their edges from it; _histogramdd_bin_edges
  returns them as a list, its `Tensor[]`); `bin_ct` places elements by linear interpolation
  corrected by a local search of the neighbouring edges, `bins_tensor` by binary search; the last
  bin includes its right edge; values outside the edges and NaN are dropped; weights and density
  as ATen.
- histc has rules of its own (ATen's histc kernel, not histogram's): min == max takes the data's
  min and max, still equal widens by 1 each side; the bins are not built as edges: each element's
  bin is (x - min) * bins / (max - min) in the input dtype, truncated (`_histc_counts`).

Not lowered: `bincount` (its length is max(self)+1, a host read).
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime.lazy_jax import jnp
from .dtypes import cast, is_low_precision, to_torch_dtype
from ._registry import aten, lower, require
from .factory import linspace_values

_I64 = np.dtype(np.int64)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _hist_check_float(x, op):
    dt = np.dtype(x.dtype)
    if dt not in (np.dtype(np.float32), _F64):
        raise TypeError(f'"{op}" not implemented for \'{dt.name}\'')


def _hist_outer_edges(x2, range_):
    """(left, right) per dimension as float64 values: `range`, else each column's min and max, else
    [0, 1]; checked finite and ordered; widened by 0.5 each side when equal."""
    m, d = x2.shape
    if range_ is not None:
        if len(range_) != 2 * d:
            raise RuntimeError(f"histogramdd: for a {d}-dimensional histogram range should have {2 * d} elements, "
                               f"but got {len(range_)}")
        left = jnp.asarray([float(v) for v in range_[0::2]], _F64)
        right = jnp.asarray([float(v) for v in range_[1::2]], _F64)
        for k in range(d):
            lo, hi = float(range_[2 * k]), float(range_[2 * k + 1])
            if not (math.isfinite(lo) and math.isfinite(hi)):
                raise RuntimeError(f"torch.histogramdd: dimension {k}'s range [{lo}, {hi}] is not finite")
            if lo > hi:
                raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {lo} max {hi} "
                                   f"for dimension {k}")
    elif m > 0:
        xf = x2.astype(_F64)
        left, right = jnp.min(xf, axis=0), jnp.max(xf, axis=0)
        for k in range(d):  # the CPU names the dimension (and its range, which only the device knows)
            require(jnp.isfinite(left[k]) & jnp.isfinite(right[k]), RuntimeError,
                    f"torch.histogramdd: dimension {k}'s range is not finite")
    else:
        left, right = jnp.zeros((d,), _F64), jnp.ones((d,), _F64)
    same = left == right
    return jnp.where(same, left - 0.5, left), jnp.where(same, right + 0.5, right)


def _hist_edges(x2, bins, range_):
    """Each dimension's bin edges: ATen's linspace (in the input dtype) between the outer edges."""
    left, right = _hist_outer_edges(x2, range_)
    dtype = to_torch_dtype(x2.dtype)
    return [linspace_values(left[k], right[k], int(bins[k]) + 1, dtype) for k in range(x2.shape[1])]


def _hist_positions(col, edges, linear: bool):
    """Each element's bin along one dimension (ATen's rules) and whether it is counted."""
    e = edges.astype(col.dtype)
    ne = e.shape[0]
    left, right = e[0], e[ne - 1]
    ok = (col >= left) & (col <= right)  # False for NaN
    if linear:
        c = jnp.where(ok, col, left)
        pos = cast((c - left) * np.asarray(ne - 1, col.dtype) / (right - left), _I64)
        lo = jnp.maximum(pos - 1, 0)
        hi = jnp.minimum(pos + 2, ne)
        # std::upper_bound over edges[lo:hi]: lo + the number of those edges <= the element
        cnt = jnp.zeros_like(pos)
        for k in range(3):
            j = lo + k
            le = e.at[jnp.minimum(j, ne - 1)].get(mode="promise_in_bounds") <= c
            cnt = cnt + ((j < hi) & le).astype(_I64)
        pos = lo + cnt - 1
    else:
        pos = jnp.searchsorted(e, col, side="right").astype(_I64) - 1
    pos = jnp.where(pos == ne - 1, pos - 1, pos)  # the last bin includes its right edge
    return pos, ok


def _histogramdd(x2, edges, weight, density, linear):
    """The histogram of rows x2 (M, D) over per-dimension edges; its shape is one bin fewer than
    the edges in each dimension."""
    m, d = x2.shape
    dt = np.dtype(x2.dtype)
    shape = tuple(int(e.shape[0]) - 1 for e in edges)
    flat = jnp.zeros((m,), _I64)
    ok = jnp.ones((m,), bool)
    for k in range(d):
        pos, okk = _hist_positions(x2[:, k], edges[k], linear)
        flat = flat * shape[k] + pos
        ok = ok & okk
    size = math.prod(shape)
    w = jnp.ones((m,), dt) if weight is None else weight.reshape(m).astype(dt)
    hist = jnp.zeros((size,), dt).at[jnp.where(ok, flat, size)].add(w, mode="drop", wrap_negative_indices=False)
    hist = hist.reshape(shape)
    if density:
        hist = hist / jnp.sum(hist)
        for k in range(d):
            lengths = jnp.diff(edges[k].astype(dt))
            hist = hist / lengths.reshape((1,) * k + (shape[k],) + (1,) * (d - k - 1))
    return hist


def _histc_counts(x, bins, lo, hi):
    """Counts of x in `bins` equal bins over [lo, hi] (float64 edges), computed as the CPU kernel
    does: the position (x - lo) * bins / (hi - lo) in the input dtype (each step rounded to it for
    float16/bfloat16), truncated; x == hi goes to the last bin; NaN and out-of-range x are skipped."""
    dt = np.dtype(x.dtype)
    low = is_low_precision(dt)
    cd = _F32 if low else dt

    def rnd(v):  # one operation of the CPU kernel's scalar_t arithmetic
        return v.astype(dt).astype(cd) if low else v

    left = rnd(lo.astype(dt).astype(cd))
    right = rnd(hi.astype(dt).astype(cd))
    xv = x.reshape(-1).astype(cd)
    inside = (xv >= left) & (xv <= right)
    pos = rnd(rnd(rnd(xv - left) * rnd(jnp.asarray(bins, cd))) / rnd(right - left))
    pos = jnp.where(inside, pos, 0).astype(_I64)
    pos = jnp.where(pos >= bins, bins - 1, pos)
    pos = jnp.clip(pos, 0, bins - 1)  # only reachable through rounding of in-range values
    counts = jnp.zeros((bins,), _I64).at[pos].add(inside.astype(_I64), mode="drop")
    return counts.astype(dt)


# ---------------------------------------------------------------------------------------------
# lowerings, alphabetical


# _histogramdd_bin_edges(Tensor self, int[] bins, *, float[]? range=None, Tensor? weight=None, bool density=False) -> Tensor[]
# (compiled graphs; eager runs it per dimension through histogram.bin_ct, eager/kernels.py)
@lower(aten._histogramdd_bin_edges.default)
def _histogramdd_bin_edges(self, bins, range, weight, density):
    _hist_check_float(self, "histogramdd")
    return _hist_edges(self.reshape(-1, self.shape[-1]), bins, range)


# _histogramdd_from_bin_cts(Tensor self, int[] bins, *, float[]? range=None, Tensor? weight=None, bool density=False) -> Tensor
@lower(aten._histogramdd_from_bin_cts.default)
def _histogramdd_from_bin_cts(self, bins, range, weight, density):
    _hist_check_float(self, "histogramdd")
    x2 = self.reshape(-1, self.shape[-1])
    return _histogramdd(x2, _hist_edges(x2, bins, range), weight, density, linear=True)


# _histogramdd_from_bin_tensors(Tensor self, Tensor[] bins, *, Tensor? weight=None, bool density=False) -> Tensor
@lower(aten._histogramdd_from_bin_tensors.default)
def _histogramdd_from_bin_tensors(self, bins, weight, density):
    _hist_check_float(self, "histogramdd")
    return _histogramdd(self.reshape(-1, self.shape[-1]), list(bins), weight, density, linear=False)


# histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor
@lower(aten.histc.default)
def histc(self, bins, min, max):
    lo = jnp.asarray(min).astype(_F64)
    hi = jnp.asarray(max).astype(_F64)
    if self.size > 0:
        data = self.astype(_F64)
        use_data = lo == hi
        lo = jnp.where(use_data, jnp.min(data), lo)
        hi = jnp.where(use_data, jnp.max(data), hi)
    same = lo == hi
    lo = jnp.where(same, lo - 1, lo)
    hi = jnp.where(same, hi + 1, hi)
    require(jnp.isfinite(lo) & jnp.isfinite(hi), RuntimeError, "torch.histc: range of [min, max] is not finite")
    require(lo < hi, RuntimeError, "torch.histc: max must be larger than min")
    if self.size == 0:
        return jnp.zeros((bins,), self.dtype)
    return _histc_counts(self, bins, lo, hi)


# histogram.bin_ct(Tensor self, int bins=100, *, float[]? range=None, Tensor? weight=None, bool density=False) -> (Tensor hist, Tensor bin_edges)
@lower(aten.histogram.bin_ct)
def histogram_bin_ct(self, bins, range, weight, density):
    _hist_check_float(self, "histogram_cpu")
    x2 = self.reshape(-1, 1)
    edges = _hist_edges(x2, [bins], range)
    return _histogramdd(x2, edges, weight, density, linear=True), edges[0]


# histogram.bins_tensor(Tensor self, Tensor bins, *, Tensor? weight=None, bool density=False) -> (Tensor hist, Tensor bin_edges)
@lower(aten.histogram.bins_tensor)
def histogram_bins_tensor(self, bins, weight, density):
    _hist_check_float(self, "histogram_cpu")
    return _histogramdd(self.reshape(-1, 1), [bins], weight, density, linear=False), bins
