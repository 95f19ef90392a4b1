"""Lowerings of ops/special.py (torch.special's functions: erfc/erfcx, lgamma/digamma/polygamma, zeta,
igamma, i0/i0e/i1/i1e, Bessel/Airy functions, orthogonal polynomials, ndtri/log_ndtr, xlogy/xlog1py
Scalar overloads) against PyTorch's CPU kernels, and on the neuron device."""
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
F32, BF = torch.float32, torch.bfloat16
NAN, INF = float("nan"), float("inf")
SPECIAL = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0])


NO_LOW_PRECISION = {aten.special_erfcx.default, aten.special_ndtri.default, aten.special_log_ndtr.default}


def check_float(op, *args, family=None, **kwargs):
    """float32 (within tests/tolerances.py's `family`, else torch's defaults), then bfloat16 (torch's
    defaults: both sides compute in float32 and round once)."""
    check_lowering(op, *args, family=family, **kwargs)
    if op in NO_LOW_PRECISION:  # the CPU kernel has no bfloat16 version: the lowering raises as it does
        with pytest.raises(NotImplementedError, match="BFloat16"):
            run_lowering(op, args[0].to(BF))
        return
    bf = [a.to(BF) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    check_lowering(op, *bf, **kwargs)


# negative non-integers (OpInfo's -8.478 among them), poles, tiny, huge and non-finite arguments
POLYGAMMA_X = torch.cat([rand(20, lo=0.05, hi=6.0, seed=0), rand(10, lo=-10.0, hi=0.0, seed=1),
                         torch.tensor([0.0, -0.0, -1.0, -2.0, -2.5, -8.478373527526855, -1e-8, -123.456, 1e-3,
                                       1e-30, 10.0, 9.0, 3e7, -3e7, 1e30, float("inf"), -float("inf"), float("nan")])])


NO_LOW_PRECISION_NAMES = {str(op) for op in NO_LOW_PRECISION}


CEPHES_X = torch.cat([randn(24, scale=6.0, seed=3), SPECIAL,
                      torch.tensor([2.09, -2.09, 2.0, 5.0, 8.0, -8.0, 8.5, 1e-6, -1e-6, 0.3, -0.3, 40.0, -40.0,
                                    -90.0, 103.0, 104.0, 150.0, -150.0])])


# float32 tolerances (tests/tolerances.py): the same float32 arithmetic as ATen's, but XLA's exp/log
# are 1 ulp off glibc's for a few percent of inputs (amplified by cancellation near the functions' zeros)
UNARY_CEPHES = {
    "special_airy_ai": (torch.special.airy_ai, "cephes_unary"),
    "special_bessel_j0": (torch.special.bessel_j0, "cephes_unary"),
    "special_bessel_j1": (torch.special.bessel_j1, "cephes_unary"),
    "special_bessel_y0": (torch.special.bessel_y0, "cephes_unary"),
    "special_bessel_y1": (torch.special.bessel_y1, "cephes_unary"),
    "special_modified_bessel_i0": (torch.special.modified_bessel_i0, "cephes_modified_bessel"),
    "special_modified_bessel_i1": (torch.special.modified_bessel_i1, "cephes_modified_bessel"),
    "special_modified_bessel_k0": (torch.special.modified_bessel_k0, "cephes_modified_bessel"),
    "special_modified_bessel_k1": (torch.special.modified_bessel_k1, "cephes_modified_bessel"),
    "special_scaled_modified_bessel_k0": (torch.special.scaled_modified_bessel_k0, "cephes_modified_bessel"),
    "special_scaled_modified_bessel_k1": (torch.special.scaled_modified_bessel_k1, "cephes_modified_bessel"),
    "special_spherical_bessel_j0": (torch.special.spherical_bessel_j0, "cephes_modified_bessel"),
}


def _no_bf16(op, *args):
    cpu_name = str(op).split(".")[1].removeprefix("special_")
    with pytest.raises(NotImplementedError, match="BFloat16"):
        op(*args)  # the CPU refuses it too
    with pytest.raises(NotImplementedError, match=f'"{cpu_name}_cpu" not implemented for \'BFloat16\''):
        run_lowering(op, *args)


POLYNOMIALS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
               "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
               "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
               "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p"]


# x: |x| < 1 (the trigonometric forms past n = 4..8), |x| > 1, the special points 0, +-1, 0.5 (the
# shifted forms' x = 0, 1), inf (NaN x: ATen's result is an uninitialized value for some of them);
# n: negative, 0, 1, the recurrences and trigonometric forms, OpInfo's fractional n, NaN/inf n
POLY_X = torch.cat([rand(12, lo=-1.0, hi=1.0, seed=5), randn(12, scale=3.0, seed=6),
                    torch.tensor([0.0, 1.0, -1.0, 0.5, 1.0, -1.0, 0.0, 2.0, 0.5, float("inf"), -float("inf"), 0.3,
                                  0.3, 0.3, -0.7])])


