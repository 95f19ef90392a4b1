"""Lowerings of sorting ops (ops/sorting.py), views and view scatters (ops/views.py), and distances,
embedding bags, FFTs and a few math ops (ops/misc.py): each compared with PyTorch's CPU kernel as a
pure jax function (lowering_harness) and, where the op reaches eager, run on the neuron device
(device_harness; no CPU fallback allowed). View lowerings serve compiled graphs only (eager views
are native strided tensors), so they have pure checks only."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from device_harness import check_device  # noqa: E402
from lowering_harness import check_lowering, run_lowering, tolerance  # noqa: E402
from tolerances import EXACT  # noqa: E402

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")


def chk(op, *args, **kwargs):
    """check_lowering: torch's default tolerances for the result's dtype unless given (the measured
    errors of these ops, float32 and bfloat16, are within them: tests/tolerances.py)."""
    check_lowering(op, *args, **kwargs)


def dev(fn, *args, must_run, **kwargs):
    return check_device(fn, *args, must_run=[must_run] if isinstance(must_run, str) else must_run, **kwargs)


def exact(op, *args, **kwargs):
    """check_lowering with PyTorch's default tolerances: exact for indices and counts."""
    check_lowering(op, *args, **kwargs)


def dev_exact(fn, *args, must_run, **kwargs):
    return check_device(fn, *args, must_run=[must_run], **kwargs)


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


# =============================================================================================
# sorting


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_histc(dtype):
    x = (torch.randn(500) * 3).to(dtype)
    exact(aten.histc.default, x, **EXACT)
    exact(aten.histc.default, x, 7, -2, 2.5, **EXACT)  # out-of-range values are skipped
    exact(aten.histc.default, x, 10, 1, 1, **EXACT)  # min == max: the data's range
    exact(aten.histc.default, torch.full((6,), 3.0, dtype=dtype), 4, **EXACT)  # constant data: [v-1, v+1]
    exact(aten.histc.default, torch.tensor([0.0, 1.0, 2.0, 3.0, NAN], dtype=dtype), 3, 0, 3, **EXACT)  # NaN skipped, max in last bin
    exact(aten.histc.default, torch.tensor([], dtype=dtype), 5, **EXACT)


def test_histc_device_and_errors():
    x = torch.randn(300)
    dev_exact(lambda t: torch.histc(t, bins=12), x, must_run="aten.histc.default")
    dev_exact(lambda t: torch.histc(t, bins=5, min=-1, max=1), x.to(torch.bfloat16), must_run="aten.histc.default")
    with pytest.raises(RuntimeError, match="not finite"):
        torch.histc(torch.tensor([1.0, NAN]).to("neuron"), bins=3).cpu()
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(x.to("neuron"), bins=3, min=2, max=1).cpu()


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


# =============================================================================================
# views (pure checks: eager views are native strided tensors)


def test_views_basic():
    x = torch.randn(3, 4, 5)
    chk(aten.alias.default, x)
    chk(aten.permute.default, x, [2, 0, 1])
    chk(aten.permute.default, x, [-1, 1, 0])
    chk(aten.expand.default, torch.randn(3, 1), [2, -1, 4])
    chk(aten.expand.default, torch.tensor(1.5), [2, 3])
    chk(aten.view.default, x, [5, -1])
    chk(aten.view.default, x, [60])
    chk(aten._unsafe_view.default, x, [12, 5])
    chk(aten.t.default, torch.randn(3, 4))
    chk(aten.t.default, torch.randn(3))
    chk(aten.transpose.int, x, 0, -1)
    chk(aten.unsqueeze.default, x, -1)
    chk(aten.unsqueeze.default, x, 0)
    chk(aten.unsqueeze.default, torch.tensor(2.0), 0)
    y = torch.randn(1, 3, 1, 2)
    chk(aten.squeeze.default, y)
    chk(aten.squeeze.dim, y, 2)
    chk(aten.squeeze.dim, y, 1)  # not of size 1: unchanged
    chk(aten.squeeze.dims, y, [0, -2, 1])
    chk(aten.squeeze.dims, torch.tensor(1.0), [0])
    chk(aten.view.default, x.to(torch.bfloat16), [4, 15])


