"""Matrix decompositions and solvers: svd, eig, eigh, inv, qr, geqrf, householder products, solve,
triangular solves, Cholesky, LU, LDL^T, least squares, det, slogdet, matrix_exp, pinv; and the
conjugations (conj_physical, _conj_physical, and the _conj / _neg_view views as compiled graphs see them).

Lowered with jnp.linalg / lax.linalg for float32, float64 (and complex, where jax takes it as is;
PyTorch's CPU kernels reject float16/bfloat16, so the meta kernel does too). `torch.linalg.*` are
CompositeImplicitAutograd and reach the backend as these `_ex` / underscore ops.

LAPACK conventions kept: pivots are int32 and 1-based (getrf's ipiv, sytrf's ipiv with its negative
2x2-block entries), `info` is getrf's / potrf's / sytrf's (0 on success, else the 1-based index of
the first zero pivot / non positive-definite leading minor). As PyTorch's CPU kernel does for a
contiguous real input, `_linalg_det` and `_linalg_slogdet` factor A^T (det(A^T) = det(A)), so their
`LU`/`pivots` outputs are those of A^T for real dtypes and of A for complex ones. (The lowering
cannot see strides: for a non-contiguous real A PyTorch factors A itself, and the returned LU
differs, although det/logabsdet agree.) `_linalg_solve_ex` factors A (torch 2.13), and solves with
that LU (X A = B through the transposed triangular solves).

`_ex` ops return their info rather than raise (linalg_ldl_factor_ex raises for check_errors=True, as
the CPU does; the other `_ex` lowerings ignore check_errors). The ops PyTorch makes raise (cholesky,
cholesky_inverse, lu_solve's and lu_unpack's pivot checks, eig's non-finite check, LU without
pivoting) raise the CPU's error type and message through value checks (`require`), which the
executor prefixes with the op's name.
linalg_ldl_factor_ex and linalg_ldl_solve are LAPACK's sytf2 / sytrs ("L") step by step (a while
loop over the 1x1 / 2x2 pivot blocks, vmapped over the batch), so LD and pivots equal the CPU's.
linalg_matrix_exp is PyTorch's own algorithm (degree by 1-norm). geqrf and linalg_lstsq have no
meta kernel in PyTorch: this module registers them (end of file).
"""
from __future__ import annotations

import numpy as np
import torch

from ..runtime.lazy_jax import jax, jnp, lax
from .dtypes import opmath
from ._registry import aten, lower, require, require_in_range

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


def _mH(x):
    return jnp.conj(_mT(x)) if _is_complex(x) else _mT(x)


def _real_dtype(dtype):
    return np.dtype(jnp.finfo(dtype).dtype)


def _complex_dtype(dtype):
    dtype = np.dtype(dtype)
    return dtype if dtype.kind == "c" else np.dtype(np.complex128 if dtype == np.float64 else np.complex64)


def _eye(rows, cols, dtype, batch=()):
    return jnp.broadcast_to(jnp.eye(rows, cols, dtype=dtype), tuple(batch) + (rows, cols))


def _mm(a, b):
    return jnp.matmul(a, b, precision=lax.Precision.HIGHEST)


def _broadcast_batch(*xs):
    """Each (..., r, c) array broadcast to the batch shape they share (PyTorch's linalg broadcasting)."""
    batch = tuple(np.broadcast_shapes(*(tuple(x.shape[:-2]) for x in xs)))
    return [jnp.broadcast_to(x, batch + tuple(x.shape[-2:])) for x in xs]


def _trsm(a, b, *, lower, left=True, trans="N", unit=False):
    """trsm: op(a) x = b (left) or x op(a) = b, reading only the `lower`/upper triangle of a;
    op is a ("N"), its transpose ("T") or its conjugate transpose ("C"). Same batch shapes."""
    if a.size == 0 or b.size == 0:
        return jnp.zeros(b.shape, b.dtype)
    return lax.linalg.triangular_solve(a, b, left_side=left, lower=lower, transpose_a=trans != "N",
                                       conjugate_a=trans == "C", unit_diagonal=unit)


def _lu_permutation(piv, m):
    """The row permutation (..., m) that 1-based LAPACK pivots (..., k) make: A[perm] = L U."""
    if piv.shape[-1] == 0:
        return jnp.broadcast_to(jnp.arange(m, dtype=_I32), piv.shape[:-1] + (m,))
    return lax.linalg.lu_pivots_to_permutation(jnp.clip(piv.astype(_I32) - 1, 0, m - 1), m)


def _perm_matrix(perm, dtype):
    """P with P[perm[j], j] = 1 (A = P L U), as lu_unpack scatters it."""
    m = perm.shape[-1]
    return (perm[..., None, :] == jnp.arange(m, dtype=perm.dtype)[:, None]).astype(dtype)


# _linalg_check_errors raises one message per (batch element, info value); up to this many of
# them are emitted as separate checks (exact messages), beyond it one check with a generic message
_MAX_INFO_CHECKS = 64


def _require_info(info, max_info, error, api, text):
    """Raise as `at::_linalg_check_errors(info, api, is_matrix)` does when an info is non-zero:
    `text(value)` is the message for info `value` (text(None): without the value)."""
    flat = info.reshape(-1)
    count = flat.shape[0]
    if count == 0 or max_info == 0:
        return
    bad = flat != 0
    any_bad = jnp.any(bad)
    first = jnp.argmax(bad)
    value = flat[first]
    if count * max_info > _MAX_INFO_CHECKS:
        require(~any_bad, error, f"{api}: {text(None)}")
        return
    for b in range(count):
        where = f": (Batch element {b})" if info.ndim > 0 else ""
        for v in range(1, max_info + 1):
            require(~(any_bad & (first == b) & (value == v)), error, f"{api}{where}: {text(v)}")


# ---- LDL^T (Bunch-Kaufman): LAPACK's sytf2 / hetf2 and sytrs / hetrs, uplo = "L"

_BK_ALPHA = (1.0 + 17.0 ** 0.5) / 8.0


def _cabs1(x):
    """|re| + |im|: the magnitude LAPACK's complex pivot searches use (izamax)."""
    return jnp.abs(jnp.real(x)) + jnp.abs(jnp.imag(x)) if _is_complex(x) else jnp.abs(x)


