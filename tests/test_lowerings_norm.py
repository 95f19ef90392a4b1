"""Lowerings of ops/norm.py (batch norm, layer norm, group norm, and their backwards):
each compared with PyTorch's CPU kernel as a pure jax function (tests/lowering_harness.py) and,
where the op reaches eager, the user-level call run on the neuron device vs the CPU with no CPU
fallback (tests/device_harness.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from device_harness import check_device  # noqa: E402
from helpers import randn  # noqa: E402
from lowering_harness import check_lowering, chk, compare_outputs, run_lowering, tolerance  # noqa: E402
from tolerances import EXACT  # noqa: E402

aten = torch.ops.aten


def bn_args(shape=(4, 3, 5, 6), dtype=torch.float32, affine=True):
    c = shape[1]
    x = randn(*shape, dtype=dtype)
    w, b = (randn(c), randn(c)) if affine else (None, None)
    return x, w, b, randn(c), torch.rand(c) + 0.5


def check_written(op, *args, n_out, written, equal_nan=False):
    """Compare an op that writes some of its arguments: its returns, then the written arguments (same
    dtype as PyTorch's, no cast; batch norm tolerances)."""
    cpu_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    expected = op(*cpu_args)
    got = run_lowering(op, *[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    assert len(got) == n_out + len(written)
    if not args[5] and expected[1].numel() == 0:  # eval mode: the CPU's statistics are empty, the
        rm, rv, eps = args[3], args[4], args[7]  # device's the running ones (CUDA's convention)
        expected = (expected[0], rm.float(), torch.rsqrt(rv.float() + eps)) + tuple(expected[3:])
    for e, g in list(zip(expected[:n_out], got[:n_out])) + [(cpu_args[i], g) for i, g in zip(written, got[n_out:])]:
        torch.testing.assert_close(g, e, equal_nan=equal_nan, **tolerance(e, family="batch_norm"))


# ---------------------------------------------------------------------------------------------
# normalization


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_layer_norm(dtype):
    x = randn(3, 4, 6, dtype=dtype) * 2 + 1
    w, b = randn(6, dtype=dtype), randn(6, dtype=dtype)
    chk(aten.native_layer_norm.default, x, [6], w, b, 1e-5)
    chk(aten.native_layer_norm.default, x, [6], None, None, 1e-5)
    chk(aten.native_layer_norm.default, x, [4, 6], randn(4, 6, dtype=dtype), None, 1e-3)
    out, mean, rstd = run_lowering(aten.native_layer_norm.default, x, [4, 6], None, None, 1e-5)
    assert mean.shape == (3, 1, 1) and rstd.shape == (3, 1, 1)
    if dtype == torch.bfloat16:  # float32 weights (autocast's): the CPU's statistics are float32 too
        chk(aten.native_layer_norm.default, x, [6], w.float(), b.float(), 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_layer_norm_backward(dtype, none_ok):
    x = randn(3, 4, 6, dtype=dtype)
    g = randn(3, 4, 6, dtype=dtype)
    w, b = randn(4, 6, dtype=dtype), randn(4, 6, dtype=dtype)
    _, mean, rstd = aten.native_layer_norm.default(x, [4, 6], w, b, 1e-5)
    op = aten.native_layer_norm_backward.default
    for args in (
        (g, x, [4, 6], mean, rstd, w, b, [True, True, True]),
        (g, x, [4, 6], mean, rstd, None, None, [True, False, False]),
        (g, x, [4, 6], mean, rstd, w, b, [False, True, False]),
        (g, x, [4, 6], mean, rstd, w, b, [False, False, True]),
    ):
        compare_outputs(op(*args), none_ok(op, *args))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_group_norm(dtype, none_ok):
    N, C, H, W, G = 2, 6, 3, 4, 3
    x = randn(N, C, H, W, dtype=dtype) * 2 + 0.5
    w, b = randn(C, dtype=dtype), randn(C, dtype=dtype)
    chk(aten.native_group_norm.default, x, w, b, N, C, H * W, G, 1e-5)
    chk(aten.native_group_norm.default, x, None, None, N, C, H * W, G, 1e-5)
    chk(aten.native_group_norm.default, x.reshape(N, C, H * W), w, None, N, C, H * W, 2, 1e-5)
    _, mean, rstd = aten.native_group_norm.default(x, w, b, N, C, H * W, G, 1e-5)
    g = randn(N, C, H, W, dtype=dtype)
    op = aten.native_group_norm_backward.default
    for args in (
        (g, x, mean, rstd, w, N, C, H * W, G, [True, True, True]),
        (g, x, mean, rstd, None, N, C, H * W, G, [True, False, False]),
        (g, x, mean, rstd, w, N, C, H * W, G, [False, True, True]),
    ):
        compare_outputs(op(*args), none_ok(op, *args))


# ---------------------------------------------------------------------------------------------
# batch norm


@pytest.mark.parametrize("dtype,shape", [
    (torch.float32, (4, 3, 5, 6)), (torch.bfloat16, (4, 3, 5, 6)), (torch.float32, (8, 5)), (torch.float32, (2, 3, 2, 3, 4)),
])
def test_native_batch_norm_legit(dtype, shape, none_ok):
    x, w, b, rm, rv = bn_args(shape, dtype)
    for training in (True, False):
        check_written(aten._native_batch_norm_legit.default, x, w, b, rm, rv, training, 0.1, 1e-5, n_out=3,
                      written=(3, 4))
    check_lowering(aten._native_batch_norm_legit.no_stats, x, w, b, True, 0.1, 1e-5, family="batch_norm")
    check_lowering(aten._native_batch_norm_legit.no_stats, x, None, None, True, 0.1, 1e-5, family="batch_norm")
    out = none_ok(aten._native_batch_norm_legit_no_training.default, x, w, b, rm, rv, 0.1, 1e-5)
    want = aten._native_batch_norm_legit_no_training.default(x, w, b, rm, rv, 0.1, 1e-5)
    torch.testing.assert_close(out[0], want[0], **tolerance(want[0], family="batch_norm"))
    # eval-mode statistics: the CPU's are empty; the device's are the running statistics (the
    # convention of CUDA and of PyTorch's reference decomposition), computed here on the CPU
    assert want[1].numel() == want[2].numel() == 0
    torch.testing.assert_close(out[1], rm.float(), **EXACT)
    torch.testing.assert_close(out[2], torch.rsqrt(rv.float() + 1e-5))


def test_native_batch_norm_legit_functional_and_batch_norm_update_ops(none_ok):
    x, w, b, rm, rv = bn_args()
    check_lowering(aten._native_batch_norm_legit_functional.default, x, w, b, rm, rv, True, 0.1, 1e-5,
                   family="batch_norm")
    check_lowering(aten._native_batch_norm_legit_functional.default, x, None, b, rm, rv, True, 0.3, 1e-3,
                   family="batch_norm")
    # _batch_norm_with_update writes the running stats; its 4th return (reserve) is empty
    ra, rb = rm.clone(), rv.clone()
    exp = aten._batch_norm_with_update.default(x, w, b, ra, rb, 0.1, 1e-5)
    got = none_ok(aten._batch_norm_with_update.default, x, w, b, rm.clone(), rv.clone(), 0.1, 1e-5)
    compare_outputs(exp[:3] + (ra, rb), got[:3] + got[4:], family="batch_norm")
    assert got[3] is None
    exp = aten._batch_norm_no_update.default(x, w, b, rm, rv, 0.1, 1e-5)
    got = none_ok(aten._batch_norm_no_update.default, x, w, b, rm, rv, 0.1, 1e-5)
    torch.testing.assert_close(got[0], exp[0], **tolerance(exp[0], family="batch_norm"))


def test_batch_norm_running_var_single_value_is_nan():
    x, w, b, rm, rv = bn_args((1, 3, 1, 1))
    check_written(aten._native_batch_norm_legit.default, x, w, b, rm, rv, True, 0.1, 1e-5, n_out=3, written=(3, 4),
                  equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_batch_norm_backward(dtype, none_ok):
    x, w, b, rm, rv = bn_args(dtype=dtype)
    _, sm, si = aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5)
    g = torch.randn_like(x)
    for train in (True, False):
        args = (g, x, w, rm, rv, sm, si, train, 1e-5)
        check_lowering(aten.native_batch_norm_backward.default, *args, [True, True, True], family="batch_norm")
        compare_outputs(aten.native_batch_norm_backward.default(*args, [False, True, False]),
                        none_ok(aten.native_batch_norm_backward.default, *args, [False, True, False]),
                        family="batch_norm")
    args = (g, x, None, rm, rv, sm, si, True, 1e-5)
    compare_outputs(aten.native_batch_norm_backward.default(*args, [True, False, False]),
                    none_ok(aten.native_batch_norm_backward.default, *args, [True, False, False]), family="batch_norm")


def test_batch_norm_backward(none_ok):
    x, w, b, rm, rv = bn_args()
    _, sm, si, reserve = aten._batch_norm_with_update.default(x, w, b, rm.clone(), rv.clone(), 0.1, 1e-5)
    g = torch.randn_like(x)
    check_lowering(aten.batch_norm_backward.default, g, x, w, rm, rv, sm, si, True, 1e-5, [True, True, True], reserve,
                   family="batch_norm")


# ---------------------------------------------------------------------------------------------
# on the device


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_device_batch_norm_module(dtype):
    x = randn(4, 3, 5, 6, dtype=dtype).requires_grad_()
    w = randn(3).requires_grad_()
    b = randn(3).requires_grad_()
    rm, rv = randn(3), torch.rand(3) + 0.5

    def train(x, w, b, rm, rv, gy):
        bn = torch.nn.BatchNorm2d(3, momentum=0.2, device=x.device, dtype=torch.float32)
        with torch.no_grad():
            bn.weight.copy_(w)
            bn.bias.copy_(b)
            bn.running_mean.copy_(rm)
            bn.running_var.copy_(rv)
        bn.train()
        y = bn(x)
        gx, gw, gb = torch.autograd.grad(y, (x, bn.weight, bn.bias), gy)
        return y, gx, gw, gb, bn.running_mean, bn.running_var, bn.num_batches_tracked

    def evaluate(x, w, b, rm, rv, gy):
        y = F.batch_norm(x, rm, rv, w, b, training=False, eps=1e-3)
        return (y,) + torch.autograd.grad(y, (x, w, b), gy)

    gy = randn(4, 3, 5, 6, dtype=dtype)  # float32 parameters with a 16-bit input, as autocast leaves them
    check_device(train, x, w, b, rm, rv, gy, must_run=["aten.native_batch_norm_backward.default"], family="batch_norm")
    check_device(evaluate, x, w, b, rm, rv, gy, must_run=["aten.native_batch_norm_backward.default"], family="batch_norm")


def test_device_batch_norm_ops():
    x, w, b, rm, rv = bn_args()

    def legit(x, w, b, rm, rv):
        rm, rv = rm.clone(), rv.clone()  # written in place
        out = aten._native_batch_norm_legit.default(x, w, b, rm, rv, True, 0.1, 1e-5)
        return out + (rm, rv)

    check_device(legit, x, w, b, rm, rv, family="batch_norm", must_run=["aten._native_batch_norm_legit.default"])
    check_device(lambda x, w, b, rm, rv: aten._native_batch_norm_legit.default(x, w, b, rm, rv, False, 0.1, 1e-5)[0],
                 x, w, b, rm, rv, family="batch_norm", must_run=["aten._native_batch_norm_legit.default"])
    check_device(lambda x, w, b: aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5), x, w, b, family="batch_norm",
                 must_run=["aten._native_batch_norm_legit.no_stats"])
    check_device(lambda *a: aten._native_batch_norm_legit_no_training.default(*a, 0.1, 1e-5)[0], x, w, b, rm, rv, family="batch_norm",
                 must_run=["aten._native_batch_norm_legit_no_training.default"])
    check_device(lambda *a: aten._native_batch_norm_legit_functional.default(*a, True, 0.1, 1e-5), x, w, b, rm, rv,
                 family="batch_norm", must_run=["aten._native_batch_norm_legit_functional.default"])

    def with_update(x, w, b, rm, rv):
        rm, rv = rm.clone(), rv.clone()
        out = aten._batch_norm_with_update.default(x, w, b, rm, rv, 0.1, 1e-5)
        return out[:3] + (rm, rv)

    check_device(with_update, x, w, b, rm, rv, family="batch_norm", must_run=["aten._batch_norm_with_update.default"])
    check_device(lambda *a: aten._batch_norm_no_update.default(*a, 0.1, 1e-5)[0], x, w, b, rm, rv, family="batch_norm",
                 must_run=["aten._batch_norm_no_update.default"])
    _, sm, si, reserve = aten._batch_norm_with_update.default(x, w, b, rm.clone(), rv.clone(), 0.1, 1e-5)
    g = torch.randn_like(x)
    check_device(lambda *a: aten.batch_norm_backward.default(*a[:-1], True, 1e-5, [True, True, True], a[-1]),
                 g, x, w, rm, rv, sm, si, reserve, family="batch_norm", must_run=["aten.batch_norm_backward.default"])
