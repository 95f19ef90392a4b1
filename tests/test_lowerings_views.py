"""Lowerings of ops/views.py: views and view scatters, each compared with PyTorch's CPU kernel as a
pure jax function (tests/lowering_harness.py). View lowerings serve compiled graphs only (eager
views are native strided tensors), so they have pure checks only; the view scatters also run on
the neuron device (tests/device_harness.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402

from lowering_harness import chk, dev, run_lowering  # noqa: E402

aten = torch.ops.aten


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
