"""Lowerings of matrix decompositions (torch_neuronx/ops/linalg_decomp.py): each compared with
PyTorch's CPU kernel on its own (tests/lowering_harness.py), and the user-level torch.linalg calls
that reach it run on the neuron device vs the CPU (tests/device_harness.py).

Singular vectors and eigenvectors are unique only up to sign (phase): those are checked through
invariants (reconstruction, orthogonality); values (S, eigenvalues, det, inverse...) directly."""
import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402

from device_harness import check_device  # noqa: E402
from helpers import gen, randn  # noqa: E402
from lowering_harness import check_lowering, run_lowering, tolerance  # noqa: E402
import tolerances  # noqa: E402

aten = torch.ops.aten
DTYPES = [torch.float32, torch.float64]


def tol(dtype):
    """float32: torch's defaults (well-conditioned inputs: the measured errors are within them);
    float64: tighter than torch's defaults (tests/tolerances.py "linalg")."""
    return tolerances.tol("linalg", dtype)


# the file's matrices: float64 draws, rounded to the dtype under test (every dtype sees the same matrix)
randn64 = functools.partial(randn, drawn_in=torch.float64)


def spd(*shape, dtype=torch.float32, seed=0):
    a = randn64(*shape, dtype=torch.float64, seed=seed)
    n = shape[-1]
    return (a @ a.mT + n * torch.eye(n, dtype=torch.float64)).to(dtype)


def well(*shape, dtype=torch.float32, seed=0):
    """A well-conditioned square matrix (no pivot ties)."""
    n = shape[-1]
    return (randn64(*shape, dtype=torch.float64, seed=seed) + 3 * torch.eye(n, dtype=torch.float64)).to(dtype)


def close(a, b, **kw):
    torch.testing.assert_close(a, b, equal_nan=True, **kw)


def eye_like(x, n):
    return torch.eye(n, dtype=x.dtype).expand(*x.shape[:-2], n, n)


# ---------------------------------------------------------------------------------------------
# _linalg_svd

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 3), (3, 5), (2, 4, 4)])
@pytest.mark.parametrize("full", [False, True])
def test_svd(dtype, shape, full):
    A = randn64(*shape, dtype=dtype, seed=0)
    U, S, Vh = run_lowering(aten._linalg_svd.default, A, full, True)
    eU, eS, eVh = aten._linalg_svd.default(A, full, True)
    assert U.shape == eU.shape and S.shape == eS.shape and Vh.shape == eVh.shape
    close(S, eS, **tol(dtype))
    k = S.shape[-1]
    close(U[..., :k] @ torch.diag_embed(S) @ Vh[..., :k, :], A, **tol(dtype))
    close(U.mT @ U, eye_like(U, U.shape[-1]), **tol(dtype))
    close(Vh @ Vh.mT, eye_like(Vh, Vh.shape[-2]), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_values_only(dtype):
    check_lowering(aten._linalg_svd.default, randn64(2, 5, 3, dtype=dtype, seed=0), False, False, **tol(dtype))


def test_svd_device():
    A = randn64(5, 3, seed=0)
    f = lambda a: torch.linalg.svdvals(a)  # noqa: E731
    check_device(f, A, must_run=["aten._linalg_svd.default"])
    g = lambda a: (lambda u, s, vh: (s, u @ torch.diag(s) @ vh))(*torch.linalg.svd(a, full_matrices=False))  # noqa: E731
    check_device(g, A, must_run=["aten._linalg_svd.default"])


# ---------------------------------------------------------------------------------------------
# _linalg_eigh

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh(dtype, uplo):
    A = randn64(2, 4, 4, dtype=dtype, seed=0)
    # only the UPLO triangle is read: the other one holds garbage
    S = spd(2, 4, 4, dtype=dtype) - 5 * torch.eye(4, dtype=dtype)
    garb = torch.tril(S) + torch.triu(A, 1) if uplo == "L" else torch.triu(S) + torch.tril(A, -1)
    w, V = run_lowering(aten._linalg_eigh.default, garb, uplo, True)
    ew, eV = aten._linalg_eigh.default(garb, uplo, True)
    close(w, ew, **tol(dtype))
    assert torch.all(w[..., 1:] >= w[..., :-1])
    close(V @ torch.diag_embed(w) @ V.mT, S, **tol(dtype))
    close(V.mT @ V, eye_like(V, 4), **tol(dtype))
    check_lowering(aten._linalg_eigh.default, garb, uplo, False, **tol(dtype))


def test_eigh_device():
    S = spd(4, 4) - 4 * torch.eye(4)
    check_device(lambda a: torch.linalg.eigvalsh(a), S,
                 must_run=["aten._linalg_eigh.default"])
    f = lambda a: (lambda w, v: (w, v @ torch.diag(w) @ v.mT))(*torch.linalg.eigh(a, UPLO="U"))  # noqa: E731
    check_device(f, S, must_run=["aten._linalg_eigh.default"])


# ---------------------------------------------------------------------------------------------
# linalg_inv_ex

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (0, 0)])
def test_inv(dtype, shape):
    check_lowering(aten.linalg_inv_ex.default, well(*shape, dtype=dtype), **tol(dtype))


