"""Elementwise ops: arithmetic, math functions, activations and their backward ops, comparisons,
bitwise/logical ops and shifts, gcd/lcm, selection, and dtype conversion (`_to_copy`); among the
math functions angle, polar, frexp, nextafter, logaddexp(2), sinc, heaviside, deg2rad/rad2deg.

PyTorch CPU semantics: the result dtype follows PyTorch's type promotion (promotion.py's
`result_dtype`: dimensioned tensors > 0-d tensors > Scalars, by category), float16/bfloat16 math runs
in float32 and rounds once (`compute_dtype`), integer division/remainder follow C/Python rules as
ATen does. `unary_float`/`binary_float` (float-valued ops over promoted operands) and `float_pow`
(pow with C semantics for negative bases) are used by other families too.
- Shifts: a count < 0 or >= the bit width gives 0 (left) or the sign fill (right), as ATen does.
- `gcd` is ATen's Euclid on |a|, |b| (so gcd(INT_MIN, 6) = -2 like the CPU); lcm = |a / gcd * b|.

Not lowered: `equal` (returns a Python bool).
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime.lazy_jax import jnp, lax
from .dtypes import cast, to_numpy_dtype
from ._registry import aten, lower, require
from .promotion import (category, compute_dtype, float_dtype, is_float, is_floatlike, is_int, is_weak,
                        result_dtype)

_BOOL = np.dtype(np.bool_)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _args(*xs, dt=None, compute=True, rounded=False):
    """Operands cast to the compute dtype of their promoted result dtype; returns (*operands, dt).

    rounded: each operand goes through the result dtype first. TensorIterator converts a Scalar (or a
    0-dim tensor of another dtype) to the common dtype before the CPU kernel sees it, so a bfloat16
    add sees 0.3 as bfloat16(0.3); only kernels that read the Scalar's original value in float32
    (mul, div) do not round it."""
    if dt is None:
        dt = result_dtype(*xs)
    cd = compute_dtype(dt) if compute else dt
    if rounded and cd != dt:
        return (*(None if x is None else cast(cast(x, dt), cd) for x in xs), dt)
    return (*(None if x is None else cast(x, cd) for x in xs), dt)


def _out(y, dt):
    return cast(y, dt)


def unary_float(fn):
    """A float-valued unary op: integer/bool inputs go to the default dtype, bf16/f16 compute in f32."""

    def lowering(self):
        dt = float_dtype(self.dtype)
        return _out(fn(cast(self, compute_dtype(dt))), dt)

    return lowering


def binary_float(fn, rounded=True):
    """A float-valued binary op: the operands' promoted dtype (integers/bools: the default dtype),
    computed in its compute dtype (rounded: each operand through the result dtype first, see `_args`)."""

    def lowering(self, other):
        dt = float_dtype(result_dtype(self, other))
        a, b, _ = _args(self, other, dt=dt, rounded=rounded)
        return _out(fn(a, b), dt)

    return lowering


def _sigmoid(x):
    return 1 / (1 + jnp.exp(-x))


# ---------------------------------------------------------------------------------------------
# integer / float division helpers
# ---------------------------------------------------------------------------------------------


def _floor_div_float(a, b):
    # c10::div_floor_floating (Python's algorithm): exact floor of a/b computed through fmod.
    a, b = jnp.broadcast_arrays(a, b)
    mod = lax.rem(a, b)
    div = (a - mod) / b
    div = jnp.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    fl = jnp.floor(div)
    fl = jnp.where(div - fl > 0.5, fl + 1, fl)
    res = jnp.where(div != 0, fl, jnp.copysign(jnp.zeros_like(div), a / b))
    return jnp.where(b == 0, a / b, res)


def _floor_div_int(a, b):
    a, b = jnp.broadcast_arrays(a, b)
    q = lax.div(a, b)
    if np.dtype(a.dtype).kind == "u":
        return q
    return jnp.where((lax.rem(a, b) != 0) & ((a < 0) != (b < 0)), q - 1, q)


def _int_divisor(a, b, divisor):
    """(a, b) broadcast, the integer divisor `b` with its zeros replaced by 1: the CPU raises
    ZeroDivisionError for a zero divisor (checked here for a tensor `divisor`, the argument before
    promotion; for a number on the host, ops/argument_checks.py), and XLA's CPU compiler dies of
    SIGFPE folding a division by a constant zero."""
    a, b = jnp.broadcast_arrays(a, b)
    if not is_weak(divisor):
        require(~jnp.any(b == 0), RuntimeError, "ZeroDivisionError")
    return a, jnp.where(b == 0, jnp.ones((), b.dtype), b)


def _remainder(a, b):
    a, b = jnp.broadcast_arrays(a, b)
    mod = lax.rem(a, b)
    if np.dtype(a.dtype).kind == "u":
        return mod
    return jnp.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod)


def _div_mode(a, b, rounding_mode, dt):
    if rounding_mode is None:
        fd = float_dtype(dt)
        x, y, _ = _args(a, b, dt=fd)
        return _out(x / y, fd)
    x, y, _ = _args(a, b, dt=dt)
    if dt == _BOOL:
        x, y = x.astype(np.int64), y.astype(np.int64)
    if rounding_mode in ("trunc", "floor") and not is_floatlike(x.dtype):
        x, y = _int_divisor(x, y, b)
    if rounding_mode == "trunc":
        res = lax.div(*jnp.broadcast_arrays(x, y)) if not is_floatlike(x.dtype) else jnp.trunc(x / y)
    elif rounding_mode == "floor":
        res = _floor_div_int(x, y) if not is_floatlike(x.dtype) else _floor_div_float(x, y)
    else:
        raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{rounding_mode}'")
    return _out(res, dt)


# ---------------------------------------------------------------------------------------------
# pow helpers
# ---------------------------------------------------------------------------------------------


def _int_pow(a, b):
    """Integer power, exact with wrap-around, as ATen's powi (negative exponents: 1, +-1 or 0)."""
    dt = np.dtype(a.dtype)
    bits = dt.itemsize * 8
    one = jnp.ones_like(a)
    acc = one
    base = a
    e = b
    for i in range(bits):
        acc = jnp.where((e & 1) != 0, acc * base, acc)
        if i + 1 < bits:
            base = base * base
            e = lax.shift_right_logical(e, jnp.ones_like(e))
    if dt.kind == "u":
        return acc
    odd = (b & 1) != 0
    neg_res = jnp.where(a == 1, one, jnp.where(a == -1, jnp.where(odd, -one, one), jnp.zeros_like(a)))
    return jnp.where(b < 0, neg_res, acc)