POLY_N = torch.cat([randint(24, lo=-2, hi=14, dtype=torch.float32, seed=7),
                    torch.tensor([3.0, 9.0, 10.0, 12.0, 7.0, 7.0, 8.0, 0.0, 1.0, 2.0, 3.0, float("nan"), float("inf"),
                                  -float("inf"), 3.7])])


# the recurrences are ATen's operation for operation (bit-identical in float32); the trigonometric
# forms of the Chebyshev polynomials differ by XLA's cos/sin/acos rounding, times n
POLY_TOL = {name: dict(family="chebyshev") if "chebyshev" in name else EXACT for name in POLYNOMIALS}


def _scalar_overloads(name):
    overloads = getattr(aten, "special_" + name)
    # integer operands, promoted to float32 as on the CPU
    check_lowering(overloads.x_scalar, 3, randint(10, lo=-1, hi=12, dtype=torch.int64, seed=8), **POLY_TOL[name])
    check_lowering(overloads.n_scalar, randint(10, lo=-3, hi=4, dtype=torch.int64, seed=9), 7, **POLY_TOL[name])
    check_lowering(overloads.n_scalar, POLY_X, 12.7, **POLY_TOL[name])


ZETA_X = torch.cat([rand(20, lo=1.0, hi=12.0, seed=14), randint(10, lo=1, hi=8, dtype=torch.float32, seed=15),
                    torch.tensor([1.0, 0.5, 2.0, 3.0, 2.0, 2.0, 2.5, float("nan"), 2.0, float("inf"), 4.0])])


ZETA_Q = torch.cat([randn(20, scale=6.0, seed=16), randn(10, scale=9.0, seed=17),
                    torch.tensor([2.0, 1.0, -1.0, -2.5, 0.0, -0.0, -2.5, 1.0, float("nan"), 1.0, 1e6])])


IGAMMA_A = torch.cat([rand(20, lo=0.0, hi=30.0, seed=18), rand(10, lo=0.0, hi=300.0, seed=19),
                      torch.tensor([0.0, 0.0, 0.0, 1.0, float("inf"), float("inf"), 2.0, -1.0, 1.0, float("nan"), 1.0,
                                    1e-3, 250.0])])


IGAMMA_X = torch.cat([rand(20, lo=0.0, hi=30.0, seed=20), rand(10, lo=0.0, hi=300.0, seed=21),
                      torch.tensor([0.0, 1.0, -1.0, 0.0, 1.0, float("inf"), float("inf"), 1.0, -1.0, 1.0,
                                    float("nan"), 1e-3, 251.0])])


CEPHES_DEVICE = [(f"aten.{name}.default", fn, (CEPHES_X,), dict(family=family))
                 for name, (fn, family) in UNARY_CEPHES.items()]


CEPHES_DEVICE += [(f"aten.special_{name}.default", getattr(torch.special, name), (POLY_X[:24], POLY_N[:24]),
                   POLY_TOL[name]) for name in POLYNOMIALS]


CEPHES_DEVICE += [
    ("aten.special_zeta.default", torch.special.zeta, (ZETA_X, ZETA_Q), dict(family="zeta")),
    ("aten.igamma.default", torch.igamma, (IGAMMA_A, IGAMMA_X), dict(family="igamma")),
    ("aten.igammac.default", torch.igammac, (IGAMMA_A, IGAMMA_X), dict(family="igamma")),
]


# ---------------------------------------------------------------------------------------------
# unary float ops

UNARY = {
    "erfc": (aten.erfc.default, torch.cat([randn(30, scale=3.0, seed=0), SPECIAL]), None),
    "special_erfcx": (aten.special_erfcx.default,
                      torch.cat([randn(30, scale=5.0, seed=0), torch.tensor([-9.0, 8.0, 20.0, 30.0, 1e5]), SPECIAL]),
                      "special_erfcx"),
    "special_i0e": (aten.special_i0e.default, torch.cat([randn(30, scale=10.0, seed=0), SPECIAL]), None),
    "special_i1": (aten.special_i1.default, torch.cat([randn(30, scale=10.0, seed=0), SPECIAL]), "special_i1"),
    "special_i1e": (aten.special_i1e.default, torch.cat([randn(30, scale=10.0, seed=0), SPECIAL]), None),
    "special_ndtri": (aten.special_ndtri.default,
                      torch.cat([rand(30, seed=0), torch.tensor([0.0, 1.0, -0.5, 1.5, 1e-30, 1 - 1e-7]), SPECIAL]),
                      None),
    "special_log_ndtr": (aten.special_log_ndtr.default, torch.cat([randn(30, scale=10.0, seed=0), SPECIAL]),
                         None),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name):
    op, x, family = UNARY[name]
    check_float(op, x, family=family)


