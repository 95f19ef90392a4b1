"""Lowerings of ops/sorting.py (sort, topk, kthvalue/median/nanmedian/mode, cummax/cummin,
searchsorted/bucketize, randperm): each compared with PyTorch's CPU kernel as a pure jax function
(tests/lowering_harness.py) and, where the op reaches eager, the user-level call run on the neuron
device vs the CPU with no CPU fallback (tests/device_harness.py)."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402

from device_harness import check_device  # noqa: E402
from lowering_harness import check_lowering, run_lowering  # noqa: E402
from tolerances import EXACT  # noqa: E402

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")


def exact(op, *args, **kwargs):
    """check_lowering with PyTorch's default tolerances: exact for indices and counts."""
    check_lowering(op, *args, **kwargs)


def unique_values(*shape, dtype=torch.float32):
    """Distinct values (so every order statistic has one right index), exactly representable."""
    n = math.prod(shape)
    return (torch.randperm(n) - n // 2).reshape(shape).to(dtype)


def ties(*shape, dtype=torch.float32, high=4):
    return torch.randint(0, high, shape).to(dtype)


def same(got, want):
    """Bit-exact, same dtype (no cast)."""
    assert got.shape == want.shape, (got.shape, want.shape)
    torch.testing.assert_close(got, want, **EXACT, equal_nan=True)


def dev_exact(fn, *args, must_run, **kwargs):
    return check_device(fn, *args, must_run=[must_run], **kwargs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.uint8, torch.int8])
def test_sort(dtype):
    if dtype in (torch.uint8, torch.int8):
        x = (torch.randperm(200) - (0 if dtype == torch.uint8 else 100)).reshape(2, 100).to(dtype)
    else:
        x = unique_values(6, 40, dtype=dtype)
    exact(aten.sort.default, x)
    exact(aten.sort.default, x, 0, True)
    exact(aten.sort.stable, x, stable=True, dim=-1, descending=True)


def test_sort_ties_nan_and_signed_zero_are_stable_like_pytorch():
    x = torch.tensor([1.0, NAN, -0.0, 0.0, -INF, NAN, 2.0, -NAN, INF, 1.0, 0.0, -0.0])
    for descending in (False, True):
        exact(aten.sort.stable, x, stable=True, dim=0, descending=descending)
        # sort.default: PyTorch's order among equal values is unspecified; ours is the stable one
        want = aten.sort.stable(x, stable=True, dim=0, descending=descending)
        got = run_lowering(aten.sort.default, x, 0, descending)
        same(got[0], want[0])
        same(got[1], want[1])
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.uint8):
        t = ties(4, 50, dtype=dtype, high=2 if dtype == torch.bool else 4)
        exact(aten.sort.stable, t, stable=True, dim=-1, descending=False)
        exact(aten.sort.stable, t, stable=True, dim=0, descending=True)


def test_sort_edge_shapes():
    exact(aten.sort.default, torch.tensor(3.0))
    exact(aten.sort.default, torch.zeros(3, 0))
    exact(aten.sort.default, torch.randn(5, 1), 1)
    exact(aten.sort.stable, torch.tensor([3, -1, 2 ** 62, -(2 ** 63)], dtype=torch.int64), stable=True)
    x = torch.tensor([2 ** 64 - 1, 0, 5, 2 ** 63], dtype=torch.uint64)
    exact(aten.sort.default, x, 0, True)  # distinct values: the CPU's indices are the only right ones


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_sort_device(dtype):
    x = unique_values(8, 33).to(dtype)
    dev_exact(lambda t: torch.sort(t, dim=0, descending=True), x, must_run="aten.sort.default")
    t = ties(5, 40, dtype=dtype)
    dev_exact(lambda t: torch.sort(t, stable=True), t, must_run="aten.sort.stable")
    dev_exact(lambda t: torch.argsort(t, dim=0, stable=True, descending=True), t, must_run="aten.sort.stable")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, pytest.param(torch.int64, marks=pytest.mark.slow)])
def test_topk(dtype):
    x = unique_values(6, 50, dtype=dtype)
    for k, dim, largest in [(5, -1, True), (6, 0, False), (50, 1, False)]:
        exact(aten.topk.default, x, k, dim, largest, True)
    exact(aten.topk.default, x, 0)
    exact(aten.topk.default, torch.tensor(2.0).to(dtype), 1)


