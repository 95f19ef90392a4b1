"""Lowerings of segment_reduce, the histograms (histogram.bin_ct / bins_tensor, _histogramdd_*),
_ctc_loss and hash_tensor (torch_neuronx/ops/misc.py): each compared with PyTorch's CPU kernel as
a pure jax function (lowering_harness), and the user-level calls (torch.segment_reduce,
torch.histogram(dd), F.ctc_loss, torch.hash_tensor) run on the neuron device vs the CPU with no CPU
fallback (device_harness)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from device_harness import check_device  # noqa: E402
from lowering_harness import check_lowering, run_lowering  # noqa: E402

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")


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
# histograms


HIST_INPUTS = [torch.randn(30), torch.tensor([1.0, 2.0, 1.0]), torch.tensor([1.0, 1.0]), torch.zeros(0),
               torch.tensor(3.0), torch.randn(4, 5).double(), torch.tensor([0.0, 0.1, 0.2, 0.3, 0.7, 1.0])]


def _hist_checks(x, grid):
    edges = torch.tensor([-1.0, -0.5, 0.0, 0.2, 1.0, 1.0]).to(x.dtype)
    w = torch.rand(x.shape, dtype=x.dtype)
    for bins, rng, weight, density in grid:
        check_lowering(aten.histogram.bin_ct, x, bins, range=rng, weight=w if weight else None, density=density)
    for weight, density in ((False, False), (True, True)):
        check_lowering(aten.histogram.bins_tensor, x, edges, weight=w if weight else None, density=density)


@pytest.mark.parametrize("x", HIST_INPUTS, ids=lambda x: f"{str(x.dtype)[6:]}{list(x.shape)}")
def test_histogram(x):
    # equal min and max (widened by 0.5), an explicit range, 1 bin, weights and density
    _hist_checks(x, [(7, None, False, False), (10, (-1.0, 1.5), True, False), (1, (2.0, 2.0), True, True)])


@pytest.mark.slow
@pytest.mark.parametrize("x", HIST_INPUTS, ids=lambda x: f"{str(x.dtype)[6:]}{list(x.shape)}")
def test_histogram_grid(x):
    _hist_checks(x, [(b, r, w, d) for b in (1, 7, 10) for r in (None, (-1.0, 1.5), (2.0, 2.0))
                     for w in (False, True) for d in (False, True)])


def test_histogramdd():
    x = torch.randn(20, 3)
    x[3, 1] = 5.0  # outside the range below
    w = torch.rand(20)
    edges = [torch.tensor([-1.0, 0.0, 1.0]), torch.tensor([-2.0, 0.5, 1.0, 3.0]), torch.tensor([0.0, 1.0])]
    for bins, rng, weight, density in (([1, 2, 3], None, None, False), ([4, 4, 4], [-1.0, 1.0, 0.0, 0.0, -2.0, 2.0], w, True)):
        kw = dict(range=rng, weight=weight, density=density)
        check_lowering(aten._histogramdd_from_bin_cts.default, x, bins, **kw)
        check_lowering(aten._histogramdd_bin_edges.default, x, bins, **kw)
        check_lowering(aten._histogramdd_from_bin_tensors.default, x, edges, weight=weight, density=density)


def test_device_histograms():
    x, w = torch.randn(20, 3), torch.rand(20)
    check_device(lambda x: torch.histogram(x, 5), torch.randn(100), must_run=["aten.histogram.bin_ct"])
    check_device(lambda x, b: torch.histogram(x, b, density=True), torch.randn(100), torch.tensor([-1.0, 0.0, 2.0]),
                 must_run=["aten.histogram.bins_tensor"])
    check_device(lambda x, w: torch.histogramdd(x, [2, 3, 4], weight=w, density=True), x, w,
                 must_run=["aten._histogramdd_from_bin_cts.default"])
    check_device(lambda x, w: torch.histogramdd(x, [2, 3, 4], range=[-1.0, 1.0, 0.0, 0.0, -2.0, 2.0], weight=w), x, w,
                 must_run=["aten._histogramdd_from_bin_cts.default"])
    check_device(lambda x, b: torch.histogramdd(x, b), x, [torch.tensor([-1.0, 1.0]), torch.tensor([0.0, 1.0, 2.0]),
                                                          torch.tensor([-3.0, 3.0])],
                 must_run=["aten._histogramdd_from_bin_tensors.default"])
    with pytest.raises(RuntimeError, match="not finite"):
        torch.histogram(torch.tensor([1.0, NAN], device="neuron"), 4)
    with pytest.raises(RuntimeError, match="min should not exceed max"):
        torch.histogram(torch.tensor([1.0], device="neuron"), 4, range=(3.0, 1.0))


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


# ---------------------------------------------------------------------------------------------
# CTC loss


def ctc_case(T=50, B=16, C=20, S=30):
    lp = torch.randn(T, B, C).log_softmax(2)
    tl = torch.randint(0, S, (B,))
    il = torch.randint(1, T + 1, (B,))
    tl[0], tl[1] = 0, S  # an empty target, a full one
    il[2], il[3], tl[3], il[4] = 0, 0, 0, 1  # no input (with and without a target), a single step
    targets = torch.randint(1, C, (B, S))
    return lp, targets, il.tolist(), tl.tolist()


def test_ctc_loss():
    lp, targets, il, tl = ctc_case()
    want = aten._ctc_loss(lp, targets, il, tl)
    got = run_lowering(aten._ctc_loss.default, lp, targets, il, tl)
    torch.testing.assert_close(got[0], want[0])
    # log_alpha where the CPU writes it
    for b in range(len(il)):
        if il[b]:
            torch.testing.assert_close(got[1][b, :il[b], :2 * tl[b] + 1], want[1][b, :il[b], :2 * tl[b] + 1])
    flat = torch.cat([targets[b, :tl[b]] for b in range(len(tl))])  # concatenated targets
    torch.testing.assert_close(run_lowering(aten._ctc_loss.default, lp, flat, il, tl)[0],
                               aten._ctc_loss(lp, flat, il, tl)[0])
    # repeated labels need a blank between them: too short an input is impossible (inf)
    rep = torch.tensor([[1, 1, 2, 2, 2, 3]])
    for t in (10, 5):
        x = torch.randn(t, 1, 5).log_softmax(2)
        torch.testing.assert_close(run_lowering(aten._ctc_loss.default, x, rep, [t], [6], 4)[0],
                                   aten._ctc_loss(x, rep, [t], [6], 4)[0])


def test_device_ctc_loss():
    lp, targets, il, tl = ctc_case(T=20, B=6, C=7, S=8)
    for reduction in ("none", "mean", "sum"):
        for zero_infinity in (True, False):
            check_device(lambda lp, tg: F.ctc_loss(lp, tg, il, tl, reduction=reduction, zero_infinity=zero_infinity),
                         lp, targets, must_run=["aten._ctc_loss.default"])
    check_device(lambda lp, tg, il, tl: F.ctc_loss(lp, tg, il, tl), lp, targets, torch.tensor(il), torch.tensor(tl),
                 must_run=["aten._ctc_loss.default"])
    with pytest.raises(RuntimeError, match="label range"):
        F.ctc_loss(lp.to("neuron"), (targets + 10).to("neuron"), il, tl, reduction="none").cpu()


# bincount(Tensor self, Tensor? weights=None, int minlength=0) -> Tensor: a data-dependent length
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_bincount_device(dtype):
    x = torch.tensor([1, 3, 3, 0, 7], dtype=dtype)
    check_device(torch.bincount, x, must_run=["aten.index_put_.default"])
    check_device(torch.bincount, x, minlength=10, must_run=["aten.index_put_.default"])
    check_device(lambda x, w: torch.bincount(x, w), x, torch.tensor([0.5, 1.0, 2.0, -1.0, 3.0]),
                 must_run=["aten.index_put_.default"])
    check_device(lambda x, w: torch.bincount(x, w), x, torch.tensor([1, 2, 3, 4, 5]),  # float64 result
                 must_run=["aten.index_put_.default"])
    check_device(torch.bincount, torch.tensor([], dtype=dtype), minlength=3, must_run=["aten.index_put_.default"])


def test_bincount_errors_match_cpu():
    for bad, kwargs in ((torch.tensor([-1, 2]), {}), (torch.tensor([[1]]), {}), (torch.tensor([1]), {"minlength": -1})):
        with pytest.raises(RuntimeError) as cpu:
            torch.bincount(bad, **kwargs)
        with pytest.raises(RuntimeError, match=str(cpu.value).split(".")[0]):
            torch.bincount(bad.to("neuron"), **kwargs)
