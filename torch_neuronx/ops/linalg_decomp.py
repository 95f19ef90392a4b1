"""Matrix decompositions: svd, eigh, inv, qr, solve, cholesky, det, slogdet, lu_factor.

Lowered with jnp.linalg / lax.linalg for float32, float64 (and complex, where jax takes it as is;
PyTorch's CPU kernels reject float16/bfloat16, so the meta kernel does too). `torch.linalg.*` are
CompositeImplicitAutograd and reach the backend as these `_ex` / underscore ops.

LAPACK conventions kept: pivots are int32 and 1-based (getrf's ipiv), `info` is getrf's / potrf's
(0 on success, else the 1-based index of the first zero pivot / non positive-definite leading
minor). As PyTorch's CPU kernel does for a contiguous real input, `_linalg_det` and `_linalg_slogdet`
factor A^T (det(A^T) = det(A)), so their `LU`/`pivots` outputs are those of A^T for real dtypes and
of A for complex ones. (The lowering cannot see strides: for a non-contiguous real A PyTorch factors
A itself, and the returned LU differs, although det/logabsdet agree.) `_linalg_solve_ex` factors A
(torch 2.13), and solves with that LU (X A = B through the transposed triangular solves).
"""
from __future__ import annotations

import numpy as np

from .._jax import jnp, lax
from ._registry import aten, lower

_I32 = np.dtype(np.int32)


def _is_complex(x) -> bool:
    return jnp.issubdtype(x.dtype, jnp.complexfloating)


def _mT(x):
    return jnp.swapaxes(x, -1, -2)


def _lu(a):
    """getrf: (LU, 1-based int32 pivots, info) of a (..., m, n)."""
    lu, piv, _perm = lax.linalg.lu(a)
    k = min(a.shape[-2], a.shape[-1])
    diag = jnp.diagonal(lu, axis1=-2, axis2=-1)[..., :k]
    return lu, piv.astype(_I32) + 1, _first_true(diag == 0)


def _first_true(flags):
    """LAPACK info: 1-based index of the first True along the last axis, 0 if none (int32)."""
    if flags.shape[-1] == 0:
        return jnp.zeros(flags.shape[:-1], _I32)
    first = jnp.argmax(flags, axis=-1).astype(_I32) + 1
    return jnp.where(jnp.any(flags, axis=-1), first, jnp.zeros((), _I32))


def _perm_sign(piv, dtype):
    """(-1) ** (number of row swaps) of 1-based pivots (..., k)."""
    k = piv.shape[-1]
    swaps = jnp.sum(piv != jnp.arange(1, k + 1, dtype=_I32), axis=-1)
    return jnp.where(swaps % 2 == 1, -jnp.ones((), dtype), jnp.ones((), dtype))


def _det_lu(a):
    """LU factorization used by det/slogdet: of A^T for real A (as PyTorch's CPU kernel)."""
    return _lu(a if _is_complex(a) else _mT(a))


def _potrf_info(a, upper):
    """potrf's info for a Hermitian (..., n, n): order of the first leading minor that is not
    positive-definite, found by unpivoted elimination on the triangle potrf reads."""
    n = a.shape[-1]
    if n == 0:
        return jnp.zeros(a.shape[:-2], _I32)
    # the full Hermitian matrix from the triangle potrf reads
    tri = jnp.triu(a) if upper else jnp.tril(a)
    strict = jnp.triu(a, 1) if upper else jnp.tril(a, -1)
    full = jnp.conj(_mT(tri)) + strict if upper else tri + jnp.conj(_mT(strict))
    full = full.astype(a.dtype)
    idx = jnp.arange(n)

    def body(k, carry):
        m, bad = carry
        piv = jnp.real(m[..., k, k])
        ok = piv > 0  # False for NaN too
        bad = jnp.where(bad == 0, jnp.where(ok, 0, k + 1), bad).astype(_I32)
        col = jnp.take(m, k, axis=-1)  # (..., n)
        row = jnp.take(m, k, axis=-2)
        mask = idx > k
        safe = jnp.where(ok, piv, jnp.ones_like(piv))[..., None, None]
        upd = col[..., :, None] * row[..., None, :] / safe
        upd = jnp.where(mask[:, None] & mask[None, :], upd, jnp.zeros((), m.dtype))
        return m - upd, bad

    _, bad = lax.fori_loop(0, n, body, (full, jnp.zeros(a.shape[:-2], _I32)))
    return bad


# _linalg_det(Tensor A) -> (Tensor result, Tensor LU, Tensor pivots)
@lower(aten._linalg_det.default)
def _linalg_det(A):
    lu, piv, _info = _det_lu(A)
    diag = jnp.diagonal(lu, axis1=-2, axis2=-1)
    det = jnp.prod(diag, axis=-1) * _perm_sign(piv, A.dtype)
    return det, lu, piv


# _linalg_eigh(Tensor A, str UPLO="L", bool compute_v=True) -> (Tensor eigenvalues, Tensor eigenvectors)
@lower(aten._linalg_eigh.default)
def _linalg_eigh(A, UPLO, compute_v):
    lower_ = UPLO.upper() == "L"
    if compute_v:
        v, w = lax.linalg.eigh(A, lower=lower_, symmetrize_input=False, sort_eigenvalues=True)
        return w, v
    w = lax.linalg.eigh(A, lower=lower_, symmetrize_input=False, sort_eigenvalues=True)[1]
    return w, jnp.zeros((0,), A.dtype)