def test_unary_int_inputs():
    for op in (aten.erfc.default, aten.special_i0e.default):
        check_lowering(op, randint(8, seed=0))


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5])
def test_polygamma(n):
    # ATen's algorithms (digamma's reflection in float64, trigamma, Hurwitz zeta accumulated in
    # float64): float32 agrees to a few ulps
    check_lowering(aten.polygamma.default, n, POLYGAMMA_X, family="polygamma")
    if n <= 2:  # the same code as float32, computed in float32
        check_lowering(aten.polygamma.default, n, POLYGAMMA_X.to(BF))


def test_polygamma_int_input():
    check_lowering(aten.polygamma.default, 2, randint(12, lo=-3, hi=9, dtype=torch.int64, seed=0), family="polygamma")


# ---------------------------------------------------------------------------------------------
# binary float ops


def test_xlogy_xlog1py_scalars():
    x = torch.cat([rand(10, lo=-0.5, hi=3.0, seed=0), torch.tensor([0.0, float("nan"), -1.0, float("inf")])])
    y = torch.cat([rand(10, lo=0.0, hi=3.0, seed=1), torch.tensor([float("nan"), 0.0, 0.0, 2.0])])
    check_float(aten.special_xlog1py.default, x, y)
    for s in (0.0, 2.0, float("nan")):
        check_float(aten.xlogy.Scalar_Other, x, s)
        check_float(aten.xlogy.Scalar_Self, s, y)
        check_float(aten.special_xlog1py.other_scalar, x, s)
        check_float(aten.special_xlog1py.self_scalar, s, y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int32])
def test_lgamma_digamma_i0(dtype):
    x = torch.cat([torch.linspace(-9.5, 12, 80), torch.tensor([0.0, -0.0, -1.0, -3.0, 1e-30, 50.0, 100.0, -INF, INF, NAN])])
    if dtype == torch.int32:
        x = torch.arange(-4, 30)
    x = x.to(dtype)
    chk(aten.lgamma.default, x)
    chk(aten.digamma.default, x)
    chk(aten.i0.default, x)


# ---------------------------------------------------------------------------------------------
# on the device: the user-level call runs on neuron, no CPU fallback

DEVICE = [
    ("aten.erfc.default", torch.erfc, (randn(16, scale=2.0, seed=0),), None),
    ("aten.special_erfcx.default", torch.special.erfcx, (randn(16, scale=4.0, seed=0),), "special_erfcx"),
    ("aten.special_i0e.default", torch.special.i0e, (randn(16, scale=5.0, seed=0),), None),
    ("aten.special_i1.default", torch.special.i1, (randn(16, scale=5.0, seed=0),), "special_i1"),
    ("aten.special_i1e.default", torch.special.i1e, (randn(16, scale=5.0, seed=0),), None),
    ("aten.special_ndtri.default", torch.special.ndtri, (rand(16, lo=0.01, hi=0.99, seed=0),), None),
    ("aten.special_log_ndtr.default", torch.special.log_ndtr, (randn(16, scale=5.0, seed=0),), None),
    ("aten.polygamma.default", lambda x: torch.polygamma(2, x), (rand(16, lo=-9.0, hi=9.0, seed=0),), "polygamma"),
    ("aten.special_xlog1py.default", torch.special.xlog1py, (rand(16, seed=0), rand(16, seed=1)), None),
    ("aten.xlogy.Scalar_Self", lambda y: torch.xlogy(2.0, y), (rand(16, seed=0),), None),
]


@pytest.mark.parametrize("dtype", [F32, BF])
@pytest.mark.parametrize("name,fn,args,family", DEVICE, ids=[d[0] for d in DEVICE])
def test_device_float(name, fn, args, family, dtype):
    check_device_float(name, fn, args, family, dtype, NO_LOW_PRECISION_NAMES)


def test_special_functions_device():
    x = torch.linspace(-7, 9, 50)
    dev(lambda t: torch.lgamma(t), x, must_run="aten.lgamma.default")
    dev(lambda t: torch.digamma(t), x, must_run="aten.digamma.default")
    dev(lambda t: torch.i0(t), x.to(torch.bfloat16), must_run="aten.i0.default")
    dev(lambda t: torch.special.i0(t), x, must_run="aten.i0.default")


# ---------------------------------------------------------------------------------------------
# Cephes special functions, polynomials, zeta, incomplete gamma: the CPU has float32/float64 kernels
# only (integers promote to the default dtype; float16/bfloat16 raise NotImplementedError)


@pytest.mark.parametrize("name", list(UNARY_CEPHES))
def test_cephes_unary(name):
    op = getattr(aten, name).default
    check_lowering(op, CEPHES_X, family=UNARY_CEPHES[name][1])
    _no_bf16(op, CEPHES_X.to(BF))


