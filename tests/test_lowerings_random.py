"""Lowerings of random ops with deterministic parts (torch_neuronx/ops/random.py): rrelu_with_noise
(and its in-place and functional forms). Eval mode is compared with PyTorch's CPU kernel
(lowering_harness, and F.rrelu on the device vs the CPU); training mode draws from the device's
generator, so it is checked by its definition (slopes in [lower, upper), noise written in place)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_neuronx  # noqa: E402
from device_harness import check_device  # noqa: E402
from lowering_harness import check_lowering, run_lowering  # noqa: E402
from tolerances import EXACT  # noqa: E402

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_rrelu_eval(dtype):
    x = torch.tensor([-3.0, -0.5, -0.0, 0.0, 2.0, NAN, -INF, INF]).to(dtype)
    noise = torch.full(x.shape, 7.0, dtype=dtype)
    for lower, upper in ((0.125, 1 / 3), (0.1, 0.3), (0.0, 1.0)):
        want = aten.rrelu_with_noise(x, noise.clone(), lower, upper, False)
        got_out, got_noise = run_lowering(aten.rrelu_with_noise.default, x, noise, lower, upper, False)
        torch.testing.assert_close(got_out, want, **EXACT, equal_nan=True)
        assert torch.equal(got_noise, noise)  # eval mode leaves noise as it is
        check_lowering(aten.rrelu_with_noise_functional.default, x, noise, lower, upper, False, **EXACT)


def test_rrelu_training():
    x = torch.randn(6, 7)
    x[0, 0] = 0.0
    x[0, 1] = NAN
    out, noise = run_lowering(aten.rrelu_with_noise.default, x, torch.empty_like(x), 0.1, 0.3, True)
    _check_rrelu_training(x, out, noise, 0.1, 0.3)
    assert (noise[x <= 0] < 0.3).all()  # float32: the slope itself, below upper
    for dtype in (torch.bfloat16, torch.float64):
        xd = x.to(dtype)
        out, noise = run_lowering(aten.rrelu_with_noise.default, xd, torch.empty_like(xd), 0.1, 0.3, True)
        assert out.dtype == noise.dtype == dtype
        if dtype == torch.bfloat16:
            _check_rrelu_training(xd, out, noise, 0.1, 0.3)
        else:  # float64 slopes are drawn in float64: out is x * noise exactly
            neg = xd <= 0
            assert torch.equal(out[neg], xd[neg] * noise[neg])
            torch.testing.assert_close(out[~neg], xd[~neg], **EXACT, equal_nan=True)
    # another key, other slopes
    _, noise2 = run_lowering(aten.rrelu_with_noise.default, x, torch.empty_like(x), 0.1, 0.3, True, key_seed=1)
    assert not torch.equal(noise[neg], noise2[neg])


def _products_rounding_to(x, noise):
    """For each element, the smallest and largest value of round(x * r) over the slopes r that round to
    `noise` in its dtype, computed on the CPU. rrelu multiplies by the float32 slope it draws and stores
    that slope rounded (as PyTorch's CPU kernel does), so for float32 this is x * noise exactly; for
    bfloat16 the output must lie in these bounds (rounding is monotonic, so the bounds are exact)."""
    if noise.dtype == torch.float32:
        p = x * noise
        return p, p
    n = noise.float()
    below = torch.nextafter(noise, torch.tensor(-INF, dtype=noise.dtype)).float()
    above = torch.nextafter(noise, torch.tensor(INF, dtype=noise.dtype)).float()
    # the midpoints to the neighbours: exact in float32, the ends of the interval rounding to noise
    a = (x.float() * ((n + below) / 2)).to(x.dtype)
    b = (x.float() * ((n + above) / 2)).to(x.dtype)
    return torch.minimum(a, b), torch.maximum(a, b)


def _check_rrelu_training(x, out, noise, lower, upper):
    """out and noise from the device (or the lowering), brought to the CPU: noise is 1 where x > 0
    and a slope in [lower, upper) elsewhere; out is x where x > 0 and x times that slope elsewhere."""
    neg = x <= 0
    lo_t, hi_t = torch.tensor(lower, dtype=x.dtype), torch.tensor(upper, dtype=x.dtype)
    assert torch.equal(noise[~neg], torch.ones_like(noise[~neg]))
    assert ((noise[neg] >= lo_t) & (noise[neg] <= hi_t)).all()
    torch.testing.assert_close(out[~neg], x[~neg], **EXACT, equal_nan=True)  # NaN is not <= 0: kept
    lo, hi = _products_rounding_to(x[neg], noise[neg])
    assert ((out[neg] >= lo) & (out[neg] <= hi)).all(), (x[neg], noise[neg], out[neg], lo, hi)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_device_rrelu(dtype):
    x = torch.randn(4, 5).to(dtype)
    check_device(lambda x: F.rrelu(x, training=False), x, must_run=["aten.rrelu_with_noise.default"])
    check_device(lambda x: F.rrelu(x.clone(), 0.1, 0.3, training=False, inplace=True), x,
                 must_run=["aten.rrelu_with_noise_.default"])

    def written(x, n):
        out = aten.rrelu_with_noise(x, n, 0.1, 0.3, False)
        return out, n

    check_device(written, x, torch.full((4, 5), 7.0).to(dtype), must_run=["aten.rrelu_with_noise.default"])
    # training: the slopes come from the device's generator, so the reference is computed on the CPU
    # from the device's noise; nothing falls back (the conftest fixture checks)
    x = torch.randn(40, 50).to(dtype)
    x[0, :3] = torch.tensor([0.0, -0.0, NAN])
    d = x.to("neuron")
    noise = torch.empty_like(d)
    torch_neuronx.clear_op_tracking()
    out = aten.rrelu_with_noise(d, noise, 0.1, 0.3, True)
    assert "aten.rrelu_with_noise.default" in torch_neuronx.get_executed_ops()
    assert out.dtype == noise.dtype == dtype
    _check_rrelu_training(x, out.cpu(), noise.cpu(), 0.1, 0.3)
    # the in-place module form (its noise is internal): out is x times a slope in [1/8, 1/3)
    y = F.rrelu(d.clone(), training=True, inplace=True).cpu()
    assert "aten.rrelu_with_noise_.default" in torch_neuronx.get_executed_ops()
    neg = x <= 0
    torch.testing.assert_close(y[~neg], x[~neg], **EXACT, equal_nan=True)
    bounds = torch.stack([(x[neg].float() * (1 / 3)).to(dtype), (x[neg].float() * 0.125).to(dtype)])
    assert ((y[neg] >= bounds.amin(0)) & (y[neg] <= bounds.amax(0))).all()


def test_device_rrelu_training_backward():
    d = torch.randn(4, 5, device="neuron").requires_grad_()
    out = F.rrelu(d, 0.1, 0.3, training=True)
    (grad,) = torch.autograd.grad(out.sum(), d)
    assert "aten.rrelu_with_noise.default" in torch_neuronx.get_executed_ops()
    x, o, g = d.detach().cpu(), out.detach().cpu(), grad.cpu()
    # the gradient is the slope used (1 where x > 0): float32 x * slope, recomputed on the CPU, is exact
    _check_rrelu_training(x, o, g, 0.1, 0.3)


def test_native_dropout_backward_promotes_integral_grads():
    # grad * mask * scale: a bool/int grad becomes the default float dtype (the scale is not truncated)
    g = torch.tensor([True, False, True, True])
    m = torch.tensor([True, True, False, True])
    for grad in (g, g.to(torch.int64)):
        want = torch.ops.aten.native_dropout_backward(grad, m, 0.5)
        got = torch.ops.aten.native_dropout_backward(grad.to("neuron"), m.to("neuron"), 0.5)
        assert got.dtype == want.dtype == torch.float32
        torch.testing.assert_close(got.cpu(), want)
