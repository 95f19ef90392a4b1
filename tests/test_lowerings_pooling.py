"""Lowerings of ops/pooling.py (max, fractional max, average, adaptive average and adaptive max pooling,
and their backwards): each compared with PyTorch's CPU kernel on its own (tests/lowering_harness.py),
and the user-level calls that reach it run on the neuron device vs the CPU (tests/device_harness.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_neuronx  # noqa: E402
from device_harness import check_device  # noqa: E402
from helpers import randn  # noqa: E402
from lowering_harness import check_lowering  # noqa: E402
from tolerances import EXACT  # noqa: E402

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")
F32, BF = torch.float32, torch.bfloat16


MAXPOOLS = [  # kernel, stride, padding, dilation, ceil_mode
    ([2, 2], [], [0, 0], [1, 1], False),
    ([3, 3], [2, 2], [1, 1], [1, 1], True),
    ([3, 2], [2, 1], [1, 1], [2, 3], False),
    ([2, 3], [3, 2], [1, 1], [1, 1], True),
]


FRACTIONAL_2D = [((2, 3, 9, 9), [3, 3], [4, 4]), ((1, 3, 9, 9), [2, 3], [2, 5]), ((3, 9, 10), [3, 2], [5, 7]),
                 ((2, 3, 7, 11), [1, 1], [7, 11]), ((1, 2, 300, 260), [3, 3], [100, 77])]


FRACTIONAL_3D = [((2, 3, 5, 5, 5), [2, 2, 2], [2, 3, 2]), ((3, 6, 5, 5), [2, 2, 2], [3, 3, 3]),
                 ((1, 2, 40, 30, 50), [3, 2, 4], [13, 20, 11])]


AVGPOOLS = [  # kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    ([2, 2], [], [0, 0], False, True, None),
    ([3, 3], [2, 2], [1, 1], True, False, None),
    ([3, 2], [2, 3], [1, 1], True, True, None),
    ([3, 2], [2, 3], [1, 0], False, False, 5),
    ([3, 3], [3, 3], [1, 1], True, True, None),  # a ceil_mode window in the padding only
]


def _pool_grads(fn):
    def run(x, gy):
        y = fn(x)
        v = y[0] if isinstance(y, tuple) else y
        return (y, torch.autograd.grad(v, x, gy)[0])

    return run


def _check_pool(fn, x, ops):
    y = fn(x)
    v = y[0] if isinstance(y, tuple) else y
    # (bfloat16: the CPU adds overlapping windows' gradients in bfloat16, the device in float32)
    check_device(_pool_grads(fn), x.requires_grad_(), torch.randn_like(v), must_run=ops, family="pool_backward")


# ---------------------------------------------------------------------------------------------
# pooling


@pytest.mark.parametrize("cfg", MAXPOOLS)
def test_max_pool2d_with_indices(cfg):
    x = randn(2, 3, 9, 10)
    check_lowering(aten.max_pool2d_with_indices.default, x, *cfg)
    check_lowering(aten.max_pool2d_with_indices.default, x[0], *cfg)  # unbatched


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.uint8])
def test_max_pool2d_with_indices_dtypes(dtype):
    x = torch.randint(-100, 100, (2, 3, 7, 8)) if not dtype.is_floating_point else randn(2, 3, 7, 8)
    if dtype == torch.uint8:
        x = x.abs()
    check_lowering(aten.max_pool2d_with_indices.default, x.to(dtype), [3, 3], [2, 2], [1, 1], [1, 1], True)


def test_max_pool2d_ties_nan_and_inf():
    # ties: the first maximum in scan order; NaN: the last NaN; all -inf: the first valid element
    x = torch.tensor([[[[1.0, 3.0, 3.0, NAN], [3.0, NAN, 0.0, 1.0], [-INF, -INF, 2.0, 2.0], [-INF, -INF, 2.0, 2.0]]]])
    check_lowering(aten.max_pool2d_with_indices.default, x, [2, 2], [2, 2], [0, 0], [1, 1], False)
    check_lowering(aten.max_pool2d_with_indices.default, x, [1, 4], [1, 1], [0, 0], [1, 1], False)
    check_lowering(aten.max_pool2d_with_indices.default, torch.full((1, 1, 3, 3), -INF), [2, 2], [1, 1], [1, 1], [1, 1], False)
    neg = -torch.arange(1, 17).reshape(1, 1, 4, 4)
    check_lowering(aten.max_pool2d_with_indices.default, neg, [2, 2], [2, 2], [1, 1], [1, 1], False)
    check_lowering(aten.max_pool2d_with_indices.default, torch.zeros(1, 1, 4, 4, dtype=torch.uint8), [3, 3], [2, 2], [1, 1], [1, 1], True)


def test_max_pool3d_with_indices():
    x = randn(2, 2, 5, 6, 7)
    check_lowering(aten.max_pool3d_with_indices.default, x, [2, 3, 2], [2, 2, 1], [1, 1, 0], [1, 1, 1], True)
    check_lowering(aten.max_pool3d_with_indices.default, x[0], [3, 2, 2], [1, 2, 2], [1, 0, 1], [1, 2, 1], False)
    check_lowering(aten.max_pool3d_with_indices.default, x.to(torch.bfloat16), [2, 2, 2], [], [0, 0, 0], [1, 1, 1], False)


@pytest.mark.parametrize("cfg", MAXPOOLS)
def test_max_pool2d_with_indices_backward(cfg):
    x = randn(2, 3, 9, 10)
    v, i = aten.max_pool2d_with_indices.default(x, *cfg)
    check_lowering(aten.max_pool2d_with_indices_backward.default, torch.randn_like(v), x, *cfg, i)


def test_max_pool_backward_indices_as_given():
    # the CPU kernel adds at whatever index it is given and skips -1
    x = randn(1, 2, 4, 4)
    i = torch.tensor([[[[0, 0], [15, -1]], [[5, 5], [5, 2]]]])
    g = randn(1, 2, 2, 2)
    check_lowering(aten.max_pool2d_with_indices_backward.default, g, x, [2, 2], [2, 2], [0, 0], [1, 1], False, i)
    xb = x.to(torch.bfloat16)
    check_lowering(aten.max_pool2d_with_indices_backward.default, g.to(torch.bfloat16), xb, [2, 2], [2, 2], [0, 0],
                   [1, 1], False, i, family="pool_backward")


def test_max_pool3d_with_indices_backward():
    x = randn(2, 2, 5, 6, 7)
    cfg = ([2, 3, 2], [2, 2, 1], [1, 1, 0], [1, 1, 1], True)
    v, i = aten.max_pool3d_with_indices.default(x, *cfg)
    check_lowering(aten.max_pool3d_with_indices_backward.default, torch.randn_like(v), x, *cfg, i)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_fractional_max_pool(dtype):
    for cases, op, nsp in ((FRACTIONAL_2D, aten.fractional_max_pool2d.default, 2),
                           (FRACTIONAL_3D, aten.fractional_max_pool3d.default, 3)):
        for shape, k, o in cases if dtype == torch.float32 else cases[:2]:
            x = randn(*shape, dtype=dtype)
            x.view(-1)[::7] = -INF
            x.view(-1)[5] = NAN
            x.view(-1)[6] = NAN
            batch = shape[0] if len(shape) == nsp + 2 else 1
            samples = torch.rand(batch, shape[-nsp - 1], nsp).to(dtype)
            check_lowering(op, x, k, o, samples, **EXACT)
    empty = randn(0, 1, 4, 5, 4, dtype=dtype)
    check_lowering(aten.fractional_max_pool3d.default, empty, [2, 2, 2], [2, 3, 2], torch.rand(0, 1, 3).to(dtype))


def test_fractional_max_pool_backward():
    x = randn(2, 3, 9, 9)
    v, i = aten.fractional_max_pool2d(x, [3, 3], [4, 4], torch.rand(2, 3, 2))
    check_lowering(aten.fractional_max_pool2d_backward.default, torch.randn_like(v), x, [3, 3], [4, 4], i)
    x = randn(2, 3, 5, 6, 7)
    v, i = aten.fractional_max_pool3d(x, [2, 2, 2], [3, 3, 3], torch.rand(2, 3, 3))
    check_lowering(aten.fractional_max_pool3d_backward.default, torch.randn_like(v), x, [2, 2, 2], [3, 3, 3], i)


def test_device_fractional_max_pool():
    def grads(pool):
        def fn(x, s):
            out, idx = pool(x, s)
            return out, idx, torch.autograd.grad(out.sin().sum(), x)[0]
        return fn

    x, s = randn(2, 3, 9, 9).requires_grad_(), torch.rand(2, 3, 2)
    check_device(grads(lambda x, s: F.fractional_max_pool2d(x, 3, output_size=4, return_indices=True,
                                                            _random_samples=s)), x, s,
                 must_run=["aten.fractional_max_pool2d.default", "aten.fractional_max_pool2d_backward.default"])
    x, s = randn(2, 3, 5, 6, 7).requires_grad_(), torch.rand(2, 3, 3)
    check_device(grads(lambda x, s: F.fractional_max_pool3d(x, 2, output_ratio=0.5, return_indices=True,
                                                            _random_samples=s)), x, s,
                 must_run=["aten.fractional_max_pool3d.default", "aten.fractional_max_pool3d_backward.default"])
    # without _random_samples the samples come from the device generator: same shapes, values in the input
    d = torch.randn(1, 2, 9, 9, device="neuron")
    out, idx = F.fractional_max_pool2d(d, 2, output_size=5, return_indices=True)
    assert "aten.fractional_max_pool2d.default" in torch_neuronx.get_executed_ops()
    assert out.shape == (1, 2, 5, 5) and torch.equal(out.cpu(), d.cpu().flatten(2).gather(2, idx.cpu().flatten(2)).view_as(out))


@pytest.mark.parametrize("cfg", AVGPOOLS)
def test_avg_pool2d(cfg):
    x = randn(2, 3, 9, 10)
    check_lowering(aten.avg_pool2d.default, x, *cfg)
    check_lowering(aten.avg_pool2d.default, x[0], *cfg)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int64])
def test_avg_pool2d_dtypes(dtype):
    x = torch.randint(-50, 50, (2, 3, 7, 8)).to(dtype) if not dtype.is_floating_point else randn(2, 3, 7, 8, dtype=dtype)
    for cfg in AVGPOOLS[1:4]:
        check_lowering(aten.avg_pool2d.default, x, *cfg)


@pytest.mark.parametrize("cfg", AVGPOOLS)
def test_avg_pool2d_backward(cfg):
    x = randn(2, 3, 9, 10)
    y = aten.avg_pool2d.default(x, *cfg)
    check_lowering(aten.avg_pool2d_backward.default, torch.randn_like(y), x, *cfg)


def test_avg_pool2d_backward_bfloat16():
    x = randn(2, 3, 9, 10, dtype=torch.bfloat16)
    cfg = AVGPOOLS[2]
    y = aten.avg_pool2d.default(x, *cfg)
    check_lowering(aten.avg_pool2d_backward.default, torch.randn_like(y), x, *cfg, family="pool_backward")


def test_avg_pool3d_and_backward():
    x = randn(2, 2, 5, 6, 7)
    for cfg in ([[2, 3, 2], [2, 2, 1], [1, 1, 0], True, False, None], [[3, 2, 2], [], [1, 0, 1], False, True, 3]):
        check_lowering(aten.avg_pool3d.default, x, *cfg)
        y = aten.avg_pool3d.default(x, *cfg)
        check_lowering(aten.avg_pool3d_backward.default, torch.randn_like(y), x, *cfg)
    check_lowering(aten.avg_pool3d.default, torch.randint(-9, 9, (1, 2, 4, 4, 4)), [2, 2, 2], [1, 1, 1], [1, 1, 1],
                   False, True, None)


@pytest.mark.parametrize("out", [[4, 5], [3, 1], [1, 1], [9, 10], [7, 3]])
def test_adaptive_avg_pool2d(out):
    x = randn(2, 3, 9, 10)
    check_lowering(aten._adaptive_avg_pool2d.default, x, out)
    y = aten._adaptive_avg_pool2d.default(x, out)
    check_lowering(aten._adaptive_avg_pool2d_backward.default, torch.randn_like(y), x)


def test_adaptive_avg_pool2d_dtypes_and_unbatched():
    x = randn(3, 9, 10)
    check_lowering(aten._adaptive_avg_pool2d.default, x, [4, 4])
    check_lowering(aten._adaptive_avg_pool2d_backward.default, randn(3, 4, 4), x)
    xb = randn(2, 3, 9, 10, dtype=torch.bfloat16)
    check_lowering(aten._adaptive_avg_pool2d.default, xb, [4, 5])
    check_lowering(aten._adaptive_avg_pool2d_backward.default, randn(2, 3, 4, 5, dtype=torch.bfloat16), xb,
                   family="pool_backward")


def test_adaptive_avg_pool3d():
    x = randn(2, 2, 5, 6, 7)
    for out in ([2, 4, 3], [5, 3, 7], [1, 1, 1]):
        check_lowering(aten._adaptive_avg_pool3d.default, x, out)
        y = aten._adaptive_avg_pool3d.default(x, out)
        check_lowering(aten._adaptive_avg_pool3d_backward.default, torch.randn_like(y), x)


# ---------------------------------------------------------------------------------------------
# on the device


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_device_max_pool(dtype):
    ops = ["aten.max_pool2d_with_indices.default", "aten.max_pool2d_with_indices_backward.default"]
    x = randn(2, 3, 9, 10, dtype=dtype)
    _check_pool(lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True), x, ops)
    _check_pool(lambda x: F.max_pool2d(x, (3, 2), (2, 1), 1, dilation=(2, 1)), x, ops)
    _check_pool(lambda x: F.max_pool1d(x[0], 3, 2, return_indices=True), x, ops)
    ops3 = ["aten.max_pool3d_with_indices.default", "aten.max_pool3d_with_indices_backward.default"]
    _check_pool(lambda x: F.max_pool3d(x, 2, 2, 1, return_indices=True), randn(1, 2, 5, 6, 7, dtype=dtype), ops3)


def test_device_max_pool_nan_and_ints():
    x = torch.tensor([[[[1.0, 3.0, 3.0, NAN], [3.0, NAN, 0.0, 1.0], [-INF, -INF, 2.0, 2.0], [-INF, -INF, 2.0, 2.0]]]])
    check_device(lambda x: F.max_pool2d(x, 2, return_indices=True), x,
                 must_run=["aten.max_pool2d_with_indices.default"])
    for dtype in (torch.int64, torch.uint8):
        xi = torch.randint(0, 100, (2, 3, 7, 8)).to(dtype)
        check_device(lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True), xi,
                     must_run=["aten.max_pool2d_with_indices.default"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_device_avg_pool(dtype):
    ops = ["aten.avg_pool2d.default", "aten.avg_pool2d_backward.default"]
    x = randn(2, 3, 9, 10, dtype=dtype)
    _check_pool(lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), x, ops)
    _check_pool(lambda x: F.avg_pool2d(x, (3, 2), (2, 3), 1, divisor_override=4), x, ops)
    _check_pool(lambda x: F.avg_pool1d(x[0], 3, 2, 1), x, ops)
    if dtype == torch.float32:  # the CPU has no 16-bit avg_pool3d
        ops3 = ["aten.avg_pool3d.default", "aten.avg_pool3d_backward.default"]
        _check_pool(lambda x: F.avg_pool3d(x, 3, 2, 1, ceil_mode=True), randn(1, 2, 5, 6, 7), ops3)


def test_device_avg_pool_int64():
    x = torch.randint(-50, 50, (2, 3, 7, 8))
    check_device(lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), x, must_run=["aten.avg_pool2d.default"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_device_adaptive_avg_pool(dtype):
    ops = ["aten._adaptive_avg_pool2d.default", "aten._adaptive_avg_pool2d_backward.default"]
    x = randn(2, 3, 9, 10, dtype=dtype)
    _check_pool(lambda x: F.adaptive_avg_pool2d(x, (4, 3)), x, ops)
    _check_pool(lambda x: F.adaptive_avg_pool2d(x, (3, 5)), x, ops)
    ops3 = ["aten._adaptive_avg_pool3d.default", "aten._adaptive_avg_pool3d_backward.default"]
    _check_pool(lambda x: F.adaptive_avg_pool3d(x, (2, 3, 4)), randn(1, 2, 5, 6, 7, dtype=dtype), ops3)


# ---------------------------------------------------------------------------------------------
# adaptive_max_pool2d


@pytest.mark.parametrize("shape,out", [((2, 3, 8, 8), (4, 4)), ((1, 2, 7, 5), (3, 4)), ((3, 5, 6), (4, 1))])
def test_adaptive_max_pool2d(shape, out):
    x = randn(*shape, seed=0)
    check_lowering(aten.adaptive_max_pool2d.default, x, out)
    check_lowering(aten.adaptive_max_pool2d.default, x.to(BF), out)
    _, idx = aten.adaptive_max_pool2d.default(x, out)
    g = randn(*idx.shape, seed=1)
    check_lowering(aten.adaptive_max_pool2d_backward.default, g, x, idx)
    check_lowering(aten.adaptive_max_pool2d_backward.default, g.to(BF), x.to(BF), idx, family="pool_backward")


def test_adaptive_max_pool2d_ties_nan():
    x = torch.zeros(1, 1, 5, 5)
    x[0, 0, 1, 1] = float("nan")
    x[0, 0, 3, 2] = float("nan")
    x[0, 0, 4, 4] = -float("inf")
    check_lowering(aten.adaptive_max_pool2d.default, x, (2, 3))
    check_lowering(aten.adaptive_max_pool2d.default, torch.full((1, 4, 4), -float("inf")), (3, 3))


# ---------------------------------------------------------------------------------------------
# on the device: the user-level call runs on neuron, no CPU fallback


@pytest.mark.parametrize("dtype", [F32, BF])
def test_device_adaptive_max_pool2d(dtype):
    x = randn(2, 3, 7, 9, seed=0).to(dtype).requires_grad_()

    def fn(x):
        out, idx = torch.nn.functional.adaptive_max_pool2d(x, (3, 4), return_indices=True)
        (grad,) = torch.autograd.grad(out, x, torch.ones_like(out))
        return out, idx, grad

    check_device(fn, x, must_run=["aten.adaptive_max_pool2d.default", "aten.adaptive_max_pool2d_backward.default"])
