"""Special functions and odd elementwise ops that otherwise fell back to the CPU (or reached the
backend only as a chain of small decomposed ops): erfc/erfcx, polygamma, modified Bessel functions,
ndtri/log_ndtr, gcd/lcm, bit shifts, angle, frexp, nextafter, logaddexp(2), sinc, heaviside,
deg2rad/rad2deg, xlogy/xlog1py Scalar overloads, adaptive_max_pool2d (+ backward).

PyTorch CPU semantics:
- float16/bfloat16 compute in float32 and round once; integer inputs of float ops give the default dtype.
- `erfcx` of float32 is computed in float64 (exp(x^2) * erfc(x) loses ~x^2 ulps in float32), with the
  asymptotic series past x = 25.
- `polygamma(1, x)` is ATen's trigamma algorithm (reflection through sin(pi x), so negative integers give
  huge finite values, as on the CPU); n >= 2 is jax's Hurwitz-zeta polygamma with ATen's poles
  (x a non-positive integer or -inf -> (-1)^(n+1) inf).
- Shifts: a count < 0 or >= the bit width gives 0 (left) or the sign fill (right), as ATen does.
- `gcd` is ATen's Euclid on |a|, |b| (so gcd(INT_MIN, 6) = -2 like the CPU); lcm = |a / gcd * b|.
- adaptive_max_pool2d: first maximum wins, a NaN wins over numbers (the last NaN of a window), indices
  are int64 flat positions in H*W.

Not lowered: `bincount` (its length is max(self)+1, a host read), `equal` (returns a Python bool).
"""
from __future__ import annotations

import math

import numpy as np

from .._jax import jax, jnp, lax
from ._dtypes import cast
from ._registry import aten, lower, require_in_range
from .elementwise import _binary_float, _compute, _float_dtype, _is_float, _out, _unary_float, result_dtype
from .misc import _digamma

_F64 = np.dtype(np.float64)


def _float_only(name, dt):
    if not _is_float(dt):
        raise RuntimeError(f'"{name}" not implemented for \'{dt}\'')


# ---------------------------------------------------------------------------------------------
# helpers


def _erfcx(x):
    """exp(x^2) * erfc(x), in float64 (float32 inputs widened), asymptotic for large x; for x < 0
    2 exp(x^2) - erfcx(-x) with x^2 rounded in the input dtype, as ATen's kernel computes it."""
    dt = x.dtype
    wide = _F64 if np.dtype(dt).itemsize <= 4 else dt
    z = cast(jnp.abs(x), wide)
    big = z > 25.0
    zs = jnp.where(big, 1.0, z)
    direct = jnp.exp(zs * zs) * lax.erfc(zs)
    zb = jnp.where(big, z, 26.0)
    t = 1.0 / (2.0 * zb * zb)
    series = (1.0 - t * (1.0 - 3.0 * t * (1.0 - 5.0 * t * (1.0 - 7.0 * t)))) / (zb * math.sqrt(math.pi))
    pos = jnp.where(big, series, direct)
    pos = jnp.where(z == jnp.inf, 0.0, pos)
    neg = 2 * jnp.exp(cast(x * x, wide)) - pos
    r = jnp.where(x < 0, neg, pos)
    return cast(jnp.where(jnp.isnan(x), jnp.nan, r), dt)


def _trigamma(x):
    # ATen's calc_trigamma, in the compute dtype.
    pi = np.asarray(math.pi, x.dtype)
    neg = x < 0.5
    s = jnp.sin(pi * x)
    result = jnp.where(neg, -(pi * pi) / (s * s), jnp.zeros_like(x))
    x = jnp.where(neg, 1 - x, x)
    for _ in range(6):
        result = result + 1 / (x * x)
        x = x + 1
    ixx = 1 / (x * x)
    result = result + (1 + 1 / (2 * x) + ixx * (1.0 / 6 - ixx * (1.0 / 30 - ixx * (1.0 / 42)))) / x
    return jnp.where(neg, -result, result)


def _gcd(a, b):
    # ATen's calc_gcd: Euclid on |a|, |b| with C remainder (wrapping abs of INT_MIN kept).
    a, b = jnp.broadcast_arrays(jnp.abs(a), jnp.abs(b))

    def cond(state):
        return jnp.any(state[0] != 0)

    def body(state):
        a, b = state
        nz = a != 0
        safe = jnp.where(nz, a, jnp.ones_like(a))
        return jnp.where(nz, lax.rem(b, safe), a), jnp.where(nz, a, b)

    return lax.while_loop(cond, body, (a, b))[1]


