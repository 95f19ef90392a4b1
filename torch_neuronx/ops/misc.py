"""A few math ops: lgamma, digamma, i0.

- `i0` is the Cephes Chebyshev expansion ATen uses (same coefficients), `digamma(±0)` is ∓inf as
  ATen's, not jax's NaN.
"""
from __future__ import annotations

import numpy as np

from ..runtime.lazy_jax import jnp, lax
from .cephes import I0_A, I0_B, chbevl
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


# digamma(Tensor self) -> Tensor
lower(aten.digamma.default)(_unary_float(_digamma))


# i0(Tensor self) -> Tensor
lower(aten.i0.default)(_unary_float(_i0))


# lgamma(Tensor self) -> Tensor
lower(aten.lgamma.default)(_unary_float(lambda x: lax.lgamma(x)))