def test_select_slice_split_unbind_diagonal_unfold():
    x = torch.randn(4, 6, 5)
    chk(aten.select.int, x, 1, 2)
    chk(aten.select.int, x, -1, -5)
    with pytest.raises(IndexError):
        run_lowering(aten.select.int, x, 0, 4)
    for start, end, step in [(None, None, 1), (1, 5, 2), (-4, -1, 1), (-100, 100, 3), (5, 2, 1), (2, None, 4), (None, -7, 1)]:
        chk(aten.slice.Tensor, x, 1, start, end, step)
    chk(aten.slice.Tensor, x, 0, 2 ** 63 - 1, None, 1)
    chk(aten.split.Tensor, x, 4, 1)
    chk(aten.split.Tensor, x, 2)
    chk(aten.split.Tensor, x, 10, -1)
    chk(aten.split_with_sizes.default, x, [1, 0, 5], 1)
    chk(aten.unbind.int, x, 2)
    chk(aten.unbind.int, x)
    m = torch.randn(4, 6)
    for offset in (0, 2, -3, 6, -4, 10):
        chk(aten.diagonal.default, m, offset)
    chk(aten.diagonal.default, x, 1, 2, 0)
    chk(aten.diagonal.default, x, -1, -1, 1)
    chk(aten.unfold.default, x, 1, 3, 2)
    chk(aten.unfold.default, x, -1, 5, 1)
    chk(aten.unfold.default, x, 0, 1, 3)
    chk(aten.unfold.default, torch.tensor(3.0), 0, 1, 1)


def test_as_strided():
    x = torch.arange(24.0).reshape(4, 6)
    for size, stride, offset in [
        ((3, 3), (7, 2), 1),
        ((2, 2), (1, 6), 0),
        ((4, 6), (6, 1), 0),  # contiguous
        ((2, 5), (5, 1), 3),  # contiguous, offset
        ((3, 4), (0, 1), 2),  # broadcast (stride 0)
        ((2, 3, 2), (1, 2, 6), None),
        ((0, 3), (1, 1), 0),
    ]:
        chk(aten.as_strided.default, x, size, stride, offset)
    with pytest.raises(RuntimeError, match="out of bounds"):
        run_lowering(aten.as_strided.default, x, (2, 2), (1, 4), 20)


def test_view_dtype_and_complex_views():
    x = torch.randn(3, 8)
    for dtype in (torch.int32, torch.uint8, torch.int16, torch.bfloat16, torch.float64, torch.int64, torch.complex64):
        chk(aten.view.dtype, x, dtype)
    chk(aten.view.dtype, torch.randint(0, 255, (2, 8), dtype=torch.uint8), torch.float32)
    chk(aten.view.dtype, torch.randn(4, 6).to(torch.bfloat16), torch.int16)
    chk(aten.view.dtype, torch.randn(4, 6).to(torch.bfloat16), torch.float32)
    chk(aten.view.dtype, torch.tensor([True, False, True, True]), torch.uint8)
    chk(aten.view.dtype, torch.tensor([0, 1, 1, 0], dtype=torch.uint8), torch.bool)
    chk(aten.view.dtype, torch.randn(3, 2, dtype=torch.complex64), torch.float32)
    c = torch.randn(3, 4, dtype=torch.complex64)
    chk(aten.view_as_real.default, c)
    chk(aten.view_as_complex.default, torch.randn(3, 4, 2))
    chk(aten.view_as_complex.default, torch.randn(5, 2, dtype=torch.float64))


# ---------------------------------------------------------------------------------------------
# scatters into views (functional ops: they reach eager)


def test_select_slice_diagonal_scatter():
    x = torch.randn(4, 6, 5)
    chk(aten.select_scatter.default, x, torch.randn(4, 5), 1, 3)
    chk(aten.select_scatter.default, x, torch.randn(6, 5), 0, -1)
    chk(aten.select_scatter.default, x, torch.randn(6, 5, dtype=torch.float64), 0, 0)  # src cast
    for start, end, step in [(None, None, 1), (1, 5, 2), (-4, -1, 1), (-100, 100, 3), (2, None, 4)]:
        n = len(range(*slice(start, end, step).indices(6)))
        chk(aten.slice_scatter.default, x, torch.randn(4, n, 5), 1, start, end, step)
    chk(aten.slice_scatter.default, x, torch.randn(4, 0, 5), 1, 5, 2)
    m = torch.randn(5, 7)
    for offset in (0, 2, -3):
        n = torch.diagonal(m, offset).shape[0]
        chk(aten.diagonal_scatter.default, m, torch.randn(n), offset)
    chk(aten.diagonal_scatter.default, x, torch.randn(6, 4), 0, 0, 2)
    chk(aten.diagonal_scatter.default, x, torch.randn(4, 4), -1, 2, 1)
    chk(aten.select_scatter.default, x.to(torch.bfloat16), torch.randn(4, 5).to(torch.bfloat16), 1, 3)
    chk(aten.slice_scatter.default, torch.arange(10), torch.arange(5) * 10, 0, 0, None, 2)


