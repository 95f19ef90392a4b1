"""Lowerings of ops/random.py: the samplers (normal_, uniform_, random_, bernoulli, exponential,
log_normal, normal's overloads, native_dropout) checked by their statistics and definitions, and
rrelu_with_noise (and its in-place and functional forms). rrelu's eval mode is compared with
PyTorch's CPU kernel (lowering_harness, and F.rrelu on the device vs the CPU); training mode draws
from the device's generator, so it is checked by its definition (slopes in [lower, upper), noise
written in place)."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_neuronx  # noqa: E402
from device_harness import check_device  # noqa: E402
from helpers import randn  # noqa: E402
from lowering_harness import check_lowering, run_lowering, to_jax, to_torch  # noqa: E402
import warm_cache  # noqa: E402
from tolerances import EXACT  # noqa: E402
from torch_neuronx.runtime.lazy_jax import jax  # noqa: E402
from torch_neuronx.ops import LOWERINGS  # noqa: E402
from torch_neuronx.ops import random as rnd  # noqa: E402

aten = torch.ops.aten
F32 = torch.float32
BF = torch.bfloat16
NAN, INF = float("nan"), float("inf")
N = (100, 100)


def run_random(op, *args, key_seed=0, impl="rbg", **kwargs):
    """run_lowering with the PRNG key passed explicitly (the harness treats `Generator?` as static)."""
    with warm_cache.harness_compiles():  # the key made by jax alone: the test's compile, not the product's
        key = jax.random.key(key_seed, impl=impl)
    return run_lowering(op, *args, key_seed=key_seed, generator=key, **kwargs)


def _stats(t):
    t = t.double()
    return t.mean().item(), t.std().item()


def _close(value, target, tol):
    assert abs(value - target) < tol, (value, target)


FROM = getattr(aten.random_, "from")


def check_float(op, *args, family=None, **kwargs):
    """float32 as is, then bfloat16 (tensor args converted); torch's default tolerances for each, or
    tests/tolerances.py's entry `family` where PyTorch's 16-bit CPU kernel rounds intermediates."""
    check_lowering(op, *args, family=family, **kwargs)
    bf = [a.to(BF) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    check_lowering(op, *bf, family=family, **kwargs)


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


# ---------------------------------------------------------------------------------------------
# random ops: shape, dtype, range, mean/std within statistical tolerance (n = 10000), determinism
# per key, difference across keys. Keys are "rbg" keys (fast to compile); one test uses threefry
# keys built the way the executor builds them.


@pytest.mark.parametrize("dtype", [F32, BF, torch.float64])
def test_normal_(dtype):
    out = run_random(aten.normal_.default, torch.empty(*N, dtype=dtype), 2.0, 3.0)
    assert out.shape == N and out.dtype == dtype
    m, s = _stats(out)
    _close(m, 2.0, 0.12)
    _close(s, 3.0, 0.12)
    if dtype == F32:
        assert torch.equal(out, run_random(aten.normal_functional.default, torch.empty(*N), 2.0, 3.0))
        assert not torch.equal(out, run_random(aten.normal_.default, torch.empty(*N), 2.0, 3.0, key_seed=1))


@pytest.mark.usefixtures("jax_alone")
def test_threefry_key():
    """The executor's keys: threefry2x32 data (seed words) folded with the offset words."""
    key = jax.random.fold_in(jax.random.fold_in(
        jax.random.wrap_key_data(np.array([0, 42], np.uint32), impl="threefry2x32"), 0), 7)
    out = run_lowering(aten.normal_.default, torch.empty(*N), 0.0, 1.0, generator=key)
    m, s = _stats(out)
    _close(m, 0.0, 0.04)
    _close(s, 1.0, 0.04)