def test_topk_nan_inf_and_ties():
    x = torch.tensor([[1.0, NAN, 3.0, INF, -INF, NAN, -0.0, 2.0]])
    exact(aten.topk.default, x, 3, -1, True)  # NaN is the largest
    exact(aten.topk.default, x, 3, -1, False)
    z = torch.tensor([1.0, NAN, -0.0, 0.0, INF])
    got = run_lowering(aten.topk.default, z, 5, -1, True)
    want = torch.topk(z, 5)
    same(got[0], want[0])
    assert torch.equal(got[0].signbit(), want[0].signbit())
    same(got[1], want[1])  # -0.0 == 0.0: the lower index first, as the CPU
    # k=1 ties: the first index, like the CPU
    t = ties(7, 200)
    exact(aten.topk.default, t, 1, -1, True)
    exact(aten.topk.default, t, 1, -1, False)
    # larger k with ties: the values match; the indices hold those values
    vals, idx = run_lowering(aten.topk.default, t, 10, -1, False)
    same(vals, torch.topk(t, 10, largest=False)[0])
    same(t.gather(-1, idx), vals)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_topk_device(dtype):
    x = unique_values(4, 64, dtype=dtype)
    dev_exact(lambda t: torch.topk(t, 7), x, must_run="aten.topk.default")
    dev_exact(lambda t: torch.topk(t, 2, dim=0, largest=False), x, must_run="aten.topk.default")


def test_kthvalue_median_nanmedian_mode():
    x = unique_values(5, 9)
    exact(aten.kthvalue.default, x, 1)
    exact(aten.kthvalue.default, x, 9, -1, True)
    exact(aten.kthvalue.default, x, 3, 0)
    exact(aten.median.default, x)
    exact(aten.median.default, unique_values(8))  # even count: the lower median
    exact(aten.median.dim, x, 1)
    exact(aten.median.dim, x, 0, True)
    exact(aten.nanmedian.default, x)
    exact(aten.nanmedian.dim, x, 1)
    n = torch.tensor([[3.0, NAN, 1.0, 2.0, NAN], [NAN, 1.0, NAN, NAN, NAN], [4.0, 1.0, 2.0, 3.0, 0.5]])
    exact(aten.median.dim, n, 1)  # a NaN row gives its first NaN
    exact(aten.nanmedian.dim, n, 1)  # the median of the other values
    v, i = run_lowering(aten.nanmedian.dim, torch.full((2, 3), NAN), 1)  # all NaN: NaN (CPU's index unspecified)
    assert v.isnan().all() and i.tolist() == [0, 0]
    exact(aten.median.default, n)
    exact(aten.nanmedian.default, n)
    exact(aten.kthvalue.default, n, 4, 1)
    exact(aten.median.default, torch.tensor([]))
    exact(aten.median.dim, x.to(torch.bfloat16), 1)
    exact(aten.kthvalue.default, x.to(torch.int32), 2, 0)
    m = torch.tensor([[2.0, 1.0, 2.0, 1.0, 3.0, 3.0], [5.0, 5.0, 5.0, 1.0, 1.0, 0.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]])
    exact(aten.mode.default, m)  # most frequent; ties of count: the smallest value; last index of it
    exact(aten.mode.default, m.to(torch.int64), 0, True)
    exact(aten.mode.default, torch.tensor(5.0))


def test_order_statistics_device():
    x = unique_values(6, 11)
    dev_exact(lambda t: torch.kthvalue(t, 3, dim=1), x, must_run="aten.kthvalue.default")
    dev_exact(lambda t: torch.median(t, dim=0, keepdim=True), x, must_run="aten.median.dim")
    dev_exact(lambda t: torch.median(t), x, must_run="aten.median.default")
    n = x.clone()
    n[1, 3] = NAN
    dev_exact(lambda t: torch.nanmedian(t, dim=1), n, must_run="aten.nanmedian.dim")
    dev_exact(lambda t: torch.nanmedian(t), n, must_run="aten.nanmedian.default")
    dev_exact(lambda t: torch.mode(t, 1), torch.randint(0, 4, (5, 9)), must_run="aten.mode.default")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
def test_cummax_cummin(dtype):
    x = ties(4, 30, dtype=dtype, high=2 if dtype == torch.bool else 5)
    for dim in (0, -1):
        exact(aten.cummax.default, x, dim)
        exact(aten.cummin.default, x, dim)
    if dtype == torch.float32:
        exact(aten.cummax.default, x[0, 0], 0)


def test_cummax_cummin_nan_and_device():
    x = torch.tensor([[1.0, 3.0, 3.0, NAN, 2.0, NAN, 5.0], [-INF, INF, 0.0, -0.0, INF, 1.0, 1.0]])
    exact(aten.cummax.default, x, 1)
    exact(aten.cummin.default, x, 1)
    dev_exact(lambda t: torch.cummax(t, 1), x, must_run="aten.cummax.default")
    dev_exact(lambda t: torch.cummin(t, 0), ties(6, 5, dtype=torch.bfloat16), must_run="aten.cummin.default")


