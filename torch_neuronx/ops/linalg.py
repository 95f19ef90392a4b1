"""Matrix products: mm/bmm/addmm/baddbmm/addbmm/addmv/mv/dot/vdot/_addmm_activation, and trace.

float32 products use Precision.HIGHEST (true float32, no bf16 passes); float16/bfloat16 products
accumulate in float32 (`preferred_element_type`), the `beta`/`alpha` epilogue is applied in float32
too, and the result is rounded once. On the CPU platform float16/bfloat16 mm, addmm, bmm and baddbmm run
torch's own CPU kernel inside the executable (`native`: oneDNN, where XLA would copy both operands to
float32 first), so they give the CPU's result bit for bit. As in BLAS, `beta == 0` ignores `self` (NaN included) and
`alpha == 0` ignores the product. `matmul`, `linear`, `outer` are CompositeImplicitAutograd and
reach the backend as these ops. `trace` sums the diagonal in ATen's CPU accumulation type (int64
for integers and bool, float64 for float32 and float64, float32 for 16-bit floats, complex128 for
complex), rounded to the result dtype once.
"""
from __future__ import annotations

import numpy as np

from ..runtime.lazy_jax import jnp, lax
from . import native
from .dtypes import is_low_precision, opmath
from ._registry import aten, lower

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_I64 = np.dtype(np.int64)
_C128 = np.dtype(np.complex128)


def _precision(dtype):
    return lax.Precision.HIGHEST if jnp.issubdtype(np.dtype(dtype), np.floating) else None


def _dot(a, b, contract, batch=((), ())):
    """lax.dot_general in PyTorch's precision: float32 accumulation for 16-bit floats."""
    precision = _precision(a.dtype)
    a, b, pet = native.contraction_operands(a, b)
    return lax.dot_general(a, b, (contract, batch), precision=precision, preferred_element_type=pet)


def _matmul(a, b):
    """a (..., n, k) @ b (..., k, m) with the same leading batch dims (or 1-d operands)."""
    if a.ndim == 1 and b.ndim == 1:
        return _dot(a, b, ((0,), (0,)))
    if b.ndim == 1:
        return _dot(a, b, ((a.ndim - 1,), (0,)))
    nb = a.ndim - 2
    batch = tuple(range(nb))
    return _dot(a, b, ((a.ndim - 1,), (b.ndim - 2,)), (batch, batch))


def _epilogue(self, prod, beta, alpha, out_dtype):
    """beta * self + alpha * prod, computed in prod's (accumulation) dtype, BLAS zero rules. For
    integer results the Scalars are first converted to the integer type (truncated), as ATen does."""
    zero = jnp.zeros((), prod.dtype)
    if not jnp.issubdtype(prod.dtype, jnp.inexact):
        alpha, beta = jnp.asarray(alpha).astype(prod.dtype), jnp.asarray(beta).astype(prod.dtype)
    scaled = jnp.where(alpha == 0, zero, alpha * prod)
    s = opmath(self).astype(prod.dtype)
    bias = jnp.where(beta == 0, zero, beta * s)
    return (bias + scaled).astype(out_dtype)


# _addmm_activation(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1, bool use_gelu=False) -> Tensor
@lower(aten._addmm_activation.default)
def _addmm_activation(self, mat1, mat2, beta, alpha, use_gelu):
    acc = _F32 if is_low_precision(mat1.dtype) else mat1.dtype
    y = _epilogue(self, _matmul(mat1, mat2), beta, alpha, acc)
    if use_gelu:  # the CPU kernel applies the exact (erf) gelu
        y = 0.5 * y * (1.0 + lax.erf(y * 0.7071067811865476))
    else:
        y = jnp.maximum(y, jnp.zeros((), y.dtype))
    return y.astype(mat1.dtype)


# addbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor
@lower(aten.addbmm.default)
def addbmm(self, batch1, batch2, beta, alpha):
    prod = _dot(batch1, batch2, ((0, 2), (0, 1)))  # sum over the batch and the inner dim
    return _epilogue(self, prod, beta, alpha, batch1.dtype)


# addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor
@lower(aten.addmm.default)
def addmm(self, mat1, mat2, beta, alpha):
    if native.usable(native.PRODUCTS, self, mat1, mat2):
        return native.addmatmul(self, mat1, mat2, beta, alpha)
    return _epilogue(self, _matmul(mat1, mat2), beta, alpha, mat1.dtype)


# addmv(Tensor self, Tensor mat, Tensor vec, *, Scalar beta=1, Scalar alpha=1) -> Tensor
@lower(aten.addmv.default)
def addmv(self, mat, vec, beta, alpha):
    return _epilogue(self, _matmul(mat, vec), beta, alpha, mat.dtype)


# baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor
@lower(aten.baddbmm.default)
def baddbmm(self, batch1, batch2, beta, alpha):
    if native.usable(native.PRODUCTS, self, batch1, batch2):
        return native.addmatmul(self, batch1, batch2, beta, alpha)
    return _epilogue(self, _matmul(batch1, batch2), beta, alpha, batch1.dtype)


# bmm(Tensor self, Tensor mat2) -> Tensor
@lower(aten.bmm.default)
def bmm(self, mat2):
    if native.usable(native.PRODUCTS, self, mat2):
        return native.matmul(self, mat2)
    return _matmul(self, mat2).astype(self.dtype)


# dot(Tensor self, Tensor tensor) -> Tensor
@lower(aten.dot.default)
def dot(self, tensor):
    return _matmul(self, tensor).astype(self.dtype)


# mm(Tensor self, Tensor mat2) -> Tensor
@lower(aten.mm.default)
def mm(self, mat2):
    if native.usable(native.PRODUCTS, self, mat2):
        return native.matmul(self, mat2)
    return _matmul(self, mat2).astype(self.dtype)


# mv(Tensor self, Tensor vec) -> Tensor
@lower(aten.mv.default)
def mv(self, vec):
    return _matmul(self, vec).astype(self.dtype)


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


# vdot(Tensor self, Tensor other) -> Tensor
@lower(aten.vdot.default)
def vdot(self, other):
    return _matmul(jnp.conj(self), other).astype(self.dtype)
