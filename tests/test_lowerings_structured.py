"""Lowerings of reductions, matrix products, norms, shape copies, gathers/scatters and attention,
compared with PyTorch's CPU kernels (tests/lowering_harness.py)."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402

from lowering_harness import check_lowering, run_lowering, tolerance  # noqa: E402

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")


def chk(op, *args, **kwargs):
    """check_lowering: torch's default tolerances for the result's dtype (bfloat16 too: both sides
    compute in float32 and round once), unless a family of tests/tolerances.py is given."""
    check_lowering(op, *args, **kwargs)


def compare_outputs(expected, got, family=None, **tol):
    """Outputs of a lowering (None where masked off) against PyTorch's: same dtype (no cast), shape, values."""
    assert len(expected) == len(got)
    for e, g in zip(expected, got):
        if e is None:
            assert g is None
            continue
        assert g is not None and tuple(g.shape) == tuple(e.shape)
        torch.testing.assert_close(g, e, equal_nan=True, **tolerance(e, family=family, **tol))


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def randint(*shape, dtype=torch.int64, high=10):
    return torch.randint(-high, high, shape).to(dtype)


# ---------------------------------------------------------------------------------------------
# reductions


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int8, torch.bool])
def test_sum(dtype):
    x = randn(4, 5, 6) if dtype.is_floating_point else randint(4, 5, 6).to(dtype)
    chk(aten.sum.default, x)
    chk(aten.sum.dim_IntList, x, [-1, 0], True)
    assert run_lowering(aten.sum.default, x).dtype == aten.sum.default(x).dtype
    if dtype in (torch.float32, torch.int32):
        chk(aten.sum.dim_IntList, x, [1])
        chk(aten.sum.dim_IntList, x, None)
        chk(aten.sum.dim_IntList, x, [])


def test_sum_dtype_and_edge_cases():
    x = randn(3, 7)
    chk(aten.sum.default, x, dtype=torch.float64)
    chk(aten.sum.dim_IntList, x, [1], dtype=torch.bfloat16)
    chk(aten.sum.dim_IntList, randint(3, 7, dtype=torch.int32), [0], dtype=torch.float32)
    chk(aten.sum.dim_IntList, torch.empty(0, 3), [0])
    chk(aten.sum.dim_IntList, torch.tensor(2.5), [0])
    # bf16 accumulates in float32: 1 + 4096 * 2^-8 would stall at 1+... in bf16
    big = torch.full((4096,), 2.0**-8, dtype=torch.bfloat16)
    chk(aten.sum.default, big)
    assert aten.sum.default(big).item() == 16.0  # (the CPU's float32 accumulation, which the lowering matches)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mean(dtype):
    x = randn(4, 5, 6, dtype=dtype)
    chk(aten.mean.default, x)
    chk(aten.mean.dim, x, [1, 2])
    chk(aten.mean.dim, x, [-2], True)
    chk(aten.mean.dim, x, None)
    chk(aten.mean.dim, x, [0], dtype=torch.float64)
    chk(aten.mean.dim, torch.empty(0, 3, dtype=dtype), [0])  # NaN


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int16, torch.bool])
def test_amax_amin_max_min(dtype):
    x = randn(5, 6) if dtype.is_floating_point else randint(5, 6).to(dtype)
    if dtype.is_floating_point:
        x = x.to(dtype)
        x[1, 2] = NAN
    for op in (aten.amax.default, aten.amin.default):
        chk(op, x, [1])
        if dtype == torch.float32:
            chk(op, x, [0, 1], True)
            chk(op, x, [])
            chk(op, x, [-1], True)
    chk(aten.max.default, x)
    chk(aten.min.default, x)


def test_max_min_dim():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [NAN, 2.0, NAN, 5.0], [-INF, -INF, -INF, -INF], [2.0, 1.0, 2.0, 1.0]])
    for op in (aten.max.dim, aten.min.dim):
        chk(op, x, 1)
        chk(op, x, 0)
        chk(op, x, -1, True)
        chk(op, x.bfloat16(), 1)
        chk(op, torch.tensor([[3, 1, 3], [0, 0, -2]], dtype=torch.int32), 1)
        chk(op, torch.tensor([[True, False, True], [False, False, False]]), 1)
        chk(op, torch.tensor(4.0), 0)
        chk(op, randn(3, 4, 5), -2, True)
    vals, idx = run_lowering(aten.max.dim, x, 1)
    assert torch.equal(idx, aten.max.dim(x, 1)[1])  # ties: the first maximum, as the CPU