@pytest.mark.parametrize("dtype", [F32, BF])
def test_uniform_(dtype):
    out = run_random(aten.uniform_.default, torch.empty(*N, dtype=dtype), -2.0, 3.0)
    assert out.dtype == dtype and out.shape == N
    assert out.min().item() >= -2.0 and out.max().item() <= 3.0
    m, s = _stats(out)
    _close(m, 0.5, 0.05)
    _close(s, 5 / math.sqrt(12), 0.05)
    if dtype == F32:
        d = run_random(aten.uniform.default, torch.empty(*N), key_seed=5)
        assert d.min().item() >= 0 and d.max().item() < 1.0
        assert not torch.equal(d, (out + 2) / 5)


@pytest.mark.usefixtures("jax_alone")
def test_dynamic_float_arguments():
    """`dynamic=` floats arrive traced from the executor: the lowerings must accept traced values."""
    key = jax.random.key(0, impl="rbg")
    x = to_jax(torch.empty(*N))
    for op, args in ((aten.normal_.default, (2.0, 3.0)), (aten.uniform_.default, (-1.0, 1.0)),
                     (aten.bernoulli_.float, (0.25,))):
        fn = LOWERINGS[op].fn
        out = to_torch(jax.jit(lambda x, *a: fn(x, *a, key))(x, *args))
        assert out.shape == N and out.dtype == F32
        torch.testing.assert_close(out, run_random(op, torch.empty(*N), *args))
    for op in (aten.exponential_.default, aten.log_normal_.default, aten.normal.float_float, aten.uniform.default):
        assert set(LOWERINGS[op].dynamic) == {a.name for a in op._schema.arguments if str(a.type) == "float"}


@pytest.mark.parametrize("dtype,lo,hi", [(F32, 0, 2**24), (BF, 0, 2**8), (torch.int8, 0, 127),
                                         (torch.int64, 0, 2**63 - 1), (torch.bool, 0, 1)])
def test_random_default(dtype, lo, hi):
    out = run_random(aten.random_.default, torch.empty(*N, dtype=dtype))
    assert out.dtype == dtype and out.shape == N
    assert out.min().item() >= lo and out.max().item() <= hi
    _close(out.double().mean().item() / (hi - lo), 0.5, 0.05)  # spread over the whole range


def test_random_from_to():
    out = run_random(FROM, torch.empty(*N, dtype=torch.int64), -5, 5)
    assert out.min().item() == -5 and out.max().item() == 4
    _close(out.double().mean().item(), -0.5, 0.1)
    out = run_random(FROM, torch.empty(*N, dtype=torch.int8), 100, None)
    assert out.min().item() == 100 and out.max().item() == 127
    out = run_random(FROM, torch.empty(*N, dtype=torch.int64), 0, 2**40)  # 64-bit draws
    assert out.min().item() >= 0 and out.max().item() < 2**40
    _close(out.double().mean().item() / 2**40, 0.5, 0.05)
    out = run_random(FROM, torch.empty(*N, dtype=torch.int64), -(2**63), None)  # the full 64-bit range
    assert (out < -(2**61)).any() and (out > 2**61).any()
    out = run_random(aten.random.to, torch.empty(*N, dtype=BF), 7)
    assert out.dtype == BF and set(out.unique().tolist()) == set(range(7))