def _iamax(values, mask):
    """BLAS i?amax over the entries where `mask`: the first index of the largest (a NaN is taken
    only as the first entry), and that value (0 when mask is empty)."""
    first = jnp.argmax(mask)
    best = jnp.argmax(jnp.where(mask & ~jnp.isnan(values), values, -1))
    i = jnp.where(jnp.isnan(values[first]), first, best)
    return i, jnp.where(jnp.any(mask), values[i], jnp.zeros((), values.dtype))


def _swap_rows(b, i, j):
    rows = jnp.arange(b.shape[0])[:, None]
    bi, bj = b[i], b[j]
    return jnp.where(rows == i, bj[None, :], jnp.where(rows == j, bi[None, :], b))


def _sytf2_lower(a, hermitian):
    """sytf2 ("L") on one (n, n) matrix (its lower triangle): (LD, ipiv, info), LAPACK's storage.
    A pivot step swaps rows and columns of the trailing matrix only (the columns of L already
    computed stay), as LAPACK does; the steps run in a while loop (1x1 and 2x2 blocks)."""
    n = a.shape[-1]
    herm = hermitian and _is_complex(a)
    idx = jnp.arange(n)
    rows, cols = idx[:, None], idx[None, :]
    below_diag = rows >= cols
    a = jnp.tril(a)
    if herm:  # hetrf reads the diagonal as real
        a = jnp.where(rows == cols, jnp.real(a).astype(a.dtype), a)

    def sym(x):  # the whole symmetric (Hermitian) matrix whose lower triangle x holds
        strict = jnp.tril(x, -1)
        return jnp.tril(x) + (jnp.conj(strict.T) if herm else strict.T)

    def diag_abs(z):
        return jnp.abs(jnp.real(z)) if herm else _cabs1(z)

    def step(state):
        k, a, ipiv, info = state
        full = sym(a)
        absakk = diag_abs(full[k, k])
        imax, colmax = _iamax(_cabs1(full[:, k]), idx > k)
        _, rowmax = _iamax(_cabs1(full[imax]), (idx >= k) & (idx != imax))
        zero = (jnp.maximum(absakk, colmax) == 0) | jnp.isnan(absakk)
        keep_k = zero | (absakk >= _BK_ALPHA * colmax) | (absakk >= _BK_ALPHA * colmax * (colmax / rowmax))
        take_i = diag_abs(full[imax, imax]) >= _BK_ALPHA * rowmax
        kp = jnp.where(keep_k, k, imax)
        two = ~keep_k & ~take_i
        kk = jnp.where(two, k + 1, k)
        # interchange rows and columns kk and kp of the trailing matrix A[k:, k:]
        p = jnp.where(idx == kk, kp, jnp.where(idx == kp, kk, idx))
        a = jnp.where((cols >= k) & below_diag, full[p][:, p], a)

        # 1x1 pivot block: A22 -= x x^T / d (sy/her), then L's column = x / d
        d = jnp.real(a[k, k]) if herm else a[k, k]
        r1 = 1 / d
        x = jnp.where(idx > k, a[:, k], jnp.zeros((), a.dtype))
        xs = jnp.conj(x) if herm else x
        a1 = jnp.where(below_diag & (cols > k), a - x[:, None] * (r1 * xs)[None, :], a)
        a1 = jnp.where((idx > k)[:, None] & (cols == k), r1 * a1, a1)

        # 2x2 pivot block (rows k, k+1): the trailing update, then L's two columns
        c0, c1 = a[:, k], a[:, k + 1]
        if herm:
            dabs = jnp.abs(a[k + 1, k])
            d11 = jnp.real(a[k + 1, k + 1]) / dabs
            d22 = jnp.real(a[k, k]) / dabs
            tt = 1 / (d11 * d22 - 1)
            d21 = a[k + 1, k] / dabs
            dd = tt / dabs
            wk = dd * (d11 * c0 - d21 * c1)
            wkp1 = dd * (d22 * c1 - jnp.conj(d21) * c0)
            upd = a - c0[:, None] * jnp.conj(wk)[None, :] - c1[:, None] * jnp.conj(wkp1)[None, :]
        else:
            d21 = a[k + 1, k]
            d11 = a[k + 1, k + 1] / d21
            d22 = a[k, k] / d21
            t = 1 / (d11 * d22 - 1)
            d21 = t / d21
            wk = d21 * (d11 * c0 - c1)
            wkp1 = d21 * (d22 * c1 - c0)
            upd = a - c0[:, None] * wk[None, :] - c1[:, None] * wkp1[None, :]
        tail = (idx > k + 1)[:, None]
        a2 = jnp.where(below_diag & (cols > k + 1), upd, a)
        a2 = jnp.where(tail & (cols == k), wk[:, None], a2)
        a2 = jnp.where(tail & (cols == k + 1), wkp1[:, None], a2)

        new = jnp.where(zero, a, jnp.where(two, a2, a1))
        if herm:
            new = jnp.where(rows == cols, jnp.real(new).astype(new.dtype), new)
        code = (kp + 1).astype(_I32)
        ipiv = jnp.where(two & ((idx == k) | (idx == k + 1)), -code, jnp.where(~two & (idx == k), code, ipiv))
        info = jnp.where((info == 0) & zero, (k + 1).astype(_I32), info)
        return k + jnp.where(two, 2, 1), new, ipiv, info

    state = (jnp.zeros((), _I32), a, jnp.zeros((n,), _I32), jnp.zeros((), _I32))
    _, a, ipiv, info = lax.while_loop(lambda s: s[0] < n, step, state)
    return jnp.tril(a), ipiv, info


