"""Reductions, scans and softmax: sum/mean/var/prod/max/argmax/any/cumsum/logsumexp/norms,
logcumsumexp, segment_reduce and hash_tensor.

PyTorch's CPU rules followed here: bool and integer sums/products/cumsums return int64;
float16/bfloat16 accumulate in float32 and round once; an empty `dim` list (or None) means every
dimension for the `int[1]? dim` reductions, but no dimension for `any.dims`/`all.dims`; max/min and
argmax/argmin propagate NaN and pick the first index of the extreme (the first NaN if any).

`logcumsumexp` of real inputs is lax.cumlogsumexp (16-bit: in float32); of complex inputs a
sequential scan with ATen's complex log-add-exp (the imaginary part is not reduced mod 2*pi, so the
order of the additions decides its branch).

`segment_reduce` (lengths or offsets along the last dim of lengths/offsets) is one scatter of
every element to its segment, starting from `initial` (or the reduction's identity); mean divides
by the segment's length and gives NaN for an empty segment without `initial`; max/min propagate
NaN. Without `unsafe` the lengths are checked as the CPU does (non-negative, summing to the axis).

`hash_tensor` (mode 0) xor-reduces the elements as uint64: floats through float64's bits,
integers and bools sign-extended through int64, as ATen.
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime.lazy_jax import jax, jnp, lax
from .dims import wrap_dim
from .dtypes import cast, is_low_precision, opmath, to_numpy_dtype
from ._registry import aten, lower, require

_I64 = np.dtype(np.int64)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


# ---------------------------------------------------------------------------------------------
# helpers


def _axes(dim, ndim: int, empty_means_all: bool = True) -> tuple:
    """Normalized reduction axes. A 0-d tensor accepts dim 0/-1 and reduces nothing."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = (dim,)
    if len(dim) == 0:
        return tuple(range(ndim)) if empty_means_all else ()
    if ndim == 0:
        return ()
    return tuple(sorted({d % ndim for d in dim}))


def _count(shape, axes) -> int:
    return math.prod(shape[a] for a in axes)


def _is_int_like(dtype) -> bool:
    dtype = np.dtype(dtype)
    return dtype == np.bool_ or jnp.issubdtype(dtype, np.integer)


def _sum_out_dtype(x, dtype):
    """Result dtype of sum/prod/cumsum: the requested one, int64 for bool/ints, else self's."""
    if dtype is not None:
        return to_numpy_dtype(dtype)
    if _is_int_like(x.dtype):
        return _I64
    return np.dtype(x.dtype)


def _acc(dtype):
    return _F32 if is_low_precision(dtype) else np.dtype(dtype)


def _float_out_dtype(x, dtype=None):
    """Result dtype of float-only reductions (mean, logsumexp, norms): ints go to float32."""
    if dtype is not None:
        return to_numpy_dtype(dtype)
    if _is_int_like(x.dtype):
        return _F32
    return np.dtype(x.dtype)


def _extreme_with_index(x, axis: int, keepdim: bool, is_max: bool):
    """(values, int64 indices) of the max/min along `axis` in one variadic reduction.

    NaN counts as the extreme; ties (and several NaNs) resolve to the first index, as PyTorch."""
    if x.ndim == 0:
        return x, jnp.zeros((), _I64)
    if x.dtype == np.bool_:
        v, i = _extreme_with_index(x.astype(np.uint8), axis, keepdim, is_max)
        return v.astype(np.bool_), i
    n = x.shape[axis]
    if n == 0:
        raise IndexError("max/min/argmax/argmin: cannot reduce over a zero-size dimension")
    is_float = jnp.issubdtype(np.dtype(x.dtype), np.floating)
    if is_float:
        init_v = -np.inf if is_max else np.inf
    else:
        info = np.iinfo(np.dtype(x.dtype))
        init_v = info.min if is_max else info.max
    iota = lax.broadcasted_iota(_I64, x.shape, axis)

    def pick(a, b):
        av, ai = a
        bv, bi = b
        better = (av > bv) if is_max else (av < bv)
        tie = (av == bv) & (ai < bi)
        if is_float:
            a_nan = av != av
            b_nan = bv != bv
            take_a = jnp.where(a_nan | b_nan, a_nan & (~b_nan | (ai < bi)), better | tie)
        else:
            take_a = better | tie
        return jnp.where(take_a, av, bv), jnp.where(take_a, ai, bi)

    vals, idx = lax.reduce(
        (x, iota),
        # the index's own maximum: int32 under a Trainium target's policy (ops.target_policy)
        (jnp.asarray(init_v, x.dtype), jnp.asarray(np.iinfo(iota.dtype).max, iota.dtype)),
        pick,
        (axis,),
    )
    if keepdim:
        vals = jnp.expand_dims(vals, axis)
        idx = jnp.expand_dims(idx, axis)
    return vals, idx