def test_inv_singular_info():
    A = torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
    _inv, info = run_lowering(aten.linalg_inv_ex.default, A)
    assert info.dtype == torch.int32 and info.item() == aten.linalg_inv_ex.default(A)[1].item() != 0


def test_inv_device():
    check_device(torch.linalg.inv, well(2, 3, 3), must_run=["aten.linalg_inv_ex.default"])


# ---------------------------------------------------------------------------------------------
# linalg_qr

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr(dtype, shape, mode):
    A = randn64(*shape, dtype=dtype, seed=0)
    Q, R = run_lowering(aten.linalg_qr.default, A, mode)
    eQ, eR = aten.linalg_qr.default(A, mode)
    assert Q.shape == eQ.shape and R.shape == eR.shape
    close(torch.triu(R), R)
    close(R.abs(), eR.abs(), **tol(dtype))  # rows of R are unique up to sign
    if mode != "r":
        close(Q @ R, A, **tol(dtype))
        close(Q.mT @ Q, eye_like(Q, Q.shape[-1]), **tol(dtype))


def test_qr_device():
    A = randn64(5, 3, seed=0)
    f = lambda a: (lambda q, r: (q @ r, r.abs()))(*torch.linalg.qr(a))  # noqa: E731
    check_device(f, A, must_run=["aten.linalg_qr.default"])


# ---------------------------------------------------------------------------------------------
# _linalg_solve_ex

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ashape,bshape,left", [
    ((3, 3), (3,), True), ((3, 3), (3, 2), True), ((2, 3, 3), (2, 3), True),
    ((2, 3, 3), (3, 4), True), ((3, 3), (2, 3), False), ((2, 3, 3), (1, 4, 3), False),
])
def test_solve(dtype, ashape, bshape, left):
    check_lowering(aten._linalg_solve_ex.default, well(*ashape, dtype=dtype), randn64(*bshape, dtype=dtype, seed=1),
                   left=left, **tol(dtype))


def test_solve_device():
    A, B = well(3, 3), randn64(3, 2, seed=1)
    check_device(torch.linalg.solve, A, B, must_run=["aten._linalg_solve_ex.default"])
    check_device(lambda a, b: torch.linalg.solve(a, b, left=False), A, B.mT,
                 must_run=["aten._linalg_solve_ex.default"])


# ---------------------------------------------------------------------------------------------
# linalg_cholesky_ex

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(dtype, upper):
    S = spd(2, 4, 4, dtype=dtype)
    garb = S + (torch.triu(randn64(4, 4, dtype=dtype, seed=0), 1) if not upper
                else torch.tril(randn64(4, 4, dtype=dtype, seed=0), -1))
    check_lowering(aten.linalg_cholesky_ex.default, garb, upper=upper, **tol(dtype))


def test_cholesky_info():
    # the leading minor of order 3 is not positive-definite
    A = torch.tensor([[4.0, 1, 1, 0], [1, 3, 2, 0], [1, 2, 1, 0], [0, 0, 0, 1]])
    _L, info = run_lowering(aten.linalg_cholesky_ex.default, A)
    assert info.dtype == torch.int32 and info.item() == aten.linalg_cholesky_ex.default(A)[1].item() == 3
    _L, info = run_lowering(aten.linalg_cholesky_ex.default, torch.stack([spd(3, 3), -torch.eye(3)]))
    assert info.tolist() == [0, 1]


def test_cholesky_device():
    S = spd(3, 3)
    check_device(torch.linalg.cholesky, S, must_run=["aten.linalg_cholesky_ex.default"])
    check_device(lambda a: torch.linalg.cholesky(a, upper=True), S,
                 must_run=["aten.linalg_cholesky_ex.default"])


# ---------------------------------------------------------------------------------------------
# _linalg_det / _linalg_slogdet

DET_INPUTS = {
    "random": lambda d: randn64(2, 4, 4, dtype=d, seed=0),
    "singular": lambda d: torch.tensor([[1.0, 2.0, 0.0], [3.0, 4.0, 0.0], [5.0, 6.0, 0.0]], dtype=d),
    "negative": lambda d: torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=d),
    "empty": lambda d: torch.zeros(0, 0, dtype=d),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", list(DET_INPUTS))
def test_det(dtype, which):
    A = DET_INPUTS[which](dtype)
    check_lowering(aten._linalg_det.default, A, **tol(dtype))
    check_lowering(aten._linalg_slogdet.default, A, **tol(dtype))