def test_bernoulli():
    out = run_random(aten.bernoulli_.float, torch.empty(*N), 0.3)
    assert out.dtype == F32 and set(out.unique().tolist()) == {0.0, 1.0}
    _close(out.mean().item(), 0.3, 0.02)
    assert not torch.equal(out, run_random(aten.bernoulli_.float, torch.empty(*N), 0.3, key_seed=4))
    out = run_random(aten.bernoulli.p, torch.empty(*N, dtype=torch.bool), 0.8)
    assert out.dtype == torch.bool
    _close(out.float().mean().item(), 0.8, 0.02)
    p = torch.cat([torch.zeros(N[0], N[1] // 2), torch.ones(N[0], N[1] // 2)], 1)
    assert torch.equal(run_random(aten.bernoulli.default, p), p)
    out = run_random(aten.bernoulli.default, torch.full(N, 0.5, dtype=BF))
    assert out.dtype == BF
    _close(out.float().mean().item(), 0.5, 0.02)
    out = run_random(aten.bernoulli_.Tensor, torch.empty(*N), torch.full((N[1],), 0.25))
    _close(out.mean().item(), 0.25, 0.02)
    out = run_random(aten.bernoulli.Tensor, torch.empty(*N, dtype=torch.int64), torch.tensor(0.6))
    assert out.dtype == torch.int64
    _close(out.double().mean().item(), 0.6, 0.02)


def test_exponential_log_normal():
    out = run_random(aten.exponential_.default, torch.empty(*N), 2.0)
    assert out.min().item() >= 0
    m, s = _stats(out)
    _close(m, 0.5, 0.03)
    _close(s, 0.5, 0.03)
    out = run_random(aten.exponential.default, torch.empty(*N, dtype=BF))
    assert out.dtype == BF
    _close(_stats(out)[0], 1.0, 0.05)
    out = run_random(aten.log_normal_.default, torch.empty(*N), 1.0, 0.5)
    assert out.min().item() > 0
    m, s = _stats(out.log())
    _close(m, 1.0, 0.03)
    _close(s, 0.5, 0.03)


def test_normal_tensor_overloads():
    mean = torch.linspace(-5, 5, N[1]).expand(*N).contiguous()
    std = torch.linspace(0.5, 2, N[1]).expand(*N).contiguous()
    for op, args, mu, sd in ((aten.normal.Tensor_float, (mean, 0.5), mean, 0.5),
                             (aten.normal.float_Tensor, (3.0, std), 3.0, std),
                             (aten.normal.Tensor_Tensor, (mean[:, :1].contiguous(), std[0]), mean[:, :1], std[0])):
        out = run_random(op, *args)
        assert out.shape == N and out.dtype == F32
        m, s = _stats((out - mu) / sd)
        _close(m, 0.0, 0.05)
        _close(s, 1.0, 0.05)
    assert run_random(aten.normal.Tensor_float, mean.to(BF), 1.0).dtype == BF
    out = run_random(aten.normal.float_float, 1.0, 2.0, list(N))
    assert out.dtype == F32 and out.shape == N
    m, s = _stats(out)
    _close(m, 1.0, 0.08)
    _close(s, 2.0, 0.08)


@pytest.mark.parametrize("dtype", [F32, BF])
@pytest.mark.usefixtures("jax_alone")
def test_native_dropout(dtype):
    x = randn(*N, seed=0).to(dtype)
    x[0, :4] = float("inf")
    fn = jax.jit(lambda a, key: rnd.native_dropout(a, 0.3, True, key))
    out, mask = (to_torch(o) for o in fn(to_jax(x), jax.random.key(0, impl="rbg")))
    assert mask.dtype == torch.bool and out.dtype == dtype and out.shape == N
    _close(mask.float().mean().item(), 0.7, 0.02)
    expected = (x.float() * mask) * (1 / 0.7)  # a dropped inf is nan, as ATen's input.mul(mask)
    torch.testing.assert_close(out.float(), expected.to(dtype).float(), equal_nan=True)
    if dtype == F32:
        out2, mask2 = (to_torch(o) for o in fn(to_jax(x), jax.random.key(1, impl="rbg")))
        assert not torch.equal(mask, mask2)
        out, mask = (to_torch(o) for o in rnd.native_dropout(to_jax(x), 0.3, False, None))
        assert mask.all() and torch.equal(out, x)
        out, mask = (to_torch(o) for o in rnd.native_dropout(to_jax(x[1:]), 1.0, True, jax.random.key(0, impl="rbg")))
        assert not mask.any() and (out == 0).all()


def test_native_dropout_backward():
    g, m = randn(4, 5, seed=0), randn(4, 5, seed=1) > 0
    check_float(aten.native_dropout_backward.default, g, m, 1 / 0.7)


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