def _arg_extreme(x, dim, keepdim, is_max):
    if dim is None:
        _, idx = _extreme_with_index(x.reshape(-1), 0, False, is_max)
        return idx.reshape((1,) * x.ndim) if keepdim else idx
    if x.ndim == 0:
        return jnp.zeros((), _I64)
    _, idx = _extreme_with_index(x, dim % x.ndim, keepdim, is_max)
    return idx


def _single_axis(x, dim):
    """(x viewed as at least 1-d, axis, undo) for ops along one dim that accept 0-d input."""
    if x.ndim == 0:
        return x.reshape(1), 0, lambda y: y.reshape(())
    return x, dim % x.ndim, lambda y: y


def _var_impl(x, dim, correction, keepdim):
    """(variance, mean-with-keepdim) computed in the opmath dtype."""
    axes = _axes(dim, x.ndim)
    xf = opmath(x)
    n = _count(x.shape, axes)
    mean = jnp.mean(xf, axis=axes, keepdims=True)
    c = 1 if correction is None else correction
    ssq = jnp.sum(jnp.square(jnp.abs(xf - mean)), axis=axes, keepdims=keepdim)
    var = ssq / jnp.maximum(n - c, 0)
    return var, (mean if keepdim else jnp.squeeze(mean, axes))


def _vector_norm(x, ord, axes, keepdim, out_dtype):
    xf = opmath(x.astype(out_dtype)) if out_dtype is not None else opmath(x)
    a = jnp.abs(xf)
    ord = 2.0 if ord is None else float(ord)
    if ord == math.inf:
        r = jnp.max(a, axis=axes, keepdims=keepdim)
    elif ord == -math.inf:
        r = jnp.min(a, axis=axes, keepdims=keepdim)
    elif ord == 0:
        r = jnp.sum((a != 0).astype(a.dtype), axis=axes, keepdims=keepdim)
    elif ord == 1:
        r = jnp.sum(a, axis=axes, keepdims=keepdim)
    elif ord == 2:
        r = jnp.sqrt(jnp.sum(a * a, axis=axes, keepdims=keepdim))
    else:
        r = jnp.sum(a ** ord, axis=axes, keepdims=keepdim) ** (1.0 / ord)
    if out_dtype is not None:
        return r.astype(out_dtype)
    # the input's dtype (bfloat16 stays bfloat16); complex inputs give their real counterpart
    return r.astype(a.dtype if jnp.issubdtype(np.dtype(x.dtype), np.complexfloating) else x.dtype)


def _softmax_impl(x, dim, half_to_float, log):
    # half_to_float (CUDA-only in PyTorch; the CPU kernel refuses it) returns the float32 result.
    out_dtype = _F32 if half_to_float and is_low_precision(x.dtype) else x.dtype
    if x.size == 0:  # nothing to normalize (jnp.max has no identity for an empty reduction)
        return x.astype(out_dtype)
    x1, axis, undo = _single_axis(x, dim)
    xf = opmath(x1)
    m = lax.stop_gradient(jnp.max(xf, axis=axis, keepdims=True))
    shifted = xf - m
    e = jnp.exp(shifted)
    s = jnp.sum(e, axis=axis, keepdims=True)
    out = shifted - jnp.log(s) if log else e / s
    return undo(out.astype(out_dtype))


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


def _exact_f64(x):
    """x as float64, subnormal inputs included: XLA's CPU conversion flushes them to zero (denormals
    are zero), so they are rebuilt from their bits (mantissa * smallest subnormal, exact in float64)."""
    dt = np.dtype(x.dtype)
    if dt == _F64:
        return x
    nbits = dt.itemsize * 8
    ut = {2: np.uint16, 4: np.uint32}[dt.itemsize]
    nmant = int(jnp.finfo(dt).nmant)
    b = lax.bitcast_convert_type(x, ut)
    mant = b & ut((1 << nmant) - 1)
    expo = (b >> ut(nmant)) & ut((1 << (nbits - 1 - nmant)) - 1)
    tiny = mant.astype(_F64) * float(jnp.finfo(dt).smallest_subnormal)
    tiny = jnp.where((b >> ut(nbits - 1)) != 0, -tiny, tiny)
    return jnp.where((expo == 0) & (mant != 0), tiny, x.astype(_F64))