def float_pow(x, y):
    """pow for floats with C semantics for negative bases (XLA backends may compute exp(y*log x))."""
    x, y = jnp.broadcast_arrays(x, y)
    r = lax.pow(jnp.abs(x), y)
    y_int = jnp.floor(y) == y
    y_odd = y_int & (jnp.abs(lax.rem(y, jnp.full_like(y, 2))) == 1)  # inf is even
    r = jnp.where(jnp.signbit(x) & y_odd, -r, r)
    return jnp.where((x < 0) & ~y_int & jnp.isfinite(x), jnp.nan, r)


def _pow_static_exponent(x, e):
    """x ** e for a Python-number exponent e; x already in the compute dtype."""
    if is_floatlike(x.dtype):
        if e == 0:
            return jnp.ones_like(x)
        if e == 1:
            return x
        if e == 2:
            return x * x
        if e == 3:
            return x * x * x
        if e == 0.5:
            return jnp.sqrt(x)
        if e == -0.5:
            return lax.rsqrt(x)
        if e == -1:
            return 1 / x
        if e == -2:
            return 1 / (x * x)
        if float(e).is_integer() and abs(e) <= 32:
            p = lax.integer_pow(x, int(abs(e)))
            return p if e > 0 else 1 / p
        ef = float(e)
        r = lax.pow(jnp.abs(x), jnp.asarray(ef, x.dtype))
        if math.isinf(ef) or ef.is_integer():
            if ef.is_integer() and int(ef) % 2 != 0:
                r = jnp.where(jnp.signbit(x), -r, r)
            return r
        return jnp.where((x < 0) & jnp.isfinite(x), jnp.nan, r)
    # integer base, integer exponent
    e = int(e)
    if e >= 0:
        return lax.integer_pow(x, e) if e > 0 else jnp.ones_like(x)
    one = jnp.ones_like(x)
    return jnp.where(x == 1, one, jnp.where(x == -1, one if e % 2 == 0 else -one, jnp.zeros_like(x)))


def _pow(a, b, dt):
    x, y, _ = _args(a, b, dt=dt)
    if dt == _BOOL:
        x, y = x.astype(np.int64), y.astype(np.int64)
    if is_int(x.dtype):
        return _out(_int_pow(x, y), dt)
    if category(x.dtype) == 3:
        return _out(jnp.power(x, y), dt)
    return _out(float_pow(x, y), dt)


# ---------------------------------------------------------------------------------------------
# integer helpers (shifts, gcd) and a float-only check
# ---------------------------------------------------------------------------------------------


def _float_only(name, dt):
    if not is_float(dt):
        raise RuntimeError(f'"{name}" not implemented for \'{dt}\'')


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


# =============================================================================================
# lowerings, alphabetical by op name
# =============================================================================================


# __lshift__.Scalar(Tensor self, Scalar other) -> Tensor
# __lshift__.Tensor(Tensor self, Tensor other) -> Tensor
lower(aten.__lshift__.Scalar, aten.__lshift__.Tensor)(_shift(True))

# __rshift__.Scalar(Tensor self, Scalar other) -> Tensor
# __rshift__.Tensor(Tensor self, Tensor other) -> Tensor
lower(aten.__rshift__.Scalar, aten.__rshift__.Tensor)(_shift(False))


# _to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None) -> Tensor
@lower(aten._to_copy.default)
def _to_copy(self, dtype, layout, device, pin_memory, non_blocking, memory_format):
    if dtype is None:
        return self
    return cast(self, to_numpy_dtype(dtype))


# abs(Tensor self) -> Tensor
@lower(aten.abs.default)
def abs_(self):
    if self.dtype == _BOOL:
        return self
    return jnp.abs(self)


# acos(Tensor self) -> Tensor
lower(aten.acos.default)(unary_float(jnp.arccos))
# acosh(Tensor self) -> Tensor
lower(aten.acosh.default)(unary_float(jnp.arccosh))


# add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
# add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor
@lower(aten.add.Tensor, aten.add.Scalar)
def add(self, other, alpha):
    a, b, dt = _args(self, other, rounded=True)
    if dt == _BOOL:
        return a | (b & (cast(alpha, _BOOL)))
    return _out(a + _alpha(alpha, dt, a.dtype) * b, dt)