def test_det_device():
    A = randn64(2, 3, 3, seed=0)
    check_device(torch.linalg.det, A, must_run=["aten._linalg_det.default"])
    check_device(torch.linalg.slogdet, A, must_run=["aten._linalg_slogdet.default"])


# ---------------------------------------------------------------------------------------------
# linalg_lu_factor_ex

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 4), (2, 5, 3), (3, 5)])
def test_lu_factor(dtype, shape):
    check_lowering(aten.linalg_lu_factor_ex.default, randn64(*shape, dtype=dtype, seed=0), **tol(dtype))


def test_lu_factor_singular_info():
    A = torch.tensor([[1.0, 2.0], [2.0, 4.0]])
    check_lowering(aten.linalg_lu_factor_ex.default, A)


def test_lu_factor_device():
    check_device(torch.linalg.lu_factor, randn64(2, 4, 4, seed=0),
                 must_run=["aten.linalg_lu_factor_ex.default"])


# ---------------------------------------------------------------------------------------------
# complex inputs (jax takes them as is) and the errors of the user-level calls

def test_complex():
    tc = {}  # complex64: torch's defaults (measured abs <= 2.9e-6 on |values| <= 10)
    c = randn64(3, 3, dtype=torch.float64, seed=0).to(torch.complex64) + 1j * randn64(3, 3, seed=2).to(torch.complex64)
    for op, args in [(aten._linalg_det.default, (c,)), (aten._linalg_slogdet.default, (c,)),
                     (aten.linalg_inv_ex.default, (c,)), (aten.linalg_lu_factor_ex.default, (c,)),
                     (aten._linalg_solve_ex.default, (c, c[:, :2].clone()))]:
        check_lowering(op, *args, **tc)
    h = c @ c.mH + 3 * torch.eye(3)
    check_lowering(aten.linalg_cholesky_ex.default, h, **tc)
    check_lowering(aten.linalg_cholesky_ex.default, h, upper=True, **tc)
    w, V = run_lowering(aten._linalg_eigh.default, h, "L", True)
    close(w, aten._linalg_eigh.default(h, "L", True)[0], **tc)
    close(V @ torch.diag_embed(w.to(V.dtype)) @ V.mH, h, **tc)
    U, S, Vh = run_lowering(aten._linalg_svd.default, c, False, True)
    close(U @ torch.diag_embed(S.to(U.dtype)) @ Vh, c, **tc)


@pytest.mark.parametrize("fn", [torch.linalg.inv, torch.linalg.cholesky,
                                lambda a: torch.linalg.solve(a, torch.ones_like(a[:, 0]))], ids=["inv", "cholesky", "solve"])
def test_singular_errors_device(fn):
    A = torch.tensor([[1.0, 2.0, 0.0], [3.0, 4.0, 0.0], [5.0, 6.0, 0.0]])
    with pytest.raises(torch.linalg.LinAlgError) as cpu:
        fn(A)
    with pytest.raises(torch.linalg.LinAlgError) as dev:
        fn(A.to("neuron"))
    assert str(dev.value) == str(cpu.value)


# ---------------------------------------------------------------------------------------------
# helpers for the solvers and factorizations below

def crandn(*shape, seed=0):
    g = gen(seed)
    return torch.complex(torch.randn(*shape, generator=g, dtype=torch.float64),
                         torch.randn(*shape, generator=g, dtype=torch.float64))


def symmetric(*shape, dtype=torch.float64, seed=0):
    """A symmetric indefinite matrix (Bunch-Kaufman picks 2x2 pivot blocks for some of them)."""
    a = randn64(*shape, dtype=torch.float64, seed=seed)
    return (a + a.mT).to(dtype)


def garbage_above(factor, upper=False, seed=5):
    """A triangular factor with garbage in the triangle the op must not read."""
    junk = randn64(*factor.shape, dtype=torch.float64, seed=seed).to(factor.dtype)
    return factor + (torch.tril(junk, -1) if upper else torch.triu(junk, 1))


def slow(*values):
    """A parametrization case run only with -m slow (the exhaustive grids; the default run keeps one
    case per code path)."""
    return pytest.param(*values, marks=pytest.mark.slow)


def must_raise(fn, *args, error=RuntimeError):
    """fn raises the same error on neuron as on the CPU, with the CPU's message in it (the device's
    value checks prefix the op's name)."""
    with pytest.raises(error) as cpu:
        fn(*args)
    with pytest.raises(error) as dev:
        fn(*(a.to("neuron") if isinstance(a, torch.Tensor) else a for a in args))
    assert str(cpu.value) in str(dev.value), (str(cpu.value), str(dev.value))


# ---------------------------------------------------------------------------------------------
# _cholesky_solve_helper (cholesky_solve)