def test_as_strided_scatter():
    x = torch.arange(24.0).reshape(4, 6)
    for size, stride, offset in [((3, 3), (7, 2), 1), ((2, 5), (5, 1), 3), ((2, 2), (1, 6), None), ((0,), (1,), 0)]:
        chk(aten.as_strided_scatter.default, x, torch.randn(size), size, stride, offset)
    chk(aten.as_strided_scatter.default, x.to(torch.int32), torch.ones(3, 3, dtype=torch.int32), (3, 3), (7, 2), 1)


def test_masked_scatter():
    x = torch.randn(4, 5)
    m = torch.rand(4, 5) > 0.5
    chk(aten.masked_scatter.default, x, m, torch.randn(20))
    chk(aten.masked_scatter.default, x, m, torch.randn(5, 7))  # more source than needed
    chk(aten.masked_scatter.default, torch.zeros(2, 1), torch.tensor([True, False, True]), torch.arange(10.0))  # broadcast
    chk(aten.masked_scatter.default, x, torch.zeros(4, 5, dtype=torch.bool), torch.randn(0))
    chk(aten.masked_scatter.default, x.to(torch.bfloat16), m, torch.randn(20).to(torch.bfloat16))
    chk(aten.masked_scatter.default, torch.arange(6), torch.tensor([1, 0, 1, 1, 0, 0], dtype=torch.bool), torch.arange(3) * 7)


def test_view_scatters_device():
    x = torch.randn(4, 6, 5)
    dev(lambda a, s: torch.select_scatter(a, s, 1, 3), x, torch.randn(4, 5), must_run="aten.select_scatter.default")
    dev(lambda a, s: torch.slice_scatter(a, s, 1, 1, 6, 2), x, torch.randn(4, 3, 5), must_run="aten.slice_scatter.default")
    dev(lambda a, s: torch.diagonal_scatter(a, s, 1, 0, 2), x, torch.randn(6, 4), must_run="aten.diagonal_scatter.default")
    a = torch.arange(24.0).reshape(4, 6)
    dev(lambda a, s: torch.as_strided_scatter(a, s, (3, 3), (7, 2), 1), a, torch.randn(3, 3),
        must_run="aten.as_strided_scatter.default")
    m = torch.rand(4, 6, 5) > 0.3
    dev(lambda a, mm, s: a.masked_scatter(mm, s), x, m, torch.randn(200), must_run="aten.masked_scatter.default")
    dev(lambda a, mm, s: a.masked_scatter(mm, s), x.to(torch.bfloat16), m, torch.randn(200).to(torch.bfloat16),
        must_run="aten.masked_scatter.default")

    def inplace(a, mm, s):
        a = a.clone()
        a.masked_scatter_(mm, s)
        return a

    dev(inplace, x, m, torch.randn(120), must_run="aten.masked_scatter_.default")


def test_masked_scatter_too_small_source_raises_on_device():
    x = torch.zeros(6).to("neuron")
    m = torch.ones(6, dtype=torch.bool).to("neuron")
    with pytest.raises(RuntimeError, match="Number of elements of source < number of ones in mask"):
        x.masked_scatter(m, torch.ones(4).to("neuron")).cpu()


# =============================================================================================
# misc


def test_cdist_pdist():
    a, b = torch.randn(2, 7, 5), torch.randn(2, 6, 5)
    for p in (0.0, 1.0, 2.0, 3.0, 0.5, INF):
        chk(aten._cdist_forward.default, a, b, p, None)
    for mode in (0, 1, 2):  # p=2: the matrix-product form for mode 1 (and mode 0 past 25 rows)
        chk(aten._cdist_forward.default, a, b, 2.0, mode)
    big = torch.randn(30, 4)
    chk(aten._cdist_forward.default, big, torch.randn(8, 4), 2.0, None)
    chk(aten._cdist_forward.default, torch.randn(3, 1, 4, 3), torch.randn(2, 5, 3), 1.0, None)  # batch broadcast
    chk(aten._cdist_forward.default, torch.randn(4, 0), torch.randn(3, 0), 2.0, None)
    chk(aten._cdist_forward.default, a.double(), b.double(), 2.0, 1)
    x = torch.randn(7, 4)
    for p in (0.0, 1.0, 2.0, 1.5, INF):
        chk(aten._pdist_forward.default, x, p)
    chk(aten._pdist_forward.default, torch.randn(1, 3), 2.0)
    chk(aten._pdist_forward.default, torch.randn(4, 0), 2.0)


