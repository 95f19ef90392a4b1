"""Distances, embedding bags, FFTs, and a few math ops: _cdist_forward, _pdist_forward,
_embedding_bag (+ _forward_only), _fft_r2c/_fft_c2r/_fft_c2c, logcumsumexp, trace, diag_embed, polar,
lgamma, digamma, i0.

- `_cdist_forward` follows the CPU's two algorithms: for p=2 with compute_mode 1, or compute_mode
  0/None and more than 25 rows on either side, the matrix-product form of `_euclidean_dist`
  (||a||^2 - 2ab + ||b||^2, clamped at 0, then sqrt); otherwise the distances of the differences.
- `_embedding_bag` returns (output, offset2bag, bag_size, max_indices) in the shapes PyTorch's meta
  function gives a non-CPU device (what eager and compiled graphs on `neuron` expect): offset2bag
  has one entry per index, bag_size one per offset (the count of non-padding indices of each bag,
  0 for the extra offset of include_last_offset), max_indices is (bags, D) for mode max and empty
  otherwise. The CPU kernel gives some of these other shapes (offset2bag empty on its fast sum path,
  bag_size zeros in sum mode); `output` is the same. Sums accumulate in float32 for 16-bit weights.
- FFTs run jnp.fft unnormalized and scale by 1/n or 1/sqrt(n) for PyTorch's normalization modes
  (0 none, 1 by sqrt(n), 2 by n), n being the signal size (c2r: the output's).
- `i0` is the Cephes Chebyshev expansion ATen uses (same coefficients), `digamma(±0)` is ∓inf as
  ATen's, not jax's NaN.
"""
from __future__ import annotations

import math

import numpy as np

from .._jax import jnp, lax
from ._dtypes import is_low_precision
from ._registry import aten, lower, require, require_in_range
from .elementwise import _compute, _float_dtype, cast

_I64 = np.dtype(np.int64)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_C128 = np.dtype(np.complex128)


def _acc(dtype):
    return _F32 if is_low_precision(dtype) else np.dtype(dtype)


def _wrap_dim(dim: int, ndim: int) -> int:
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


def _unary_float(fn):
    """A float-valued unary op: integer/bool inputs give the default dtype, 16-bit floats compute
    in float32 and round once."""

    def lowering(self):
        dt = _float_dtype(self.dtype)
        return cast(fn(cast(self, _compute(dt))), dt)

    return lowering


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