@pytest.mark.parametrize("dtype,upper", [(torch.float32, False), (torch.float64, True), (torch.complex128, True),
                                         slow(torch.float64, False), slow(torch.complex128, False)])
def test_cholesky_solve(dtype, upper):
    if dtype.is_complex:
        a = crandn(2, 4, 4)
        S, B = a @ a.mH + 4 * torch.eye(4), crandn(2, 4, 3, seed=1)
    else:
        S, B = spd(2, 4, 4, dtype=dtype), randn64(2, 4, 3, dtype=dtype, seed=1)
    factor = torch.linalg.cholesky(S, upper=upper).resolve_conj()
    check_lowering(aten._cholesky_solve_helper.default, B, garbage_above(factor, upper), upper, **tol(dtype))


def test_cholesky_solve_device():
    L, B = torch.linalg.cholesky(spd(4, 4)), randn64(2, 4, 3, seed=1)
    # cholesky_solve has its own lowering (compiled graphs hold it whole), which eager uses too
    check_device(torch.cholesky_solve, B, L, must_run=["aten.cholesky_solve.default"])
    check_device(lambda b, u: torch.cholesky_solve(b, u, upper=True), B, L.mT.contiguous(),
                 must_run=["aten.cholesky_solve.default"])


# ---------------------------------------------------------------------------------------------
# _linalg_eigvals / linalg_eig (LAPACK geev on the CPU platform: same order, same normalization)

@pytest.mark.parametrize("dtype", [torch.float32, torch.complex128, slow(torch.float64)])
def test_eig(dtype):
    A = crandn(2, 5, 5) if dtype.is_complex else randn64(2, 5, 5, dtype=dtype, seed=0)
    t = tol(torch.float32 if dtype == torch.float32 else torch.float64)
    check_lowering(aten._linalg_eigvals.default, A, **t)
    w, V = run_lowering(aten.linalg_eig.default, A)
    ew, eV = aten.linalg_eig.default(A)
    assert w.dtype == ew.dtype and V.shape == eV.shape
    close(w, ew, **t)
    close(V.abs(), eV.abs(), **t)  # unit columns, largest component real: unique up to the sign
    close(V @ torch.diag_embed(w) @ torch.linalg.inv(V), A.to(V.dtype), **t)


def test_eig_device():
    A = randn64(5, 5, seed=0)
    check_device(torch.linalg.eigvals, A, must_run=["aten._linalg_eigvals.default"])
    check_device(lambda a: (lambda w, v: (w, v.abs()))(*torch.linalg.eig(a)), A,
                 must_run=["aten.linalg_eig.default"])
    must_raise(torch.linalg.eig, torch.tensor([[1.0, float("nan")], [0.0, 1.0]]))


# ---------------------------------------------------------------------------------------------
# cholesky (the deprecated op: raises where the factorization fails) and cholesky_inverse

@pytest.mark.parametrize("dtype,upper", [(torch.float32, False), (torch.float64, True), slow(torch.float32, True)])
def test_cholesky_deprecated(dtype, upper):
    S = spd(2, 4, 4, dtype=dtype)
    check_lowering(aten.cholesky.default, S, upper, **tol(dtype))
    check_lowering(aten.cholesky.default, torch.zeros(0, 3, 3, dtype=dtype), upper)


@pytest.mark.parametrize("dtype,upper", [(torch.float32, False), (torch.float64, True), (torch.complex128, True),
                                         slow(torch.float64, False), slow(torch.complex128, False)])
def test_cholesky_inverse(dtype, upper):
    if dtype.is_complex:
        a = crandn(2, 4, 4)
        S = a @ a.mH + 4 * torch.eye(4)
    else:
        S = spd(2, 4, 4, dtype=dtype)
    factor = torch.linalg.cholesky(S, upper=upper).resolve_conj()
    check_lowering(aten.cholesky_inverse.default, garbage_above(factor, upper), upper, **tol(dtype))


def test_cholesky_ops_device():
    S = spd(2, 4, 4)
    f = lambda a: torch.cholesky(a)  # noqa: E731
    check_device(f, S, must_run=["aten.cholesky.default"])
    check_device(torch.cholesky_inverse, torch.linalg.cholesky(S),
                 must_run=["aten.cholesky_inverse.default"])
    # the CPU's errors: the first failing batch element, the leading minor / the zero diagonal element
    bad = torch.stack([spd(3, 3), torch.diag(torch.tensor([1.0, -1.0, 1.0]))])
    must_raise(f, bad[1], error=torch.linalg.LinAlgError)
    must_raise(f, bad, error=torch.linalg.LinAlgError)
    singular = torch.diag(torch.tensor([1.0, 0.0, 2.0]))
    must_raise(torch.cholesky_inverse, singular, error=torch.linalg.LinAlgError)
    must_raise(torch.cholesky_inverse, torch.stack([torch.eye(3), singular]), error=torch.linalg.LinAlgError)