def test_argmax_argmin():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [NAN, 2.0, NAN, 5.0], [-INF, -INF, 7.0, 7.0]])
    for op in (aten.argmax.default, aten.argmin.default):
        chk(op, x)
        chk(op, x, 1)
        chk(op, x, 0, True)
        chk(op, x, None, True)
        chk(op, x, -1)
        chk(op, randint(4, 6, high=2), 1)
        chk(op, randn(4, 6).bfloat16(), 0)
        chk(op, torch.tensor(1.5), 0)
    assert run_lowering(aten.argmax.default, x).item() == aten.argmax.default(x).item()  # the first NaN


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_var_std(dtype):
    x = randn(4, 5, 6, dtype=dtype) * 3 + 1
    for op in (aten.var.correction, aten.std.correction, aten.var_mean.correction, aten.std_mean.correction):
        chk(op, x, [0, 2], correction=0, keepdim=True)
        chk(op, x, [-1], correction=2)
    chk(aten.var.correction, x)
    chk(aten.std_mean.correction, x, [1])
    chk(aten.var_mean.correction, x, None, correction=1.5)
    chk(aten.var.correction, torch.tensor([1.0]))  # 0 / 0 -> nan
    chk(aten.var.correction, torch.tensor([1.0, 2.0]), correction=3)  # -> inf


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
def test_prod(dtype):
    x = (randn(3, 5) * 0.5 + 1) if dtype.is_floating_point else randint(3, 5, high=3)
    x = x.to(dtype)
    chk(aten.prod.default, x)
    chk(aten.prod.dim_int, x, 1)
    chk(aten.prod.dim_int, x, -2, True)
    chk(aten.prod.dim_int, x, 0, dtype=torch.float64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.uint8, torch.bool])