_SEGMENT_REDUCTIONS = ("max", "mean", "min", "sum", "prod")


def _segment_reduce(data, reduce, lengths, offsets, axis, unsafe, initial):
    if reduce not in _SEGMENT_REDUCTIONS:
        raise RuntimeError(f"unsupported reduction given! {reduce}")
    dt = np.dtype(data.dtype)
    if dt.kind != "f" and not is_low_precision(dt):
        raise TypeError(f'"_segment_reduce_cpu" not implemented for \'{dt.name}\'')
    axis = wrap_dim(axis, data.ndim)
    if offsets is not None:
        off = offsets.astype(_I64)
        if axis != off.ndim - 1:
            raise RuntimeError(f"segment_reduce(): Expected axis to be the last dimension of offsets but got {axis}.")
        starts, ends = off[..., :-1], off[..., 1:]
    else:
        lens = lengths.astype(_I64)
        if axis != lens.ndim - 1:
            raise RuntimeError(f"segment_reduce(): Expected axis to be the last dimension of lengths but got {axis}.")
        if not unsafe:
            require(jnp.all(lens >= 0), RuntimeError, "lengths contains negative value!")
            require(jnp.all(jnp.sum(lens, axis=-1) == data.shape[axis]), RuntimeError,
                    "segment_reduce(): Expected all rows of lengths along axis to sum to data.size(lengths.dim()-1) "
                    "when !unsafe.")
        ends = jnp.cumsum(lens, axis=-1)
        starts = ends - lens
    outer = tuple(data.shape[:axis])
    n, segs = data.shape[axis], starts.shape[-1]
    o = math.prod(outer)
    inner = tuple(data.shape[axis + 1:])
    out_shape = outer + (segs,) + inner
    acc = _acc(dt)
    x = data.reshape(o, n, math.prod(inner)).astype(acc)
    starts = jnp.broadcast_to(starts, outer + (segs,)).reshape(o, segs)
    ends = jnp.broadcast_to(ends, outer + (segs,)).reshape(o, segs)
    pos = jnp.arange(n, dtype=_I64)
    # segment s holds positions starts[s] <= j < ends[s]: s = #(ends <= j) for non-decreasing ends
    seg = jax.vmap(lambda e: jnp.searchsorted(e, pos, side="right"))(ends).astype(_I64) if segs else \
        jnp.zeros((o, n), _I64)
    seg_c = jnp.minimum(seg, max(segs - 1, 0))
    inside = (seg < segs) & (pos[None] >= jnp.take_along_axis(starts, seg_c, axis=1)) if segs else seg < 0
    seg = jnp.where(inside, seg, segs)  # dropped by the scatter
    row = lax.broadcasted_iota(_I64, (o, n), 0)
    if initial is not None:
        ident = cast(initial, dt).astype(acc)
    else:
        ident = {"max": -np.inf, "min": np.inf, "prod": 1.0}.get(reduce, 0.0)
    base = jnp.full((o, segs, x.shape[2]), ident, acc)
    kw = dict(mode="drop", wrap_negative_indices=False)
    key = (row, seg)
    if reduce == "max":
        out = base.at[key].max(x, **kw)
    elif reduce == "min":
        out = base.at[key].min(x, **kw)
    elif reduce == "prod":
        out = base.at[key].multiply(x, **kw)
    else:
        out = base.at[key].add(x, **kw)
    if reduce == "mean":
        length = (ends - starts)[..., None]
        if initial is None:
            out = jnp.where(length == 0, np.nan, out / jnp.maximum(length, 1).astype(acc))
        else:
            out = jnp.where(length > 0, out / jnp.maximum(length, 1).astype(acc), out)
    return out.astype(dt).reshape(out_shape)


# ---------------------------------------------------------------------------------------------
# lowerings (alphabetical by op name)