def _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                   include_last_offset, padding_idx):
    num_weights, d = weight.shape
    n = indices.shape[0]
    n_off = offsets.shape[0]
    bags = n_off - 1 if include_last_offset else n_off
    if bags < 0:
        raise RuntimeError("include_last_offset: numBags should be at least 1")
    if mode not in (0, 1, 2):
        raise RuntimeError(f"embedding_bag: unknown mode {mode}")
    if per_sample_weights is not None and mode != 0:
        raise RuntimeError("embedding_bag: per_sample_weights only supported with mode='sum'")
    idx = indices.astype(_I64)
    off = offsets.astype(_I64)
    require_in_range(idx, num_weights, RuntimeError,
                     f"embedding_bag: an index is not in the valid range [0, {num_weights})", False)
    if n_off > 0:
        require(off[0] == 0, RuntimeError, "offsets[0] has to be 0, i.e., the first sequence in the "
                "mini-batch has to start from position 0")
        require(off[-1] <= n, RuntimeError, f"offsets[-1] can not be greater than input's length {n}")
    # offset2bag as the CPU's make_offset2bag: (number of bag starts <= i) - 1
    starts = jnp.zeros((n + 1,), _I64).at[off[:bags]].add(1, mode="drop", wrap_negative_indices=False)
    bag = (jnp.cumsum(starts) - 1)[:n]
    valid = jnp.ones((n,), bool) if padding_idx < 0 else idx != padding_idx
    counts = jnp.zeros((max(bags, 0),), _I64).at[bag].add(valid.astype(_I64), mode="drop",
                                                         wrap_negative_indices=False)
    bag_size = jnp.concatenate([counts, jnp.zeros((n_off - bags,), _I64)]) if n_off > bags else counts
    acc = _acc(weight.dtype)
    rows = weight.at[idx].get(mode="promise_in_bounds")
    kw = dict(mode="drop", wrap_negative_indices=False)
    if mode == 2:  # max: the first maximal row element per bag (NaN only if the bag's first)
        is_nan = jnp.isnan(rows)
        pos = jnp.arange(n, dtype=_I64)
        first = jnp.full((bags,), n, _I64).at[bag].min(jnp.where(valid, pos, n), **kw)
        first_row = rows.at[first].get(mode="fill", fill_value=0)
        nonempty = first < n
        cand = valid[:, None] & ~is_nan
        neg = jnp.full((), -np.inf, rows.dtype)
        best = jnp.full((bags, d), -np.inf, rows.dtype).at[bag].max(jnp.where(cand, rows, neg), **kw)
        hit = cand & (rows == best.at[bag].get(mode="fill", fill_value=0))
        best_pos = jnp.full((bags, d), n, _I64).at[bag].min(jnp.where(hit, pos[:, None], n), **kw)
        first_nan = jnp.isnan(first_row)
        any_hit = best_pos < n
        out = jnp.where(first_nan, first_row, jnp.where(any_hit, best, first_row))
        arg_pos = jnp.where(first_nan | ~any_hit, first[:, None], best_pos)
        max_indices = idx.at[arg_pos].get(mode="fill", fill_value=0)
        out = jnp.where(nonempty[:, None], out, jnp.zeros((), rows.dtype))
        max_indices = jnp.where(nonempty[:, None], max_indices, 0)
        return out.astype(weight.dtype), bag, bag_size, max_indices
    vals = rows.astype(acc)
    if per_sample_weights is not None:
        vals = vals * per_sample_weights.astype(weight.dtype).astype(acc)[:, None]
    vals = jnp.where(valid[:, None], vals, jnp.zeros((), acc))
    out = jnp.zeros((bags, d), acc).at[bag].add(vals, **kw)
    if mode == 1:
        out = out / jnp.maximum(counts, 1).astype(acc)[:, None]
    return out.astype(weight.dtype), bag, bag_size, jnp.zeros((0,), _I64)


def _fft_scale(y, n: int, normalization: int):
    if normalization == 0 or n == 0:
        return y
    if normalization == 1:
        f = 1.0 / math.sqrt(n)
    elif normalization == 2:
        f = 1.0 / n
    else:
        raise ValueError(f"fft: unknown normalization mode {normalization}")
    real = jnp.real(y).dtype
    return y * jnp.asarray(f, real)


def _fft_dims(x, dim):
    return [_wrap_dim(d, x.ndim) for d in dim]


def _require_fft_dtype(x, op):
    dt = np.dtype(x.dtype)
    if dt not in (np.dtype(np.float32), _F64, np.dtype(np.complex64), _C128):
        raise TypeError(f"{op}: Unsupported dtype {dt}")


_I0_A = (
    -4.41534164647933937950e-18, 3.33079451882223809783e-17, -2.43127984654795469359e-16,
    1.71539128555513303061e-15, -1.16853328779934516808e-14, 7.67618549860493561688e-14,
    -4.85644678311192946090e-13, 2.95505266312963983461e-12, -1.72682629144155570723e-11,
    9.67580903537323691224e-11, -5.18979560163526290666e-10, 2.65982372468238665035e-9,
    -1.30002500998624804212e-8, 6.04699502254191894932e-8, -2.67079385394061173391e-7,
    1.11738753912010371815e-6, -4.41673835845875056359e-6, 1.64484480707288970893e-5,
    -5.75419501008210370398e-5, 1.88502885095841655729e-4, -5.76375574538582365885e-4,
    1.63947561694133579842e-3, -4.32430999505057594430e-3, 1.05464603945949983183e-2,
    -2.37374148058994688156e-2, 4.93052842396707084878e-2, -9.49010970480476444210e-2,
    1.71620901522208775349e-1, -3.04682672343198398683e-1, 6.76795274409476084995e-1,
)
_I0_B = (
    -7.23318048787475395456e-18, -4.83050448594418207126e-18, 4.46562142029675999901e-17,
    3.46122286769746109310e-17, -2.82762398051658348494e-16, -3.42548561967721913462e-16,
    1.77256013305652638360e-15, 3.81168066935262242075e-15, -9.55484669882830764870e-15,
    -4.15056934728722208663e-14, 1.54008621752140982691e-14, 3.85277838274214270114e-13,
    7.18012445138366623367e-13, -1.79417853150680611778e-12, -1.32158118404477131188e-11,
    -3.14991652796324136454e-11, 1.18891471078464383424e-11, 4.94060238822496958910e-10,
    3.39623202570838634515e-9, 2.26666899049817806459e-8, 2.04891858946906374183e-7,
    2.89137052083475648297e-6, 6.88975834691682398426e-5, 3.36911647825569408990e-3,
    8.04490411014108831608e-1,
)


