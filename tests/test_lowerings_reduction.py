"""Lowerings of ops/reduction.py (sum/mean/var/prod/max/argmax/any/cumsum/logsumexp/softmax/norms,
logcumsumexp, segment_reduce, hash_tensor):
each compared with PyTorch's CPU kernel as a pure jax function (tests/lowering_harness.py) and,
where the op reaches eager, the user-level call run on the neuron device vs the CPU with no CPU
fallback (tests/device_harness.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402

from device_harness import check_device  # noqa: E402
from helpers import randint, randn  # noqa: E402
from lowering_harness import check_lowering, chk, dev, run_lowering  # noqa: E402

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")


# ---------------------------------------------------------------------------------------------
# reductions


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int8, torch.bool])
def test_sum(dtype):
    x = randn(4, 5, 6) if dtype.is_floating_point else randint(4, 5, 6, lo=-10, hi=10, dtype=torch.int64).to(dtype)
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
    chk(aten.sum.dim_IntList, randint(3, 7, dtype=torch.int32, lo=-10, hi=10), [0], dtype=torch.float32)
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
    x = randn(5, 6) if dtype.is_floating_point else randint(5, 6, lo=-10, hi=10, dtype=torch.int64).to(dtype)
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
        chk(op, randint(4, 6, lo=-2, hi=2, dtype=torch.int64), 1)
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
    x = (randn(3, 5) * 0.5 + 1) if dtype.is_floating_point else randint(3, 5, lo=-3, hi=3, dtype=torch.int64)
    x = x.to(dtype)
    chk(aten.prod.default, x)
    chk(aten.prod.dim_int, x, 1)
    chk(aten.prod.dim_int, x, -2, True)
    chk(aten.prod.dim_int, x, 0, dtype=torch.float64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.uint8, torch.bool])
def test_any_all(dtype):
    x = randint(4, 5, lo=-2, hi=2, dtype=torch.int64)
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
    x = (randn(4, 7) * 0.5 + 1) if dtype.is_floating_point else randint(4, 7, lo=-3, hi=3, dtype=torch.int64)
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
    chk(aten.logsumexp.default, randint(3, 4, lo=-10, hi=10, dtype=torch.int64), [1])  # ints give float32


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logcumsumexp(dtype):
    x = (torch.randn(5, 30) * 4).to(dtype)
    chk(aten.logcumsumexp.default, x, 1)
    chk(aten.logcumsumexp.default, x, 0)
    chk(aten.logcumsumexp.default, torch.tensor([-INF, -INF, 1.0, INF, 2.0, NAN, 3.0]).to(dtype), 0)
    dev(lambda t: torch.logcumsumexp(t, 1), x, must_run="aten.logcumsumexp.default")


def test_logcumsumexp_complex():
    # sequential like ATen: the imaginary part's branch (not reduced mod 2*pi) depends on the order
    x = torch.randn(3, 20, dtype=torch.complex64) * 3
    chk(aten.logcumsumexp.default, x, 1)
    c = torch.tensor([complex(-INF, 1), complex(1, 2), complex(INF, 0.5), complex(INF, 1), complex(2, NAN), complex(1, 1)])
    chk(aten.logcumsumexp.default, c, 0)
    dev(lambda t: torch.logcumsumexp(t, 0), x, must_run="aten.logcumsumexp.default")


# ---------------------------------------------------------------------------------------------
# segment_reduce


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("reduce", ["max", "mean", "min", "sum", "prod"])
def test_segment_reduce(dtype, reduce):
    # bfloat16: the CPU folds each segment in bfloat16, the lowering in float32
    t = dict(family="accumulate_16bit")
    for initial in (None, 2.5):
        x = torch.tensor([1.0, NAN, 3.0, -2.0, 5.0]).to(dtype)
        check_lowering(aten.segment_reduce.default, x, reduce, lengths=torch.tensor([0, 1, 2, 2]), initial=initial, **t)
        check_lowering(aten.segment_reduce.default, x, reduce, offsets=torch.tensor([0, 0, 1, 3, 5]), initial=initial,
                       **t)
        x = torch.randn(2, 6, 3).to(dtype)
        check_lowering(aten.segment_reduce.default, x, reduce, lengths=torch.tensor([[2, 0, 4], [1, 2, 3]]), axis=1,
                       initial=initial, **t)
        # offsets that skip the first and last elements of a row
        check_lowering(aten.segment_reduce.default, x, reduce, offsets=torch.tensor([[0, 2, 2, 6], [1, 2, 4, 5]]),
                       axis=1, initial=initial, unsafe=True, **t)
        check_lowering(aten.segment_reduce.default, torch.randn(6, 2).to(dtype), reduce,
                       lengths=torch.tensor([2, 0, 4], dtype=torch.int32), initial=initial, **t)


def test_device_segment_reduce():
    x, lengths = torch.tensor([1.0, 2.0, 3.0, -2.0, 5.0]), torch.tensor([0, 1, 2, 2])
    check_device(lambda x, l: torch.segment_reduce(x, "max", lengths=l, initial=1), x, lengths,
                 must_run=["aten.segment_reduce.default"])
    check_device(lambda x, o: torch.segment_reduce(x, "mean", offsets=o), x, torch.tensor([0, 0, 1, 3, 5]),
                 must_run=["aten.segment_reduce.default"])
    d = x.to("neuron")
    with pytest.raises(RuntimeError, match="sum to data.size"):
        torch.segment_reduce(d, "sum", lengths=torch.tensor([0, 1, 2, 3], device="neuron"))
    with pytest.raises(RuntimeError, match="negative"):
        torch.segment_reduce(d, "sum", lengths=torch.tensor([-1, 4, 2], device="neuron"))


# ---------------------------------------------------------------------------------------------
# hash_tensor


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int8, torch.int64, torch.uint8,
                                   torch.bool])
def test_hash_tensor(dtype):
    x = (torch.randn(3, 4, 5) * 100).to(dtype)
    for dim in ([], [0], [1, 2], [-1]):
        for keepdim in (False, True):
            check_lowering(aten.hash_tensor.default, x, dim, keepdim=keepdim)
    check_lowering(aten.hash_tensor.default, torch.tensor(3.0).to(dtype), [], keepdim=True)


def test_hash_tensor_special_values():
    # subnormals too (XLA's CPU conversion to float64 would flush them to zero)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        check_lowering(aten.hash_tensor.default, torch.tensor([-0.0, NAN, INF, -INF, 1e-40, -3e-39, 6e-8]).to(dtype))


def test_device_hash_tensor():
    check_device(lambda x: torch.hash_tensor(x, 1), torch.randn(3, 4), must_run=["aten.hash_tensor.default"])
    check_device(lambda x: torch.hash_tensor(x), torch.tensor([-1, 7], dtype=torch.int32),
                 must_run=["aten.hash_tensor.default"])