def _int_args(name, self, other):
    dt = result_dtype(self, other)
    if not np.issubdtype(dt, np.integer):
        raise RuntimeError(f'"{name}" not implemented for \'{dt}\'')
    return cast(self, dt), cast(other, dt), dt


def _shift(left):
    def lowering(self, other):
        a, b, dt = _int_args("lshift_cpu" if left else "rshift_cpu", self, other)
        a, b = jnp.broadcast_arrays(a, b)
        bits = np.dtype(dt).itemsize * 8
        signed = np.dtype(dt).kind == "i"
        bad = (b >= bits) | (b < 0) if signed else b >= bits
        sb = jnp.where(bad, jnp.zeros_like(b), b)
        if left:
            return jnp.where(bad, jnp.zeros_like(a), lax.shift_left(a, sb))
        fill = lax.shift_right_arithmetic(a, jnp.full_like(a, bits - 1)) if signed else jnp.zeros_like(a)
        return jnp.where(bad, fill, lax.shift_right_arithmetic(a, sb) if signed else lax.shift_right_logical(a, sb))

    return lowering


def _xlog1py(x, y):
    r = jnp.where(x == 0, jnp.zeros_like(x), x * jnp.log1p(y))
    return jnp.where(jnp.isnan(y), jnp.nan, r)


def _xlogy(x, y):
    r = jnp.where(x == 0, jnp.zeros_like(x), x * jnp.log(y))
    return jnp.where(jnp.isnan(y), jnp.nan, r)


def _no_low_precision(name, fn):
    """ATen's CPU kernel has no float16/bfloat16 version: raise as it does."""

    def lowering(self):
        if np.dtype(self.dtype) != _compute(self.dtype):
            names = {np.dtype(jnp.bfloat16): "BFloat16", np.dtype(np.float16): "Half"}
            raise NotImplementedError(f'"{name}" not implemented for \'{names.get(np.dtype(self.dtype), self.dtype)}\'')
        return fn(self)

    return lowering