def _chbevl(y, coeffs):
    """Cephes' Clenshaw recurrence for a Chebyshev series (coefficients in y's dtype)."""
    dt = y.dtype
    b0 = jnp.full(y.shape, coeffs[0], dt)
    b1 = jnp.zeros(y.shape, dt)
    b2 = b1
    for c in coeffs[1:]:
        b2, b1 = b1, b0
        b0 = y * b1 - b2 + jnp.asarray(c, dt)
    return (b0 - b2) * jnp.asarray(0.5, dt)


def _i0(x):
    a = jnp.abs(x)
    small = a <= 8
    ys = a / 2 - 2
    yb = 32 / jnp.where(small, jnp.ones((), a.dtype), a) - 2
    vs = jnp.exp(a) * _chbevl(ys, _I0_A)
    vb = jnp.exp(a) * _chbevl(yb, _I0_B) / jnp.sqrt(a)
    return jnp.where(small, vs, vb)


def _complex_log_add_exp(x, y):
    """ATen's complex log(exp(x) + exp(y)) of logcumsumexp (x the new value, y the sum so far):
    NaNs infect, equal infinite real parts are special-cased, else log1p(exp(min - max)) + max with
    min/max by real part."""
    def isnan(v):
        return jnp.isnan(jnp.real(v)) | jnp.isnan(jnp.imag(v))

    xn, yn = isnan(x), isnan(y)
    x_lt = jnp.real(x) < jnp.real(y)
    mn = jnp.where(yn, y, jnp.where(xn, x, jnp.where(x_lt, x, y)))
    mx = jnp.where(yn, y, jnp.where(xn, x, jnp.where(x_lt, y, x)))
    mnr, mxr = jnp.real(mn), jnp.real(mx)
    general = jnp.log1p(jnp.exp(mn - mx)) + mx
    infinite = jnp.where(mnr < 0, mn, jnp.log(jnp.exp(mn) + jnp.exp(mx)))
    out = jnp.where(~jnp.isfinite(mnr) & (mnr == mxr), infinite, general)
    nan = jnp.full((), complex(np.nan, np.nan), out.dtype)
    return jnp.where(isnan(mn), nan, out)


def _digamma(x):
    y = lax.digamma(x)
    inf = jnp.full((), np.inf, x.dtype)
    return jnp.where(x == 0, jnp.where(jnp.signbit(x), inf, -inf), y)


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


# _embedding_bag(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1) -> (Tensor, Tensor, Tensor, Tensor)
@lower(aten._embedding_bag.default)
def _embedding_bag_lowering(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                            include_last_offset, padding_idx):
    return _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                          include_last_offset, padding_idx)


# _embedding_bag_forward_only(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1) -> (Tensor, Tensor, Tensor, Tensor)
@lower(aten._embedding_bag_forward_only.default)
def _embedding_bag_forward_only(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                                include_last_offset, padding_idx):
    return _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                          include_last_offset, padding_idx)


# _fft_c2c(Tensor self, SymInt[] dim, int normalization, bool forward) -> Tensor
@lower(aten._fft_c2c.default)
def _fft_c2c(self, dim, normalization, forward):
    _require_fft_dtype(self, "_fft_c2c")
    axes = _fft_dims(self, dim)
    if not axes:
        return self
    if forward:
        y = jnp.fft.fftn(self, axes=axes)
    else:
        y = jnp.fft.ifftn(self, axes=axes, norm="forward")  # unnormalized inverse
    return _fft_scale(y, math.prod(self.shape[a] for a in axes), normalization)


# _fft_c2r(Tensor self, int[] dim, int normalization, SymInt last_dim_size) -> Tensor
@lower(aten._fft_c2r.default)
def _fft_c2r(self, dim, normalization, last_dim_size):
    _require_fft_dtype(self, "_fft_c2r")
    axes = _fft_dims(self, dim)
    s = [self.shape[a] for a in axes[:-1]] + [int(last_dim_size)]
    y = jnp.fft.irfftn(self, s=s, axes=axes, norm="forward")  # unnormalized inverse
    return _fft_scale(y, math.prod(s), normalization)