def test_searchsorted_and_bucketize():
    bd = torch.tensor([-1.0, 0.0, 0.0, 2.5, 4.0, 4.0, 7.0])
    v = torch.tensor([[-3.0, 0.0, 4.0, 9.0], [2.5, NAN, -INF, 4.5]])
    for right in (False, True):
        exact(aten.searchsorted.Tensor, bd, v, right=right)
        exact(aten.bucketize.Tensor, v, bd, right=right)
    exact(aten.searchsorted.Tensor, bd, v, side="right")
    exact(aten.searchsorted.Tensor, bd, v, out_int32=True)
    exact(aten.searchsorted.Scalar, bd, 4.0)
    exact(aten.searchsorted.Scalar, bd, 4, right=True)
    exact(aten.bucketize.Scalar, 2.5, bd)
    # N-d boundaries: one sorted row per row of values
    rows = torch.sort(torch.randn(3, 5, 8), dim=-1)[0]
    vals = torch.randn(3, 5, 6)
    exact(aten.searchsorted.Tensor, rows, vals)
    exact(aten.searchsorted.Tensor, rows, vals, right=True, out_int32=True)
    # sorter: the boundaries unsorted, their order given
    raw = torch.randn(3, 9)
    order = torch.argsort(raw, dim=-1)
    exact(aten.searchsorted.Tensor, raw, torch.randn(3, 4), sorter=order)
    # mixed dtypes promote; NaN boundaries replay the CPU's binary search
    exact(aten.searchsorted.Tensor, torch.tensor([1, 3, 5, 7]), torch.tensor([0.5, 3.0, 6.9, 8.0]))
    exact(aten.searchsorted.Tensor, torch.tensor([1.0, 2.0, NAN]), torch.tensor([1.5, 5.0, NAN]))
    exact(aten.searchsorted.Tensor, torch.tensor([3.0, 1.0, 2.0, 0.0]), torch.tensor([0.5, 2.5]))  # unsorted
    exact(aten.searchsorted.Tensor, torch.tensor([]), torch.tensor([1.0, 2.0]))
    exact(aten.bucketize.Tensor, torch.randn(20).to(torch.bfloat16), bd.to(torch.bfloat16))
    exact(aten.bucketize.Tensor, torch.randint(-5, 10, (20,)), torch.tensor([0, 2, 2, 5]))


def test_searchsorted_device_and_sorter_check():
    bd = torch.sort(torch.randn(40))[0]
    v = torch.randn(3, 7)
    dev_exact(lambda b, x: torch.searchsorted(b, x, right=True), bd, v, must_run="aten.searchsorted.Tensor")
    dev_exact(lambda x, b: torch.bucketize(x, b, out_int32=True), v, bd, must_run="aten.bucketize.Tensor")
    dev_exact(lambda b: torch.searchsorted(b, 0.25), bd, must_run="aten.searchsorted.Scalar")
    dev_exact(lambda b: torch.bucketize(3, b, right=True), torch.arange(6), must_run="aten.bucketize.Scalar")
    raw = torch.randn(9)
    dev_exact(lambda r, s, x: torch.searchsorted(r, x, sorter=s), raw, torch.argsort(raw), v,
        must_run="aten.searchsorted.Tensor")
    bad = torch.arange(9)
    bad[2] = 9
    with pytest.raises(RuntimeError, match="sorter index out of range"):
        torch.searchsorted(raw.to("neuron"), v.to("neuron"), sorter=bad.to("neuron")).cpu()


def test_randperm():
    for n in (0, 1000):
        p = run_lowering(aten.randperm.default, n)
        assert p.dtype == torch.int64 and sorted(p.tolist()) == list(range(n))
    p = run_lowering(aten.randperm.default, 50, dtype=torch.float32)
    assert p.dtype == torch.float32 and sorted(p.tolist()) == list(range(50))
    a = run_lowering(aten.randperm.generator, 64, generator=None, key_seed=1)
    b = run_lowering(aten.randperm.generator, 64, generator=None, key_seed=2)
    assert sorted(a.tolist()) == list(range(64)) and not torch.equal(a, b)


def test_randperm_device():
    import torch_neuronx

    torch_neuronx.clear_op_tracking()
    p = torch.randperm(100, device="neuron")
    assert p.device.type == "neuron" and p.dtype == torch.int64
    assert sorted(p.cpu().tolist()) == list(range(100))
    q = torch.randperm(100, device="neuron")
    assert not torch.equal(p.cpu(), q.cpu())
    g = torch.Generator("neuron")
    g.manual_seed(3)
    r1 = torch.randperm(30, generator=g, device="neuron", dtype=torch.int32).cpu()
    g.manual_seed(3)
    r2 = torch.randperm(30, generator=g, device="neuron", dtype=torch.int32).cpu()
    assert r1.dtype == torch.int32 and torch.equal(r1, r2) and sorted(r1.tolist()) == list(range(30))
    ran = torch_neuronx.get_executed_ops()
    assert "aten.randperm.default" in ran and "aten.randperm.generator" in ran, ran
    assert not torch_neuronx.get_fallback_ops()