# _linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet, Tensor LU, Tensor pivots)
@lower(aten._linalg_slogdet.default)
def _linalg_slogdet(A):
    lu, piv, _info = _det_lu(A)
    diag = jnp.diagonal(lu, axis1=-2, axis2=-1)
    absd = jnp.abs(diag)
    logabs = jnp.sum(jnp.log(absd), axis=-1)
    if _is_complex(A):
        unit = jnp.where(absd == 0, jnp.zeros((), A.dtype), diag / jnp.where(absd == 0, 1, absd).astype(A.dtype))
        sign = jnp.prod(unit, axis=-1) * _perm_sign(piv, A.dtype)
    else:
        sign = jnp.prod(jnp.sign(diag), axis=-1) * _perm_sign(piv, A.dtype)
    return sign, logabs, lu, piv


# _linalg_solve_ex(Tensor A, Tensor B, *, bool left=True, bool check_errors=False) -> (Tensor result, Tensor LU, Tensor pivots, Tensor info)
@lower(aten._linalg_solve_ex.default)
def _linalg_solve_ex(A, B, left, check_errors):
    n = A.shape[-1]
    # numpy-compat: B is a batch of vectors when it is 1-d or A's batch shape + (n,)
    vector = B.ndim == 1 or (left and B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))
    lu, piv, info = _lu(A)  # of A itself (PyTorch 2.13's kernel; det/slogdet factor A^T)
    dtype = jnp.result_type(A.dtype, B.dtype)
    Bm = B[..., None] if vector else B
    if not left:  # X A = B  <=>  A^T X^T = B^T
        Bm = _mT(Bm)
    batch = jnp.broadcast_shapes(A.shape[:-2], Bm.shape[:-2])
    k = Bm.shape[-1]
    a = jnp.broadcast_to(lu, batch + (n, n)).astype(dtype)
    b = jnp.broadcast_to(Bm, batch + (n, k)).astype(dtype)
    perm = jnp.broadcast_to(lax.linalg.lu_pivots_to_permutation(piv - 1, n), batch + (n,))
    if left:  # L U x = P b
        pb = jnp.take_along_axis(b, jnp.broadcast_to(perm[..., :, None], batch + (n, k)), axis=-2)
        y = lax.linalg.triangular_solve(a, pb, left_side=True, lower=True, unit_diagonal=True)
        x = lax.linalg.triangular_solve(a, y, left_side=True, lower=False)
    else:  # U^T L^T (P x) = b
        y = lax.linalg.triangular_solve(a, b, left_side=True, lower=False, transpose_a=True)
        z = lax.linalg.triangular_solve(a, y, left_side=True, lower=True, unit_diagonal=True, transpose_a=True)
        inv = jnp.argsort(perm, axis=-1)
        x = _mT(jnp.take_along_axis(z, jnp.broadcast_to(inv[..., :, None], batch + (n, k)), axis=-2))
    if vector:
        x = x[..., 0]
    return x, lu, piv, info


# _linalg_svd(Tensor A, bool full_matrices=False, bool compute_uv=True, *, str? driver=None) -> (Tensor U, Tensor S, Tensor Vh)
@lower(aten._linalg_svd.default)
def _linalg_svd(A, full_matrices, compute_uv, driver):
    if not compute_uv:
        s = jnp.linalg.svd(A, compute_uv=False)
        return jnp.zeros((0,), A.dtype), s, jnp.zeros((0,), A.dtype)
    u, s, vh = jnp.linalg.svd(A, full_matrices=full_matrices, compute_uv=True)
    return u, s, vh


# linalg_cholesky_ex(Tensor self, *, bool upper=False, bool check_errors=False) -> (Tensor L, Tensor info)
@lower(aten.linalg_cholesky_ex.default)
def linalg_cholesky_ex(self, upper, check_errors):
    # lax's cholesky reads the lower triangle: the upper one is read as the conjugate transpose
    src = jnp.conj(_mT(self)) if upper else self
    L = lax.linalg.cholesky(src, symmetrize_input=False)
    L = jnp.tril(L)
    # the elimination that finds potrf's info runs only when the factorization failed (NaNs)
    info = lax.cond(jnp.all(jnp.isfinite(L)), lambda a: jnp.zeros(a.shape[:-2], _I32),
                    lambda a: _potrf_info(a, upper), self)
    L = jnp.where((info == 0)[..., None, None], L, jnp.zeros((), L.dtype))
    return (jnp.conj(_mT(L)) if upper else L), info


# linalg_inv_ex(Tensor A, *, bool check_errors=False) -> (Tensor inverse, Tensor info)
@lower(aten.linalg_inv_ex.default)
def linalg_inv_ex(A, check_errors):
    lu, piv, info = _lu(A)
    n = A.shape[-1]
    perm = lax.linalg.lu_pivots_to_permutation(piv - 1, n)
    pe = (perm[..., :, None] == jnp.arange(n, dtype=perm.dtype)).astype(A.dtype)  # P, with P A = L U
    x = lax.linalg.triangular_solve(lu, pe, left_side=True, lower=True, unit_diagonal=True)
    x = lax.linalg.triangular_solve(lu, x, left_side=True, lower=False)
    return x, info


# linalg_lu_factor_ex(Tensor A, *, bool pivot=True, bool check_errors=False) -> (Tensor LU, Tensor pivots, Tensor info)
@lower(aten.linalg_lu_factor_ex.default)
def linalg_lu_factor_ex(A, pivot, check_errors):
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    return _lu(A)


# linalg_qr(Tensor A, str mode="reduced") -> (Tensor Q, Tensor R)
@lower(aten.linalg_qr.default)
def linalg_qr(A, mode):
    if mode == "r":
        return jnp.zeros((0,), A.dtype), jnp.linalg.qr(A, mode="r")
    q, r = jnp.linalg.qr(A, mode=mode)
    return q, r
