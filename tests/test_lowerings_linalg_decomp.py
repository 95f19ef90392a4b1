"""Lowerings of matrix decompositions (torch_neuronx/ops/linalg_decomp.py): each compared with
PyTorch's CPU kernel on its own (tests/lowering_harness.py), and the user-level torch.linalg calls
that reach it run on the neuron device vs the CPU (tests/device_harness.py).

Singular vectors and eigenvectors are unique only up to sign (phase): those are checked through
invariants (reconstruction, orthogonality); values (S, eigenvalues, det, inverse...) directly."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402

from device_harness import check_device  # noqa: E402
from lowering_harness import check_lowering, run_lowering  # noqa: E402

aten = torch.ops.aten
DTYPES = [torch.float32, torch.float64]


def tol(dtype):
    return dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=1e-10, rtol=1e-10)


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def spd(*shape, dtype=torch.float32, seed=0):
    a = randn(*shape, dtype=torch.float64, seed=seed)
    n = shape[-1]
    return (a @ a.mT + n * torch.eye(n, dtype=torch.float64)).to(dtype)


def well(*shape, dtype=torch.float32, seed=0):
    """A well-conditioned square matrix (no pivot ties)."""
    n = shape[-1]
    return (randn(*shape, dtype=torch.float64, seed=seed) + 3 * torch.eye(n, dtype=torch.float64)).to(dtype)


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
    A = randn(*shape, dtype=dtype)
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
    check_lowering(aten._linalg_svd.default, randn(2, 5, 3, dtype=dtype), False, False, **tol(dtype))


def test_svd_device():
    A = randn(5, 3)
    f = lambda a: torch.linalg.svdvals(a)  # noqa: E731
    check_device(f, A, atol=1e-4, rtol=1e-4, must_run=["aten._linalg_svd.default"])
    g = lambda a: (lambda u, s, vh: (s, u @ torch.diag(s) @ vh))(*torch.linalg.svd(a, full_matrices=False))  # noqa: E731
    check_device(g, A, atol=1e-4, rtol=1e-4, must_run=["aten._linalg_svd.default"])


# ---------------------------------------------------------------------------------------------
# _linalg_eigh

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh(dtype, uplo):
    A = randn(2, 4, 4, dtype=dtype)
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
    check_device(lambda a: torch.linalg.eigvalsh(a), S, atol=1e-4, rtol=1e-4,
                 must_run=["aten._linalg_eigh.default"])
    f = lambda a: (lambda w, v: (w, v @ torch.diag(w) @ v.mT))(*torch.linalg.eigh(a, UPLO="U"))  # noqa: E731
    check_device(f, S, atol=1e-4, rtol=1e-4, must_run=["aten._linalg_eigh.default"])


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
    check_device(torch.linalg.inv, well(2, 3, 3), atol=1e-4, rtol=1e-4, must_run=["aten.linalg_inv_ex.default"])


# ---------------------------------------------------------------------------------------------
# linalg_qr

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr(dtype, shape, mode):
    A = randn(*shape, dtype=dtype)
    Q, R = run_lowering(aten.linalg_qr.default, A, mode)
    eQ, eR = aten.linalg_qr.default(A, mode)
    assert Q.shape == eQ.shape and R.shape == eR.shape
    close(torch.triu(R), R)
    close(R.abs(), eR.abs(), **tol(dtype))  # rows of R are unique up to sign
    if mode != "r":
        close(Q @ R, A, **tol(dtype))
        close(Q.mT @ Q, eye_like(Q, Q.shape[-1]), **tol(dtype))


def test_qr_device():
    A = randn(5, 3)
    f = lambda a: (lambda q, r: (q @ r, r.abs()))(*torch.linalg.qr(a))  # noqa: E731
    check_device(f, A, atol=1e-4, rtol=1e-4, must_run=["aten.linalg_qr.default"])


# ---------------------------------------------------------------------------------------------
# _linalg_solve_ex

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ashape,bshape,left", [
    ((3, 3), (3,), True), ((3, 3), (3, 2), True), ((2, 3, 3), (2, 3), True),
    ((2, 3, 3), (3, 4), True), ((3, 3), (2, 3), False), ((2, 3, 3), (1, 4, 3), False),
])
def test_solve(dtype, ashape, bshape, left):
    check_lowering(aten._linalg_solve_ex.default, well(*ashape, dtype=dtype), randn(*bshape, dtype=dtype, seed=1),
                   left=left, **tol(dtype))


def test_solve_device():
    A, B = well(3, 3), randn(3, 2, seed=1)
    check_device(torch.linalg.solve, A, B, atol=1e-4, rtol=1e-4, must_run=["aten._linalg_solve_ex.default"])
    check_device(lambda a, b: torch.linalg.solve(a, b, left=False), A, B.mT, atol=1e-4, rtol=1e-4,
                 must_run=["aten._linalg_solve_ex.default"])


# ---------------------------------------------------------------------------------------------
# linalg_cholesky_ex

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(dtype, upper):
    S = spd(2, 4, 4, dtype=dtype)
    garb = S + (torch.triu(randn(4, 4, dtype=dtype), 1) if not upper else torch.tril(randn(4, 4, dtype=dtype), -1))
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
    check_device(torch.linalg.cholesky, S, atol=1e-4, rtol=1e-4, must_run=["aten.linalg_cholesky_ex.default"])
    check_device(lambda a: torch.linalg.cholesky(a, upper=True), S, atol=1e-4, rtol=1e-4,
                 must_run=["aten.linalg_cholesky_ex.default"])


# ---------------------------------------------------------------------------------------------
# _linalg_det / _linalg_slogdet

DET_INPUTS = {
    "random": lambda d: randn(2, 4, 4, dtype=d),
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
    A = randn(2, 3, 3)
    check_device(torch.linalg.det, A, atol=1e-4, rtol=1e-4, must_run=["aten._linalg_det.default"])
    check_device(torch.linalg.slogdet, A, atol=1e-4, rtol=1e-4, must_run=["aten._linalg_slogdet.default"])


# ---------------------------------------------------------------------------------------------
# linalg_lu_factor_ex

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 4), (2, 5, 3), (3, 5)])
def test_lu_factor(dtype, shape):
    check_lowering(aten.linalg_lu_factor_ex.default, randn(*shape, dtype=dtype), **tol(dtype))


def test_lu_factor_singular_info():
    A = torch.tensor([[1.0, 2.0], [2.0, 4.0]])
    check_lowering(aten.linalg_lu_factor_ex.default, A)


def test_lu_factor_device():
    check_device(torch.linalg.lu_factor, randn(2, 4, 4), atol=1e-4, rtol=1e-4,
                 must_run=["aten.linalg_lu_factor_ex.default"])


# ---------------------------------------------------------------------------------------------
# complex inputs (jax takes them as is) and the errors of the user-level calls

def test_complex():
    tc = dict(atol=1e-4, rtol=1e-4)
    c = randn(3, 3, dtype=torch.float64).to(torch.complex64) + 1j * randn(3, 3, seed=2).to(torch.complex64)
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