def _sytrs_lower(a, ipiv, b, hermitian):
    """sytrs ("L"): solves A X = B for one (n, n) factorization (a, ipiv) and one (n, nrhs) B."""
    n = a.shape[-1]
    herm = hermitian and _is_complex(a)
    idx = jnp.arange(n)
    zero = jnp.zeros((), a.dtype)

    # which rows open / close a 2x2 block (a run of negative pivots pairs up from its start)
    def pair(opened, p):
        second = opened
        first = (p < 0) & ~second
        return first, (first, second)

    _, (first, second) = lax.scan(pair, jnp.zeros((), bool), ipiv)
    conj = jnp.conj if herm else (lambda v: v)

    def forward(k, b):  # L D Y = B, k = 0 .. n-1
        p = ipiv[k]
        # 1x1 block
        b1 = _swap_rows(b, k, jnp.clip(p - 1, 0, n - 1))
        col = jnp.where(idx > k, a[:, k], zero)
        b1 = b1 - col[:, None] * b1[k][None, :]
        dk = jnp.real(a[k, k]).astype(a.dtype) if herm else a[k, k]
        b1 = jnp.where((idx == k)[:, None], b1 * (1 / dk), b1)
        # 2x2 block on rows k, k+1
        b2 = _swap_rows(b, k + 1, jnp.clip(-p - 1, 0, n - 1))
        c0 = jnp.where(idx > k + 1, a[:, k], zero)
        c1 = jnp.where(idx > k + 1, a[:, k + 1], zero)
        b2 = b2 - c0[:, None] * b2[k][None, :]
        b2 = b2 - c1[:, None] * b2[k + 1][None, :]
        akm1k = a[k + 1, k]  # D = [[d11, conj(e)], [e, d22]] (e conjugated above the diagonal if Hermitian)
        akm1 = a[k, k] / conj(akm1k)
        ak = a[k + 1, k + 1] / akm1k
        denom = akm1 * ak - 1
        bkm1 = b2[k] / conj(akm1k)
        bk = b2[k + 1] / akm1k
        b2 = jnp.where((idx == k)[:, None], ((ak * bkm1 - bk) / denom)[None, :], b2)
        b2 = jnp.where((idx == k + 1)[:, None], ((akm1 * bk - bkm1) / denom)[None, :], b2)
        return jnp.where(second[k], b, jnp.where(p > 0, b1, b2))

    def backward(i, b):  # L^T X = Y (L^H), k = n-1 .. 0
        k = n - 1 - i
        p = ipiv[k]
        col = conj(jnp.where(idx > k, a[:, k], zero))
        b1 = b.at[k].add(-jnp.sum(col[:, None] * b, axis=0))
        b1 = _swap_rows(b1, k, jnp.clip(p - 1, 0, n - 1))
        # 2x2 block on rows k-1, k
        col0 = conj(jnp.where(idx > k, a[:, k - 1], zero))
        b2 = b.at[k].add(-jnp.sum(col[:, None] * b, axis=0))
        b2 = b2.at[k - 1].add(-jnp.sum(col0[:, None] * b2, axis=0))
        b2 = _swap_rows(b2, k, jnp.clip(-p - 1, 0, n - 1))
        return jnp.where(first[k], b, jnp.where(p > 0, b1, b2))

    b = lax.fori_loop(0, n, forward, b)
    return lax.fori_loop(0, n, backward, b)


# ---- least squares

def _lstsq_qr(A, B):
    """Full-rank least squares (m >= n, by QR) or minimum-norm solution (m < n, by LQ), as gels."""
    m, n = A.shape[-2:]
    if m >= n:
        q, r = jnp.linalg.qr(A, mode="reduced")
        return _trsm(r, _mm(_mH(q), B), lower=False)
    q, r = jnp.linalg.qr(_mH(A), mode="reduced")  # A = R^H Q^H
    return _mm(q, _trsm(r, B, lower=False, trans="C"))


def _lstsq_svd(A, B, rcond):
    """The minimum-norm least-squares solution with singular values <= rcond * s_max dropped (gelss)."""
    u, s, vh = jnp.linalg.svd(A, full_matrices=False)
    keep = s > rcond * s[..., :1]
    inv = jnp.where(keep, 1 / jnp.where(keep, s, 1), 0).astype(A.dtype)
    return _mm(_mH(vh), inv[..., :, None] * _mm(_mH(u), B))


# ---- matrix exponential (PyTorch's mexp: optimized Taylor polynomials, Bader, Blanes and Casas 2019)

_MEXP_THETAS_F32 = (1.192092800768788e-07, 5.978858893805233e-04, 5.116619363445086e-02,
                    5.800524627688768e-01, 1.461661507209034e+00, 3.010066362817634e+00)
_MEXP_THETAS_F64 = (2.220446049250313e-16, 2.580956802971767e-08, 3.397168839976962e-04,
                    4.991228871115323e-02, 2.996158913811580e-01, 1.090863719290036e+00)
def _t8_coefficients(single: bool) -> dict:
    """compute_T8's constants as PyTorch computes them: from sqrt(177) and 2/3 already rounded to
    the scalar type, in double, then rounded (by _lincomb) to the scalar type."""
    rnd = (lambda v: float(np.float32(v))) if single else float
    sqrt_177, x3 = rnd(0.1330413469565007072504e+2), rnd(2.0 / 3.0)
    return dict(
        x1=x3 * ((1.0 + sqrt_177) / 88.0), x2=x3 * ((1.0 + sqrt_177) / 352.0), x3=x3,
        x4=(-271.0 + 29.0 * sqrt_177) / (315.0 * x3), x5=(-11.0 + 11.0 * sqrt_177) / (1260.0 * x3),
        x6=(-99.0 + 11.0 * sqrt_177) / (5040.0 * x3), x7=(89.0 - sqrt_177) / (5040.0 * x3),
        y2=(857.0 - 58.0 * sqrt_177) / 630.0,
    )


_T12_B = (
    (9.0198e-16, 0.46932117595418237389, -0.20099424927047284052, -0.04623946134063071740),
    (5.31597895759871264183, 1.19926790417132231573, 0.01179296240992997031, 0.01108844528519167989),
    (0.18188869982170434744, 0.05502798439925399070, 0.09351590770535414968, 0.00610700528898058230),
    (-2.0861320e-13, -0.13181061013830184015, -0.02027855540589259079, -0.00675951846863086359),
)
_T18_B = (
    (0.0, -1.00365581030144618291e-01, -8.02924648241156932449e-03, -8.92138498045729985177e-04, 0.0),
    (0.0, 3.97849749499645077844e-01, 1.36783778460411720168e+00, 4.98289622525382669416e-01,
     -6.37898194594723280150e-04),
    (-1.09676396052962061844e+01, 1.68015813878906206114e+00, 5.71779846478865511061e-02,
     -6.98210122488052056106e-03, 3.34975017086070470649e-05),
    (-9.04316832390810593223e-02, -6.76404519071381882256e-02, 6.75961301770459654925e-02,
     2.95552570429315521194e-02, -1.39180257516060693404e-05),
    (0.0, 0.0, -9.23364619367118555360e-02, -1.69364939002081722752e-02, -1.40086798182036094347e-05),
)