# ---------------------------------------------------------------------------------------------
# conj_physical (reached as conj_physical.out: the functional op is CompositeImplicit)

def test_conj_physical():
    check_lowering(aten.conj_physical.default, crandn(3, 4).to(torch.complex64))
    check_lowering(aten.conj_physical.default, randn64(3, 4, seed=0))


def test_conj_physical_device():
    c = crandn(3, 4).to(torch.complex64)
    # conj_physical -> _conj_physical (lowered: compiled graphs hold it), no longer through conj_physical.out
    check_device(torch.conj_physical, c, must_run=["aten._conj_physical.default"])
    x = randn64(4, 6, seed=0)
    check_device(torch.fft.ihfft2, x, must_run=["aten._conj_physical.default"])
    check_device(torch.fft.ihfftn, torch.arange(24).reshape(2, 3, 4),
                 must_run=["aten._conj_physical.default"])


# ---------------------------------------------------------------------------------------------
# geqrf, linalg_householder_product, ormqr

@pytest.mark.parametrize("dtype,shape", [(torch.float32, (5, 3)), (torch.float64, (3, 5)), (torch.float32, (2, 4, 4)),
                                         (torch.float32, (0, 3)), slow(torch.float64, (2, 0, 3, 3)),
                                         slow(torch.float64, (2, 4, 4))])
def test_geqrf(dtype, shape):
    check_lowering(aten.geqrf.default, randn64(*shape, dtype=dtype, seed=0), **tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, slow(torch.float64)])
@pytest.mark.parametrize("shape,k", [((6, 4), 4), ((5, 4), 2), ((2, 1, 5, 3), 3), ((0, 0), 0), slow((5, 5), 5),
                                     slow((4, 4), 0)])
def test_householder_product(dtype, shape, k):
    A, tau = randn64(*shape, dtype=dtype, seed=0), randn64(*shape[:-2], k, dtype=dtype, seed=1)
    check_lowering(aten.linalg_householder_product.default, A, tau, **tol(dtype))


@pytest.mark.parametrize("dtype,left,transpose", [
    (torch.float32, True, False), (torch.float64, False, True), (torch.complex128, True, True),
    (torch.complex128, False, False), slow(torch.float32, True, True), slow(torch.float32, False, False),
    slow(torch.float64, True, False), slow(torch.complex128, True, False)])
def test_ormqr(dtype, left, transpose):
    A = crandn(2, 5, 3) if dtype.is_complex else randn64(2, 5, 3, dtype=dtype, seed=0)
    a, tau = torch.geqrf(A)
    C = (crandn if dtype.is_complex else lambda *s, seed: randn64(*s, dtype=dtype, seed=seed))(
        *((2, 5, 2) if left else (2, 2, 5)), seed=1)
    check_lowering(aten.ormqr.default, a, tau, C, left, transpose, **tol(dtype))


def test_qr_family_device():
    A = randn64(5, 3, seed=0)
    check_device(torch.geqrf, A, must_run=["aten.geqrf.default"])
    a, tau = torch.geqrf(A)
    check_device(torch.linalg.householder_product, a, tau,
                 must_run=["aten.linalg_householder_product.default"])
    check_device(lambda x, t, c: torch.ormqr(x, t, c, transpose=True), a, tau, randn64(5, 2, seed=1), must_run=["aten.ormqr.default"])
    # geqrf has no meta kernel in PyTorch: this module registers one (out= too)
    out = (torch.empty(0, device="neuron"), torch.empty(0, device="neuron"))
    torch.geqrf(A.to("neuron"), out=out)
    ea, etau = torch.geqrf(A)
    close(out[0].cpu(), ea)
    close(out[1].cpu(), etau)
    must_raise(torch.geqrf, randn64(3, seed=0))


# ---------------------------------------------------------------------------------------------
# linalg_ldl_factor_ex / linalg_ldl_solve (LAPACK's sytrf / sytrs, uplo="L", step by step)

@pytest.mark.parametrize("dtype", [torch.float64, slow(torch.float32)])
def test_ldl_factor(dtype):
    A = symmetric(4, 6, 6, dtype=dtype, seed=3)
    LD, piv, info = run_lowering(aten.linalg_ldl_factor_ex.default, A)
    eLD, epiv, einfo = aten.linalg_ldl_factor_ex.default(A)
    assert torch.equal(piv, epiv) and torch.equal(info, einfo) and (piv < 0).any()  # 2x2 blocks too
    close(LD, eLD, **tol(dtype))
    # only the lower triangle is read
    check_lowering(aten.linalg_ldl_factor_ex.default, torch.tril(A) + torch.triu(randn64(6, 6, dtype=dtype, seed=0), 1),
                   **tol(dtype))


