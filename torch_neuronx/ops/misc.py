"""Segment reductions, tensor hashes, and a
few math ops: segment_reduce, hash_tensor, logcumsumexp, trace, diag_embed, polar, lgamma, digamma, i0.

- `i0` is the Cephes Chebyshev expansion ATen uses (same coefficients), `digamma(±0)` is ∓inf as
  ATen's, not jax's NaN.
- `segment_reduce` (lengths or offsets along the last dim of lengths/offsets) is one scatter of
  every element to its segment, starting from `initial` (or the reduction's identity); mean divides
  by the segment's length and gives NaN for an empty segment without `initial`; max/min propagate
  NaN. Without `unsafe` the lengths are checked as the CPU does (non-negative, summing to the axis).
- `hash_tensor` (mode 0) xor-reduces the elements as uint64: floats through float64's bits,
  integers and bools sign-extended through int64, as ATen.
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime.lazy_jax import jax, jnp, lax
from .cephes import I0_A, I0_B, chbevl
from .dims import wrap_dim
from .dtypes import cast, is_low_precision
from ._registry import aten, lower, require
from .promotion import compute_dtype, float_dtype

_I64 = np.dtype(np.int64)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_C128 = np.dtype(np.complex128)


def _acc(dtype):
    return _F32 if is_low_precision(dtype) else np.dtype(dtype)


def _unary_float(fn):
    """A float-valued unary op: integer/bool inputs give the default dtype, 16-bit floats compute
    in float32 and round once."""

    def lowering(self):
        dt = float_dtype(self.dtype)
        return cast(fn(cast(self, compute_dtype(dt))), dt)

    return lowering


def _i0(x):
    a = jnp.abs(x)
    small = a <= 8
    ys = a / 2 - 2
    yb = 32 / jnp.where(small, jnp.ones((), a.dtype), a) - 2
    vs = jnp.exp(a) * chbevl(ys, I0_A)
    vb = jnp.exp(a) * chbevl(yb, I0_B) / jnp.sqrt(a)
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
# segment_reduce


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


# ---------------------------------------------------------------------------------------------
# lowerings, alphabetical


# diag_embed(Tensor self, int offset=0, int dim1=-2, int dim2=-1) -> Tensor
@lower(aten.diag_embed.default)
def diag_embed(self, offset, dim1, dim2):
    nd = self.ndim + 1
    d1, d2 = wrap_dim(dim1, nd), wrap_dim(dim2, nd)
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


# polar(Tensor abs, Tensor angle) -> Tensor
@lower(aten.polar.default)
def polar(abs, angle):
    dt = np.dtype(abs.dtype)
    if dt not in (np.dtype(np.float32), _F64) or np.dtype(angle.dtype) != dt:
        raise TypeError(
            f"polar: expected abs and angle to be float or double and of the same dtype, got {dt}, {angle.dtype}"
        )
    return lax.complex(abs * jnp.cos(angle), abs * jnp.sin(angle))


# segment_reduce(Tensor data, str reduce, *, Tensor? lengths=None, Tensor? indices=None, Tensor? offsets=None, int axis=0, bool unsafe=False, Scalar? initial=None) -> Tensor
@lower(aten.segment_reduce.default)
def segment_reduce(data, reduce, lengths, indices, offsets, axis, unsafe, initial):
    if indices is not None:
        raise RuntimeError("segment_reduce(): indices based reduction is not supported yet.")
    if lengths is None and offsets is None:
        raise RuntimeError("segment_reduce(): Either lengths or offsets must be defined.")
    return _segment_reduce(data, reduce, lengths, offsets, axis, unsafe, initial)


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