def _lincomb(mats, coeffs):
    """sum_j coeffs[j] * mats[j], accumulated in order (PyTorch's _compute_linear_combination), the
    coefficients rounded to the matrices' (real) precision."""
    real = _real_dtype(mats[0].dtype)
    out = None
    for c, m in zip(coeffs, mats):
        term = m * jnp.asarray(c, real)
        out = term if out is None else out + term
    return out


def _mexp(a, thetas):
    """exp of a batch (b, n, n), n >= 2: the Taylor degree each matrix's 1-norm asks for."""
    n = a.shape[-1]
    eye = _eye(n, n, a.dtype, a.shape[:-2])
    norm = jnp.max(jnp.sum(jnp.abs(a), axis=-2), axis=-1)
    a2 = _mm(a, a)
    t1 = eye + a
    t2 = (eye + a) + a2 / 2
    t4 = _lincomb([eye, a, a2, _mm(a2, _lincomb([eye, a, a2], [1 / 2.0, 1 / 6.0, 1 / 24.0]))], [1.0, 1.0, 0.0, 1.0])
    c = _t8_coefficients(thetas is _MEXP_THETAS_F32)
    a4 = _mm(a2, _lincomb([a, a2], [c["x1"], c["x2"]]))
    a8 = _mm(_lincomb([a2, a4], [c["x3"], 1.0]), _lincomb([eye, a, a2, a4], [c["x4"], c["x5"], c["x6"], c["x7"]]))
    t8 = _lincomb([eye, a, a2, a4, a8], [1.0, 1.0, c["y2"], 0.0, 1.0])
    a3 = _mm(a, a2)
    b = [_lincomb([eye, a, a2, a3], row) for row in _T12_B]
    b2 = b[2] + _mm(b[3], b[3])
    t12 = b[0] + _mm(b[1] + b2, b2)
    # degree 18 on a / 2^s, then squared s times (s = 0 below the degree-18 bound)
    big = norm >= thetas[4]
    s = jnp.ceil(jnp.log2(norm / thetas[5]))
    s = jnp.where(big & jnp.isfinite(s), jnp.maximum(s, 0), 0).astype(np.int64)
    scaled = a / jnp.exp2(s.astype(_real_dtype(a.dtype)))[:, None, None].astype(a.dtype)
    s2 = _mm(scaled, scaled)
    s3 = _mm(scaled, s2)
    s6 = _mm(s3, s3)
    b = [_lincomb([eye, scaled, s2, s3, s6], row) for row in _T18_B]
    b3 = b[3] + _mm(b[0], b[4])
    t18 = b[1] + _mm(b[2] + b3, b3)
    t18 = lax.fori_loop(0, jnp.max(s, initial=0), lambda i, m: jnp.where((i < s)[:, None, None], _mm(m, m), m), t18)
    pick = lambda cond, x, y: jnp.where(cond[:, None, None], x, y)  # noqa: E731
    return pick(norm <= thetas[0], t1, pick(norm <= thetas[1], t2, pick(norm <= thetas[2], t4, pick(
        norm <= thetas[3], t8, pick(norm < thetas[4], t12, t18)))))


# _cholesky_solve_helper(Tensor self, Tensor A, bool upper) -> Tensor
@lower(aten._cholesky_solve_helper.default)
def _cholesky_solve_helper(self, A, upper):
    # potrs: A holds the factor (A = U^H U or L L^H); only that triangle is read
    b, a = _broadcast_batch(self, A)
    if upper:
        return _trsm(a, _trsm(a, b, lower=False, trans="C"), lower=False)
    return _trsm(a, _trsm(a, b, lower=True), lower=True, trans="C")


# cholesky_solve(Tensor self, Tensor input2, bool upper=False) -> Tensor
@lower(aten.cholesky_solve.default)
def cholesky_solve(self, input2, upper):
    # CompositeExplicitAutograd: eager runs PyTorch's kernel (-> _cholesky_solve_helper), but
    # AOTAutograd keeps the op whole in compiled graphs, so it needs its own lowering. The meta
    # kernel checks dtypes and shapes as the CPU does; the helper broadcasts the batches.
    if self.ndim < 2:
        raise RuntimeError(f"b should have at least 2 dimensions, but has {self.ndim} dimensions instead")
    if input2.ndim < 2:
        raise RuntimeError(f"u should have at least 2 dimensions, but has {input2.ndim} dimensions instead")
    return _cholesky_solve_helper(self, input2, upper)


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


# _linalg_eigvals(Tensor self) -> Tensor
@lower(aten._linalg_eigvals.default)
def _linalg_eigvals(self):
    # geev (jax's eig, on the CPU platform), eigenvalues in LAPACK's order; complex for real input.
    # No check for infs/NaNs: PyTorch's eigvals has none (eig has)
    if self.shape[-1] == 0:
        return jnp.zeros(self.shape[:-1], _complex_dtype(self.dtype))
    return lax.linalg.eig(self, compute_left_eigenvectors=False, compute_right_eigenvectors=False)[0]


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


# cholesky(Tensor self, bool upper=False) -> Tensor
@lower(aten.cholesky.default)
def cholesky(self, upper):
    # the deprecated op raises (LinAlgError) where the factorization fails, naming the leading minor
    if self.size == 0:
        return jnp.zeros(self.shape, self.dtype)
    factor, info = linalg_cholesky_ex(self, upper, False)
    _require_info(info, self.shape[-1], torch.linalg.LinAlgError, "cholesky", lambda v: (
        "The factorization could not be completed because the input is not positive-definite"
        + ("." if v is None else f" (the leading minor of order {v} is not positive-definite).")))
    return factor


# cholesky_inverse(Tensor self, bool upper=False) -> Tensor
@lower(aten.cholesky_inverse.default)
def cholesky_inverse(self, upper):
    # potri: the inverse of L L^H (U^H U) from the factor's triangle, made exactly Hermitian as
    # PyTorch reflects potri's triangle; an exactly zero diagonal element raises, as potri's info
    n = self.shape[-1]
    if self.size == 0:
        return jnp.zeros(self.shape, self.dtype)
    inv_factor = _trsm(self, _eye(n, n, self.dtype, self.shape[:-2]), lower=not upper)
    inv = _mm(_mH(inv_factor), inv_factor) if not upper else _mm(inv_factor, _mH(inv_factor))
    if upper:
        inv = jnp.triu(inv) + _mH(jnp.triu(inv, 1))
    else:
        inv = jnp.tril(inv) + _mH(jnp.tril(inv, -1))
    info = _first_true(jnp.diagonal(self, axis1=-2, axis2=-1) == 0)
    _require_info(info, n, torch.linalg.LinAlgError, "cholesky_inverse", lambda v: (
        ("The diagonal element " + ("" if v is None else f"{v} ")) + "is zero, the inversion could not be "
        "completed because the input matrix is singular."))
    return inv