@pytest.mark.parametrize("hermitian", [True, slow(False)])
def test_ldl_factor_complex(hermitian):
    c = crandn(3, 5, 5)
    check_lowering(aten.linalg_ldl_factor_ex.default, c + (c.mH if hermitian else c.mT), hermitian=hermitian,
                   **tol(torch.float64))


def test_ldl_factor_singular():
    singular = torch.stack([torch.diag(torch.tensor([1.0, 0.0, 2.0, 0.0])), torch.zeros(4, 4)])
    _LD, _piv, info = run_lowering(aten.linalg_ldl_factor_ex.default, singular)
    assert info.tolist() == aten.linalg_ldl_factor_ex.default(singular)[2].tolist() == [2, 1]
    check_lowering(aten.linalg_ldl_factor_ex.default, torch.zeros(0, 3, 3))


@pytest.mark.parametrize("dtype,hermitian", [(torch.float64, False), (torch.complex128, True),
                                             slow(torch.float32, False), slow(torch.float64, True),
                                             slow(torch.complex128, False)])
def test_ldl_solve(dtype, hermitian):
    if dtype.is_complex:
        c = crandn(3, 6, 6)
        A, B = (c + c.mH if hermitian else c + c.mT), crandn(3, 6, 2, seed=1)
    else:
        A, B = symmetric(3, 6, 6, dtype=dtype, seed=3), randn64(3, 6, 2, dtype=dtype, seed=1)
    LD, piv, _ = torch.linalg.ldl_factor_ex(A, hermitian=hermitian)
    t = tol(torch.float32 if dtype == torch.float32 else torch.float64)
    check_lowering(aten.linalg_ldl_solve.default, LD, piv, B[0] if hermitian else B, hermitian=hermitian, **t)


def test_ldl_device():
    A = symmetric(2, 5, 5, dtype=torch.float32, seed=3)
    check_device(torch.linalg.ldl_factor, A, must_run=["aten.linalg_ldl_factor_ex.default"])
    LD, piv = torch.linalg.ldl_factor(A)
    check_device(torch.linalg.ldl_solve, LD, piv, randn64(5, 3, seed=1),
                 must_run=["aten.linalg_ldl_solve.default"])
    # PyTorch raises it as an internal assert ("Unknown error code"): the message past its preamble
    with pytest.raises(RuntimeError, match="torch.linalg.ldl_factor_ex: Unknown error code: 1."):
        torch.linalg.ldl_factor_ex(torch.zeros(3, 3, device="neuron"), check_errors=True)


# ---------------------------------------------------------------------------------------------
# linalg_lstsq (and its meta kernel, which PyTorch lacks)

@pytest.mark.parametrize("driver,m,n,dtype", [
    ("gels", 5, 3, torch.float32), ("gels", 2, 4, torch.float64), ("gelsy", 5, 3, torch.float64),
    ("gelsy", 2, 4, torch.float32), ("gelsd", 5, 3, torch.float32), ("gelss", 3, 3, torch.float64),
    slow("gels", 3, 3, torch.float32), slow("gelsy", 3, 3, torch.float32), slow("gelsd", 2, 4, torch.float64),
    slow("gelsd", 3, 3, torch.float64), slow("gelss", 5, 3, torch.float32), slow("gelss", 2, 4, torch.float32)])
def test_lstsq(driver, m, n, dtype):
    A, B = randn64(2, m, n, dtype=dtype, seed=0), randn64(2, m, 2, dtype=dtype, seed=1)
    check_lowering(aten.linalg_lstsq.default, A, B, driver=driver, **tol(dtype))


@pytest.mark.parametrize("ashape,bshape,driver", [
    ((4, 3), (4,), "gels"), ((2, 4, 3), (2, 4), "gelsd"), ((1, 4, 3), (2, 4, 2), "gelsd"), ((1, 4, 3), (4, 2), "gels"),
    ((0, 3), (0, 2), "gelsd"), ((3, 0), (3, 2), "gels"), ((3, 0), (3, 2), "gelsd"),
    ((2, 0, 4, 3), (2, 0, 4, 2), "gelsd"),
    slow((4, 3), (4,), "gelsd"), slow((2, 4, 3), (2, 4), "gels"), slow((1, 4, 3), (2, 4, 2), "gels"),
    slow((1, 4, 3), (4, 2), "gelsd"), slow((0, 3), (0, 2), "gels"), slow((2, 0, 4, 3), (2, 0, 4, 2), "gels")])
def test_lstsq_shapes(ashape, bshape, driver):
    check_lowering(aten.linalg_lstsq.default, randn64(*ashape, dtype=torch.float64, seed=0),
                   randn64(*bshape, dtype=torch.float64, seed=1), driver=driver, **tol(torch.float64))


