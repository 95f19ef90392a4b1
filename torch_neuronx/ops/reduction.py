"""Reductions, scans and softmax: sum/mean/var/prod/max/argmax/any/cumsum/logsumexp/norms.

PyTorch's CPU rules followed here: bool and integer sums/products/cumsums return int64;
float16/bfloat16 accumulate in float32 and round once; an empty `dim` list (or None) means every
dimension for the `int[1]? dim` reductions, but no dimension for `any.dims`/`all.dims`; max/min and
argmax/argmin propagate NaN and pick the first index of the extreme (the first NaN if any).
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime.lazy_jax import jnp, lax
from .dtypes import is_low_precision, opmath, to_numpy_dtype
from ._registry import aten, lower

_I64 = np.dtype(np.int64)
_F32 = np.dtype(np.float32)


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
        (jnp.asarray(init_v, x.dtype), jnp.asarray(np.iinfo(np.int64).max, _I64)),
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


# linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor
@lower(aten.linalg_vector_norm.default, static=("ord",))
def linalg_vector_norm(self, ord, dim, keepdim, dtype):
    out = None if dtype is None else to_numpy_dtype(dtype)
    return _vector_norm(self, ord, _axes(dim, self.ndim), keepdim, out)


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