def _adaptive_windows(size: int, out: int):
    starts = [(i * size) // out for i in range(out)]
    ends = [-((-(i + 1) * size) // out) for i in range(out)]
    k = max(e - s for s, e in zip(starts, ends))
    idx = np.array([[min(s + j, size - 1) for j in range(k)] for s in starts], np.int64)
    valid = np.array([[s + j < e for j in range(k)] for s, e in zip(starts, ends)])
    return idx, valid, k


# ---------------------------------------------------------------------------------------------
# lowerings, alphabetical

# __lshift__.Scalar(Tensor self, Scalar other) -> Tensor
# __lshift__.Tensor(Tensor self, Tensor other) -> Tensor
lower(aten.__lshift__.Scalar, aten.__lshift__.Tensor)(_shift(True))

# __rshift__.Scalar(Tensor self, Scalar other) -> Tensor
# __rshift__.Tensor(Tensor self, Tensor other) -> Tensor
lower(aten.__rshift__.Scalar, aten.__rshift__.Tensor)(_shift(False))


# adaptive_max_pool2d(Tensor self, int[2] output_size) -> (Tensor, Tensor)
@lower(aten.adaptive_max_pool2d.default)
def adaptive_max_pool2d(self, output_size):
    oh, ow = output_size
    H, W = self.shape[-2:]
    if self.ndim not in (3, 4) or H == 0 or W == 0:
        raise RuntimeError("adaptive_max_pool2d(): Expected 3D or 4D tensor with non-zero spatial dims")
    ri, rv, kh = _adaptive_windows(H, oh)
    ci, cv, kw = _adaptive_windows(W, ow)
    # (..., oh, kh, ow, kw) -> (..., oh, ow, kh*kw)
    v = self[..., ri[:, :, None, None], ci[None, None, :, :]]
    v = jnp.moveaxis(v, -3, -2).reshape(*self.shape[:-2], oh, ow, kh * kw)
    mask = (rv[:, :, None, None] & cv[None, None, :, :]).transpose(0, 2, 1, 3).reshape(oh, ow, kh * kw)
    flat = (ri[:, :, None, None] * W + ci[None, None, :, :]).transpose(0, 2, 1, 3).reshape(oh, ow, kh * kw)
    neg = jnp.asarray(-jnp.inf, self.dtype) if jnp.issubdtype(self.dtype, jnp.floating) else jnp.iinfo(self.dtype).min
    v = jnp.where(mask, v, neg)
    if jnp.issubdtype(self.dtype, jnp.floating):
        nan = jnp.isnan(v) & mask
        last_nan = kh * kw - 1 - jnp.argmax(nan[..., ::-1], axis=-1)
        pos = jnp.where(jnp.any(nan, axis=-1), last_nan, jnp.argmax(v, axis=-1))
    else:
        pos = jnp.argmax(v, axis=-1)
    vals = jnp.take_along_axis(v, pos[..., None], axis=-1)[..., 0]
    idx = jnp.take_along_axis(jnp.broadcast_to(jnp.asarray(flat), v.shape), pos[..., None], axis=-1)[..., 0]
    return vals, idx.astype(jnp.int64)


# adaptive_max_pool2d_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor
@lower(aten.adaptive_max_pool2d_backward.default)
def adaptive_max_pool2d_backward(grad_output, self, indices):
    H, W = self.shape[-2:]
    require_in_range(indices, H * W, RuntimeError, "adaptive_max_pool2d_backward: index out of range", False)
    lead = self.shape[:-2]
    n = int(np.prod(lead)) if lead else 1
    g = cast(grad_output, _compute(self.dtype)).reshape(n, -1)
    i = indices.reshape(n, -1)
    rows = jnp.arange(n)[:, None]
    out = jnp.zeros((n, H * W), g.dtype).at[rows, i].add(g)
    return cast(out.reshape(self.shape), self.dtype)


# angle(Tensor self) -> Tensor
@lower(aten.angle.default)
def angle(self):
    if jnp.issubdtype(self.dtype, jnp.complexfloating):
        return jnp.angle(self)
    dt = _float_dtype(self.dtype)
    x = cast(self, _compute(dt))
    r = jnp.where(x < 0, np.asarray(math.pi, x.dtype), jnp.zeros_like(x))
    return _out(jnp.where(jnp.isnan(x), x, r), dt)


# bitwise_left_shift.Tensor(Tensor self, Tensor other) -> Tensor
# bitwise_left_shift.Tensor_Scalar(Tensor self, Scalar other) -> Tensor
lower(aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar)(_shift(True))


# bitwise_left_shift.Scalar_Tensor(Scalar self, Tensor other) -> Tensor
@lower(aten.bitwise_left_shift.Scalar_Tensor)
def bitwise_left_shift_scalar_tensor(self, other):
    return _shift(True)(self, other)


# bitwise_right_shift.Tensor(Tensor self, Tensor other) -> Tensor
# bitwise_right_shift.Tensor_Scalar(Tensor self, Scalar other) -> Tensor
lower(aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar)(_shift(False))


# bitwise_right_shift.Scalar_Tensor(Scalar self, Tensor other) -> Tensor
@lower(aten.bitwise_right_shift.Scalar_Tensor)
def bitwise_right_shift_scalar_tensor(self, other):
    return _shift(False)(self, other)


# deg2rad(Tensor self) -> Tensor
lower(aten.deg2rad.default)(_unary_float(lambda x: x * np.asarray(math.pi / 180, x.dtype)))


# erfc(Tensor self) -> Tensor
lower(aten.erfc.default)(_unary_float(lax.erfc))


# frexp.Tensor(Tensor self) -> (Tensor mantissa, Tensor exponent)
@lower(aten.frexp.Tensor)
def frexp(self):
    _float_only("frexp", self.dtype)
    x = cast(self, _compute(self.dtype))
    m, e = jnp.frexp(x)
    # subnormals (XLA flushes them): the mantissa field as an exact integer, scaled by 2^-(bias+frac)
    info = np.finfo(x.dtype)
    ity = jnp.int32 if info.bits == 32 else jnp.int64
    bits = lax.bitcast_convert_type(x, ity)
    field = (bits & ((1 << info.nmant) - 1)).astype(x.dtype)
    sm, se = jnp.frexp(field)
    sub = (jnp.abs(bits & ~(np.asarray(1, ity) << (info.bits - 1))) < (1 << info.nmant)) & (field != 0)
    m = jnp.where(sub, jnp.where(bits < 0, -sm, sm), m)
    e = jnp.where(sub, se + (info.minexp - info.nmant), e)
    return cast(m, self.dtype), e.astype(jnp.int32)


# gcd(Tensor self, Tensor other) -> Tensor
@lower(aten.gcd.default)
def gcd(self, other):
    a, b, dt = _int_args("gcd_cpu", self, other)
    return _gcd(a, b)


# heaviside(Tensor self, Tensor values) -> Tensor
@lower(aten.heaviside.default)
def heaviside(self, values):
    dt = result_dtype(self, values)
    if np.dtype(self.dtype) != np.dtype(values.dtype):
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes")
    x, v = cast(self, dt), cast(values, dt)
    return jnp.where(x == 0, v, cast(x > 0, dt))


# lcm(Tensor self, Tensor other) -> Tensor
@lower(aten.lcm.default)
def lcm(self, other):
    a, b, dt = _int_args("lcm_cpu", self, other)
    a, b = jnp.broadcast_arrays(a, b)
    g = _gcd(a, b)
    safe = jnp.where(g == 0, jnp.ones_like(g), g)
    return jnp.where(g == 0, jnp.zeros_like(g), jnp.abs(lax.div(a, safe) * b))


# logaddexp(Tensor self, Tensor other) -> Tensor
@lower(aten.logaddexp.default)
@_binary_float
def logaddexp(a, b):
    m = jnp.maximum(a, b)
    r = m + jnp.log1p(jnp.exp(-jnp.abs(a - b)))
    return jnp.where(jnp.isinf(a) & (a == b), a, r)


# logaddexp2(Tensor self, Tensor other) -> Tensor
@lower(aten.logaddexp2.default)
@_binary_float
def logaddexp2(a, b):
    m = jnp.maximum(a, b)
    r = m + jnp.log1p(jnp.exp2(-jnp.abs(a - b))) * np.asarray(1 / math.log(2), a.dtype)
    return jnp.where(jnp.isinf(a) & (a == b), a, r)


# nextafter(Tensor self, Tensor other) -> Tensor
@lower(aten.nextafter.default)
def nextafter(self, other):
    dt = result_dtype(self, other)
    _float_only("nextafter_cpu", dt)
    a, b = jnp.broadcast_arrays(cast(self, dt), cast(other, dt))
    return lax.nextafter(a, b)


# polygamma(int n, Tensor self) -> Tensor
@lower(aten.polygamma.default)
def polygamma(n, self):
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    dt = _float_dtype(self.dtype)
    x = cast(self, _compute(dt))
    if n == 0:
        r = _digamma(x)
    elif n == 1:
        r = _trigamma(x)
    else:
        r = jax.scipy.special.polygamma(jnp.asarray(n, jnp.int32), x)
        pole = (x <= 0) & (x == jnp.floor(x))
        r = jnp.where(pole, np.asarray(jnp.inf if n % 2 else -jnp.inf, x.dtype), r)
    return _out(r, dt)


# rad2deg(Tensor self) -> Tensor
lower(aten.rad2deg.default)(_unary_float(lambda x: x * np.asarray(180 / math.pi, x.dtype)))


# sinc(Tensor self) -> Tensor
@lower(aten.sinc.default)
@_unary_float
def sinc(x):
    p = x * np.asarray(math.pi, x.dtype)
    return jnp.where(x == 0, jnp.ones_like(x), jnp.sin(p) / p)


# special_erfcx(Tensor self) -> Tensor
lower(aten.special_erfcx.default)(_no_low_precision("erfcx_cpu", _unary_float(_erfcx)))

# special_i0e(Tensor self) -> Tensor
lower(aten.special_i0e.default)(_unary_float(lambda x: jax.scipy.special.i0e(x)))

# special_i1(Tensor self) -> Tensor
lower(aten.special_i1.default)(_unary_float(lambda x: jax.scipy.special.i1(x)))

# special_i1e(Tensor self) -> Tensor
lower(aten.special_i1e.default)(_unary_float(lambda x: jax.scipy.special.i1e(x)))


# special_log_ndtr(Tensor self) -> Tensor
@lower(aten.special_log_ndtr.default)
@lambda fn: _no_low_precision("log_ndtr_cpu", _unary_float(fn))
def special_log_ndtr(x):
    t = x * np.asarray(math.sqrt(0.5), x.dtype)
    lo = jnp.log(_erfcx(-t) / 2) - t * t
    hi = jnp.log1p(-lax.erfc(t) / 2)
    return jnp.where(x < -1.0, lo, hi)


# special_ndtri(Tensor self) -> Tensor
lower(aten.special_ndtri.default)(_no_low_precision("ndtri_cpu", _unary_float(lambda x: jax.scipy.special.ndtri(x))))


# special_xlog1py(Tensor self, Tensor other) -> Tensor
# special_xlog1py.other_scalar(Tensor self, Scalar other) -> Tensor
# special_xlog1py.self_scalar(Scalar self, Tensor other) -> Tensor
lower(aten.special_xlog1py.default, aten.special_xlog1py.other_scalar, aten.special_xlog1py.self_scalar)(
    _binary_float(_xlog1py)
)

# xlogy.Scalar_Other(Tensor self, Scalar other) -> Tensor
# xlogy.Scalar_Self(Scalar self, Tensor other) -> Tensor
lower(aten.xlogy.Scalar_Other, aten.xlogy.Scalar_Self)(_binary_float(_xlogy))
