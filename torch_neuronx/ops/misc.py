"""Segment reductions, tensor hashes, and a
few math ops: segment_reduce, hash_tensor, logcumsumexp, trace, diag_embed, polar, lgamma, digamma, i0.

- `i0` is the Cephes Chebyshev expansion ATen uses (same coefficients), `digamma(±0)` is ∓inf as
  ATen's, not jax's NaN.
"""
from __future__ import annotations

import numpy as np

from ..runtime.lazy_jax import jnp, lax
from .cephes import I0_A, I0_B, chbevl
from .dims import wrap_dim
from .dtypes import cast, is_low_precision
from ._registry import aten, lower
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


def _digamma(x):
    y = lax.digamma(x)
    inf = jnp.full((), np.inf, x.dtype)
    return jnp.where(x == 0, jnp.where(jnp.signbit(x), inf, -inf), y)


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


# i0(Tensor self) -> Tensor
lower(aten.i0.default)(_unary_float(_i0))


# lgamma(Tensor self) -> Tensor
lower(aten.lgamma.default)(_unary_float(lambda x: lax.lgamma(x)))


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