def test_any_all(dtype):
    x = randint(4, 5, high=2)
    x[0] = 1
    x[1] = 0
    if dtype.is_floating_point:
        x = x.float()
        x[2, 3] = NAN  # NaN is truthy
    x = x.to(dtype)
    for base, dim_op, dims_op in ((aten.any.default, aten.any.dim, aten.any.dims), (aten.all.default, aten.all.dim, aten.all.dims)):
        chk(base, x)
        chk(dim_op, x, 1)
        chk(dims_op, x, [])  # no reduction
        if dtype == torch.float32:
            chk(dim_op, x, -2, True)
            chk(dims_op, x)
            chk(dims_op, x, [0, 1])
            chk(dims_op, x, [1], True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
def test_cumsum_cumprod(dtype):
    x = (randn(4, 7) * 0.5 + 1) if dtype.is_floating_point else randint(4, 7, high=3)
    x = x.to(dtype)
    for op in (aten.cumsum.default, aten.cumprod.default):
        chk(op, x, -2)
        assert run_lowering(op, x, 1).dtype == op(x, 1).dtype
    chk(aten.cumsum.default, x, 1, dtype=torch.float64)
    chk(aten.cumsum.default, torch.tensor(3.0), 0)


def test_logsumexp():
    x = randn(4, 6)
    x[1] = -INF
    x[2, 3] = INF
    chk(aten.logsumexp.default, x, [1])
    chk(aten.logsumexp.default, x, [0, 1], True)
    chk(aten.logsumexp.default, x, [-1], True)
    chk(aten.logsumexp.default, randn(3, 4) * 50, [1])
    chk(aten.logsumexp.default, randn(3, 4).bfloat16(), [1])
    chk(aten.logsumexp.default, randint(3, 4), [1])  # ints give float32


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_log_softmax(dtype):
    x = randn(3, 4, 5, dtype=dtype) * 4
    x[0, 1, 2] = -INF
    for op in (aten._softmax.default, aten._log_softmax.default):
        chk(op, x, 2, False, family="softmax")
        chk(op, x, 0, False, family="softmax")
        chk(op, x, -2, False, family="softmax")
        if dtype == torch.float32:
            chk(op, torch.full((2, 3), -INF), 1, False)  # all -inf: NaN as PyTorch
            chk(op, torch.tensor(2.0), 0, False)


def test_softmax_half_to_float():
    x = randn(3, 5, dtype=torch.bfloat16)
    got = run_lowering(aten._softmax.default, x, 1, True)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch.softmax(x.float(), 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_backward(dtype):
    x = randn(3, 4, 5, dtype=dtype)
    g = randn(3, 4, 5, dtype=dtype)
    for dim in (2, -3):
        out = aten._softmax.default(x, dim, False)
        chk(aten._softmax_backward_data.default, g, out, dim, dtype)
        lout = aten._log_softmax.default(x, dim, False)
        chk(aten._log_softmax_backward_data.default, g, lout, dim, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norms(dtype):
    x = randn(4, 5, 3, dtype=dtype)
    x[0, 0, 0] = 0
    for p in (None, 1, 2, 3, 0.5, 0, INF, -INF) if dtype == torch.float32 else (None, 1, INF):
        chk(aten.norm.ScalarOpt_dim, x, p, [0, 2], True)
        chk(aten.linalg_vector_norm.default, x, 2 if p is None else p, [-1])
    chk(aten.norm.ScalarOpt_dim_dtype, x, 2, [1], False, dtype=torch.float64)
    chk(aten.norm.Scalar, x)
    chk(aten.linalg_vector_norm.default, x, 2, [], True)
    if dtype == torch.float32:
        chk(aten.norm.ScalarOpt_dim, x, 2, [])
        chk(aten.norm.ScalarOpt_dtype, x, 3, dtype=torch.float64)
        chk(aten.linalg_vector_norm.default, x)
        chk(aten.linalg_vector_norm.default, x, 1, None, False, dtype=torch.float64)


# ---------------------------------------------------------------------------------------------
# matrix products


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mm_bmm_mv_dot(dtype):
    a, b = randn(17, 33, dtype=dtype), randn(33, 9, dtype=dtype)
    chk(aten.mm.default, a, b)
    chk(aten.mm.default, a.t().contiguous().t(), b)
    chk(aten.bmm.default, randn(3, 8, 16, dtype=dtype), randn(3, 16, 5, dtype=dtype))
    chk(aten.mv.default, a, randn(33, dtype=dtype))
    chk(aten.dot.default, randn(40, dtype=dtype), randn(40, dtype=dtype))
    chk(aten.vdot.default, randn(40, dtype=dtype), randn(40, dtype=dtype))
    chk(aten.mm.default, randn(0, 4, dtype=dtype), randn(4, 3, dtype=dtype))


def test_mm_float32_is_full_precision():
    a, b = randn(64, 256), randn(256, 32)
    got = run_lowering(aten.mm.default, a, b)
    want = (a.double() @ b.double()).float()
    torch.testing.assert_close(got, want, **tolerance(want, family="matmul"))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_mm_int(dtype):
    chk(aten.mm.default, randint(5, 6, dtype=dtype), randint(6, 4, dtype=dtype))
    chk(aten.bmm.default, randint(2, 5, 6, dtype=dtype), randint(2, 6, 4, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_addmm_family(dtype):
    m1, m2 = randn(6, 7, dtype=dtype), randn(7, 5, dtype=dtype)
    chk(aten.addmm.default, randn(6, 5, dtype=dtype), m1, m2)
    chk(aten.addmm.default, randn(5, dtype=dtype), m1, m2, beta=0.5, alpha=-2)
    chk(aten.addmm.default, randn(1, 5, dtype=dtype), m1, m2, beta=2, alpha=0.25)
    b1, b2 = randn(3, 6, 7, dtype=dtype), randn(3, 7, 5, dtype=dtype)
    chk(aten.baddbmm.default, randn(3, 6, 5, dtype=dtype), b1, b2)
    chk(aten.baddbmm.default, randn(6, 5, dtype=dtype), b1, b2, beta=-1, alpha=3)
    # PyTorch's CPU addbmm adds the batches one addmm at a time, rounding to bfloat16 after each
    chk(aten.addbmm.default, randn(6, 5, dtype=dtype), b1, b2, beta=0.5, alpha=2, family="addbmm")
    chk(aten.addmv.default, randn(6, dtype=dtype), m1, randn(7, dtype=dtype), beta=2, alpha=0.5)
    for gelu in (False, True):
        chk(aten._addmm_activation.default, randn(5, dtype=dtype), m1, m2, use_gelu=gelu)


def test_addmm_zero_beta_alpha_ignore_nan():
    m1, m2 = randn(4, 3), randn(3, 5)
    self_nan = torch.full((4, 5), NAN)
    chk(aten.addmm.default, self_nan, m1, m2, beta=0)
    m1n = m1.clone()
    m1n[0, 0] = NAN
    chk(aten.addmm.default, randn(4, 5), m1n, m2, alpha=0)
    chk(aten.addmv.default, torch.full((4,), NAN), m1, randn(3), beta=0)
    chk(aten.baddbmm.default, torch.full((2, 4, 5), NAN), randn(2, 4, 3), randn(2, 3, 5), beta=0)


def test_addmm_int():
    chk(aten.addmm.default, randint(4, 5), randint(4, 3), randint(3, 5), beta=2, alpha=3)
    # fractional Scalars are truncated to the integer type first (0.6 -> 0, 2.6 -> 2), as ATen does
    chk(aten.addmm.default, randint(4, 5), randint(4, 3), randint(3, 5), beta=1.7, alpha=2.6)
    chk(aten.addmv.default, randint(4), randint(4, 3), randint(3), beta=0.2, alpha=0.6)
    chk(aten.baddbmm.default, randint(2, 4, 5), randint(2, 4, 3), randint(2, 3, 5), beta=1.5, alpha=-2.5)
    chk(aten.addbmm.default, randint(4, 5), randint(2, 4, 3), randint(2, 3, 5), beta=0.9, alpha=3.2)


# ---------------------------------------------------------------------------------------------
# normalization


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_layer_norm(dtype):
    x = randn(3, 4, 6, dtype=dtype) * 2 + 1
    w, b = randn(6, dtype=dtype), randn(6, dtype=dtype)
    chk(aten.native_layer_norm.default, x, [6], w, b, 1e-5)
    chk(aten.native_layer_norm.default, x, [6], None, None, 1e-5)
    chk(aten.native_layer_norm.default, x, [4, 6], randn(4, 6, dtype=dtype), None, 1e-3)
    out, mean, rstd = run_lowering(aten.native_layer_norm.default, x, [4, 6], None, None, 1e-5)
    assert mean.shape == (3, 1, 1) and rstd.shape == (3, 1, 1)
    if dtype == torch.bfloat16:  # float32 weights (autocast's): the CPU's statistics are float32 too
        chk(aten.native_layer_norm.default, x, [6], w.float(), b.float(), 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_layer_norm_backward(dtype, none_ok):
    x = randn(3, 4, 6, dtype=dtype)
    g = randn(3, 4, 6, dtype=dtype)
    w, b = randn(4, 6, dtype=dtype), randn(4, 6, dtype=dtype)
    _, mean, rstd = aten.native_layer_norm.default(x, [4, 6], w, b, 1e-5)
    op = aten.native_layer_norm_backward.default
    for args in (
        (g, x, [4, 6], mean, rstd, w, b, [True, True, True]),
        (g, x, [4, 6], mean, rstd, None, None, [True, False, False]),
        (g, x, [4, 6], mean, rstd, w, b, [False, True, False]),
        (g, x, [4, 6], mean, rstd, w, b, [False, False, True]),
    ):
        compare_outputs(op(*args), none_ok(op, *args))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_group_norm(dtype, none_ok):
    N, C, H, W, G = 2, 6, 3, 4, 3
    x = randn(N, C, H, W, dtype=dtype) * 2 + 0.5
    w, b = randn(C, dtype=dtype), randn(C, dtype=dtype)
    chk(aten.native_group_norm.default, x, w, b, N, C, H * W, G, 1e-5)
    chk(aten.native_group_norm.default, x, None, None, N, C, H * W, G, 1e-5)
    chk(aten.native_group_norm.default, x.reshape(N, C, H * W), w, None, N, C, H * W, 2, 1e-5)
    _, mean, rstd = aten.native_group_norm.default(x, w, b, N, C, H * W, G, 1e-5)
    g = randn(N, C, H, W, dtype=dtype)
    op = aten.native_group_norm_backward.default
    for args in (
        (g, x, mean, rstd, w, N, C, H * W, G, [True, True, True]),
        (g, x, mean, rstd, None, N, C, H * W, G, [True, False, False]),
        (g, x, mean, rstd, w, N, C, H * W, G, [False, True, True]),
    ):
        compare_outputs(op(*args), none_ok(op, *args))


# ---------------------------------------------------------------------------------------------
# shape copies


def test_cat():
    a, b = randn(2, 3), randn(4, 3)
    chk(aten.cat.default, [a, b])
    chk(aten.cat.default, [randn(2, 3), randn(2, 5)], -1)
    chk(aten.cat.default, [a, torch.empty(0), b])  # legacy (0,) tensors are skipped
    chk(aten.cat.default, [torch.empty(0), a])
    chk(aten.cat.default, [a, randint(1, 3)])  # float + int -> float
    chk(aten.cat.default, [randint(2, 3, dtype=torch.int8), torch.ones(1, 3, dtype=torch.bool)])
    chk(aten.cat.default, [randint(2, 3, dtype=torch.uint8), randint(2, 3, dtype=torch.int8)], 1)
    chk(aten.cat.default, [a.bfloat16(), b.bfloat16()])
    chk(aten.cat.default, [a])
    chk(aten.cat.default, [torch.empty(0), torch.empty(0)])
    chk(aten.cat.default, [randn(2, 0, 3), randn(2, 4, 3)], 1)
    assert run_lowering(aten.cat.default, [a, randint(1, 3)]).dtype == torch.float32


def test_stack():
    chk(aten.stack.default, [randn(2, 3), randn(2, 3), randn(2, 3)])
    chk(aten.stack.default, [randn(2, 3), randn(2, 3)], -1)
    chk(aten.stack.default, [randn(2, 3), randn(2, 3)], 1)
    chk(aten.stack.default, [randint(2, 3), randn(2, 3).bfloat16()], 2)


def test_constant_pad_nd():
    x = randn(2, 3, 4)
    chk(aten.constant_pad_nd.default, x, [1, 2])
    chk(aten.constant_pad_nd.default, x, [1, 2, 0, 3], 1.5)
    chk(aten.constant_pad_nd.default, x, [-1, 2, 1, -2, 1, 1], -7.0)
    chk(aten.constant_pad_nd.default, randint(3, 3), [2, 2], 9)
    chk(aten.constant_pad_nd.default, torch.ones(2, 2, dtype=torch.bool), [1, 0])
    chk(aten.constant_pad_nd.default, x.bfloat16(), [0, 1], 0.5)


def test_repeat_flip_roll():
    x = randn(2, 3)
    chk(aten.repeat.default, x, [2, 3])
    chk(aten.repeat.default, x, [2, 1, 2])
    chk(aten.repeat.default, x, [0, 2])
    chk(aten.repeat.default, torch.tensor(3), [4])
    y = randn(2, 3, 4)
    chk(aten.flip.default, y, [0])
    chk(aten.flip.default, y, [-1, 1])
    chk(aten.flip.default, y, [])
    chk(aten.roll.default, y, [1])
    chk(aten.roll.default, y, [-2], [1])
    chk(aten.roll.default, y, [5, -1], [-1, 0])
    chk(aten.roll.default, randint(3, 4), [7], [1])


def test_tril_triu():
    for x, d in ((randn(4, 6), 0), (randn(2, 5, 3), 1), (torch.ones(3, 3, dtype=torch.bool), -2), (randint(4, 4), 10)):
        chk(aten.tril.default, x, d)
        chk(aten.triu.default, x, -d)


def test_index_select():
    x = randn(5, 4, 3)
    chk(aten.index_select.default, x, 0, torch.tensor([4, 0, 0, 2]))
    chk(aten.index_select.default, x, -1, torch.tensor([2, 1], dtype=torch.int32))
    chk(aten.index_select.default, x, 1, torch.tensor(3))
    chk(aten.index_select.default, x, 1, torch.tensor([], dtype=torch.int64))
    chk(aten.index_select.default, torch.tensor(2.0), 0, torch.tensor([0]))
    chk(aten.index_select.default, randint(5, 2).bfloat16(), 0, torch.tensor([1, 1]))


# ---------------------------------------------------------------------------------------------
# gathers and scatters


def test_embedding():
    w = randn(10, 4)
    idx = torch.tensor([[0, 3, 9], [3, 3, 1]])
    chk(aten.embedding.default, w, idx)
    chk(aten.embedding.default, w, idx, 3)
    chk(aten.embedding.default, w.bfloat16(), idx.int())
    chk(aten.embedding.default, w, torch.tensor(7))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding_dense_backward(dtype):
    idx = torch.tensor([[0, 3, 9, 3], [3, 3, 1, 0]])
    g = randn(2, 4, 5, dtype=dtype)
    for padding_idx in (-1, 3):
        for freq in (False, True):
            chk(aten.embedding_dense_backward.default, g, idx, 10, padding_idx, freq, family="accumulate_16bit")


def test_index_tensor():
    x = randn(5, 6, 7)
    i = torch.tensor([4, -1, 0])
    j = torch.tensor([[1], [2]])
    chk(aten.index.Tensor, x, [i])
    chk(aten.index.Tensor, x, [i, torch.tensor([0, 5, 5])])
    chk(aten.index.Tensor, x, [None, i])
    chk(aten.index.Tensor, x, [None, None, torch.tensor([6, 0], dtype=torch.int32)])
    chk(aten.index.Tensor, x, [j, i])  # broadcast index tensors
    chk(aten.index.Tensor, x, [i, None, torch.tensor([1, 2, 3])])  # advanced dims go first
    chk(aten.index.Tensor, x, [None, j, i])
    chk(aten.index.Tensor, randint(4, 4), [torch.tensor(2)])
    chk(aten.index.Tensor, x.bfloat16(), [torch.tensor([[0, 1], [2, 3]])])
    with pytest.raises(NotImplementedError, match="mask"):
        run_lowering(aten.index.Tensor, x, [torch.tensor([True, False, True, False, True])])


def test_index_put():
    x = randn(5, 6)
    i = torch.tensor([4, 0, 2])
    chk(aten.index_put.default, x, [i], randn(3, 6))
    chk(aten.index_put.default, x, [i], randn(6))  # broadcast values
    chk(aten.index_put.default, x, [i, torch.tensor([1, -1, 3])], randn(3))
    chk(aten.index_put.default, x, [None, torch.tensor([5, 0])], randn(5, 2))
    chk(aten.index_put.default, x, [None, torch.tensor([5, 0])], torch.tensor(3.0))
    dup = torch.tensor([1, 1, 3, 1])
    chk(aten.index_put.default, x, [dup], randn(4, 6), True)
    chk(aten.index_put.default, x, [dup, torch.tensor([0, 0, 2, 0])], randn(4), True)
    chk(aten.index_put.default, x.bfloat16(), [dup], randn(4, 6).bfloat16(), True, family="accumulate_16bit")
    chk(aten.index_put.default, randint(5, 6), [i], randint(3, 6), True)
    chk(aten.index_put.default, randn(3, 4, 5), [torch.tensor([[0], [2]]), None, torch.tensor([1, 4])], randn(2, 2, 4))


def test_index_put_bool_mask():
    x = randn(4, 5)
    m = x > 0
    k = int(m.sum())
    chk(aten.index_put.default, x, [m], torch.tensor(0.0))
    chk(aten.index_put.default, x, [m], torch.tensor(2.0), True)
    chk(aten.index_put.default, x, [m], randn(k))  # one value per True element
    chk(aten.index_put.default, x, [m], randn(k), True)
    rows = torch.tensor([True, False, True, True])
    chk(aten.index_put.default, x, [rows], randn(5))
    chk(aten.index_put.default, x, [rows], randn(3, 5))
    cols = torch.tensor([False, True, True, False, True])
    chk(aten.index_put.default, x, [None, cols], randn(4, 1))
    chk(aten.index_put.default, x, [None, cols], randn(4, 3), True)
    y = randn(2, 3, 4)
    chk(aten.index_put.default, y, [None, y[0] > 0], torch.tensor(-1.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_gather(dtype):
    x = (randn(4, 5, 6) * 10).to(dtype)
    chk(aten.gather.default, x, 1, torch.randint(0, 5, (4, 3, 6)))
    chk(aten.gather.default, x, -1, torch.randint(0, 6, (2, 5, 9)))  # index smaller in other dims
    chk(aten.gather.default, x, 0, torch.randint(0, 4, (1, 2, 3)))
    chk(aten.gather.default, x, 0, torch.zeros(0, 5, 6, dtype=torch.int64))
    chk(aten.gather.default, torch.tensor(3.0), 0, torch.tensor(0))


def _perm_index(shape, dim, size):
    """An index without duplicates along `dim` (so scatter's result is deterministic)."""
    n = shape[dim]
    idx = torch.stack([torch.randperm(size)[:n] for _ in range(math.prod(shape) // n)])
    return idx.reshape(*[s for i, s in enumerate(shape) if i != dim], n).movedim(-1, dim).contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_scatter(dtype):
    x = (randn(4, 6, 5) * 10).to(dtype)
    idx = _perm_index((4, 3, 5), 1, 6)
    src = (randn(4, 4, 5) * 10).to(dtype)  # larger than index: cut
    chk(aten.scatter.src, x, 1, idx, src)
    chk(aten.scatter.value, x, 1, idx, 2)
    dup = torch.randint(0, 6, (4, 7, 5))
    src2 = (randn(4, 7, 5) * 10).to(dtype)
    chk(aten.scatter_add.default, x, 1, dup, src2)
    small = (randn(4, 7, 5) * 0.5 + 1).to(dtype) if dtype.is_floating_point else randint(4, 7, 5, high=2).to(dtype)
    chk(aten.scatter.reduce, x, 1, dup, small, reduce="multiply")
    if dtype == torch.float32:
        chk(aten.scatter.src, x, -1, _perm_index((2, 4, 3), 2, 5), src)
        chk(aten.scatter.src, x, 0, torch.zeros(0, 6, 5, dtype=torch.int64), src)
        chk(aten.scatter.reduce, x, 1, dup, src2, reduce="add")
        chk(aten.scatter.value_reduce, x, 1, dup, 3, reduce="add")
        chk(aten.scatter.value_reduce, x, 1, dup, 2, reduce="multiply")
        chk(aten.scatter.src, torch.tensor(1.0), 0, torch.tensor(0), torch.tensor(5.0))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce(reduce):
    idx = torch.randint(0, 6, (4, 9))
    idx[:, 0] = 2
    idx[idx == 5] = 4  # column 5 is never hit: it keeps self in every mode
    for dtype, include_self in (
        (torch.float32, True), (torch.float32, False), (torch.bfloat16, False), (torch.int64, False), (torch.int64, True)
    ):
        x = (randn(4, 6) * 5).to(dtype)
        src = (randn(4, 9) * 5).to(dtype)
        if reduce == "prod":
            src = (randn(4, 9) * 0.5 + 1).to(dtype) if dtype.is_floating_point else randint(4, 9, high=3)
        chk(aten.scatter_reduce.two, x, 1, idx, src, reduce, include_self=include_self)
    chk(aten.scatter_reduce.two, x.float(), 0, idx[:3, :6] % 4, src.float(), reduce)


def test_scatter_reduce_nan():
    x = torch.tensor([1.0, 2.0, 3.0])
    idx = torch.tensor([0, 0, 2])
    src = torch.tensor([NAN, 5.0, -1.0])
    for reduce in ("amax", "amin"):
        chk(aten.scatter_reduce.two, x, 0, idx, src, reduce)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_index_add(dtype):
    x = (randn(5, 4, 3) * 5).to(dtype)
    idx = torch.tensor([0, 4, 0, 2])
    chk(aten.index_add.default, x, 0, idx, (randn(4, 4, 3) * 5).to(dtype), family="accumulate_16bit")
    chk(aten.index_add.default, x, -2, torch.tensor([3, 3]), (randn(5, 2, 3) * 5).to(dtype), alpha=2,
        family="accumulate_16bit")
    chk(aten.index_add.default, x, 2, torch.tensor([1], dtype=torch.int32), (randn(5, 4, 1) * 5).to(dtype))
    chk(aten.index_add.default, torch.tensor(1.0).to(dtype), 0, torch.tensor([0]), torch.tensor(2.0).to(dtype))


# ---------------------------------------------------------------------------------------------
# attention

SDPA = aten._scaled_dot_product_fused_attention_overrideable.default
SDPA_BWD = aten._scaled_dot_product_fused_attention_overrideable_backward.default


def _reference_lse(q, k, bias, is_causal, scale, enable_gqa=False):
    q, k = q.double(), k.double()
    if enable_gqa and k.shape[-3] != q.shape[-3]:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
    s = q @ k.transpose(-2, -1) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if bias is not None:
        s = s.masked_fill(~bias, -INF) if bias.dtype == torch.bool else s + bias.double()
    if is_causal:
        s = s.masked_fill(~torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).tril(), -INF)
    lse = torch.logsumexp(s, -1)
    return lse.float() if lse.dim() == 3 else lse.float()[None]


SDPA_CASES = [
    # (B, Hq, Hk, L, S, E, Ev, bias, is_causal, scale)
    (2, 3, 3, 5, 7, 8, 8, None, False, None),
    (1, 2, 2, 6, 4, 4, 5, "float", False, 0.3),
    (2, 2, 2, 5, 7, 8, 8, "bool", False, None),
    (2, 4, 2, 6, 6, 8, 8, None, True, None),  # GQA
    (1, 2, 2, 7, 5, 8, 8, "float2d", False, None),
    (2, 2, 2, 7, 5, 8, 8, None, True, 0.5),  # causal, L > S (top-left aligned)
    (1, 2, 2, 3, 6, 8, 8, None, True, None),  # causal, L < S
    (None, 2, 2, 5, 5, 4, 4, None, False, None),  # 3-d inputs
]


def _sdpa_inputs(case, dtype=torch.float32):
    B, Hq, Hk, L, S, E, Ev, bias, causal, scale = case
    lead = () if B is None else (B,)
    q, k, v = randn(*lead, Hq, L, E, dtype=dtype), randn(*lead, Hk, S, E, dtype=dtype), randn(*lead, Hk, S, Ev, dtype=dtype)
    if bias == "float":
        bias = randn(*lead, Hq, L, S, dtype=dtype)
    elif bias == "float2d":
        bias = randn(L, S, dtype=dtype)
    elif bias == "bool":
        bias = torch.rand(L, S) > 0.3
        bias[1] = False  # a fully masked row gives 0 (PyTorch's safe softmax)
    return q, k, v, bias, causal, scale


def _math_mask(bias, dtype=None):
    """The float mask scaled_dot_product_attention hands the fused kernels (and math) for a bool one."""
    if bias is None or bias.dtype != torch.bool:
        return bias
    return torch.zeros(bias.shape, dtype=dtype).masked_fill(~bias, -INF)


@pytest.mark.parametrize(
    "case, dtype",
    [(c, torch.float32) for c in range(len(SDPA_CASES))] + [(1, torch.bfloat16), (3, torch.bfloat16)],
)
def test_sdpa_overrideable_forward(case, dtype, none_ok):
    q, k, v, bias, causal, scale = _sdpa_inputs(SDPA_CASES[case], dtype)
    gqa = k.shape[-3] != q.shape[-3]
    expected = aten._scaled_dot_product_attention_math(
        q, k, v, _math_mask(bias, dtype), 0.0, causal, scale=scale, enable_gqa=gqa
    )[0]
    got = none_ok(SDPA, q, k, v, bias, 0.0, causal, False, scale=scale)
    out, lse, cum_q, cum_k, max_q, max_k, seed, offset, debug = got
    assert out.dtype == dtype and out.shape == expected.shape
    torch.testing.assert_close(out, expected)
    assert lse.dtype == torch.float32
    torch.testing.assert_close(lse, _reference_lse(q, k, bias, causal, scale, gqa))
    assert cum_q is None and cum_k is None and debug is None
    assert int(max_q) == q.shape[-2] and int(max_k) == k.shape[-2]
    assert seed.dtype == torch.int64 and offset.dtype == torch.int64


def test_sdpa_overrideable_dropout_refused():
    q = randn(1, 1, 2, 4)
    with pytest.raises(NotImplementedError, match="dropout"):
        run_lowering(SDPA, q, q, q, None, 0.1)


@pytest.mark.parametrize("case", range(len(SDPA_CASES)))
def test_sdpa_overrideable_backward(case, none_ok):
    q, k, v, bias, causal, scale = _sdpa_inputs(SDPA_CASES[case])
    gqa = k.shape[-3] != q.shape[-3]
    float_bias = bias is not None and bias.dtype != torch.bool
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    b_leaf = bias.double().requires_grad_() if float_bias else _math_mask(bias, torch.float64)
    out_ref = aten._scaled_dot_product_attention_math(*leaves, b_leaf, 0.0, causal, scale=scale, enable_gqa=gqa)[0]
    g = randn(*out_ref.shape)
    out_ref.backward(g.double())
    fwd = none_ok(SDPA, q, k, v, bias, 0.0, causal, False, scale=scale)
    out, lse = fwd[0], fwd[1]
    mask = [True, True, True, float_bias]
    grads = none_ok(
        SDPA_BWD, g, q, k, v, bias, mask, out, lse, None, None, fwd[4].item(), fwd[5].item(),
        0.0, causal, fwd[6], fwd[7], scale=scale,
    )
    expected = [t.grad.float() for t in leaves] + [b_leaf.grad.float() if float_bias else None]
    compare_outputs(expected, grads)
    # masked-off gradients are not computed
    part = none_ok(
        SDPA_BWD, g, q, k, v, bias, [False, True, False, False], out, lse, None, None,
        fwd[4].item(), fwd[5].item(), 0.0, causal, fwd[6], fwd[7], scale=scale,
    )
    assert part[0] is None and part[2] is None and part[3] is None
    torch.testing.assert_close(part[1], expected[1])


def test_sdpa_overrideable_backward_bf16(none_ok):
    q, k, v, bias, causal, scale = _sdpa_inputs(SDPA_CASES[1], torch.bfloat16)
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    b_leaf = bias.double().requires_grad_()
    out_ref = aten._scaled_dot_product_attention_math(*leaves, b_leaf, 0.0, causal, scale=scale)[0]
    g = randn(*out_ref.shape, dtype=torch.bfloat16)
    out_ref.backward(g.double())
    fwd = none_ok(SDPA, q, k, v, bias, 0.0, causal, False, scale=scale)
    grads = none_ok(
        SDPA_BWD, g, q, k, v, bias, [True] * 4, fwd[0], fwd[1], None, None, fwd[4].item(), fwd[5].item(),
        0.0, causal, fwd[6], fwd[7], scale=scale,
    )
    for r, t in zip(grads, leaves + [b_leaf]):
        want = t.grad.to(torch.bfloat16)  # the exact gradient, rounded once
        torch.testing.assert_close(r, want, **tolerance(want, family="attention_bf16"))
