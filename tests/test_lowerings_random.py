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

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_rrelu_eval(dtype):
    x = torch.tensor([-3.0, -0.5, -0.0, 0.0, 2.0, NAN, -INF, INF]).to(dtype)
    noise = torch.full(x.shape, 7.0, dtype=dtype)
    for lower, upper in ((0.125, 1 / 3), (0.1, 0.3), (0.0, 1.0)):
        want = aten.rrelu_with_noise(x, noise.clone(), lower, upper, False)
        got_out, got_noise = run_lowering(aten.rrelu_with_noise.default, x, noise, lower, upper, False)
        torch.testing.assert_close(got_out, want, atol=0, rtol=0, equal_nan=True)
        assert torch.equal(got_noise, noise)  # eval mode leaves noise as it is
        check_lowering(aten.rrelu_with_noise_functional.default, x, noise, lower, upper, False, atol=0, rtol=0)


def test_rrelu_training():
    x = torch.randn(6, 7)
    x[0, 0] = 0.0
    x[0, 1] = NAN
    out, noise = run_lowering(aten.rrelu_with_noise.default, x, torch.empty_like(x), 0.1, 0.3, True)
    neg = x <= 0
    assert torch.equal(noise[~neg], torch.ones_like(noise[~neg]))
    assert ((noise[neg] >= 0.1) & (noise[neg] < 0.3)).all()
    torch.testing.assert_close(out, torch.where(neg, x * noise, x), equal_nan=True)
    # another key, other slopes
    _, noise2 = run_lowering(aten.rrelu_with_noise.default, x, torch.empty_like(x), 0.1, 0.3, True, key_seed=1)
    assert not torch.equal(noise[neg], noise2[neg])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_device_rrelu(dtype):
    x = torch.randn(4, 5).to(dtype)
    check_device(lambda x: F.rrelu(x, training=False), x, must_run=["aten.rrelu_with_noise.default"])
    check_device(lambda x: F.rrelu(x.clone(), 0.1, 0.3, training=False, inplace=True), x,
                 must_run=["aten.rrelu_with_noise_.default"])

    def written(x, n):
        out = aten.rrelu_with_noise(x, n, 0.1, 0.3, False)
        return out, n

    check_device(written, x, torch.full((4, 5), 7.0).to(dtype))
    # training: noise is written in place, the output is x * noise; nothing falls back
    d = x.to("neuron")
    noise = torch.empty_like(d)
    torch_neuronx.clear_op_tracking()
    out = aten.rrelu_with_noise(d, noise, 0.1, 0.3, True)
    y = F.rrelu(d.clone(), training=True, inplace=True)
    assert not torch_neuronx.get_fallback_ops(), torch_neuronx.get_fallback_ops()
    o, n, xc = out.cpu().float(), noise.cpu().float(), x.float()
    neg = xc <= 0
    assert torch.equal(n[~neg], torch.ones_like(n[~neg]))
    assert ((n[neg] >= 0.1) & (n[neg] <= 0.3)).all()
    torch.testing.assert_close(o, torch.where(neg, xc * n, xc), atol=2e-2, rtol=2e-2)
    assert y.shape == x.shape


def test_device_rrelu_training_backward():
    d = torch.randn(4, 5, device="neuron").requires_grad_()
    torch_neuronx.clear_op_tracking()
    out = F.rrelu(d, 0.1, 0.3, training=True)
    (grad,) = torch.autograd.grad(out.sum(), d)
    assert not torch_neuronx.get_fallback_ops(), torch_neuronx.get_fallback_ops()
    x, o, g = d.detach().cpu(), out.detach().cpu(), grad.cpu()
    torch.testing.assert_close(o, x * g)  # the gradient is the slope used


def test_native_dropout_backward_promotes_integral_grads():
    # grad * mask * scale: a bool/int grad becomes the default float dtype (the scale is not truncated)
    g = torch.tensor([True, False, True, True])
    m = torch.tensor([True, True, False, True])
    for grad in (g, g.to(torch.int64)):
        want = torch.ops.aten.native_dropout_backward(grad, m, 0.5)
        got = torch.ops.aten.native_dropout_backward(grad.to("neuron"), m.to("neuron"), 0.5)
        assert got.dtype == want.dtype == torch.float32
        torch.testing.assert_close(got.cpu(), want)