def test_lstsq_rank_deficient_and_complex():
    A = randn64(5, 3, dtype=torch.float64, seed=0)
    A[:, 2] = A[:, 0] + A[:, 1]
    B = randn64(5, 2, dtype=torch.float64, seed=1)
    check_lowering(aten.linalg_lstsq.default, A, B, **tol(torch.float64))  # gelsy: minimum-norm solution, rank 2
    x, _res, rank, s = run_lowering(aten.linalg_lstsq.default, A, B, driver="gelsd")
    ex, _eres, erank, es = aten.linalg_lstsq.default(A, B, driver="gelsd")
    close(x, ex, **tol(torch.float64))
    assert rank.item() == erank.item() == 2
    close(s, es, **tol(torch.float64))
    check_lowering(aten.linalg_lstsq.default, crandn(2, 5, 3), crandn(2, 5, 2, seed=1), **tol(torch.float64))


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["gels", "gelsd", "gelss"])
@pytest.mark.parametrize("m,n", [(5, 3), (2, 4)])
def test_lstsq_complex(driver, m, n):
    check_lowering(aten.linalg_lstsq.default, crandn(2, m, n), crandn(2, m, 2, seed=1), driver=driver,
                   **tol(torch.float64))


def test_lstsq_device():
    A, B = randn64(5, 3, seed=0), randn64(5, 2, seed=1)
    check_device(torch.linalg.lstsq, A, B, must_run=["aten.linalg_lstsq.default"])
    check_device(lambda a, b: torch.linalg.lstsq(a, b, driver="gelsd"), A, B,
                 must_run=["aten.linalg_lstsq.default"])
    check_device(lambda a, b: torch.linalg.lstsq(a, b, driver="gels"), randn64(2, 3, 4, seed=0), randn64(2, 3, seed=0), must_run=["aten.linalg_lstsq.default"])
    must_raise(lambda a, b: torch.linalg.lstsq(a, b, driver="foo"), A, B)
    must_raise(torch.linalg.lstsq, A, randn64(4, seed=0))
    must_raise(torch.linalg.lstsq, randn64(2, 4, 3, seed=0), randn64(4, 2, seed=0))


# ---------------------------------------------------------------------------------------------
# linalg_lu, linalg_lu_solve, lu_unpack

@pytest.mark.parametrize("dtype,shape", [(torch.float32, (4, 4)), (torch.float64, (2, 5, 3)), (torch.float32, (3, 5)),
                                         (torch.float32, (0, 3, 2)), (torch.float64, (3, 0)),
                                         slow(torch.float64, (4, 4)), slow(torch.float32, (2, 5, 3))])
def test_lu(dtype, shape):
    check_lowering(aten.linalg_lu.default, randn64(*shape, dtype=dtype, seed=0), **tol(dtype))


@pytest.mark.parametrize("dtype,left,adjoint", [
    (torch.float32, True, False), (torch.float32, True, True), (torch.float64, False, False),
    (torch.float64, False, True), (torch.complex128, False, True), slow(torch.complex128, True, True),
    slow(torch.complex128, True, False), slow(torch.complex128, False, False), slow(torch.float32, False, True)])
def test_lu_solve(dtype, left, adjoint):
    A = crandn(2, 4, 4) + 3 * torch.eye(4) if dtype.is_complex else well(2, 4, 4, dtype=dtype)
    LU, piv = torch.linalg.lu_factor(A)
    B = crandn(4, 3, seed=1) if dtype.is_complex else randn64(4, 3, dtype=dtype, seed=1)  # broadcast over A's batch
    check_lowering(aten.linalg_lu_solve.default, LU, piv, B if left else B.mT, left=left, adjoint=adjoint,
                   **tol(torch.float32 if dtype == torch.float32 else torch.float64))


@pytest.mark.parametrize("shape,unpack_data,unpack_pivots", [
    ((4, 4), True, True), ((2, 5, 3), True, True), ((3, 5), False, True), ((2, 5, 3), True, False),
    slow((3, 5), True, True), slow((4, 4), False, True), slow((3, 5), True, False)])
def test_lu_unpack(shape, unpack_data, unpack_pivots):
    LU, piv = torch.linalg.lu_factor(randn64(*shape, dtype=torch.float64, seed=0))
    check_lowering(aten.lu_unpack.default, LU, piv, unpack_data, unpack_pivots)


def test_lu_unpack_any_pivots():
    # pivots as LAPACK may leave them: any row at or below their own
    check_lowering(aten.lu_unpack.default, randn64(4, 3, seed=0), torch.tensor([4, 4, 4], dtype=torch.int32))