# conj_physical(Tensor self) -> Tensor
# _conj_physical(Tensor self) -> Tensor
@lower(aten.conj_physical.default, aten._conj_physical.default)
def conj_physical(self):
    # conj_physical is CompositeImplicit itself: this lowering serves conj_physical.out and
    # conj_physical_. A copy for real dtypes (as the CPU's kernel), the conjugated values for complex
    return jnp.conj(self) if _is_complex(self) else self


# _conj(Tensor(a) self) -> Tensor(a)
@lower(aten._conj.default)
def _conj(self):
    # A view with the conjugate bit in eager (the C++ shim's view, never this lowering); in a functional
    # graph it is the conjugated values. PyTorch (CPU, meta and fake) refuses a real tensor, so a
    # traced graph never holds one; refuse it here too rather than invent a meaning.
    if not _is_complex(self):
        raise RuntimeError(f"_conj: expected a complex tensor, got {np.dtype(self.dtype).name} "
                           "(PyTorch's kernel asserts isComplexType)")
    return jnp.conj(self)


# _neg_view(Tensor(a) self) -> Tensor(a)
@lower(aten._neg_view.default)
def _neg_view(self):
    # like _conj: the negative bit in eager, the negated values in a functional graph (x.conj().imag
    # makes one); a bool view cannot be read there either (resolve_neg raises this on the CPU)
    if np.dtype(self.dtype) == np.bool_:
        raise RuntimeError("\"neg_cpu\" not implemented for 'Bool'")
    return -self


# geqrf(Tensor self) -> (Tensor a, Tensor tau)
@lower(aten.geqrf.default)
def geqrf(self):
    # LAPACK's Householder QR (R above the diagonal, the reflectors below it); jax names it raw QR
    # and returns it transposed. (PyTorch has no meta kernel for geqrf: see META_FUNCTIONS.)
    h, tau = jnp.linalg.qr(self, mode="raw")
    return _mT(h), tau


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


# linalg_eig(Tensor self) -> (Tensor eigenvalues, Tensor eigenvectors)
@lower(aten.linalg_eig.default)
def linalg_eig(self):
    # geev: eigenvalues in LAPACK's order, unit-norm right eigenvectors with their largest component
    # real (geev's normalization, which jax keeps)
    require(jnp.all(jnp.isfinite(self)), RuntimeError,
            "torch.linalg.eig: input tensor should not contain infs or NaNs.")
    if self.shape[-1] == 0:
        cdt = _complex_dtype(self.dtype)
        return jnp.zeros(self.shape[:-1], cdt), jnp.zeros(self.shape, cdt)
    w, v = lax.linalg.eig(self, compute_left_eigenvectors=False, compute_right_eigenvectors=True)
    return w, v


# linalg_householder_product(Tensor input, Tensor tau) -> Tensor
@lower(aten.linalg_householder_product.default)
def linalg_householder_product(input, tau):
    # orgqr: the first n columns of H(1) ... H(k)
    if input.size == 0:
        return jnp.zeros(input.shape, input.dtype)
    return lax.linalg.householder_product(input, tau.astype(input.dtype))


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


# linalg_ldl_factor_ex(Tensor self, *, bool hermitian=False, bool check_errors=False) -> (Tensor LD, Tensor pivots, Tensor info)
@lower(aten.linalg_ldl_factor_ex.default)
def linalg_ldl_factor_ex(self, hermitian, check_errors):
    # sytrf / hetrf with uplo="L" (Bunch-Kaufman), as PyTorch calls it on tril(self): LD holds L
    # and D below the diagonal (zeros above), pivots are LAPACK's ipiv (k > 0: 1x1 block, rows k
    # and ipiv swapped; -p twice: a 2x2 block), info the first zero pivot (1-based)
    n = self.shape[-1]
    batch = self.shape[:-2]
    if self.size == 0:
        return jnp.zeros(self.shape, self.dtype), jnp.zeros(batch + (n,), _I32), jnp.zeros(batch, _I32)
    flat = self.reshape((-1, n, n))
    ld, piv, info = jax.vmap(lambda a: _sytf2_lower(a, hermitian))(flat)
    ld, piv, info = ld.reshape(self.shape), piv.reshape(batch + (n,)), info.reshape(batch)
    if check_errors:
        _require_info(info, n, RuntimeError, "torch.linalg.ldl_factor_ex",
                      lambda v: "Unknown error code" + ("." if v is None else f": {v}."))
    return ld, piv, info


# linalg_ldl_solve(Tensor LD, Tensor pivots, Tensor B, *, bool hermitian=False) -> Tensor
@lower(aten.linalg_ldl_solve.default)
def linalg_ldl_solve(LD, pivots, B, hermitian):
    # sytrs / hetrs ("L") on the factorization linalg_ldl_factor_ex returns (LD, B broadcast)
    n = LD.shape[-1]
    batch = tuple(np.broadcast_shapes(tuple(B.shape[:-2]), tuple(LD.shape[:-2])))
    if LD.size == 0 or pivots.size == 0 or B.size == 0:
        return jnp.zeros(batch + tuple(B.shape[-2:]), B.dtype)
    # LAPACK would read out of bounds: outside of 1..n (in absolute value) a pivot raises here
    require(jnp.all((jnp.abs(pivots) >= 1) & (jnp.abs(pivots) <= n)), RuntimeError,
            "torch.linalg.ldl_solve: pivots must be between 1 and LD.size(-1) in absolute value. "
            "Did you pass the pivots linalg.ldl_factor returned?")
    ld = jnp.broadcast_to(LD, batch + (n, n)).reshape((-1, n, n))
    piv = jnp.broadcast_to(pivots.astype(_I32), batch + (n,)).reshape((-1, n))
    b = jnp.broadcast_to(B, batch + tuple(B.shape[-2:]))
    x = jax.vmap(lambda a, p, r: _sytrs_lower(a, p, r, hermitian))(ld, piv, b.reshape((-1,) + tuple(B.shape[-2:])))
    return x.reshape(b.shape)