def test_cdist_pdist_device():
    a, b = torch.randn(2, 7, 5), torch.randn(6, 5)
    dev(lambda x, y: torch.cdist(x, y), a, b, must_run="aten._cdist_forward.default")
    dev(lambda x, y: torch.cdist(x, y, p=1), a, b, must_run="aten._cdist_forward.default")
    dev(lambda x, y: torch.cdist(x, y, p=INF), a, b, must_run="aten._cdist_forward.default")
    dev(lambda x: F.pdist(x), torch.randn(9, 3), must_run="aten._pdist_forward.default")


def _bag_reference(weight, indices, offsets, mode, psw, include_last_offset, padding_idx):
    """(offset2bag, bag_size) the neuron lowering returns: meta's (non-CPU) shapes, CPU values."""
    n = indices.shape[0]
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    o2b = torch.zeros(n, dtype=torch.int64)
    for b in range(bags):
        o2b[offsets[b]:] = b
    size = torch.zeros(offsets.shape[0], dtype=torch.int64)
    for i in range(n):
        if padding_idx < 0 or indices[i] != padding_idx:
            size[o2b[i]] += 1
    return o2b, size


@pytest.mark.parametrize("case", [
    dict(mode=0), dict(mode=1), dict(mode=2), dict(mode=0, psw=True), dict(mode=1, padding_idx=3),
    dict(mode=2, padding_idx=3), dict(mode=0, include_last_offset=True), dict(mode=1, include_last_offset=True),
    dict(mode=2, include_last_offset=True, padding_idx=1),
])
def test_embedding_bag(case):
    mode = case["mode"]
    include_last = case.get("include_last_offset", False)
    pad = case.get("padding_idx", -1)
    weight = torch.randn(10, 4)
    weight[2, 1] = weight[5, 1]  # a tie for max
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 3, 5, 1])
    offsets = torch.tensor([0, 3, 3, 8, 11]) if include_last else torch.tensor([0, 3, 3, 8])
    psw = torch.randn(indices.shape[0]) if case.get("psw") else None
    ops = [aten._embedding_bag.default] + ([aten._embedding_bag_forward_only.default] if mode == 0 else [])
    for op in ops:
        want = op(weight, indices, offsets, False, mode, False, psw, include_last, pad)
        got = run_lowering(op, weight, indices, offsets, False, mode, False, psw, include_last, pad)
        torch.testing.assert_close(got[0], want[0], **tolerance(want[0], family="embedding_bag"))
        o2b, size = _bag_reference(weight, indices, offsets, mode, psw, include_last, pad)
        same(got[1], o2b)
        same(got[2], size)
        if mode == 2:
            same(got[3], want[3])
        else:
            assert got[3].shape == (0,)
        if want[1].numel():
            same(got[1], want[1])
        if mode != 0:
            same(got[2][: want[2].shape[0]], want[2])
    if case.get("include_last_offset"):
        return
    bf = run_lowering(aten._embedding_bag.default, weight.to(torch.bfloat16), indices, offsets, False, mode, False,
                      None if psw is None else psw.to(torch.bfloat16), include_last, pad)
    want = aten._embedding_bag.default(weight.to(torch.bfloat16), indices, offsets, False, mode, False,
                                       None if psw is None else psw.to(torch.bfloat16), include_last, pad)
    torch.testing.assert_close(bf[0], want[0])


def test_embedding_bag_device():
    weight = torch.randn(20, 6)
    idx = torch.randint(0, 20, (17,))
    off = torch.tensor([0, 4, 4, 10])
    for mode in ("sum", "mean", "max"):
        dev(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode), weight, idx, off,
            must_run="aten._embedding_bag_forward_only.default", family="embedding_bag")
    dev(lambda w, i: F.embedding_bag(i, w, mode="mean"), weight, idx[:16].reshape(4, 4),
        must_run="aten._embedding_bag_forward_only.default", family="embedding_bag")
    dev(lambda w, i, o, p: F.embedding_bag(i, w, o, per_sample_weights=p, mode="sum"), weight, idx, off,
        torch.randn(17), must_run="aten._embedding_bag_forward_only.default", family="embedding_bag")
    dev(lambda w, i, o: F.embedding_bag(i, w, o, mode="mean", padding_idx=idx[0].item()), weight.to(torch.bfloat16),
        idx, off, must_run="aten._embedding_bag_forward_only.default")
    w = weight.clone().requires_grad_(False)
    dev(lambda w, i, o: torch.nn.EmbeddingBag.from_pretrained(w, mode="max")(i, o), w, idx, off,
        must_run="aten._embedding_bag_forward_only.default")
    with pytest.raises(RuntimeError, match="offsets\\[0\\] has to be 0"):
        F.embedding_bag(idx.to("neuron"), weight.to("neuron"), torch.tensor([1, 4]).to("neuron")).cpu()