def _alpha(alpha, dt, cd):
    """add/sub's alpha as the CPU kernel uses it: rounded to the result dtype (bfloat16(0.1) for a
    bfloat16 add), then multiplied in the compute dtype."""
    return cast(cast(alpha, dt), cd)


# addcdiv(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor
@lower(aten.addcdiv.default)
def addcdiv(self, tensor1, tensor2, value):
    s, t1, t2, dt = _args(self, tensor1, tensor2)
    return _out(s + cast(value, s.dtype) * t1 / t2, dt)


# addcmul(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor
@lower(aten.addcmul.default)
def addcmul(self, tensor1, tensor2, value):
    s, t1, t2, dt = _args(self, tensor1, tensor2)
    if dt == _BOOL:
        return s | (t1 & t2 & cast(value, _BOOL))
    return _out(s + cast(value, s.dtype) * t1 * t2, dt)


# angle(Tensor self) -> Tensor
@lower(aten.angle.default)
def angle(self):
    if jnp.issubdtype(self.dtype, jnp.complexfloating):
        return jnp.angle(self)
    dt = float_dtype(self.dtype)
    x = cast(self, compute_dtype(dt))
    r = jnp.where(x < 0, np.asarray(math.pi, x.dtype), jnp.zeros_like(x))
    return _out(jnp.where(jnp.isnan(x), x, r), dt)


# asin(Tensor self) -> Tensor
lower(aten.asin.default)(unary_float(jnp.arcsin))
# asinh(Tensor self) -> Tensor
lower(aten.asinh.default)(unary_float(jnp.arcsinh))
# atan(Tensor self) -> Tensor
lower(aten.atan.default)(unary_float(jnp.arctan))
# atan2(Tensor self, Tensor other) -> Tensor
lower(aten.atan2.default)(binary_float(jnp.arctan2))
# atanh(Tensor self) -> Tensor
lower(aten.atanh.default)(unary_float(jnp.arctanh))


def _bitwise(fn):
    def lowering(self, other):
        a, b, dt = _args(self, other, compute=False)
        return fn(a, b)

    return lowering


# bitwise_and.Tensor(Tensor self, Tensor other) -> Tensor
# bitwise_and.Scalar(Tensor self, Scalar other) -> Tensor
lower(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar)(_bitwise(jnp.bitwise_and))


# bitwise_left_shift.Tensor(Tensor self, Tensor other) -> Tensor
# bitwise_left_shift.Tensor_Scalar(Tensor self, Scalar other) -> Tensor
lower(aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar)(_shift(True))


# bitwise_left_shift.Scalar_Tensor(Scalar self, Tensor other) -> Tensor
@lower(aten.bitwise_left_shift.Scalar_Tensor)
def bitwise_left_shift_scalar_tensor(self, other):
    return _shift(True)(self, other)


# bitwise_not(Tensor self) -> Tensor
@lower(aten.bitwise_not.default)
def bitwise_not(self):
    return jnp.invert(self)


# bitwise_or.Tensor(Tensor self, Tensor other) -> Tensor
# bitwise_or.Scalar(Tensor self, Scalar other) -> Tensor
lower(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar)(_bitwise(jnp.bitwise_or))


# bitwise_right_shift.Tensor(Tensor self, Tensor other) -> Tensor
# bitwise_right_shift.Tensor_Scalar(Tensor self, Scalar other) -> Tensor
lower(aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar)(_shift(False))


# bitwise_right_shift.Scalar_Tensor(Scalar self, Tensor other) -> Tensor
@lower(aten.bitwise_right_shift.Scalar_Tensor)
def bitwise_right_shift_scalar_tensor(self, other):
    return _shift(False)(self, other)


# bitwise_xor.Tensor(Tensor self, Tensor other) -> Tensor
# bitwise_xor.Scalar(Tensor self, Scalar other) -> Tensor
lower(aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar)(_bitwise(jnp.bitwise_xor))


def _rounding(fn):
    def lowering(self):
        if not is_floatlike(self.dtype):
            return self
        return fn(self)

    return lowering


# ceil(Tensor self) -> Tensor
lower(aten.ceil.default)(_rounding(jnp.ceil))


# clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor
# clamp.Tensor(Tensor self, Tensor? min=None, Tensor? max=None) -> Tensor
@lower(aten.clamp.default, aten.clamp.Tensor)
def clamp(self, min, max):
    x, lo, hi, dt = _args(self, min, max, compute=False)
    if lo is not None:
        x = jnp.maximum(x, lo)
    if hi is not None:
        x = jnp.minimum(x, hi)
    return x


