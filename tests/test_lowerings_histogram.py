"""Lowerings of ops/histogram.py (histc, histogram.bin_ct/bins_tensor, _histogramdd_bin_edges/
_from_bin_cts/_from_bin_tensors), and bincount (not lowered: eager's path):
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
from lowering_harness import check_lowering  # noqa: E402
from tolerances import EXACT  # noqa: E402

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")


def exact(op, *args, **kwargs):
    """check_lowering with PyTorch's default tolerances: exact for indices and counts."""
    check_lowering(op, *args, **kwargs)


def dev_exact(fn, *args, must_run, **kwargs):
    return check_device(fn, *args, must_run=[must_run], **kwargs)


HIST_INPUTS = [torch.randn(30), torch.tensor([1.0, 2.0, 1.0]), torch.tensor([1.0, 1.0]), torch.zeros(0),
               torch.tensor(3.0), torch.randn(4, 5).double(), torch.tensor([0.0, 0.1, 0.2, 0.3, 0.7, 1.0])]


def _hist_checks(x, grid):
    edges = torch.tensor([-1.0, -0.5, 0.0, 0.2, 1.0, 1.0]).to(x.dtype)
    w = torch.rand(x.shape, dtype=x.dtype)
    for bins, rng, weight, density in grid:
        check_lowering(aten.histogram.bin_ct, x, bins, range=rng, weight=w if weight else None, density=density)
    for weight, density in ((False, False), (True, True)):
        check_lowering(aten.histogram.bins_tensor, x, edges, weight=w if weight else None, density=density)


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


# ---------------------------------------------------------------------------------------------
# histograms


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


@pytest.mark.parametrize("bad", [
    {"bins": [3, 4, 5]},  # more bins than dimensions
    {"bins": [3]},  # fewer
    {"bins": [3, 4], "range": [0.0, 1.0]},  # a range for one dimension of two
    {"bins": [3, 4], "nan_in": 1},  # a dimension whose range is not finite
])
def test_histogramdd_bin_edges_rejects_what_the_cpu_rejects(bad):
    """histogramdd's edges run their lowering in eager mode (a Tensor[] result): its argument checks
    (meta) and value checks (in the executable) raise the CPU's error, naming the dimension."""
    x = torch.rand(10, 2, generator=torch.Generator().manual_seed(0))
    if "nan_in" in bad:
        x[0, bad["nan_in"]] = float("nan")
    kwargs = {k: v for k, v in bad.items() if k in ("bins", "range")}
    with pytest.raises(RuntimeError) as cpu:
        torch.histogramdd(x, **kwargs)
    with pytest.raises(RuntimeError) as dev:
        torch.histogramdd(x.to("neuron"), **kwargs)
    expected = str(cpu.value).split(" [")[0]  # the CPU also prints the range it found
    assert expected.removesuffix("'s range") in str(dev.value)
    assert "_histogramdd_bin_edges" in str(dev.value)