def test_embedding_bag_training_device():
    weight = torch.randn(12, 3)
    idx = torch.randint(0, 12, (9,))
    off = torch.tensor([0, 2, 7])

    def fwd(w, i, o):
        w = w.clone().requires_grad_(True)
        return F.embedding_bag(i, w, o, mode="mean")

    dev(fwd, weight, idx, off, must_run="aten._embedding_bag.default", allow_fallback=(), family="embedding_bag")


def test_fft_lowerings():
    x = torch.randn(4, 6, 8)
    for norm in (0, 1, 2):
        chk(aten._fft_r2c.default, x, [2], norm, True)
        chk(aten._fft_r2c.default, x, [0, 2], norm, False)
        c = torch.randn(4, 6, 5, dtype=torch.complex64)
        chk(aten._fft_c2r.default, c, [2], norm, 8)
        chk(aten._fft_c2r.default, c, [1, 2], norm, 9)
        chk(aten._fft_c2c.default, c, [0, 2], norm, True)
        chk(aten._fft_c2c.default, c, [1], norm, False)
    chk(aten._fft_r2c.default, x, [1, 0], 0, True)  # the LAST listed dim is halved
    chk(aten._fft_r2c.default, x.double(), [0, 1, 2], 2, True)
    chk(aten._fft_c2c.default, torch.randn(2, 3, 4, 5, dtype=torch.complex64), [0, 1, 2, 3], 1, True)


def test_fft_device():
    x = torch.randn(4, 16)
    dev(lambda t: torch.fft.rfft(t), x, must_run="aten._fft_r2c.default")
    dev(lambda t: torch.fft.fft(t, norm="ortho"), x, must_run="aten._fft_r2c.default")
    dev(lambda t: torch.fft.irfft(torch.fft.rfft(t), n=16), x, must_run="aten._fft_c2r.default")
    c = torch.randn(4, 16, dtype=torch.complex64)
    dev(lambda t: torch.fft.ifft2(t, norm="forward"), c, must_run="aten._fft_c2c.default")
    dev(lambda t: torch.fft.fftn(t), c, must_run="aten._fft_c2c.default")


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


def test_trace_diag_embed_polar():
    for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.float64, torch.uint8):
        m = (torch.randn(5, 7) * 5).to(dtype)
        chk(aten.trace.default, m)
    chk(aten.trace.default, torch.randn(0, 3))
    v = torch.randn(2, 4)
    for offset, d1, d2 in [(0, -2, -1), (1, 0, 2), (-2, 2, 0), (3, 1, 2)]:
        chk(aten.diag_embed.default, v, offset, d1, d2)
    chk(aten.diag_embed.default, torch.randn(3).to(torch.bfloat16))
    chk(aten.diag_embed.default, torch.randint(0, 9, (2, 3)), -1)
    r, a = torch.rand(3, 4) * 3, torch.randn(3, 4) * 3
    chk(aten.polar.default, r, a)
    chk(aten.polar.default, r.double(), a.double())
    chk(aten.polar.default, torch.tensor([INF, 0.0, 1.0]), torch.tensor([0.0, INF, NAN]))
    dev(lambda t: torch.trace(t), torch.randn(6, 6), must_run="aten.trace.default")
    dev(lambda t: torch.diag_embed(t, offset=1), v, must_run="aten.diag_embed.default")
    dev(lambda x, y: torch.polar(x, y), r, a, must_run="aten.polar.default")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int32])
def test_lgamma_digamma_i0(dtype):
    x = torch.cat([torch.linspace(-9.5, 12, 80), torch.tensor([0.0, -0.0, -1.0, -3.0, 1e-30, 50.0, 100.0, -INF, INF, NAN])])
    if dtype == torch.int32:
        x = torch.arange(-4, 30)
    x = x.to(dtype)
    chk(aten.lgamma.default, x)
    chk(aten.digamma.default, x)
    chk(aten.i0.default, x)


def test_special_functions_device():
    x = torch.linspace(-7, 9, 50)
    dev(lambda t: torch.lgamma(t), x, must_run="aten.lgamma.default")
    dev(lambda t: torch.digamma(t), x, must_run="aten.digamma.default")
    dev(lambda t: torch.i0(t), x.to(torch.bfloat16), must_run="aten.i0.default")
    dev(lambda t: torch.special.i0(t), x, must_run="aten.i0.default")