# linalg_lstsq(Tensor self, Tensor b, float? rcond=None, *, str? driver=None) -> (Tensor solution, Tensor residuals, Tensor rank, Tensor singular_values)
@lower(aten.linalg_lstsq.default)
def linalg_lstsq(self, b, rcond, driver):
    # As the CPU's drivers (default gelsy): gels solves by QR (m >= n) or LQ (m < n) and returns
    # no rank; gelss/gelsd by the SVD with singular values <= rcond * s_max dropped, returning the
    # rank and singular values; gelsy by QR where A has full rank, else as gelss (its rank found
    # from the singular values rather than by incremental condition estimation), no singular
    # values. Residuals (|b - A x|^2 per column) where m > n, except for gelsy. For gelss/gelsd
    # PyTorch returns them only when every matrix has rank n, a data-dependent shape: here (and
    # in the meta kernel) they are always returned. Batches broadcast as on the CPU (b's first
    # A.dim() - 2 dims against A's batch dims); rank and singular_values keep A's batch shape.
    driver = "gelsy" if driver is None else driver.lower()
    A = self
    m, n = A.shape[-2:]
    k = min(m, n)
    vector = b.ndim == 1 or (b.ndim == A.ndim - 1 and tuple(b.shape) == tuple(A.shape[:-1]))
    b2 = b[..., None] if vector else b
    nrhs = b2.shape[-1]
    batch = tuple(np.broadcast_shapes(tuple(A.shape[:-2]), tuple(b2.shape[: A.ndim - 2])))
    dtype = jnp.result_type(A.dtype, b.dtype)
    real = _real_dtype(dtype)
    Ab = jnp.broadcast_to(A.astype(dtype), batch + (m, n))
    Bb = jnp.broadcast_to(b2.astype(dtype), batch + (m, nrhs))
    eps = float(np.finfo(real).eps)
    rc = eps * max(m, n) if rcond is None else float(rcond)
    if driver in ("gelss", "gelsd") and rc < 0:
        rc = eps  # LAPACK: a negative rcond means machine precision
    rc = max(rc, 0.0)
    empty_real = jnp.zeros((0,), real)
    if k == 0 or nrhs == 0:
        x = jnp.zeros(batch + (n, nrhs), dtype)
        s = jnp.zeros(A.shape[:-2] + (k,), real)
    else:
        s = jnp.linalg.svd(A, compute_uv=False) if driver != "gels" else None
        if driver == "gels":
            x = _lstsq_qr(Ab, Bb)
        elif driver == "gelsy":
            full = jnp.broadcast_to(jnp.sum(s > rc * s[..., :1], axis=-1) == k, batch)
            x = jnp.where(full[..., None, None], _lstsq_qr(Ab, Bb), _lstsq_svd(Ab, Bb, rc))
        else:
            x = _lstsq_svd(Ab, Bb, rc)
    if m > n and driver != "gelsy":
        if n == 0:  # LAPACK's quick return: gels zeroes b, gelss/gelsd leave it as it is
            residuals = (jnp.zeros(batch + (nrhs,), real) if driver == "gels"
                         else jnp.sum(jnp.abs(Bb) ** 2, axis=-2).astype(real))
        else:  # the rows n: of Q^H b, Q from the complete QR of A (LAPACK's raw residuals)
            q = jnp.linalg.qr(Ab, mode="complete")[0]
            y = _mm(_mH(q), Bb)[..., n:, :]
            residuals = jnp.sum(jnp.real(y * jnp.conj(y)) if _is_complex(y) else y * y, axis=-2)
    else:
        residuals = empty_real
    if driver == "gels":
        rank = jnp.zeros((0,), np.int64)
    elif k == 0:
        rank = jnp.zeros(A.shape[:-2], np.int64)
    else:
        rank = jnp.sum(s > rc * s[..., :1], axis=-1).astype(np.int64)
    singular_values = s if driver in ("gelss", "gelsd") else empty_real
    return (x[..., 0] if vector else x), residuals, rank, singular_values