# clamp_max(Tensor self, Scalar max) -> Tensor
# clamp_max.Tensor(Tensor self, Tensor max) -> Tensor
@lower(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(self, max):
    x, hi, dt = _args(self, max, compute=False)
    return jnp.minimum(x, hi)


# clamp_min(Tensor self, Scalar min) -> Tensor
# clamp_min.Tensor(Tensor self, Tensor min) -> Tensor
@lower(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(self, min):
    x, lo, dt = _args(self, min, compute=False)
    return jnp.maximum(x, lo)


# clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor
@lower(aten.clone.default)
def clone(self, memory_format):
    return self


# copysign.Tensor(Tensor self, Tensor other) -> Tensor
# copysign.Scalar(Tensor self, Scalar other) -> Tensor
lower(aten.copysign.Tensor, aten.copysign.Scalar)(binary_float(jnp.copysign))
# cos(Tensor self) -> Tensor
lower(aten.cos.default)(unary_float(jnp.cos))
# cosh(Tensor self) -> Tensor
lower(aten.cosh.default)(unary_float(jnp.cosh))


# deg2rad(Tensor self) -> Tensor
lower(aten.deg2rad.default)(unary_float(lambda x: x * np.asarray(math.pi / 180, x.dtype)))


# div.Tensor(Tensor self, Tensor other) -> Tensor
# div.Scalar(Tensor self, Scalar other) -> Tensor
@lower(aten.div.Tensor, aten.div.Scalar)
def div(self, other):
    return _div_mode(self, other, None, result_dtype(self, other))


# div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor
# div.Scalar_mode(Tensor self, Scalar other, *, str? rounding_mode) -> Tensor
@lower(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(self, other, rounding_mode):
    return _div_mode(self, other, rounding_mode, result_dtype(self, other))


# elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor
@lower(aten.elu.default)
def elu(self, alpha, scale, input_scale):
    dt = self.dtype
    x = cast(self, compute_dtype(dt))
    negcoef = cast(alpha, x.dtype) * cast(scale, x.dtype)
    neg = jnp.expm1(x * cast(input_scale, x.dtype)) * negcoef
    return _out(jnp.where(x <= 0, neg, x * cast(scale, x.dtype)), dt)


# elu_backward(Tensor grad_output, Scalar alpha, Scalar scale, Scalar input_scale, bool is_result, Tensor self_or_result) -> Tensor
@lower(aten.elu_backward.default)
def elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result):
    g, x, dt = _args(grad_output, self_or_result)
    negcoef = cast(alpha, g.dtype) * cast(scale, g.dtype)
    poscoef = cast(scale, g.dtype)
    negiptcoef = cast(input_scale, g.dtype)
    if is_result:
        neg = g * negiptcoef * (x + negcoef)
    else:
        neg = g * negiptcoef * negcoef * jnp.exp(x * negiptcoef)
    return _out(jnp.where(x <= 0, neg, g * poscoef), dt)


def _compare(fn):
    def lowering(self, other):
        a, b, _ = _args(self, other, compute=False)
        return fn(a, b)

    return lowering


# eq.Tensor(Tensor self, Tensor other) -> Tensor
# eq.Scalar(Tensor self, Scalar other) -> Tensor
lower(aten.eq.Tensor, aten.eq.Scalar)(_compare(jnp.equal))
# erf(Tensor self) -> Tensor
lower(aten.erf.default)(unary_float(lax.erf))
# erfinv(Tensor self) -> Tensor
lower(aten.erfinv.default)(unary_float(lax.erf_inv))
# exp(Tensor self) -> Tensor
lower(aten.exp.default)(unary_float(jnp.exp))
# exp2(Tensor self) -> Tensor
lower(aten.exp2.default)(unary_float(jnp.exp2))
# expm1(Tensor self) -> Tensor
lower(aten.expm1.default)(unary_float(jnp.expm1))
# floor(Tensor self) -> Tensor
lower(aten.floor.default)(_rounding(jnp.floor))


# floor_divide(Tensor self, Tensor other) -> Tensor
# floor_divide.Scalar(Tensor self, Scalar other) -> Tensor
@lower(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(self, other):
    return _div_mode(self, other, "floor", result_dtype(self, other))


# fmax(Tensor self, Tensor other) -> Tensor
@lower(aten.fmax.default)
def fmax(self, other):
    a, b, dt = _args(self, other, compute=False)
    return jnp.fmax(a, b) if is_floatlike(dt) else jnp.maximum(a, b)


# fmin(Tensor self, Tensor other) -> Tensor
@lower(aten.fmin.default)
def fmin(self, other):
    a, b, dt = _args(self, other, compute=False)
    return jnp.fmin(a, b) if is_floatlike(dt) else jnp.minimum(a, b)


# fmod.Tensor(Tensor self, Tensor other) -> Tensor
# fmod.Scalar(Tensor self, Scalar other) -> Tensor
@lower(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(self, other):
    a, b, dt = _args(self, other, rounded=True)
    if not is_floatlike(a.dtype):
        a, b = _int_divisor(a, b, other)
    return _out(lax.rem(*jnp.broadcast_arrays(a, b)), dt)


# frac(Tensor self) -> Tensor
@lower(aten.frac.default)
def frac(self):
    x = cast(self, compute_dtype(self.dtype))
    return _out(x - jnp.trunc(x), self.dtype)


# frexp.Tensor(Tensor self) -> (Tensor mantissa, Tensor exponent)
@lower(aten.frexp.Tensor)
def frexp(self):
    _float_only("frexp", self.dtype)
    x = cast(self, compute_dtype(self.dtype))
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


# ge.Tensor(Tensor self, Tensor other) -> Tensor
# ge.Scalar(Tensor self, Scalar other) -> Tensor
lower(aten.ge.Tensor, aten.ge.Scalar)(_compare(jnp.greater_equal))

_SQRT1_2 = 1 / math.sqrt(2)
_GELU_BETA = math.sqrt(2 / math.pi)  # M_SQRT2 * M_2_SQRTPI * 0.5
_GELU_KAPPA = 0.044715
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)  # M_2_SQRTPI * M_SQRT1_2 * 0.5


# gelu(Tensor self, *, str approximate='none') -> Tensor
@lower(aten.gelu.default)
def gelu(self, approximate):
    dt = self.dtype
    x = cast(self, compute_dtype(dt))
    if approximate == "tanh":
        inner = _GELU_BETA * (x + _GELU_KAPPA * (x * x * x))
        y = 0.5 * x * (1 + jnp.tanh(inner))
    else:
        y = x * 0.5 * (1 + lax.erf(x * _SQRT1_2))
    return _out(y, dt)


# gelu_backward(Tensor grad_output, Tensor self, *, str approximate='none') -> Tensor
@lower(aten.gelu_backward.default)
def gelu_backward(grad_output, self, approximate):
    g, x, dt = _args(grad_output, self)
    if approximate == "tanh":
        x_sq = x * x
        inner = _GELU_BETA * (x + _GELU_KAPPA * x_sq * x)
        t = jnp.tanh(inner)
        left = 0.5 * x
        right = 1 + t
        left_derivative = 0.5 * right
        inner_derivative = _GELU_BETA * (1 + 3 * _GELU_KAPPA * x_sq)
        right_derivative = left * (1 - t * t) * inner_derivative
        y = g * (left_derivative + right_derivative)
    else:
        cdf = 0.5 * (1 + lax.erf(x * _SQRT1_2))
        pdf = _INV_SQRT_2PI * jnp.exp(x * x * -0.5)
        y = g * (cdf + x * pdf)
    return _out(y, dt)


# gt.Tensor(Tensor self, Tensor other) -> Tensor
# gt.Scalar(Tensor self, Scalar other) -> Tensor
lower(aten.gt.Tensor, aten.gt.Scalar)(_compare(jnp.greater))


# hardsigmoid(Tensor self) -> Tensor
@lower(aten.hardsigmoid.default)
def hardsigmoid(self):
    x = cast(self, compute_dtype(self.dtype))
    return _out(jnp.minimum(jnp.maximum(x + 3, 0), 6) / 6, self.dtype)


# hardsigmoid_backward(Tensor grad_output, Tensor self) -> Tensor
@lower(aten.hardsigmoid_backward.default)
def hardsigmoid_backward(grad_output, self):
    g, x, dt = _args(grad_output, self)
    return _out(jnp.where((x > -3) & (x < 3), g / 6, jnp.zeros_like(g)), dt)


# hardswish(Tensor self) -> Tensor
@lower(aten.hardswish.default)
def hardswish(self):
    x = cast(self, compute_dtype(self.dtype))
    return _out(x * jnp.minimum(jnp.maximum(x + 3, 0), 6) / 6, self.dtype)


# hardswish_backward(Tensor grad_output, Tensor self) -> Tensor
@lower(aten.hardswish_backward.default)
def hardswish_backward(grad_output, self):
    g, x, dt = _args(grad_output, self)
    y = jnp.where(x <= -3, jnp.zeros_like(g), jnp.where(x < 3, g * (x / 3 + 0.5), g))
    return _out(y, dt)


# hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor
@lower(aten.hardtanh.default)
def hardtanh(self, min_val, max_val):
    return jnp.minimum(jnp.maximum(self, cast(min_val, self.dtype)), cast(max_val, self.dtype))


# hardtanh_backward(Tensor grad_output, Tensor self, Scalar min_val, Scalar max_val) -> Tensor
@lower(aten.hardtanh_backward.default)
def hardtanh_backward(grad_output, self, min_val, max_val):
    g, x, dt = _args(grad_output, self, compute=False)
    lo, hi = cast(min_val, x.dtype), cast(max_val, x.dtype)
    return jnp.where((x <= lo) | (x >= hi), jnp.zeros_like(g), g)


# heaviside(Tensor self, Tensor values) -> Tensor
@lower(aten.heaviside.default)
def heaviside(self, values):
    dt = result_dtype(self, values)
    if np.dtype(self.dtype) != np.dtype(values.dtype):
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes")
    x, v = cast(self, dt), cast(values, dt)
    return jnp.where(x == 0, v, cast(x > 0, dt))


# hypot(Tensor self, Tensor other) -> Tensor
lower(aten.hypot.default)(binary_float(jnp.hypot))


# isinf(Tensor self) -> Tensor
@lower(aten.isinf.default)
def isinf(self):
    if not is_floatlike(self.dtype):
        return jnp.zeros(self.shape, _BOOL)
    return jnp.isinf(self)


# isnan(Tensor self) -> Tensor
@lower(aten.isnan.default)
def isnan(self):
    if not is_floatlike(self.dtype):
        return jnp.zeros(self.shape, _BOOL)
    return jnp.isnan(self)


# isneginf(Tensor self) -> Tensor
@lower(aten.isneginf.default)
def isneginf(self):
    if not is_float(self.dtype):
        return jnp.zeros(self.shape, _BOOL)
    return self == -jnp.inf


# isposinf(Tensor self) -> Tensor
@lower(aten.isposinf.default)
def isposinf(self):
    if not is_float(self.dtype):
        return jnp.zeros(self.shape, _BOOL)
    return self == jnp.inf


# lcm(Tensor self, Tensor other) -> Tensor
@lower(aten.lcm.default)
def lcm(self, other):
    a, b, dt = _int_args("lcm_cpu", self, other)
    a, b = jnp.broadcast_arrays(a, b)
    g = _gcd(a, b)
    safe = jnp.where(g == 0, jnp.ones_like(g), g)
    return jnp.where(g == 0, jnp.zeros_like(g), jnp.abs(lax.div(a, safe) * b))


# le.Tensor(Tensor self, Tensor other) -> Tensor
# le.Scalar(Tensor self, Scalar other) -> Tensor
lower(aten.le.Tensor, aten.le.Scalar)(_compare(jnp.less_equal))


# leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor
@lower(aten.leaky_relu.default)
def leaky_relu(self, negative_slope):
    x = cast(self, compute_dtype(self.dtype))
    return _out(jnp.where(x > 0, x, x * cast(negative_slope, x.dtype)), self.dtype)


# leaky_relu_backward(Tensor grad_output, Tensor self, Scalar negative_slope, bool self_is_result) -> Tensor
@lower(aten.leaky_relu_backward.default)
def leaky_relu_backward(grad_output, self, negative_slope, self_is_result):
    g, x, dt = _args(grad_output, self)
    return _out(jnp.where(x > 0, g, g * cast(negative_slope, g.dtype)), dt)


# lerp.Scalar(Tensor self, Tensor end, Scalar weight) -> Tensor
# lerp.Tensor(Tensor self, Tensor end, Tensor weight) -> Tensor
@lower(aten.lerp.Scalar, aten.lerp.Tensor)
def lerp(self, end, weight):
    s, e, dt = _args(self, end)
    w = cast(weight, s.dtype)
    diff = e - s
    return _out(jnp.where(jnp.abs(w) < 0.5, s + w * diff, e - diff * (1 - w)), dt)


# lift_fresh_copy(Tensor self) -> Tensor
@lower(aten.lift_fresh_copy.default)
def lift_fresh_copy(self):
    return self


# log(Tensor self) -> Tensor
lower(aten.log.default)(unary_float(jnp.log))
# log10(Tensor self) -> Tensor
lower(aten.log10.default)(unary_float(jnp.log10))
# log1p(Tensor self) -> Tensor
lower(aten.log1p.default)(unary_float(jnp.log1p))
# log2(Tensor self) -> Tensor
lower(aten.log2.default)(unary_float(jnp.log2))


# logaddexp(Tensor self, Tensor other) -> Tensor
@lower(aten.logaddexp.default)
@binary_float
def logaddexp(a, b):
    m = jnp.maximum(a, b)
    r = m + jnp.log1p(jnp.exp(-jnp.abs(a - b)))
    return jnp.where(jnp.isinf(a) & (a == b), a, r)


# logaddexp2(Tensor self, Tensor other) -> Tensor
@lower(aten.logaddexp2.default)
@binary_float
def logaddexp2(a, b):
    m = jnp.maximum(a, b)
    r = m + jnp.log1p(jnp.exp2(-jnp.abs(a - b))) * np.asarray(1 / math.log(2), a.dtype)
    return jnp.where(jnp.isinf(a) & (a == b), a, r)


# logical_and(Tensor self, Tensor other) -> Tensor
@lower(aten.logical_and.default)
def logical_and(self, other):
    return (self != 0) & (other != 0)


# logical_not(Tensor self) -> Tensor
@lower(aten.logical_not.default)
def logical_not(self):
    return self == 0


# logical_or(Tensor self, Tensor other) -> Tensor
@lower(aten.logical_or.default)
def logical_or(self, other):
    return (self != 0) | (other != 0)


# logical_xor(Tensor self, Tensor other) -> Tensor
@lower(aten.logical_xor.default)
def logical_xor(self, other):
    return (self != 0) != (other != 0)


# logit(Tensor self, float? eps=None) -> Tensor
@lower(aten.logit.default)
def logit(self, eps):
    dt = float_dtype(self.dtype)
    x = cast(self, compute_dtype(dt))
    if eps is not None and eps >= 0:
        lo, hi = eps, 1 - eps
        x = jnp.where(x < lo, lo, jnp.where(x > hi, hi, x)).astype(x.dtype)
    return _out(jnp.log(x / (1 - x)), dt)


# logit_backward(Tensor grad_output, Tensor self, float? eps=None) -> Tensor
@lower(aten.logit_backward.default)
def logit_backward(grad_output, self, eps):
    g, x, dt = _args(grad_output, self)
    d = g / (x * (1 - x))
    if eps is None or eps < 0:
        return _out(jnp.where((x < 0) | (x > 1), jnp.nan, d), dt)
    return _out(jnp.where((x < eps) | (x > 1 - eps), jnp.zeros_like(d), d), dt)


# lt.Tensor(Tensor self, Tensor other) -> Tensor
# lt.Scalar(Tensor self, Scalar other) -> Tensor
lower(aten.lt.Tensor, aten.lt.Scalar)(_compare(jnp.less))


# masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor
# masked_fill.Tensor(Tensor self, Tensor mask, Tensor value) -> Tensor
@lower(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(self, mask, value):
    return jnp.where(cast(mask, _BOOL), cast(value, self.dtype), self)


# maximum(Tensor self, Tensor other) -> Tensor
@lower(aten.maximum.default)
def maximum(self, other):
    a, b, dt = _args(self, other, compute=False)
    return jnp.maximum(a, b)


# minimum(Tensor self, Tensor other) -> Tensor
@lower(aten.minimum.default)
def minimum(self, other):
    a, b, dt = _args(self, other, compute=False)
    return jnp.minimum(a, b)


# mish(Tensor self) -> Tensor
@lower(aten.mish.default)
def mish(self):
    x = cast(self, compute_dtype(self.dtype))
    return _out(x * jnp.tanh(jnp.log1p(jnp.exp(x))), self.dtype)


# mul.Tensor(Tensor self, Tensor other) -> Tensor
# mul.Scalar(Tensor self, Scalar other) -> Tensor
@lower(aten.mul.Tensor, aten.mul.Scalar)
def mul(self, other):
    a, b, dt = _args(self, other)
    if dt == _BOOL:
        return a & b
    return _out(a * b, dt)


# nan_to_num(Tensor self, float? nan=None, float? posinf=None, float? neginf=None) -> Tensor
@lower(aten.nan_to_num.default)
def nan_to_num(self, nan, posinf, neginf):
    if not is_float(self.dtype):
        return self
    fi = jnp.finfo(self.dtype)
    x = self
    x = jnp.where(jnp.isnan(x), jnp.asarray(0.0 if nan is None else nan).astype(x.dtype), x)
    x = jnp.where(x == jnp.inf, (fi.max if posinf is None else jnp.asarray(posinf).astype(x.dtype)), x)
    x = jnp.where(x == -jnp.inf, (fi.min if neginf is None else jnp.asarray(neginf).astype(x.dtype)), x)
    return x.astype(self.dtype)


# ne.Tensor(Tensor self, Tensor other) -> Tensor
# ne.Scalar(Tensor self, Scalar other) -> Tensor
lower(aten.ne.Tensor, aten.ne.Scalar)(_compare(jnp.not_equal))


# neg(Tensor self) -> Tensor
@lower(aten.neg.default)
def neg(self):
    return -self


# nextafter(Tensor self, Tensor other) -> Tensor
@lower(aten.nextafter.default)
def nextafter(self, other):
    dt = result_dtype(self, other)
    _float_only("nextafter_cpu", dt)
    a, b = jnp.broadcast_arrays(cast(self, dt), cast(other, dt))
    return lax.nextafter(a, b)


# polar(Tensor abs, Tensor angle) -> Tensor
@lower(aten.polar.default)
def polar(abs, angle):
    dt = np.dtype(abs.dtype)
    if dt not in (np.dtype(np.float32), _F64) or np.dtype(angle.dtype) != dt:
        raise TypeError(
            f"polar: expected abs and angle to be float or double and of the same dtype, got {dt}, {angle.dtype}"
        )
    return lax.complex(abs * jnp.cos(angle), abs * jnp.sin(angle))


# pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor
@lower(aten.pow.Tensor_Tensor)
def pow_tensor_tensor(self, exponent):
    return _pow(self, exponent, result_dtype(self, exponent))


# pow.Scalar(Scalar self, Tensor exponent) -> Tensor
@lower(aten.pow.Scalar)
def pow_scalar(self, exponent):
    return _pow(self, exponent, result_dtype(self, exponent))


# pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor
# (exponent static: x**2 -> x*x, x**0.5 -> sqrt, integral exponents exact, as ATen special-cases)
@lower(aten.pow.Tensor_Scalar, static=("exponent",))
def pow_tensor_scalar(self, exponent):
    dt = result_dtype(self, exponent)
    if isinstance(exponent, complex) or category(dt) == 3:
        x, e, _ = _args(self, jnp.asarray(exponent), dt=dt)
        return _out(jnp.power(x, e), dt)
    x = cast(self, compute_dtype(dt) if dt != _BOOL else np.int64)
    if is_int(x.dtype) and isinstance(exponent, (bool, float)):
        exponent = int(exponent)
    return _out(_pow_static_exponent(x, exponent), dt)


# rad2deg(Tensor self) -> Tensor
lower(aten.rad2deg.default)(unary_float(lambda x: x * np.asarray(180 / math.pi, x.dtype)))


# reciprocal(Tensor self) -> Tensor
lower(aten.reciprocal.default)(unary_float(lambda x: 1 / x))


# relu(Tensor self) -> Tensor
@lower(aten.relu.default)
def relu(self):
    return jnp.maximum(self, jnp.zeros((), self.dtype))


# remainder.Tensor(Tensor self, Tensor other) -> Tensor
# remainder.Scalar(Tensor self, Scalar other) -> Tensor
@lower(aten.remainder.Tensor, aten.remainder.Scalar)
def remainder(self, other):
    a, b, dt = _args(self, other, rounded=True)
    if not is_floatlike(a.dtype):
        a, b = _int_divisor(a, b, other)
    return _out(_remainder(a, b), dt)


# round(Tensor self) -> Tensor
lower(aten.round.default)(_rounding(jnp.round))


# round.decimals(Tensor self, *, int decimals) -> Tensor
@lower(aten.round.decimals)
def round_decimals(self, decimals):
    if not is_floatlike(self.dtype):
        return self
    x = cast(self, compute_dtype(self.dtype))
    ten_pow = np.asarray(10.0 ** abs(decimals), x.dtype)
    if decimals < 0:
        y = jnp.round(x / ten_pow) * ten_pow
    else:
        y = jnp.round(x * ten_pow) / ten_pow
    return _out(y, self.dtype)


# rsqrt(Tensor self) -> Tensor
lower(aten.rsqrt.default)(unary_float(lax.rsqrt))


# rsub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
# rsub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor
@lower(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(self, other, alpha):
    a, b, dt = _args(self, other, rounded=True)
    return _out(b - _alpha(alpha, dt, a.dtype) * a, dt)


# sigmoid(Tensor self) -> Tensor
lower(aten.sigmoid.default)(unary_float(_sigmoid))


# sigmoid_backward(Tensor grad_output, Tensor output) -> Tensor
@lower(aten.sigmoid_backward.default)
def sigmoid_backward(grad_output, output):
    g, y, dt = _args(grad_output, output)
    return _out(g * (1 - y) * y, dt)


# sign(Tensor self) -> Tensor
@lower(aten.sign.default)
def sign(self):
    if self.dtype == _BOOL:
        return self
    return (self > 0).astype(self.dtype) - (self < 0).astype(self.dtype)


# signbit(Tensor self) -> Tensor
@lower(aten.signbit.default)
def signbit(self):
    if is_float(self.dtype):
        return jnp.signbit(self)
    if self.dtype == _BOOL or np.dtype(self.dtype).kind == "u":
        return jnp.zeros(self.shape, _BOOL)
    return self < 0


# silu(Tensor self) -> Tensor
lower(aten.silu.default)(unary_float(lambda x: x / (1 + jnp.exp(-x))))


# silu_backward(Tensor grad_output, Tensor self) -> Tensor
# (the functional overload has a CompositeImplicitAutograd kernel, so it is not registered itself;
#  its CompositeExplicitAutogradNonFunctional kernel runs silu_backward.grad_input, derived from this)
@lower(aten.silu_backward.default)
def silu_backward(grad_output, self):
    g, x, dt = _args(grad_output, self)
    sig = _sigmoid(x)
    return _out(g * sig * (1 + x * (1 - sig)), dt)


# sin(Tensor self) -> Tensor
lower(aten.sin.default)(unary_float(jnp.sin))


# sinc(Tensor self) -> Tensor
@lower(aten.sinc.default)
@unary_float
def sinc(x):
    p = x * np.asarray(math.pi, x.dtype)
    return jnp.where(x == 0, jnp.ones_like(x), jnp.sin(p) / p)


# sinh(Tensor self) -> Tensor
lower(aten.sinh.default)(unary_float(jnp.sinh))


# softplus(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor
@lower(aten.softplus.default)
def softplus(self, beta, threshold):
    x = cast(self, compute_dtype(self.dtype))
    b = cast(beta, x.dtype)
    xb = x * b
    return _out(jnp.where(xb > cast(threshold, x.dtype), x, jnp.log1p(jnp.exp(xb)) / b), self.dtype)


# softplus_backward(Tensor grad_output, Tensor self, Scalar beta, Scalar threshold) -> Tensor
@lower(aten.softplus_backward.default)
def softplus_backward(grad_output, self, beta, threshold):
    g, x, dt = _args(grad_output, self)
    xb = x * cast(beta, x.dtype)
    z = jnp.exp(xb)
    return _out(jnp.where(xb > cast(threshold, x.dtype), g, g * z / (z + 1)), dt)


# sqrt(Tensor self) -> Tensor
lower(aten.sqrt.default)(unary_float(jnp.sqrt))


# sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
# sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor
@lower(aten.sub.Tensor, aten.sub.Scalar)
def sub(self, other, alpha):
    a, b, dt = _args(self, other, rounded=True)
    return _out(a - _alpha(alpha, dt, a.dtype) * b, dt)


# tan(Tensor self) -> Tensor
lower(aten.tan.default)(unary_float(jnp.tan))
# tanh(Tensor self) -> Tensor
lower(aten.tanh.default)(unary_float(jnp.tanh))


# tanh_backward(Tensor grad_output, Tensor output) -> Tensor
@lower(aten.tanh_backward.default)
def tanh_backward(grad_output, output):
    g, y, dt = _args(grad_output, output)
    return _out(g * (1 - y * y), dt)


# threshold_backward(Tensor grad_output, Tensor self, Scalar threshold) -> Tensor
@lower(aten.threshold_backward.default)
def threshold_backward(grad_output, self, threshold):
    g, x, dt = _args(grad_output, self, compute=False)
    return jnp.where(x <= cast(threshold, x.dtype), jnp.zeros_like(g), g)


# trunc(Tensor self) -> Tensor
lower(aten.trunc.default)(_rounding(jnp.trunc))


# where.self(Tensor condition, Tensor self, Tensor other) -> Tensor
@lower(aten.where.self)
def where(condition, self, other):
    a, b, dt = _args(self, other, compute=False)
    return jnp.where(cast(condition, _BOOL), a, b)


# xlogy.Tensor(Tensor self, Tensor other) -> Tensor
@lower(aten.xlogy.Tensor)
def xlogy(self, other):
    dt = float_dtype(result_dtype(self, other))
    x, y, _ = _args(self, other, dt=dt)
    r = jnp.where(x == 0, jnp.zeros_like(x), x * jnp.log(y))
    return _out(jnp.where(jnp.isnan(y), jnp.nan, r), dt)