def test_lu_family_device():
    A = randn64(2, 4, 4, seed=0)
    check_device(torch.linalg.lu, A, must_run=["aten.linalg_lu.default"])
    LU, piv = torch.linalg.lu_factor(well(2, 4, 4))
    B = randn64(2, 4, 3, seed=1)
    check_device(torch.linalg.lu_solve, LU, piv, B, must_run=["aten.linalg_lu_solve.default"])
    check_device(torch.lu_solve, B, LU, piv, must_run=["aten.linalg_lu_solve.default"])
    check_device(torch.lu_unpack, LU, piv, must_run=["aten.lu_unpack.default"])
    # the CPU's checks of the pivots, and its refusal of LU without pivoting
    bad = piv.clone()
    bad[0, 1] = 7
    must_raise(torch.linalg.lu_solve, LU, bad, B)
    must_raise(torch.lu_unpack, LU, bad)
    bad[1, 0] = 0
    must_raise(torch.linalg.lu_solve, LU, bad, B)
    must_raise(lambda a: torch.linalg.lu(a, pivot=False), A)


# ---------------------------------------------------------------------------------------------
# linalg_matrix_exp (PyTorch's degree selection by the 1-norm)

def test_matrix_exp():
    # one matrix per degree: 1, 2, 4, 8, 12, 18, 18 with scaling and squaring
    scales = [1e-9, 1e-5, 1e-2, 0.1, 0.3, 1.0, 30.0]
    A = torch.stack([randn64(4, 4, dtype=torch.float64, seed=i) * s for i, s in enumerate(scales)])
    check_lowering(aten.linalg_matrix_exp.default, A, family="matrix_exp")
    check_lowering(aten.linalg_matrix_exp.default, A.float()[:6])
    check_lowering(aten.linalg_matrix_exp.default, randn64(3, 1, 1, seed=0))
    check_lowering(aten.linalg_matrix_exp.default, randn64(2, 0, 0, seed=0))
    check_lowering(aten.linalg_matrix_exp.default, torch.tensor([[float("nan"), 1.0], [0.0, 1.0]]))


@pytest.mark.slow
def test_matrix_exp_complex():
    check_lowering(aten.linalg_matrix_exp.default, crandn(2, 3, 3), family="matrix_exp")
    check_lowering(aten.linalg_matrix_exp.default, 10 * crandn(2, 3, 3), family="matrix_exp")


def test_matrix_exp_bfloat16():
    # computed in float32 and rounded once (the CPU's bfloat16 kernel returns NaN/inf: a PyTorch bug)
    A = randn64(2, 4, 4, seed=0) * 0.5
    got = run_lowering(aten.linalg_matrix_exp.default, A.to(torch.bfloat16))
    assert got.dtype == torch.bfloat16
    want = torch.linalg.matrix_exp(A.to(torch.bfloat16).double())
    close(got.double(), want, **tolerance(want, family="bf16_rounding"))


def test_matrix_exp_device():
    check_device(torch.linalg.matrix_exp, randn64(2, 5, 5, seed=0),
                 must_run=["aten.linalg_matrix_exp.default"])


# ---------------------------------------------------------------------------------------------
# linalg_solve_triangular, triangular_solve

@pytest.mark.parametrize("dtype,upper,left,unit", [
    (torch.float32, True, True, False), (torch.float64, False, True, True), (torch.float32, True, False, True),
    (torch.float64, False, False, False), slow(torch.float64, True, True, False),
    slow(torch.float32, False, True, True)])
def test_solve_triangular(dtype, upper, left, unit):
    A = well(2, 4, 4, dtype=dtype)  # the other triangle (and the diagonal if unit) is never read
    B = randn64(4, 3, dtype=dtype, seed=1) if left else randn64(3, 4, dtype=dtype, seed=1)
    check_lowering(aten.linalg_solve_triangular.default, A, B, upper=upper, left=left, unitriangular=unit,
                   **tol(dtype))


@pytest.mark.parametrize("dtype,upper,transpose,unit", [
    (torch.float32, True, False, False), (torch.float64, False, True, False), (torch.complex128, True, True, True),
    slow(torch.float32, False, True, False), slow(torch.float64, True, True, True),
    slow(torch.complex128, True, False, False)])
def test_triangular_solve(dtype, upper, transpose, unit):
    if dtype.is_complex:
        A, B = crandn(4, 4) + 3 * torch.eye(4), crandn(2, 4, 3, seed=1)
    else:
        A, B = well(4, 4, dtype=dtype), randn64(2, 4, 3, dtype=dtype, seed=1)
    check_lowering(aten.triangular_solve.default, B, A, upper, transpose, unit,
                   **tol(torch.float32 if dtype == torch.float32 else torch.float64))


def test_triangular_device():
    A, B = well(2, 4, 4), randn64(2, 4, 3, seed=1)
    check_device(lambda a, b: torch.linalg.solve_triangular(a, b, upper=False), A, B,
                 must_run=["aten.linalg_solve_triangular.default"])
    check_device(lambda b, a: torch.triangular_solve(b, a, transpose=True), B, A,
                 must_run=["aten.triangular_solve.default"])
