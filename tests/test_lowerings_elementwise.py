"""Lowerings of ops/elementwise.py (arithmetic, math functions, activations, comparisons, bitwise ops and
shifts, gcd/lcm, angle/polar/frexp/nextafter/logaddexp/sinc/heaviside, dtype conversion) against
PyTorch's CPU kernels (tests/lowering_harness.py), and some user-level calls on the neuron device
(tests/device_harness.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402

from device_harness import check_device, check_device_float  # noqa: E402
from helpers import rand, randint, randn  # noqa: E402
from lowering_harness import check_lowering, chk, dev, run_lowering  # noqa: E402
from tolerances import EXACT  # noqa: E402

aten = torch.ops.aten
F32 = torch.float32
BF = torch.bfloat16
NAN, INF = float("nan"), float("inf")


SPECIAL = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0])


def check_float(op, *args, family=None, **kwargs):
    """float32 as is, then bfloat16 (tensor args converted); torch's default tolerances for each, or
    tests/tolerances.py's entry `family` where PyTorch's 16-bit CPU kernel rounds intermediates."""
    check_lowering(op, *args, family=family, **kwargs)
    bf = [a.to(BF) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    check_lowering(op, *bf, family=family, **kwargs)


UNARY_GENERAL = ["abs", "neg", "sign", "exp", "exp2", "expm1", "sin", "cos", "tan", "atan", "sinh", "cosh",
                 "tanh", "sigmoid", "erf", "floor", "ceil", "round", "trunc", "frac", "relu", "silu", "mish",
                 "hardsigmoid", "hardswish", "asinh", "reciprocal"]


UNARY_POSITIVE = ["sqrt", "rsqrt", "log", "log2", "log10", "log1p"]
UNARY_UNIT = ["asin", "acos", "atanh", "erfinv"]
NO_LOW_PRECISION = {aten.special_erfcx.default, aten.special_ndtri.default, aten.special_log_ndtr.default}


NO_LOW_PRECISION_NAMES = {str(op) for op in NO_LOW_PRECISION}


# ---------------------------------------------------------------------------------------------
# unary math


@pytest.mark.parametrize("name", UNARY_GENERAL)
def test_unary_general(name):
    op = getattr(aten, name).default
    check_float(op, torch.cat([randn(20, scale=2.0, seed=0), SPECIAL]))


@pytest.mark.parametrize("name", UNARY_POSITIVE)
def test_unary_positive(name):
    op = getattr(aten, name).default
    check_float(op, torch.cat([rand(20, lo=0.05, hi=5.0, seed=0), SPECIAL]))
    check_lowering(op, randint(6, lo=1, hi=50, seed=0))  # int -> default float dtype


@pytest.mark.parametrize("name", UNARY_UNIT)
def test_unary_unit(name):
    op = getattr(aten, name).default
    check_float(op, torch.cat([rand(20, lo=-0.95, hi=0.95, seed=0), SPECIAL]))


def test_acosh():
    check_float(aten.acosh.default, rand(10, lo=1.0, hi=5.0, seed=0))


@pytest.mark.parametrize("name", ["abs", "neg", "sign", "floor", "ceil", "round", "trunc", "relu"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int8])
def test_unary_int(name, dtype):
    check_lowering(getattr(aten, name).default, randint(3, 7, dtype=dtype, seed=0))


@pytest.mark.parametrize("name", ["sin", "exp", "sigmoid", "sqrt", "erf"])
def test_unary_int_to_float(name):
    x = randint(3, 4, lo=0, hi=9, seed=0)
    out = run_lowering(getattr(aten, name).default, x)
    assert out.dtype == torch.float32
    check_lowering(getattr(aten, name).default, x)


def test_unary_empty_and_bool():
    check_lowering(aten.exp.default, torch.empty(0, 3))
    check_lowering(aten.sign.default, torch.tensor([True, False]))
    check_lowering(aten.bitwise_not.default, torch.tensor([True, False]))


def test_round_decimals():
    x = randn(20, scale=50.0, seed=0)
    check_float(aten.round.decimals, x, decimals=2)
    check_float(aten.round.decimals, x, decimals=-1)
    check_lowering(aten.round.decimals, torch.tensor([0.125, 2.5, -0.5, 1.005]), decimals=2)
    check_lowering(aten.round.default, torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5]))  # half to even


def test_rounding_special():
    check_lowering(aten.frac.default, torch.tensor([-1.5, 2.25, -0.0]))
    check_lowering(aten.sign.default, torch.tensor([float("nan"), -0.0, 3.0, -2.0]))


# ---------------------------------------------------------------------------------------------
# binary arithmetic and type promotion


@pytest.mark.parametrize("name", ["add", "sub"])
def test_add_sub(name):
    op = getattr(aten, name)
    a, b = randn(3, 1, 4, seed=0), randn(1, 5, 4, seed=1)
    check_float(op.Tensor, a, b)
    check_float(op.Tensor, a, b, alpha=2.5, family="add_alpha")
    check_float(op.Scalar, a, 0.3, 2)
    check_lowering(op.Tensor, randint(3, 4, seed=0), randint(3, 4, seed=1, dtype=torch.int64), alpha=3)
    check_lowering(op.Tensor, randint(3, 4, lo=0, hi=255, dtype=torch.uint8, seed=0),
                   randint(4, lo=0, hi=255, dtype=torch.uint8, seed=0))
    check_lowering(op.Tensor, randint(3, 4, seed=0), 2.5)  # int tensor + float scalar -> float32
    check_lowering(op.Tensor, a, torch.tensor(1.25, dtype=torch.float64))  # 0-d f64 does not widen
    check_lowering(op.Tensor, randint(4, seed=0), torch.tensor(1.5, dtype=torch.float64))  # but widens ints to f64
    check_lowering(op.Tensor, a.to(BF), torch.tensor(0.1))  # 0.1 rounded to bfloat16 first, as the CPU
    check_lowering(op.Scalar, randint(3, 4, dtype=torch.int8, seed=0), 7, 1)


def test_add_bool_and_mixed():
    a, b = torch.tensor([True, False, True, False]), torch.tensor([True, True, False, False])
    check_lowering(aten.add.Tensor, a, b)
    check_lowering(aten.mul.Tensor, a, b)
    check_lowering(aten.add.Tensor, a, randint(4, seed=0))
    check_lowering(aten.mul.Tensor, randint(4, dtype=torch.uint8, lo=0, seed=0), randint(4, dtype=torch.int8, seed=3))


def test_add_promotion_dtype():
    out = run_lowering(aten.add.Tensor, randint(4, dtype=torch.int32, seed=0), 2.5)
    assert out.dtype == torch.float32
    out = run_lowering(aten.add.Tensor, randn(4, seed=0).to(BF), torch.tensor(0.5, dtype=torch.float64))
    assert out.dtype == torch.bfloat16
    out = run_lowering(aten.add.Tensor, randint(4, dtype=torch.int16, seed=0), 3)
    assert out.dtype == torch.int16


def test_mul_rsub():
    a, b = randn(3, 4, seed=0), randn(4, seed=1)
    check_float(aten.mul.Tensor, a, b)
    check_float(aten.mul.Scalar, a, -1.5)
    check_lowering(aten.mul.Tensor, randint(3, 4, dtype=torch.int64, seed=0), randint(4, seed=0))
    check_float(aten.rsub.Tensor, a, b, alpha=2)
    check_float(aten.rsub.Scalar, a, 1.0)
    check_lowering(aten.rsub.Scalar, randint(5, seed=0), 3, 2)


def test_div():
    a = randn(4, 6, scale=5.0, seed=0)
    b = randn(6, seed=1, scale=3.0)
    b[0] = 0.0
    check_float(aten.div.Tensor, a, b)
    check_float(aten.div.Scalar, a, 0.7)
    for mode in (None, "trunc", "floor"):
        check_float(aten.div.Tensor_mode, a, b, rounding_mode=mode)
        check_float(aten.div.Scalar_mode, a, -2.5, rounding_mode=mode)
    ai = randint(5, 6, lo=-50, hi=50, seed=0)
    bi = randint(6, lo=1, hi=9, seed=1) * torch.tensor([1, -1, 1, -1, 1, -1], dtype=torch.int32)
    check_lowering(aten.div.Tensor, ai, bi)  # int / int -> float
    assert run_lowering(aten.div.Tensor, ai, bi).dtype == torch.float32
    for mode in ("trunc", "floor"):
        check_lowering(aten.div.Tensor_mode, ai, bi, rounding_mode=mode)
        check_lowering(aten.div.Scalar_mode, ai, -3, rounding_mode=mode)
        check_lowering(aten.div.Tensor_mode, ai.to(torch.int64), bi.to(torch.int8), rounding_mode=mode)
    # floor division corner cases (Python semantics)
    x = torch.tensor([-7.0, 7.0, -7.0, 7.0, 0.0, -0.0, 5.0, -5.0, 1.0, float("inf"), float("nan")])
    y = torch.tensor([2.0, -2.0, -2.0, 2.0, -3.0, 3.0, 0.0, 0.0, 0.1, 2.0, 1.0])
    check_lowering(aten.div.Tensor_mode, x, y, rounding_mode="floor")
    check_lowering(aten.div.Tensor_mode, x, y, rounding_mode="trunc")


def test_floor_divide_remainder_fmod():
    a = randn(4, 6, scale=7.0, seed=0)
    b = randn(6, seed=1, scale=3.0)
    ai = randint(4, 6, lo=-40, hi=40, seed=0)
    bi = randint(6, lo=1, hi=7, seed=2) * torch.tensor([1, -1, 1, -1, -1, 1], dtype=torch.int32)
    for name in ("floor_divide", "remainder", "fmod"):
        packet = getattr(aten, name)
        tensor_op = packet.default if name == "floor_divide" else packet.Tensor
        check_float(tensor_op, a, b)
        check_float(packet.Scalar, a, -1.5)
        check_lowering(tensor_op, ai, bi)
        check_lowering(packet.Scalar, ai, 3)
        check_lowering(packet.Scalar, ai, -3)
        check_lowering(tensor_op, ai.to(torch.uint8).abs(), bi.abs().to(torch.uint8))
    check_lowering(aten.remainder.Tensor, torch.tensor([5.0, -5.0, 5.0, -5.0, 0.0]), torch.tensor([3.0, 3.0, -3.0, -3.0, -2.0]))


def test_pow_tensor_tensor():
    base = torch.tensor([-2.0, -2.0, -2.0, -0.5, -3.0, -0.0, -0.0, 0.0, 2.0, -1.0, -1.0, float("-inf"), float("nan"), 1.0, -4.0])
    expo = torch.tensor([2.0, 3.0, -1.0, 0.5, 3.0, 3.0, -1.0, -2.0, 0.5, float("inf"), 7.0, 0.5, 0.0, float("nan"), 0.5])
    check_lowering(aten.pow.Tensor_Tensor, base, expo)
    check_float(aten.pow.Tensor_Tensor, rand(4, 5, lo=0.1, hi=3, seed=0), randn(5, seed=2))
    ib = torch.tensor([2, -1, 1, 3, 0, -3, 5, -1, 7], dtype=torch.int64)
    ie = torch.tensor([-1, -3, -2, 40, 0, 3, 2, -4, 21], dtype=torch.int64)
    check_lowering(aten.pow.Tensor_Tensor, ib, ie)
    check_lowering(aten.pow.Tensor_Tensor, ib.to(torch.int32), ie.abs().to(torch.int32))
    check_lowering(aten.pow.Tensor_Tensor, randint(5, lo=0, hi=6, dtype=torch.uint8, seed=0),
                   randint(5, lo=0, hi=4, dtype=torch.uint8, seed=0))
    check_lowering(aten.pow.Tensor_Tensor, randint(5, lo=-4, hi=5, seed=0), torch.tensor(2.5, dtype=torch.float64))


@pytest.mark.parametrize("exponent", [0, 2, 3, 0.5, -0.5, -1, -2, 2.5, -3, 40, 3.0, 17])
def test_pow_tensor_scalar(exponent):
    x = torch.cat([randn(20, scale=2.0, seed=0), SPECIAL])
    check_lowering(aten.pow.Tensor_Scalar, x, exponent)
    check_lowering(aten.pow.Tensor_Scalar, x.to(BF), exponent)


def test_pow_int_and_scalar_base():
    xi = randint(10, lo=-6, hi=6, dtype=torch.int64, seed=0)
    check_lowering(aten.pow.Tensor_Scalar, xi, 2)
    check_lowering(aten.pow.Tensor_Scalar, xi, 5)
    check_lowering(aten.pow.Tensor_Scalar, xi, 0.5)
    check_lowering(aten.pow.Tensor_Scalar, xi.to(torch.int32), 3)
    assert run_lowering(aten.pow.Tensor_Scalar, xi.to(torch.int32), 3).dtype == torch.int32
    check_lowering(aten.pow.Scalar, 2, randint(8, lo=0, hi=20, seed=0))
    check_lowering(aten.pow.Scalar, 2.0, randn(8, seed=0))
    check_lowering(aten.pow.Scalar, -2.0, torch.tensor([1.0, 2.0, 3.0, 0.5, -1.0]))
    check_lowering(aten.pow.Scalar, 1.5, randn(6, seed=0).to(BF))


# ---------------------------------------------------------------------------------------------
# activations and their backward ops


def test_activations():
    x = torch.cat([randn(40, scale=4.0, seed=0), torch.tensor([0.0, -3.0, 3.0, 25.0, -25.0])])
    for approx in ("none", "tanh"):
        check_float(aten.gelu.default, x, approximate=approx)
    check_float(aten.softplus.default, x, 1, 20)
    check_float(aten.softplus.default, x, 2.0, 5.0)
    check_float(aten.elu.default, x, 1.0, 1.0, 1.0)
    check_float(aten.elu.default, x, 0.5, 1.05, 2.0)
    check_float(aten.leaky_relu.default, x, 0.01)
    check_float(aten.leaky_relu.default, x, 0.2)
    check_float(aten.hardtanh.default, x, -1, 1)
    check_float(aten.hardtanh.default, x, 0.0, 6.0)
    check_lowering(aten.hardtanh.default, randint(10, seed=0), -3, 4)
    check_float(aten.logit.default, rand(20, lo=0.001, hi=0.999, seed=0), family="logit")
    check_float(aten.logit.default, rand(20, seed=0), 0.1, family="logit")
    check_lowering(aten.logit.default, torch.tensor([-0.5, 0.0, 1.0, 1.5, float("nan")]))
    check_lowering(aten.logit.default, torch.tensor([-0.5, 0.0, 1.0, 1.5, float("nan")]), 0.05)
    for name in ("relu", "silu", "mish", "sigmoid", "hardsigmoid", "hardswish"):
        check_lowering(getattr(aten, name).default, torch.tensor([float("nan"), float("inf"), -float("inf")]))


def test_activation_backward():
    x = torch.cat([randn(40, scale=4.0, seed=0), torch.tensor([0.0, -3.0, 3.0, 1.0, -1.0])])
    g = randn(45, seed=1)
    for approx in ("none", "tanh"):
        check_float(aten.gelu_backward.default, g, x, approximate=approx)
    check_float(aten.threshold_backward.default, g, x, 0)
    check_float(aten.threshold_backward.default, g, x, 0.5)
    check_lowering(aten.threshold_backward.default, randint(45, seed=0), randint(45, seed=3), 0)
    check_float(aten.silu_backward.default, g, x)
    y = torch.sigmoid(x)
    check_float(aten.sigmoid_backward.default, g, y)
    check_float(aten.tanh_backward.default, g, torch.tanh(x))
    check_float(aten.leaky_relu_backward.default, g, x, 0.01, False)
    check_float(aten.hardtanh_backward.default, g, x, -1, 1)
    check_float(aten.hardtanh_backward.default, g, x, 0.0, 6.0)
    check_float(aten.hardsigmoid_backward.default, g, x)
    check_float(aten.hardswish_backward.default, g, x)
    check_float(aten.softplus_backward.default, g, x, 1, 20)
    check_float(aten.softplus_backward.default, g, x, 2.0, 3.0)
    check_float(aten.elu_backward.default, g, 1.0, 1.0, 1.0, False, x)
    check_float(aten.elu_backward.default, g, 0.7, 1.1, 1.5, True, torch.nn.functional.elu(x, 0.7))
    p = rand(45, lo=-0.1, hi=1.1, seed=0)
    check_float(aten.logit_backward.default, g, p)
    check_float(aten.logit_backward.default, g, p, 0.05)


# ---------------------------------------------------------------------------------------------
# comparisons, bitwise, logical, selection


@pytest.mark.parametrize("name", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons(name):
    packet = getattr(aten, name)
    a = torch.tensor([1.0, 2.0, float("nan"), -1.0, 0.1, 3.0])
    b = torch.tensor([1.0, 3.0, float("nan"), -2.0, 0.1, float("nan")])
    check_lowering(packet.Tensor, a, b)
    check_lowering(packet.Tensor, randn(3, 1, seed=0), randn(4, seed=1).to(BF))  # broadcast, f32 wins
    check_lowering(packet.Scalar, a, 0.1)
    check_lowering(packet.Scalar, randint(8, seed=0), 2.5)  # compared as floats
    check_lowering(packet.Tensor, randint(8, dtype=torch.uint8, lo=0, seed=0), randint(8, seed=1, dtype=torch.int64))
    bf = torch.tensor([0.1, 0.09, 0.1001, 0.0996]).to(BF)
    check_lowering(packet.Scalar, bf, 0.1)  # the Scalar is rounded to bf16 first


@pytest.mark.parametrize("name", ["bitwise_and", "bitwise_or", "bitwise_xor"])
def test_bitwise(name):
    packet = getattr(aten, name)
    for dt in (torch.int64, torch.uint8):
        check_lowering(packet.Tensor, randint(3, 5, lo=-100, hi=100, seed=0).to(dt),
                       randint(5, lo=-100, hi=100, seed=1).to(dt))
        check_lowering(packet.Scalar, randint(3, 5, lo=-100, hi=100, seed=0).to(dt), 0x5A)
    check_lowering(packet.Tensor, torch.tensor([True, False, True]), torch.tensor([True, True, False]))
    check_lowering(packet.Scalar, torch.tensor([True, False, True]), True)


def test_bitwise_not_logical():
    check_lowering(aten.bitwise_not.default, randint(10, dtype=torch.int64, seed=0))
    check_lowering(aten.bitwise_not.default, randint(10, lo=0, hi=255, dtype=torch.uint8, seed=0))
    a = torch.tensor([0.0, 1.0, float("nan"), -2.0])
    b = torch.tensor([0, 0, 3, 1], dtype=torch.int32)
    for name in ("logical_and", "logical_or", "logical_xor"):
        check_lowering(getattr(aten, name).default, a, b)
        check_lowering(getattr(aten, name).default, randn(3, 1, seed=0), randn(4, seed=1) > 0)
    check_lowering(aten.logical_not.default, a)
    check_lowering(aten.logical_not.default, b)


def test_where_masked_fill():
    cond = randn(3, 4, seed=0) > 0
    check_float(aten.where.self, cond, randn(3, 4, seed=1), randn(4, seed=2))
    check_lowering(aten.where.self, cond, randint(3, 4, seed=0), randn(1, seed=2))  # promotion
    check_lowering(aten.where.self, cond, randn(3, 4, seed=1), torch.tensor(0.0, dtype=torch.float64))
    x = randn(3, 4, seed=3)
    check_float(aten.masked_fill.Scalar, x, cond, -1e4)
    check_lowering(aten.masked_fill.Scalar, x, cond[0], float("-inf"))
    check_lowering(aten.masked_fill.Scalar, randint(3, 4, seed=0), cond, 7)
    check_lowering(aten.masked_fill.Tensor, x, cond, torch.tensor(2.5))
    check_lowering(aten.masked_fill.Scalar, torch.tensor([True, False]), torch.tensor([True, True]), False)


def test_isnan_isinf_signbit():
    x = torch.cat([SPECIAL, randn(5, seed=0)])
    for name in ("isnan", "isinf", "isposinf", "isneginf", "signbit"):
        op = getattr(aten, name).default
        check_lowering(op, x)
        check_lowering(op, x.to(BF))
        check_lowering(op, randint(5, seed=0))


def test_clamp():
    x = torch.cat([randn(20, scale=3.0, seed=0), torch.tensor([float("nan"), float("inf")])])
    check_float(aten.clamp.default, x, -1.0, 0.5)
    check_float(aten.clamp.default, x, -1.0, None)
    check_float(aten.clamp.default, x, None, 0.5)
    check_float(aten.clamp.default, x, 1.0, -1.0)  # min > max -> max
    check_lowering(aten.clamp.default, randint(10, seed=0), -3, 4)
    check_lowering(aten.clamp.default, randint(10, seed=0), -3.5, 4)  # promotes to float
    lo, hi = randn(22, seed=1) - 1, randn(22, seed=2) + 1
    check_float(aten.clamp.Tensor, x, lo, hi)
    check_float(aten.clamp.Tensor, x, None, hi)
    check_float(aten.clamp.Tensor, x, lo, None)
    check_float(aten.clamp_min.default, x, 0.2)
    check_float(aten.clamp_max.default, x, 0.2)
    check_float(aten.clamp_min.Tensor, x, lo)
    check_float(aten.clamp_max.Tensor, x, hi)
    check_lowering(aten.clamp_min.default, randint(10, dtype=torch.int64, seed=0), 0)


def test_maximum_minimum_fmax_fmin():
    a = torch.tensor([1.0, float("nan"), 3.0, float("nan"), -0.5])
    b = torch.tensor([2.0, 1.0, float("nan"), float("nan"), -1.0])
    for name in ("maximum", "minimum", "fmax", "fmin"):
        op = getattr(aten, name).default
        check_lowering(op, a, b)
        check_float(op, randn(3, 1, seed=0), randn(4, seed=1))
        check_lowering(op, randint(3, 4, seed=0), randint(4, seed=1, dtype=torch.int64))
        check_lowering(op, randint(5, seed=0), randn(5, seed=0))
        check_lowering(op, torch.tensor([True, False]), torch.tensor([False, False]))


def test_lerp_addcmul_addcdiv():
    s, e = randn(3, 4, seed=0), randn(3, 4, seed=1)
    for w in (0.3, 0.7, -0.2, 1.5):
        check_float(aten.lerp.Scalar, s, e, w)
    check_float(aten.lerp.Tensor, s, e, rand(4, lo=-0.5, hi=1.5, seed=2))
    t1, t2 = randn(3, 4, seed=3), randn(4, seed=4)
    check_float(aten.addcmul.default, s, t1, t2)
    check_float(aten.addcmul.default, s, t1, t2, value=-0.5)
    check_lowering(aten.addcmul.default, randint(3, 4, seed=0), randint(4, seed=0), randint(3, 4, seed=1), value=2)
    check_float(aten.addcdiv.default, s, t1, t2)
    check_float(aten.addcdiv.default, s, t1, t2, value=0.1)


def test_nan_to_num():
    x = torch.cat([SPECIAL, randn(4, seed=0)])
    check_lowering(aten.nan_to_num.default, x)
    check_lowering(aten.nan_to_num.default, x, 1.0, 100.0, -100.0)
    check_lowering(aten.nan_to_num.default, x.to(BF))
    check_lowering(aten.nan_to_num.default, x.to(torch.float64), None, 5.0)
    check_lowering(aten.nan_to_num.default, randint(5, seed=0))


def test_binary_float_misc():
    a, b = randn(3, 4, scale=2.0, seed=0), randn(4, seed=1, scale=2.0)
    check_float(aten.atan2.default, a, b)
    check_float(aten.hypot.default, a, b)
    check_float(aten.copysign.Tensor, a, b)
    check_lowering(aten.copysign.Scalar, a, -1.0)
    check_lowering(aten.atan2.default, randint(5, seed=0), randint(5, seed=1))
    x = torch.tensor([0.0, 0.0, 2.0, 3.0, 0.0, 1.0])
    y = torch.tensor([0.0, float("nan"), 0.5, 0.0, -1.0, float("inf")])
    check_lowering(aten.xlogy.Tensor, x, y)
    check_float(aten.xlogy.Tensor, rand(3, 4, seed=0), rand(4, lo=0.1, hi=2.0, seed=1))


# ---------------------------------------------------------------------------------------------
# dtype conversion


@pytest.mark.parametrize("dst", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool,
                                 torch.float16, torch.bfloat16, torch.float64])
def test_to_copy_from_float(dst):
    x = torch.tensor([-1.0, 200.0, -200.0, 3.7, -3.7, 0.0, -0.0, 0.5, -0.99, 127.0, float("nan") if dst == torch.bool else 1.0])
    check_lowering(aten._to_copy.default, x, dtype=dst)


def test_to_copy_other():
    check_lowering(aten._to_copy.default, randint(6, lo=-300, hi=300, seed=0), dtype=torch.uint8)
    check_lowering(aten._to_copy.default, randint(6, seed=0), dtype=torch.float32)
    check_lowering(aten._to_copy.default, randint(6, seed=0), dtype=torch.bool)
    check_lowering(aten._to_copy.default, randn(6, seed=0).to(BF), dtype=torch.float32)
    check_lowering(aten._to_copy.default, randn(6, seed=0), dtype=BF)
    check_lowering(aten._to_copy.default, torch.tensor([True, False]), dtype=torch.float32)
    check_lowering(aten._to_copy.default, randn(6, seed=0))
    check_lowering(aten._to_copy.default, randn(6, seed=0), dtype=torch.float32, device="cpu")
    check_lowering(aten.clone.default, randn(2, 3, seed=0))
    check_lowering(aten.lift_fresh_copy.default, randn(2, 3, seed=0))


# ---------------------------------------------------------------------------------------------
# 16-bit operands: a Scalar (or 0-dim tensor of another dtype) is converted to the result dtype first,
# as TensorIterator converts it before PyTorch's CPU kernel runs (mul and div read its float value)


@pytest.mark.parametrize("dtype", [BF, torch.float16])
def test_low_precision_scalar_operands_rounded_like_the_cpu(dtype):
    near = torch.linspace(-0.35, -0.25, 256).to(dtype)  # x + 0.3 cancels: the rounding of 0.3 shows
    pos = torch.linspace(0.5, 3.0, 256).to(dtype)  # remainder by 0.3 jumps where 0.3's rounding moves a multiple
    wide = torch.linspace(-3.0, 3.0, 256).to(dtype)
    for op, args, kwargs in [
        (aten.add.Scalar, (near, 0.3), {}), (aten.add.Tensor, (near, 0.3), {}),
        (aten.add.Tensor, (near, torch.tensor(0.3)), {}), (aten.sub.Scalar, (near, -0.3), {}),
        (aten.rsub.Scalar, (near, -0.3), {}), (aten.sub.Tensor, (near, pos), dict(alpha=0.3)),
        (aten.add.Tensor, (near, pos), dict(alpha=0.3)), (aten.rsub.Tensor, (near, pos), dict(alpha=0.3)),
        (aten.remainder.Scalar, (pos, 0.3), {}), (aten.fmod.Scalar, (pos, 0.3), {}),
        (aten.remainder.Tensor, (wide, torch.tensor(0.3)), {}), (aten.fmod.Tensor, (wide, torch.tensor(-0.3)), {}),
        (aten.atan2.default, (near, torch.tensor(0.3)), {}), (aten.hypot.default, (near, torch.tensor(0.3)), {}),
        (aten.copysign.Scalar, (near, -0.3), {}), (aten.mul.Scalar, (pos, 0.3), {}),
    ]:
        check_lowering(op, *args, **EXACT, **kwargs)


# ---------------------------------------------------------------------------------------------
# unary float ops that were special.py's (its test_unary; this file's check_float runs them as special's did)

UNARY = {
    "sinc": (aten.sinc.default, torch.cat([randn(30, scale=3.0, seed=0), SPECIAL]), None),
    "deg2rad": (aten.deg2rad.default, torch.cat([randn(30, scale=300.0, seed=0), SPECIAL]), None),
    "rad2deg": (aten.rad2deg.default, torch.cat([randn(30, scale=3.0, seed=0), SPECIAL]), None),
    "angle": (aten.angle.default, torch.cat([randn(30, seed=0), SPECIAL]), None),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name):
    op, x, family = UNARY[name]
    check_float(op, x, family=family)


def test_unary_int_inputs():
    for op in (aten.sinc.default, aten.deg2rad.default, aten.angle.default):
        check_lowering(op, randint(8, seed=0))


def test_frexp():
    x = torch.cat([randn(20, scale=100.0, seed=0), SPECIAL, torch.tensor([1e-40, -3e-42, 1e-45, 3e38])])
    check_lowering(aten.frexp.Tensor, x)
    check_lowering(aten.frexp.Tensor, x.to(BF))


def test_nextafter():
    a = torch.cat([randn(10, seed=0), torch.tensor([0.0, 0.0, -0.0, 1.0, float("inf"), float("nan"), 1.0])])
    b = torch.cat([randn(10, seed=1), torch.tensor([1.0, -1.0, 1.0, 1.0, 0.0, 1.0, float("nan")])])
    check_lowering(aten.nextafter.default, a, b, **EXACT)
    check_lowering(aten.nextafter.default, a.to(BF), b.to(BF), **EXACT)


# ---------------------------------------------------------------------------------------------
# binary float ops


def test_logaddexp():
    inf = float("inf")
    a = torch.cat([randn(20, scale=5.0, seed=0), torch.tensor([inf, -inf, inf, -inf, float("nan"), 0.0, 100.0])])
    b = torch.cat([randn(20, scale=5.0, seed=1), torch.tensor([inf, -inf, -inf, 1.0, 1.0, float("nan"), -100.0])])
    check_float(aten.logaddexp.default, a, b)
    check_float(aten.logaddexp2.default, a, b)


def test_heaviside():
    x = torch.cat([randn(10, seed=0), torch.tensor([0.0, -0.0, float("nan"), float("inf")])])
    v = randn(14, seed=1)
    check_float(aten.heaviside.default, x, v)
    check_lowering(aten.heaviside.default, randint(10, lo=-2, hi=3, seed=0), randint(10, seed=1))


# ---------------------------------------------------------------------------------------------
# integer ops


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.uint8])
def test_gcd_lcm(dtype):
    lo = 0 if dtype == torch.uint8 else -60
    a = torch.cat([randint(30, lo=lo, hi=60, dtype=dtype, seed=0), torch.tensor([0, 0, 7, 12], dtype=dtype)])
    b = torch.cat([randint(30, lo=lo, hi=60, dtype=dtype, seed=1), torch.tensor([0, 5, 0, 18], dtype=dtype)])
    check_lowering(aten.gcd.default, a, b)
    check_lowering(aten.lcm.default, a, b)
    if dtype == torch.int32:  # INT_MIN: ATen's wrapping abs
        m = torch.tensor([-2**31, -2**31, 6], dtype=dtype)
        check_lowering(aten.gcd.default, m, torch.tensor([6, 0, -2**31], dtype=dtype))
        check_lowering(aten.lcm.default, m, torch.tensor([6, 1, 3], dtype=dtype))
        check_lowering(aten.gcd.default, randint(3, 4, seed=0), randint(4, seed=2))  # broadcasting


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8, torch.uint8])
def test_shifts(dtype):
    bits = torch.iinfo(dtype).bits
    a = randint(40, lo=0 if dtype == torch.uint8 else -100, hi=100, dtype=dtype, seed=0)
    lo = 0 if dtype == torch.uint8 else -3
    b = torch.cat([randint(34, lo=0, hi=bits, dtype=dtype, seed=0),
                   torch.tensor([lo, bits - 1, bits, bits + 1, 0, 1], dtype=dtype)])
    for op in (aten.bitwise_left_shift.Tensor, aten.bitwise_right_shift.Tensor, aten.__lshift__.Tensor,
               aten.__rshift__.Tensor):
        check_lowering(op, a, b)
    for s in (0, 3, bits - 1, bits):
        check_lowering(aten.__lshift__.Scalar, a, s)
        check_lowering(aten.__rshift__.Scalar, a, s)
        check_lowering(aten.bitwise_left_shift.Tensor_Scalar, a, s)
        check_lowering(aten.bitwise_right_shift.Tensor_Scalar, a, s)
    check_lowering(aten.bitwise_left_shift.Tensor, a, torch.tensor(2, dtype=torch.int64))  # promotion
    check_lowering(aten.bitwise_left_shift.Scalar_Tensor, 3, b)


def test_polar():
    r, a = torch.rand(3, 4) * 3, torch.randn(3, 4) * 3
    chk(aten.polar.default, r, a)
    chk(aten.polar.default, r.double(), a.double())
    chk(aten.polar.default, torch.tensor([INF, 0.0, 1.0]), torch.tensor([0.0, INF, NAN]))
    dev(lambda x, y: torch.polar(x, y), r, a, must_run="aten.polar.default")


# ---------------------------------------------------------------------------------------------
# on the device: the user-level call runs on neuron, no CPU fallback

DEVICE = [
    ("aten.angle.default", torch.angle, (randn(16, seed=0),), None),
    ("aten.sinc.default", torch.sinc, (randn(16, seed=0),), None),
    ("aten.deg2rad.default", torch.deg2rad, (randn(16, seed=0),), None),
    ("aten.nextafter.default", torch.nextafter, (randn(16, seed=0), randn(16, seed=1)), None),
    ("aten.logaddexp.default", torch.logaddexp, (randn(16, seed=0), randn(16, seed=1)), None),
    ("aten.logaddexp2.default", torch.logaddexp2, (randn(16, seed=0), randn(16, seed=1)), None),
    ("aten.heaviside.default", torch.heaviside, (randn(16, seed=0), randn(16, seed=1)), None),
]


@pytest.mark.parametrize("dtype", [F32, BF])
@pytest.mark.parametrize("name,fn,args,family", DEVICE, ids=[d[0] for d in DEVICE])
def test_device_float(name, fn, args, family, dtype):
    check_device_float(name, fn, args, family, dtype, NO_LOW_PRECISION_NAMES)


def test_device_frexp():
    check_device(torch.frexp, randn(16, scale=50.0, seed=0), must_run=["aten.frexp.Tensor"])


def test_device_int_ops():
    a, b = randint(16, lo=-50, hi=50, seed=0), randint(16, lo=-50, hi=50, seed=1)
    check_device(torch.gcd, a, b, must_run=["aten.gcd.default"])
    check_device(torch.lcm, a, b, must_run=["aten.lcm.default"])
    s = randint(16, lo=0, hi=40, dtype=torch.int64, seed=0)
    check_device(lambda x, y: x << y, a.long(), s, must_run=["aten.__lshift__.Tensor"])
    check_device(lambda x, y: x >> y, a.long(), s, must_run=["aten.__rshift__.Tensor"])
    check_device(lambda x: x >> 3, a, must_run=["aten.__rshift__.Scalar"])
    check_device(torch.bitwise_left_shift, a, s.int(), must_run=["aten.bitwise_left_shift.Tensor"])