# linalg_lu(Tensor A, *, bool pivot=True) -> (Tensor P, Tensor L, Tensor U)
@lower(aten.linalg_lu.default)
def linalg_lu(A, pivot):
    # getrf, unpacked (A = P L U, P[perm[j], j] = 1); LU without pivoting raises, as on the CPU
    if not pivot:
        require(jnp.zeros((), bool), RuntimeError,
                "linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    m, n = A.shape[-2:]
    k = min(m, n)
    batch = A.shape[:-2]
    if A.size == 0:
        P = _eye(m, m, A.dtype, batch)
        L, U = _eye(m, k, A.dtype, batch), jnp.zeros(batch + (k, n), A.dtype)
    else:
        lu, _piv, perm = lax.linalg.lu(A)
        L = jnp.tril(lu[..., :, :k], -1) + _eye(m, k, A.dtype)
        U = jnp.triu(lu[..., :k, :])
        P = _perm_matrix(perm, A.dtype)
    return (P if pivot else jnp.zeros((0,), A.dtype)), L, U


# linalg_lu_factor_ex(Tensor A, *, bool pivot=True, bool check_errors=False) -> (Tensor LU, Tensor pivots, Tensor info)
@lower(aten.linalg_lu_factor_ex.default)
def linalg_lu_factor_ex(A, pivot, check_errors):
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    return _lu(A)


# linalg_lu_solve(Tensor LU, Tensor pivots, Tensor B, *, bool left=True, bool adjoint=False) -> Tensor
@lower(aten.linalg_lu_solve.default)
def linalg_lu_solve(LU, pivots, B, left, adjoint):
    # getrs on (LU, pivots) broadcast to B's batch: A X = B (left) or X A = B, A^H for adjoint
    n = LU.shape[-1]
    batch = tuple(np.broadcast_shapes(tuple(B.shape[:-2]), tuple(LU.shape[:-2])))
    out_shape = batch + tuple(B.shape[-2:])
    if LU.size == 0 or B.size == 0:
        return jnp.zeros(out_shape, B.dtype)
    require(jnp.all(pivots >= 1), RuntimeError, "Pivots given to lu_solve must all be greater or equal to 1. "
            "Did you properly pass the result of lu_factor?")
    require(jnp.all(pivots <= n), RuntimeError, "Pivots given to lu_solve must all be smaller or equal to "
            "LU.size(-2). Did you properly pass the result of lu_factor?")
    lu = jnp.broadcast_to(LU, batch + (n, n))
    perm = jnp.broadcast_to(_lu_permutation(pivots, n), batch + (n,))
    b = jnp.broadcast_to(B, out_shape)
    if not left:  # X A = B <=> A^H X^H = B^H
        b, adjoint = _mH(b), not adjoint
    cols = b.shape[-1]
    if not adjoint:  # L U x = P^T b
        pb = jnp.take_along_axis(b, jnp.broadcast_to(perm[..., :, None], b.shape), axis=-2)
        x = _trsm(lu, _trsm(lu, pb, lower=True, unit=True), lower=False)
    else:  # U^H L^H (P^T x) = b
        z = _trsm(lu, _trsm(lu, b, lower=False, trans="C"), lower=True, unit=True, trans="C")
        inv = jnp.argsort(perm, axis=-1)
        x = jnp.take_along_axis(z, jnp.broadcast_to(inv[..., :, None], batch + (n, cols)), axis=-2)
    return _mH(x) if not left else x


# linalg_matrix_exp(Tensor self) -> Tensor
@lower(aten.linalg_matrix_exp.default)
def linalg_matrix_exp(self):
    # PyTorch's algorithm (Bader, Blanes, Casas: optimized Taylor approximants of degree 1, 2, 4,
    # 8, 12, 18 chosen by the 1-norm, scaling and squaring above the degree-18 bound), each matrix
    # with its own degree. float16/bfloat16 are computed in float32 (float32's bounds) and rounded
    # once: PyTorch's CPU kernel returns garbage for them (it reads its float64 coefficient tables
    # as 16-bit floats), which this does not reproduce
    n = self.shape[-1]
    if n == 0:
        return self
    x = opmath(self)
    if n == 1:
        return jnp.exp(x).astype(self.dtype)
    double = np.dtype(x.dtype) in (np.dtype(np.float64), np.dtype(np.complex128))
    out = _mexp(x.reshape((-1, n, n)), _MEXP_THETAS_F64 if double else _MEXP_THETAS_F32)
    return out.reshape(self.shape).astype(self.dtype)


# linalg_pinv.atol_rtol_tensor(Tensor self, *, Tensor? atol=None, Tensor? rtol=None, bool hermitian=False) -> Tensor
@lower(aten.linalg_pinv.atol_rtol_tensor)
def linalg_pinv(self, atol, rtol, hermitian):
    # PyTorch's kernel step by step (CompositeExplicitAutogradNonFunctional: eager runs it over our
    # svd/eigh, AOTAutograd keeps it whole). Singular values (|eigenvalues| if hermitian) at most
    # max(atol, rtol * the largest) are dropped; the tolerances are float64 unless both are given,
    # and the comparisons run in the promoted dtype, as PyTorch's (jax promotes these alike).
    m, n = self.shape[-2:]
    if self.size == 0:
        return jnp.zeros(tuple(self.shape[:-2]) + (n, m), self.dtype)
    f64 = np.dtype(np.float64)
    if rtol is None:
        default = jnp.full((), float(jnp.finfo(_real_dtype(self.dtype)).eps) * max(m, n), f64)
        rtol = default if atol is None else jnp.where(atol > 0, jnp.zeros((), f64), default)
    if atol is None:
        atol = jnp.zeros((), f64)
    if hermitian:
        s, u = _linalg_eigh(self, "L", True)
        size = jnp.abs(s)
        largest = jnp.max(size, axis=-1, keepdims=True)
        v = u
    else:
        u, s, vh = _linalg_svd(self, False, True, None)
        size = s
        largest = s[..., :1]  # sorted in descending order
        v = _mH(vh)
    tol = jnp.maximum(atol[..., None], rtol[..., None] * largest)
    s_inv = jnp.where(size > tol, 1 / s, jnp.zeros((), s.dtype)).astype(self.dtype)
    return _mm(v * s_inv[..., None, :], _mH(u))


# linalg_qr(Tensor A, str mode="reduced") -> (Tensor Q, Tensor R)
@lower(aten.linalg_qr.default)
def linalg_qr(A, mode):
    if mode == "r":
        return jnp.zeros((0,), A.dtype), jnp.linalg.qr(A, mode="r")
    q, r = jnp.linalg.qr(A, mode=mode)
    return q, r


# linalg_solve_triangular(Tensor self, Tensor B, *, bool upper, bool left=True, bool unitriangular=False) -> Tensor
@lower(aten.linalg_solve_triangular.default)
def linalg_solve_triangular(self, B, upper, left, unitriangular):
    # trsm; only the `upper` (or lower) triangle of A is read, and not its diagonal if unitriangular
    a, b = _broadcast_batch(self, B)
    return _trsm(a, b, lower=not upper, left=left, unit=unitriangular)


# lu_unpack(Tensor LU_data, Tensor LU_pivots, bool unpack_data=True, bool unpack_pivots=True) -> (Tensor P, Tensor L, Tensor U)
@lower(aten.lu_unpack.default)
def lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots):
    m, n = LU_data.shape[-2:]
    k = min(m, n)
    batch = LU_data.shape[:-2]
    empty = jnp.zeros((0,), LU_data.dtype)
    L = U = P = empty
    if unpack_data:
        L = jnp.tril(LU_data[..., :, :k], -1) + _eye(m, k, LU_data.dtype)
        U = jnp.triu(LU_data[..., :k, :])
    if unpack_pivots:
        piv = LU_pivots[..., :k]  # the CPU kernel reads (and checks) the first min(m, n) pivots
        require_in_range(piv.astype(np.int64) - 1, m, RuntimeError,
                         "pivots passed to lu_unpack must be between 1 and LU.size(-2) inclusive."
                         "Did you properly pass the result of lu_factor?", allow_negative=False)
        perm = jnp.broadcast_to(_lu_permutation(piv, m), batch + (m,))
        P = _perm_matrix(perm, LU_data.dtype)
    return P, L, U