# _log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor
@lower(aten._log_softmax.default)
def _log_softmax(self, dim, half_to_float):
    return _softmax_impl(self, dim, half_to_float, log=True)


# _log_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor
@lower(aten._log_softmax_backward_data.default)
def _log_softmax_backward_data(grad_output, output, dim, input_dtype):
    g, axis, undo = _single_axis(grad_output, dim)
    o = output.reshape(g.shape)
    gf, of = opmath(g), opmath(o)
    out = gf - jnp.exp(of) * jnp.sum(gf, axis=axis, keepdims=True)
    return undo(out.astype(to_numpy_dtype(input_dtype)))


# _softmax(Tensor self, int dim, bool half_to_float) -> Tensor
@lower(aten._softmax.default)
def _softmax(self, dim, half_to_float):
    return _softmax_impl(self, dim, half_to_float, log=False)


# _softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor
@lower(aten._softmax_backward_data.default)
def _softmax_backward_data(grad_output, output, dim, input_dtype):
    g, axis, undo = _single_axis(grad_output, dim)
    o = output.reshape(g.shape)
    gf, of = opmath(g), opmath(o)
    out = of * (gf - jnp.sum(gf * of, axis=axis, keepdims=True))
    return undo(out.astype(to_numpy_dtype(input_dtype)))


def _bool_result(self, r):
    """all/any: bool, except for a uint8 input, where PyTorch keeps uint8 (0 or 1)."""
    return r.astype(np.uint8) if np.dtype(self.dtype) == np.uint8 else r


# all(Tensor self) -> Tensor
@lower(aten.all.default)
def all_default(self):
    return _bool_result(self, jnp.all(self))


# all.dim(Tensor self, int dim, bool keepdim=False) -> Tensor
@lower(aten.all.dim)
def all_dim(self, dim, keepdim):
    return _bool_result(self, jnp.all(self, axis=_axes(dim, self.ndim), keepdims=keepdim))


# all.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor
@lower(aten.all.dims)
def all_dims(self, dim, keepdim):
    return _bool_result(self, jnp.all(self, axis=_axes(dim, self.ndim, empty_means_all=False), keepdims=keepdim))


# amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor
@lower(aten.amax.default)
def amax(self, dim, keepdim):
    return jnp.max(self, axis=_axes(dim, self.ndim), keepdims=keepdim)


# amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor
@lower(aten.amin.default)
def amin(self, dim, keepdim):
    return jnp.min(self, axis=_axes(dim, self.ndim), keepdims=keepdim)


# any(Tensor self) -> Tensor
@lower(aten.any.default)
def any_default(self):
    return _bool_result(self, jnp.any(self))


# any.dim(Tensor self, int dim, bool keepdim=False) -> Tensor
@lower(aten.any.dim)
def any_dim(self, dim, keepdim):
    return _bool_result(self, jnp.any(self, axis=_axes(dim, self.ndim), keepdims=keepdim))


# any.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor
@lower(aten.any.dims)
def any_dims(self, dim, keepdim):
    return _bool_result(self, jnp.any(self, axis=_axes(dim, self.ndim, empty_means_all=False), keepdims=keepdim))


# argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor
@lower(aten.argmax.default)
def argmax(self, dim, keepdim):
    return _arg_extreme(self, dim, keepdim, is_max=True)


# argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor
@lower(aten.argmin.default)
def argmin(self, dim, keepdim):
    return _arg_extreme(self, dim, keepdim, is_max=False)


# cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor
@lower(aten.cumprod.default)
def cumprod(self, dim, dtype):
    out = _sum_out_dtype(self, dtype)
    x, axis, undo = _single_axis(self, dim)
    return undo(lax.cumprod(x.astype(out).astype(_acc(out)), axis=axis).astype(out))


# cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor
@lower(aten.cumsum.default)
def cumsum(self, dim, dtype):
    out = _sum_out_dtype(self, dtype)
    x, axis, undo = _single_axis(self, dim)
    return undo(lax.cumsum(x.astype(out).astype(_acc(out)), axis=axis).astype(out))


