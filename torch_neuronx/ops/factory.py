"""Factory ops (arange, linspace, eye, full, zeros, ones, scalar_tensor, the *_like / new_* variants)
and the fills (fill_, zero_). In eager mode `empty`/`empty_strided` are the C++ allocator's
(csrc/kernels.cpp): they allocate lazily, without a launch. Their lowerings here serve compiled
graphs, where an empty tensor is a value like any other (zeros: its contents are unspecified).

A factory lowering gets dtype/layout/device/pin_memory as Python values; only dtype matters here
(the executor places the result). `dtype=None` means PyTorch's default: torch.get_default_dtype()
for floats, int64 for integral `arange`, the Scalar's kind for `full`. The Scalars that fix the
output shape (arange's start/end/step) are static.
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime.lazy_jax import jnp, lax
from .dtypes import cast, to_numpy_dtype
from ._registry import aten, lower
from .promotion import category, compute_dtype, default_float, is_floatlike, result_dtype

_I32 = np.iinfo(np.int32)


def requested_dtype(dtype, default):
    """A `ScalarType? dtype` argument as a numpy dtype, `default` when None."""
    return default if dtype is None else to_numpy_dtype(dtype)


def _is_integral_number(v) -> bool:
    return isinstance(v, (bool, int, np.integer, np.bool_))


def _arange(start, end, step, dtype):
    if dtype is None:
        integral = all(_is_integral_number(v) for v in (start, end, step))
        dt = np.dtype(np.int64) if integral else default_float()
    else:
        dt = to_numpy_dtype(dtype)
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if dt == np.int64:
        # ATen computes the size of an int64 arange in int64 (the Scalars truncated toward zero).
        xs, xe, xst = int(start), int(end), int(step)
        sgn = (xst > 0) - (xst < 0)
        num = xe - xs + xst - sgn
        n = abs(num) // abs(xst) * (1 if (num >= 0) == (xst > 0) else -1)
    else:
        n = math.ceil((float(end) - float(start)) / float(step))
    if n < 0:
        raise ValueError("arange: upper bound and larger bound inconsistent with step sign")
    if is_floatlike(dt):
        cd = compute_dtype(dt)
        i = lax.iota(cd, n)
        return cast(float(start) + float(step) * i if not (float(start) == 0 and float(step) == 1) else i, dt)
    # integers: ATen computes start + step * i in int64 (Scalars truncated), then converts.
    xs, xst = int(start), int(step)
    last = xs + xst * max(n - 1, 0)
    fits32 = dt.itemsize <= 4 and _I32.min <= xs <= _I32.max and _I32.min <= last <= _I32.max
    cd = np.dtype(np.int32) if fits32 else np.dtype(np.int64)
    i = lax.iota(cd, n)
    return cast(i * np.asarray(xst, cd) + np.asarray(xs, cd), dt)


def linspace_values(start, end, steps, dtype):
    """ATen's linspace: `steps` values from start to end in `dtype` (the default float dtype when
    None), the first half stepped up from start, the second down from end, as the CPU kernel."""
    dt = requested_dtype(dtype, default_float())
    if steps < 0:
        raise ValueError("linspace: number of steps must be non-negative")
    if steps == 0:
        return jnp.zeros((0,), dt)
    if steps == 1:
        return jnp.reshape(cast(start, dt), (1,))
    idx = lax.iota(np.int32 if steps < 2**31 else np.int64, steps)
    halfway = steps // 2
    if is_floatlike(dt):
        cd = compute_dtype(dt)
        s = cast(cast(jnp.reshape(start, ()), dt), cd)
        e = cast(cast(jnp.reshape(end, ()), dt), cd)
        step = (e - s) / (steps - 1)
        i = idx.astype(cd)
        vals = jnp.where(idx < halfway, s + step * i, e - step * ((steps - 1) - i))
        return cast(vals, dt)
    # integral dtypes: start/end converted to the dtype, the step and the values in double.
    s = cast(cast(jnp.reshape(start, ()), dt), np.float64)
    e = cast(cast(jnp.reshape(end, ()), dt), np.float64)
    step = (e - s) / (steps - 1)
    i = idx.astype(np.float64)
    vals = jnp.where(idx < halfway, s + step * i, e - step * ((steps - 1) - i))
    return cast(vals, dt)


def _full(size, value, dt):
    return jnp.full(tuple(size), cast(value, dt), dtype=dt)


def _full_dtype(fill_value):
    dt = result_dtype(fill_value)
    # a traced Python bool arrives strongly typed (0-d bool): still bool; complex -> default complex
    return dt if category(dt) != 2 else default_float()


# arange(Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.arange.default, static=("end",))
def arange(end, dtype, layout, device, pin_memory):
    return _arange(0, end, 1, dtype)


# arange.start(Scalar start, Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.arange.start, static=("start", "end"))
def arange_start(start, end, dtype, layout, device, pin_memory):
    return _arange(start, end, 1, dtype)


# arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.arange.start_step, static=("start", "end", "step"))
def arange_start_step(start, end, step, dtype, layout, device, pin_memory):
    return _arange(start, end, step, dtype)


# empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor
@lower(aten.empty.memory_format)
def empty(size, dtype, layout, device, pin_memory, memory_format):
    return jnp.zeros(tuple(size), requested_dtype(dtype, default_float()))


# empty_permuted(SymInt[] size, int[] physical_layout, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.empty_permuted.default)
def empty_permuted(size, physical_layout, dtype, layout, device, pin_memory):
    return jnp.zeros(tuple(size), requested_dtype(dtype, default_float()))


# empty_strided(SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.empty_strided.default)
def empty_strided(size, stride, dtype, layout, device, pin_memory):
    return jnp.zeros(tuple(size), requested_dtype(dtype, default_float()))


# eye(SymInt n, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.eye.default)
def eye(n, dtype, layout, device, pin_memory):
    return jnp.eye(n, n, dtype=requested_dtype(dtype, default_float()))


# eye.m(SymInt n, SymInt m, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.eye.m)
def eye_m(n, m, dtype, layout, device, pin_memory):
    return jnp.eye(n, m, dtype=requested_dtype(dtype, default_float()))


# fill.Scalar(Tensor self, Scalar value) -> Tensor
# fill.Tensor(Tensor self, Tensor value) -> Tensor
# fill_.Scalar(Tensor(a!) self, Scalar value) -> Tensor(a!)
# fill_.Tensor(Tensor(a!) self, Tensor value) -> Tensor(a!)
@lower(aten.fill.Scalar, aten.fill.Tensor, aten.fill_.Scalar, aten.fill_.Tensor)
def fill(self, value):
    return _full(self.shape, value, np.dtype(self.dtype))


# full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.full.default)
def full(size, fill_value, dtype, layout, device, pin_memory):
    dt = _full_dtype(fill_value) if dtype is None else to_numpy_dtype(dtype)
    return _full(size, fill_value, dt)


# full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor
@lower(aten.full_like.default)
def full_like(self, fill_value, dtype, layout, device, pin_memory, memory_format):
    return _full(self.shape, fill_value, requested_dtype(dtype, self.dtype))


# linspace(Scalar start, Scalar end, int steps, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
# linspace.Tensor_Tensor(Tensor start, Tensor end, int steps, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
# linspace.Tensor_Scalar(Tensor start, Scalar end, int steps, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
# linspace.Scalar_Tensor(Scalar start, Tensor end, int steps, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.linspace.default, aten.linspace.Tensor_Tensor, aten.linspace.Tensor_Scalar, aten.linspace.Scalar_Tensor)
def linspace(start, end, steps, dtype, layout, device, pin_memory):
    return linspace_values(start, end, steps, dtype)


# new_full(Tensor self, SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.new_full.default)
def new_full(self, size, fill_value, dtype, layout, device, pin_memory):
    return _full(size, fill_value, requested_dtype(dtype, self.dtype))


# new_ones(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.new_ones.default)
def new_ones(self, size, dtype, layout, device, pin_memory):
    return jnp.ones(tuple(size), requested_dtype(dtype, self.dtype))


# new_zeros(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.new_zeros.default)
def new_zeros(self, size, dtype, layout, device, pin_memory):
    return jnp.zeros(tuple(size), requested_dtype(dtype, self.dtype))


# ones(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.ones.default)
def ones(size, dtype, layout, device, pin_memory):
    return jnp.ones(tuple(size), requested_dtype(dtype, default_float()))


# ones_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor
@lower(aten.ones_like.default)
def ones_like(self, dtype, layout, device, pin_memory, memory_format):
    return jnp.ones(self.shape, requested_dtype(dtype, self.dtype))


# scalar_tensor(Scalar s, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.scalar_tensor.default)
def scalar_tensor(s, dtype, layout, device, pin_memory):
    return jnp.reshape(cast(s, requested_dtype(dtype, default_float())), ())


# zero(Tensor self) -> Tensor
# zero_(Tensor(a!) self) -> Tensor(a!)
@lower(aten.zero.default, aten.zero_.default)
def zero(self):
    return jnp.zeros(self.shape, self.dtype)


# zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.zeros.default)
def zeros(size, dtype, layout, device, pin_memory):
    return jnp.zeros(tuple(size), requested_dtype(dtype, default_float()))


# zeros_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor
@lower(aten.zeros_like.default)
def zeros_like(self, dtype, layout, device, pin_memory, memory_format):
    return jnp.zeros(self.shape, requested_dtype(dtype, self.dtype))