# ormqr(Tensor self, Tensor input2, Tensor input3, bool left=True, bool transpose=False) -> Tensor
@lower(aten.ormqr.default)
def ormqr(self, input2, input3, left, transpose):
    # ormqr / unmqr: Q C, Q^H C (transpose), C Q or C Q^H with Q = H(1) ... H(k) from geqrf's output
    if input3.size == 0:
        return jnp.zeros(input3.shape, input3.dtype)
    if self.size == 0 or input2.shape[-1] == 0:  # Q = I
        return input3
    return lax.linalg.ormqr(self, input2.astype(self.dtype), input3, left=left, transpose=transpose)


# triangular_solve(Tensor self, Tensor A, bool upper=True, bool transpose=False, bool unitriangular=False) -> (Tensor solution, Tensor cloned_coefficient)
@lower(aten.triangular_solve.default)
def triangular_solve(self, A, upper, transpose, unitriangular):
    # op(A) X = B with op(A) = A^T (never conjugated) for transpose; returns A broadcast too
    b, a = _broadcast_batch(self, A)
    return _trsm(a, b, lower=not upper, trans="T" if transpose else "N", unit=unitriangular), a


# ---- meta kernels PyTorch lacks: geqrf and linalg_lstsq have none (nor fake implementations), and
# the executor takes every output's shape, dtype and strides from the meta kernel. These mirror the
# CPU kernels' checks (their messages) and outputs. Registered once, at import, only where
# PyTorch has no Meta kernel of its own; they make new tensors with `new_empty` so that they also
# serve fake tensors.

_LAPACK_DTYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128)
_SCALAR_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.complex64: "ComplexFloat",
                 torch.complex128: "ComplexDouble", torch.float16: "Half", torch.bfloat16: "BFloat16",
                 torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
                 torch.uint8: "Byte", torch.bool: "Bool"}


def _scalar_name(dtype):
    return _SCALAR_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def _resize_outs(outs, results):
    for out, res in zip(outs, results):
        if tuple(out.shape) != tuple(res.shape):
            out.resize_(res.shape)
    return tuple(outs)


def _meta_geqrf(self):
    if self.dim() < 2:
        raise RuntimeError("torch.geqrf: input must have at least 2 dimensions.")
    if self.dtype not in _LAPACK_DTYPES:
        raise NotImplementedError(f"\"geqrf_cpu\" not implemented for '{_scalar_name(self.dtype)}'")
    m, n = self.shape[-2:]
    a = self.new_empty(tuple(self.shape[:-2]) + (n, m)).mT  # column major, as LAPACK's
    return a, self.new_empty(tuple(self.shape[:-2]) + (min(m, n),))


def _meta_geqrf_out(self, *, a, tau):
    return _resize_outs((a, tau), _meta_geqrf(self))


def _infer_size(a, b):
    """Broadcast two shapes as at::infer_size does (its message on a mismatch)."""
    ndim = max(len(a), len(b))
    a = (1,) * (ndim - len(a)) + tuple(a)
    b = (1,) * (ndim - len(b)) + tuple(b)
    out = [0] * ndim
    for i in range(ndim - 1, -1, -1):
        if a[i] != b[i] and a[i] != 1 and b[i] != 1:
            raise RuntimeError(f"The size of tensor a ({a[i]}) must match the size of tensor b ({b[i]}) "
                               f"at non-singleton dimension {i}")
        out[i] = b[i] if a[i] == 1 else a[i]
    return tuple(out)


def _meta_lstsq(self, b, rcond=None, *, driver=None):
    if self.dim() < 2:
        raise RuntimeError("torch.linalg.lstsq: input must have at least 2 dimensions.")
    if b.dim() < 1:
        raise RuntimeError("torch.linalg.lstsq: other must have at least 1 dimension.")
    if self.dtype != b.dtype:
        raise RuntimeError(f"torch.linalg.lstsq: Expected input and other to have the same dtype, but got "
                           f"input's dtype {_scalar_name(self.dtype)} and other's dtype {_scalar_name(b.dtype)}")
    dim_diff = self.dim() - b.dim()
    if not 0 <= dim_diff <= 1:
        raise RuntimeError("torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and "
                           "(input.dim() - other.dim()) <= 1")
    vector = b.dim() == 1 or (dim_diff == 1 and tuple(b.shape) == tuple(self.shape[:-1]))
    b2 = tuple(b.shape) + (1,) if vector else tuple(b.shape)
    if self.shape[-2] != b2[-2]:
        raise RuntimeError("torch.linalg.lstsq: input.size(-2) should match other.size(-1)" if vector
                           else "torch.linalg.lstsq: input.size(-2) should match other.size(-2)")
    name = "gelsy" if driver is None else driver.lower()
    if name not in ("gels", "gelsy", "gelsd", "gelss"):
        raise RuntimeError("torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    if self.dtype not in _LAPACK_DTYPES:
        raise RuntimeError("This function doesn't handle types other than float and double")
    m, n = self.shape[-2:]
    nrhs = b2[-1]
    batch = _infer_size(self.shape[:-2], b2[: self.dim() - 2])
    b.new_empty(b2).expand(batch + (m, nrhs))  # b is copied into the batch: PyTorch's error if it can't be
    real = {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(self.dtype, self.dtype)
    big = max(m, n)
    if vector:
        solution = self.new_empty(batch + (big,))[..., :n]
    else:  # column major (..., max(m, n), nrhs), rows :n
        solution = self.new_empty(batch + (nrhs, big)).mT[..., :n, :]
    residuals = self.new_empty(batch + (nrhs,) if m > n and name != "gelsy" else (0,), dtype=real)
    rank = self.new_empty(tuple(self.shape[:-2]) if name != "gels" else (0,), dtype=torch.int64)
    singular = self.new_empty(tuple(self.shape[:-2]) + (min(m, n),) if name in ("gelsd", "gelss") else (0,),
                              dtype=real)
    return solution, residuals, rank, singular


def _meta_lstsq_out(self, b, rcond=None, *, driver=None, solution, residuals, rank, singular_values):
    return _resize_outs((solution, residuals, rank, singular_values), _meta_lstsq(self, b, rcond, driver=driver))


# Meta functions PyTorch lacks for ops lowered here (the eager executor and fake tensors learn result
# shapes from meta); eager/meta_kernels.py registers them
META_FUNCTIONS = {
    aten.geqrf.default: _meta_geqrf,
    aten.geqrf.a: _meta_geqrf_out,
    aten.linalg_lstsq.default: _meta_lstsq,
    aten.linalg_lstsq.out: _meta_lstsq_out,
}