# hash_tensor(Tensor self, int[1] dim=[], *, bool keepdim=False, int mode=0) -> Tensor
@lower(aten.hash_tensor.default)
def hash_tensor(self, dim, keepdim, mode):
    if mode != 0:
        raise RuntimeError(f"hash_tensor: only mode=0 (xor reduction) is supported, got mode={mode}")
    dt = np.dtype(self.dtype)
    if dt.kind == "f" or is_low_precision(dt):
        bits = lax.bitcast_convert_type(_exact_f64(self), np.uint64)
    elif dt.kind == "u":
        bits = self.astype(np.uint64)
    elif dt.kind in "ib":
        bits = lax.bitcast_convert_type(self.astype(_I64), np.uint64)
    else:
        raise TypeError(f"hash_tensor: not implemented for {dt}")
    axes = tuple(range(self.ndim)) if len(dim) == 0 else tuple(sorted({wrap_dim(d, self.ndim) for d in dim}))
    if self.ndim == 0:
        return bits
    out = lax.reduce(bits, np.uint64(0), lax.bitwise_xor, axes)
    if keepdim:
        out = jnp.expand_dims(out, axes)
    return out


# linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor
@lower(aten.linalg_vector_norm.default, static=("ord",))
def linalg_vector_norm(self, ord, dim, keepdim, dtype):
    out = None if dtype is None else to_numpy_dtype(dtype)
    return _vector_norm(self, ord, _axes(dim, self.ndim), keepdim, out)


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
    axis = wrap_dim(dim, self.ndim)
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


# logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor
@lower(aten.logsumexp.default)
def logsumexp(self, dim, keepdim):
    out = _float_out_dtype(self)
    axes = _axes(dim, self.ndim)
    x = opmath(self.astype(out))
    m = lax.stop_gradient(jnp.max(x, axis=axes, keepdims=True))
    m = jnp.where(jnp.isinf(m), jnp.zeros((), m.dtype), m)
    s = jnp.sum(jnp.exp(x - m), axis=axes, keepdims=keepdim)
    m_out = m if keepdim else jnp.squeeze(m, axes)
    return (jnp.log(s) + m_out).astype(out)


# max(Tensor self) -> Tensor
@lower(aten.max.default)
def max_default(self):
    return jnp.max(self)


# max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)
@lower(aten.max.dim)
def max_dim(self, dim, keepdim):
    if self.ndim == 0:
        return self, jnp.zeros((), _I64)
    return _extreme_with_index(self, dim % self.ndim, keepdim, is_max=True)


# mean(Tensor self, *, ScalarType? dtype=None) -> Tensor
@lower(aten.mean.default)
def mean_default(self, dtype):
    return mean_dim(self, None, False, dtype)


# mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor
@lower(aten.mean.dim)
def mean_dim(self, dim, keepdim, dtype):
    out = _float_out_dtype(self, dtype)
    x = self.astype(out).astype(_acc(out))
    return jnp.mean(x, axis=_axes(dim, self.ndim), keepdims=keepdim).astype(out)


# min(Tensor self) -> Tensor
@lower(aten.min.default)
def min_default(self):
    return jnp.min(self)


# min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)
@lower(aten.min.dim)
def min_dim(self, dim, keepdim):
    if self.ndim == 0:
        return self, jnp.zeros((), _I64)
    return _extreme_with_index(self, dim % self.ndim, keepdim, is_max=False)


# norm.Scalar(Tensor self, Scalar p=2) -> Tensor
@lower(aten.norm.Scalar, static=("p",))
def norm_scalar(self, p):
    return _vector_norm(self, p, _axes(None, self.ndim), False, None)


# norm.ScalarOpt_dim(Tensor self, Scalar? p, int[1] dim, bool keepdim=False) -> Tensor
@lower(aten.norm.ScalarOpt_dim, static=("p",))
def norm_scalaropt_dim(self, p, dim, keepdim):
    return _vector_norm(self, p, _axes(dim, self.ndim), keepdim, None)


# norm.ScalarOpt_dim_dtype(Tensor self, Scalar? p, int[1] dim, bool keepdim, *, ScalarType dtype) -> Tensor
@lower(aten.norm.ScalarOpt_dim_dtype, static=("p",))
def norm_scalaropt_dim_dtype(self, p, dim, keepdim, dtype):
    return _vector_norm(self, p, _axes(dim, self.ndim), keepdim, to_numpy_dtype(dtype))


# norm.ScalarOpt_dtype(Tensor self, Scalar? p, *, ScalarType dtype) -> Tensor
@lower(aten.norm.ScalarOpt_dtype, static=("p",))
def norm_scalaropt_dtype(self, p, dtype):
    return _vector_norm(self, p, _axes(None, self.ndim), False, to_numpy_dtype(dtype))