# _fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor
@lower(aten._fft_r2c.default)
def _fft_r2c(self, dim, normalization, onesided):
    _require_fft_dtype(self, "_fft_r2c")
    axes = _fft_dims(self, dim)
    if onesided:
        y = jnp.fft.rfftn(self, axes=axes)
    else:
        y = jnp.fft.fftn(self, axes=axes)
    return _fft_scale(y, math.prod(self.shape[a] for a in axes), normalization)


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


# diag_embed(Tensor self, int offset=0, int dim1=-2, int dim2=-1) -> Tensor
@lower(aten.diag_embed.default)
def diag_embed(self, offset, dim1, dim2):
    nd = self.ndim + 1
    d1, d2 = _wrap_dim(dim1, nd), _wrap_dim(dim2, nd)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    x = self.reshape(1) if self.ndim == 0 else self
    length = x.shape[-1]
    m = length + abs(offset)
    i = lax.broadcasted_iota(_I64, (m, m), 0)
    j = lax.broadcasted_iota(_I64, (m, m), 1)
    on = (j - i) == offset
    k = i if offset >= 0 else j  # position along the diagonal
    vals = x.at[..., k].get(mode="fill", fill_value=0)  # (..., m, m)
    out = jnp.where(on, vals, jnp.zeros((), x.dtype))
    return jnp.moveaxis(out, (-2, -1), (d1, d2))


# digamma(Tensor self) -> Tensor
lower(aten.digamma.default)(_unary_float(_digamma))


# i0(Tensor self) -> Tensor
lower(aten.i0.default)(_unary_float(_i0))


# lgamma(Tensor self) -> Tensor
lower(aten.lgamma.default)(_unary_float(lambda x: lax.lgamma(x)))


# logcumsumexp(Tensor self, int dim) -> Tensor
# (not _logcumsumexp, which it calls on the CPU: that one has no meta function, so neither the
# executor nor a compiled graph can use it)
@lower(aten.logcumsumexp.default)
def logcumsumexp(self, dim):
    dt = np.dtype(self.dtype)
    if dt.kind not in "fc" and not is_low_precision(dt):
        raise TypeError(f"logcumsumexp: not implemented for {dt}")
    if self.ndim == 0 or self.size == 0:
        return self
    axis = _wrap_dim(dim, self.ndim)
    if dt.kind == "c":
        # sequential, as ATen: the imaginary part is not reduced mod 2*pi, so the order of the
        # additions decides its branch (an associative scan would pick others)
        xs = jnp.moveaxis(self, axis, 0)

        def step(cum, x):
            cum = _complex_log_add_exp(x, cum)
            return cum, cum

        init = jnp.full(xs.shape[1:], complex(-np.inf, 0), dt)
        return jnp.moveaxis(lax.scan(step, init, xs)[1], 0, axis)
    return lax.cumlogsumexp(self.astype(_acc(dt)), axis=axis).astype(dt)


# polar(Tensor abs, Tensor angle) -> Tensor
@lower(aten.polar.default)
def polar(abs, angle):
    dt = np.dtype(abs.dtype)
    if dt not in (np.dtype(np.float32), _F64) or np.dtype(angle.dtype) != dt:
        raise TypeError(
            f"polar: expected abs and angle to be float or double and of the same dtype, got {dt}, {angle.dtype}"
        )
    return lax.complex(abs * jnp.cos(angle), abs * jnp.sin(angle))


# trace(Tensor self) -> Tensor
@lower(aten.trace.default)
def trace(self):
    if self.ndim != 2:
        raise RuntimeError("trace: expected a matrix")
    dt = np.dtype(self.dtype)
    if dt.kind in "biu":
        acc, out = _I64, _I64
    elif dt.kind == "c":
        acc, out = _C128, dt
    elif is_low_precision(dt):
        acc, out = _F32, dt
    else:
        acc, out = _F64, dt  # ATen's CPU accumulation type for float is double
    if min(self.shape) == 0:
        return jnp.zeros((), out)
    return jnp.sum(jnp.diagonal(self).astype(acc)).astype(out)