def test_cephes_unary_int_inputs():
    for name in ("special_airy_ai", "special_bessel_y1", "special_modified_bessel_k0"):
        check_lowering(getattr(aten, name).default, randint(10, lo=-3, hi=12, dtype=torch.int64, seed=0),
                       family=UNARY_CEPHES[name][1])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(UNARY_CEPHES))
def test_cephes_unary_float64(name):
    x = torch.cat([randn(500, scale=10.0, seed=4), CEPHES_X]).double()
    check_lowering(getattr(aten, name).default, x, family="cephes_float64")


@pytest.mark.parametrize("name", POLYNOMIALS)
def test_polynomials(name):
    op = getattr(aten, "special_" + name).default
    check_lowering(op, POLY_X, POLY_N, **POLY_TOL[name])
    _no_bf16(op, POLY_X.to(BF), POLY_N.to(BF))


def test_polynomial_scalar_overloads():
    for name in ("chebyshev_polynomial_u", "hermite_polynomial_h"):
        _scalar_overloads(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", POLYNOMIALS)
def test_polynomial_scalar_overloads_all(name):
    _scalar_overloads(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", POLYNOMIALS)
def test_polynomials_large_n(name):
    overloads = getattr(aten, "special_" + name)
    x = torch.cat([rand(20, lo=-1.0, hi=1.0, seed=10), randn(10, scale=0.1, seed=11) + 1.0])
    for n in (30.0, 127.0, 128.0, 129.0, 200.0, 513.0):
        # float32: the trigonometric forms multiply an acos that differs from glibc's by an ulp by n
        check_lowering(overloads.n_scalar, x, n, family="polynomials_large_n")
        check_lowering(overloads.n_scalar, x.double(), n, family="polynomials_large_n")


def test_zeta():
    check_lowering(aten.special_zeta.default, ZETA_X, ZETA_Q, family="zeta")
    check_lowering(aten.special_zeta.other_scalar, ZETA_X, 2.5, family="zeta")
    check_lowering(aten.special_zeta.self_scalar, 3, randint(10, lo=-4, hi=9, dtype=torch.int64, seed=0), family="zeta")
    _no_bf16(aten.special_zeta.default, ZETA_X.to(BF), ZETA_Q.to(BF))


@pytest.mark.slow
def test_zeta_float64():
    check_lowering(aten.special_zeta.default, ZETA_X.double(), ZETA_Q.double(), family="zeta")
    check_lowering(aten.polygamma.default, 3, POLYGAMMA_X.double(), family="polygamma")


@pytest.mark.parametrize("op", [aten.igamma.default, aten.igammac.default], ids=["igamma", "igammac"])
def test_igamma(op):
    check_lowering(op, IGAMMA_A, IGAMMA_X, family="igamma")
    check_lowering(op, IGAMMA_A.to(BF), IGAMMA_X.to(BF))
    a = randint(4, lo=0, hi=5, dtype=torch.int64, seed=0)
    with pytest.raises(NotImplementedError, match="'Long'"):
        op(a, a)
    with pytest.raises(NotImplementedError, match=f'"{str(op).split(".")[1]}_cpu" not implemented for \'Long\''):
        run_lowering(op, a, a)


@pytest.mark.parametrize("name,fn,args,tol", CEPHES_DEVICE, ids=[d[0] for d in CEPHES_DEVICE])
def test_device_cephes(name, fn, args, tol):
    check_device(fn, *args, must_run=[name], **tol)


def test_device_scalar_overloads():
    n = randint(8, lo=0, hi=12, dtype=torch.int64, seed=0)
    check_device(lambda n: torch.special.chebyshev_polynomial_t(0.25, n), n,
                 must_run=["aten.special_chebyshev_polynomial_t.x_scalar"])
    check_device(lambda x: torch.special.legendre_polynomial_p(x, 5), randn(8, seed=0),
                 must_run=["aten.special_legendre_polynomial_p.n_scalar"])
    check_device(lambda x: torch.special.zeta(x, 2.0), ZETA_X[:8], must_run=["aten.special_zeta.other_scalar"])
    check_device(lambda q: torch.special.zeta(3.0, q), ZETA_Q[:8], must_run=["aten.special_zeta.self_scalar"])


def test_device_polygamma_negative():
    # the OpInfo failure: polygamma(n, -8.478...) for n >= 2 (jax's zeta is wrong at negative q)
    x = torch.tensor([-8.478373527526855, -1.765825867652893, -4.3228044509887695, 3.5, -2.0])
    for n in (0, 3):  # (n = 2 in DEVICE)
        check_device(lambda x: torch.polygamma(n, x), x, must_run=["aten.polygamma.default"], family="polygamma")