# prod(Tensor self, *, ScalarType? dtype=None) -> Tensor
@lower(aten.prod.default)
def prod_default(self, dtype):
    out = _sum_out_dtype(self, dtype)
    return jnp.prod(self.astype(out).astype(_acc(out))).astype(out)


# prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor
@lower(aten.prod.dim_int)
def prod_dim_int(self, dim, keepdim, dtype):
    out = _sum_out_dtype(self, dtype)
    x = self.astype(out).astype(_acc(out))
    return jnp.prod(x, axis=_axes(dim, self.ndim), keepdims=keepdim).astype(out)


# segment_reduce(Tensor data, str reduce, *, Tensor? lengths=None, Tensor? indices=None, Tensor? offsets=None, int axis=0, bool unsafe=False, Scalar? initial=None) -> Tensor
@lower(aten.segment_reduce.default)
def segment_reduce(data, reduce, lengths, indices, offsets, axis, unsafe, initial):
    if indices is not None:
        raise RuntimeError("segment_reduce(): indices based reduction is not supported yet.")
    if lengths is None and offsets is None:
        raise RuntimeError("segment_reduce(): Either lengths or offsets must be defined.")
    return _segment_reduce(data, reduce, lengths, offsets, axis, unsafe, initial)


# std.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor
@lower(aten.std.correction)
def std_correction(self, dim, correction, keepdim):
    var, _ = _var_impl(self, dim, correction, keepdim)
    return jnp.sqrt(var).astype(self.dtype)


# std_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> (Tensor, Tensor)
@lower(aten.std_mean.correction)
def std_mean_correction(self, dim, correction, keepdim):
    var, mean = _var_impl(self, dim, correction, keepdim)
    return jnp.sqrt(var).astype(self.dtype), mean.astype(self.dtype)


# sum(Tensor self, *, ScalarType? dtype=None) -> Tensor
@lower(aten.sum.default)
def sum_default(self, dtype):
    return sum_dim_intlist(self, None, False, dtype)


# sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor
@lower(aten.sum.dim_IntList)
def sum_dim_intlist(self, dim, keepdim, dtype):
    out = _sum_out_dtype(self, dtype)
    axes = _axes(dim, self.ndim)
    if len(axes) == self.ndim and self.size > _WIDE_SUM_CHUNK and _widens_int(self.dtype, out):
        total = _chunked_int_sum(self.reshape(-1), out)
        return total.reshape((1,) * self.ndim if keepdim else ())
    x = self.astype(out).astype(_acc(out))
    return jnp.sum(x, axis=axes, keepdims=keepdim).astype(out)


# XLA's CPU backend does not fuse an integer widening into the reduction that follows it: the sum
# of n bool/uint8 values into int64 first writes an 8n-byte int64 copy (17 GB for a 2**31-element
# mask, and `nonzero` counts with such a sum). Large whole-tensor integer sums therefore run as a
# loop over chunks, each widened on its own; exact (integer addition is associative).
_WIDE_SUM_CHUNK = 1 << 22


def _widens_int(src, out) -> bool:
    src, out = np.dtype(src), np.dtype(out)
    return _is_int_like(src) and jnp.issubdtype(out, np.integer) and (src == np.bool_ or src.itemsize < out.itemsize)


def _chunked_int_sum(flat, out):
    n, chunk = flat.shape[0], _WIDE_SUM_CHUNK
    full = n // chunk

    def body(i, acc):  # a dynamic slice of the input itself: no copy of the whole input
        part = lax.dynamic_slice(flat, (i * chunk,), (chunk,))
        return acc + jnp.sum(part.astype(out), dtype=out)

    total = lax.fori_loop(0, full, body, jnp.zeros((), out))
    return total + jnp.sum(flat[full * chunk:].astype(out), dtype=out)


# var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor
@lower(aten.var.correction)
def var_correction(self, dim, correction, keepdim):
    var, _ = _var_impl(self, dim, correction, keepdim)
    return var.astype(self.dtype)


# var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> (Tensor, Tensor)
@lower(aten.var_mean.correction)
def var_mean_correction(self, dim, correction, keepdim):
    var, mean = _var_impl(self, dim, correction, keepdim)
    return var.astype(self.dtype), mean.astype(self.dtype)
