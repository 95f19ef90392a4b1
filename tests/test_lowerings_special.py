"""Lowerings of ops/special.py against PyTorch's CPU kernels, and on the neuron device."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import pytest  # noqa: E402
import torch  # noqa: E402

from device_harness import check_device  # noqa: E402
from lowering_harness import check_lowering, run_lowering  # noqa: E402

aten = torch.ops.aten
F32, BF = torch.float32, torch.bfloat16
BF16 = dict(atol=2e-2, rtol=2e-2)
SPECIAL = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0])


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def randn(*shape, scale=1.0, seed=0):
    return torch.randn(*shape, generator=gen(seed)) * scale


def rand(*shape, lo=0.0, hi=1.0, seed=0):
    return torch.rand(*shape, generator=gen(seed)) * (hi - lo) + lo


def randint(*shape, lo=-20, hi=20, dtype=torch.int32, seed=0):
    return torch.randint(lo, hi, shape, generator=gen(seed)).to(dtype)


NO_LOW_PRECISION = {aten.special_erfcx.default, aten.special_ndtri.default, aten.special_log_ndtr.default}
NO_LOW_PRECISION_NAMES = {str(op) for op in NO_LOW_PRECISION}


def check_float(op, *args, tol=None, **kwargs):
    tol = tol or {}
    check_lowering(op, *args, **tol, **kwargs)
    if op in NO_LOW_PRECISION:  # the CPU kernel has no bfloat16 version: the lowering raises as it does
        with pytest.raises(NotImplementedError, match="BFloat16"):
            run_lowering(op, args[0].to(BF))
        return
    bf = [a.to(BF) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    check_lowering(op, *bf, **BF16, **kwargs)


# ---------------------------------------------------------------------------------------------
# unary float ops

UNARY = {
    "erfc": (aten.erfc.default, torch.cat([randn(30, scale=3.0), SPECIAL]), None),
    "special_erfcx": (aten.special_erfcx.default,
                      torch.cat([randn(30, scale=5.0), torch.tensor([-9.0, 8.0, 20.0, 30.0, 1e5]), SPECIAL]),
                      dict(atol=1e-6, rtol=2e-6)),
    "special_i0e": (aten.special_i0e.default, torch.cat([randn(30, scale=10.0), SPECIAL]), None),
    "special_i1": (aten.special_i1.default, torch.cat([randn(30, scale=10.0), SPECIAL]), dict(atol=1e-5, rtol=2e-6)),
    "special_i1e": (aten.special_i1e.default, torch.cat([randn(30, scale=10.0), SPECIAL]), None),
    "special_ndtri": (aten.special_ndtri.default,
                      torch.cat([rand(30), torch.tensor([0.0, 1.0, -0.5, 1.5, 1e-30, 1 - 1e-7]), SPECIAL]),
                      dict(atol=1e-5, rtol=1e-5)),
    "special_log_ndtr": (aten.special_log_ndtr.default, torch.cat([randn(30, scale=10.0), SPECIAL]),
                         dict(atol=1e-5, rtol=1e-5)),
    "sinc": (aten.sinc.default, torch.cat([randn(30, scale=3.0), SPECIAL]), None),
    "deg2rad": (aten.deg2rad.default, torch.cat([randn(30, scale=300.0), SPECIAL]), None),
    "rad2deg": (aten.rad2deg.default, torch.cat([randn(30, scale=3.0), SPECIAL]), None),
    "angle": (aten.angle.default, torch.cat([randn(30), SPECIAL]), None),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name):
    op, x, tol = UNARY[name]
    check_float(op, x, tol=tol)


def test_unary_int_inputs():
    for op in (aten.erfc.default, aten.sinc.default, aten.deg2rad.default, aten.angle.default,
               aten.special_i0e.default):
        check_lowering(op, randint(8))


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_polygamma(n):
    x = torch.cat([rand(20, lo=0.05, hi=6.0), rand(10, lo=-4.0, hi=0.0, seed=1),
                   torch.tensor([0.0, -0.0, -1.0, -2.0, 1e-3, float("inf"), -float("inf"), float("nan")])])
    check_lowering(aten.polygamma.default, n, x, atol=1e-4, rtol=2e-5)
    check_lowering(aten.polygamma.default, n, x.to(BF), **BF16)


def test_frexp():
    x = torch.cat([randn(20, scale=100.0), SPECIAL, torch.tensor([1e-40, -3e-42, 1e-45, 3e38])])
    check_lowering(aten.frexp.Tensor, x)
    check_lowering(aten.frexp.Tensor, x.to(BF))


def test_nextafter():
    a = torch.cat([randn(10), torch.tensor([0.0, 0.0, -0.0, 1.0, float("inf"), float("nan"), 1.0])])
    b = torch.cat([randn(10, seed=1), torch.tensor([1.0, -1.0, 1.0, 1.0, 0.0, 1.0, float("nan")])])
    check_lowering(aten.nextafter.default, a, b, atol=0, rtol=0)
    check_lowering(aten.nextafter.default, a.to(BF), b.to(BF), atol=0, rtol=0)


# ---------------------------------------------------------------------------------------------
# binary float ops


def test_logaddexp():
    inf = float("inf")
    a = torch.cat([randn(20, scale=5.0), torch.tensor([inf, -inf, inf, -inf, float("nan"), 0.0, 100.0])])
    b = torch.cat([randn(20, scale=5.0, seed=1), torch.tensor([inf, -inf, -inf, 1.0, 1.0, float("nan"), -100.0])])
    check_float(aten.logaddexp.default, a, b)
    check_float(aten.logaddexp2.default, a, b)


def test_xlogy_xlog1py_scalars():
    x = torch.cat([rand(10, lo=-0.5, hi=3.0), torch.tensor([0.0, float("nan"), -1.0, float("inf")])])
    y = torch.cat([rand(10, lo=0.0, hi=3.0, seed=1), torch.tensor([float("nan"), 0.0, 0.0, 2.0])])
    check_float(aten.special_xlog1py.default, x, y)
    for s in (0.0, 2.0, float("nan")):
        check_float(aten.xlogy.Scalar_Other, x, s)
        check_float(aten.xlogy.Scalar_Self, s, y)
        check_float(aten.special_xlog1py.other_scalar, x, s)
        check_float(aten.special_xlog1py.self_scalar, s, y)


def test_heaviside():
    x = torch.cat([randn(10), torch.tensor([0.0, -0.0, float("nan"), float("inf")])])
    v = randn(14, seed=1)
    check_float(aten.heaviside.default, x, v)
    check_lowering(aten.heaviside.default, randint(10, lo=-2, hi=3), randint(10, seed=1))


# ---------------------------------------------------------------------------------------------
# integer ops


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.uint8])
def test_gcd_lcm(dtype):
    lo = 0 if dtype == torch.uint8 else -60
    a = torch.cat([randint(30, lo=lo, hi=60, dtype=dtype), torch.tensor([0, 0, 7, 12], dtype=dtype)])
    b = torch.cat([randint(30, lo=lo, hi=60, dtype=dtype, seed=1), torch.tensor([0, 5, 0, 18], dtype=dtype)])
    check_lowering(aten.gcd.default, a, b)
    check_lowering(aten.lcm.default, a, b)
    if dtype == torch.int32:  # INT_MIN: ATen's wrapping abs
        m = torch.tensor([-2**31, -2**31, 6], dtype=dtype)
        check_lowering(aten.gcd.default, m, torch.tensor([6, 0, -2**31], dtype=dtype))
        check_lowering(aten.lcm.default, m, torch.tensor([6, 1, 3], dtype=dtype))
        check_lowering(aten.gcd.default, randint(3, 4), randint(4, seed=2))  # broadcasting


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8, torch.uint8])
def test_shifts(dtype):
    bits = torch.iinfo(dtype).bits
    a = randint(40, lo=0 if dtype == torch.uint8 else -100, hi=100, dtype=dtype)
    lo = 0 if dtype == torch.uint8 else -3
    b = torch.cat([randint(34, lo=0, hi=bits, dtype=dtype), torch.tensor([lo, bits - 1, bits, bits + 1, 0, 1], dtype=dtype)])
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


# ---------------------------------------------------------------------------------------------
# adaptive_max_pool2d


@pytest.mark.parametrize("shape,out", [((2, 3, 8, 8), (4, 4)), ((1, 2, 7, 5), (3, 4)), ((3, 5, 6), (4, 1))])
def test_adaptive_max_pool2d(shape, out):
    x = randn(*shape)
    check_lowering(aten.adaptive_max_pool2d.default, x, out)
    check_lowering(aten.adaptive_max_pool2d.default, x.to(BF), out)
    _, idx = aten.adaptive_max_pool2d.default(x, out)
    g = randn(*idx.shape, seed=1)
    check_lowering(aten.adaptive_max_pool2d_backward.default, g, x, idx)
    check_lowering(aten.adaptive_max_pool2d_backward.default, g.to(BF), x.to(BF), idx, **BF16)


def test_adaptive_max_pool2d_ties_nan():
    x = torch.zeros(1, 1, 5, 5)
    x[0, 0, 1, 1] = float("nan")
    x[0, 0, 3, 2] = float("nan")
    x[0, 0, 4, 4] = -float("inf")
    check_lowering(aten.adaptive_max_pool2d.default, x, (2, 3))
    check_lowering(aten.adaptive_max_pool2d.default, torch.full((1, 4, 4), -float("inf")), (3, 3))


# ---------------------------------------------------------------------------------------------
# on the device: the user-level call runs on neuron, no CPU fallback

DEVICE = [
    ("aten.erfc.default", torch.erfc, (randn(16, scale=2.0),), None),
    ("aten.special_erfcx.default", torch.special.erfcx, (randn(16, scale=4.0),), dict(atol=1e-6, rtol=2e-6)),
    ("aten.special_i0e.default", torch.special.i0e, (randn(16, scale=5.0),), None),
    ("aten.special_i1.default", torch.special.i1, (randn(16, scale=5.0),), dict(atol=1e-5, rtol=2e-6)),
    ("aten.special_i1e.default", torch.special.i1e, (randn(16, scale=5.0),), None),
    ("aten.special_ndtri.default", torch.special.ndtri, (rand(16, lo=0.01, hi=0.99),), dict(atol=1e-5, rtol=1e-5)),
    ("aten.special_log_ndtr.default", torch.special.log_ndtr, (randn(16, scale=5.0),), dict(atol=1e-5, rtol=1e-5)),
    ("aten.polygamma.default", lambda x: torch.polygamma(2, x), (rand(16, lo=0.1, hi=5.0),), dict(atol=1e-4, rtol=2e-5)),
    ("aten.angle.default", torch.angle, (randn(16),), None),
    ("aten.sinc.default", torch.sinc, (randn(16),), None),
    ("aten.deg2rad.default", torch.deg2rad, (randn(16),), None),
    ("aten.nextafter.default", torch.nextafter, (randn(16), randn(16, seed=1)), None),
    ("aten.logaddexp.default", torch.logaddexp, (randn(16), randn(16, seed=1)), None),
    ("aten.logaddexp2.default", torch.logaddexp2, (randn(16), randn(16, seed=1)), None),
    ("aten.heaviside.default", torch.heaviside, (randn(16), randn(16, seed=1)), None),
    ("aten.special_xlog1py.default", torch.special.xlog1py, (rand(16), rand(16, seed=1)), None),
    ("aten.xlogy.Scalar_Self", lambda y: torch.xlogy(2.0, y), (rand(16),), None),
]


@pytest.mark.parametrize("dtype", [F32, BF])
@pytest.mark.parametrize("name,fn,args,tol", DEVICE, ids=[d[0] for d in DEVICE])
def test_device_float(name, fn, args, tol, dtype):
    args = tuple(a.to(dtype) for a in args)
    if dtype == BF and name in NO_LOW_PRECISION_NAMES:
        # the CPU has no bfloat16 kernel: the device refuses it the same way
        with pytest.raises(NotImplementedError):
            fn(*args)
        with pytest.raises(NotImplementedError):
            fn(*(a.to("neuron") for a in args))
        return
    tol = BF16 if dtype == BF else (tol or {})
    check_device(fn, *args, must_run=[name], **tol)


def test_device_frexp():
    check_device(torch.frexp, randn(16, scale=50.0), must_run=["aten.frexp.Tensor"])


def test_device_int_ops():
    a, b = randint(16, lo=-50, hi=50), randint(16, lo=-50, hi=50, seed=1)
    check_device(torch.gcd, a, b, must_run=["aten.gcd.default"])
    check_device(torch.lcm, a, b, must_run=["aten.lcm.default"])
    s = randint(16, lo=0, hi=40, dtype=torch.int64)
    check_device(lambda x, y: x << y, a.long(), s, must_run=["aten.__lshift__.Tensor"])
    check_device(lambda x, y: x >> y, a.long(), s, must_run=["aten.__rshift__.Tensor"])
    check_device(lambda x: x >> 3, a, must_run=["aten.__rshift__.Scalar"])
    check_device(torch.bitwise_left_shift, a, s.int(), must_run=["aten.bitwise_left_shift.Tensor"])


@pytest.mark.parametrize("dtype", [F32, BF])
def test_device_adaptive_max_pool2d(dtype):
    x = randn(2, 3, 7, 9).to(dtype).requires_grad_()

    def fn(x):
        out, idx = torch.nn.functional.adaptive_max_pool2d(x, (3, 4), return_indices=True)
        (grad,) = torch.autograd.grad(out, x, torch.ones_like(out))
        return out, idx, grad

    check_device(fn, x, must_run=["aten.adaptive_max_pool2d.default", "aten.adaptive_max_pool2d_backward.default"])
