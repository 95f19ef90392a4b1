"""Lowerings of ops/linalg.py (matrix products, trace): each compared with PyTorch's CPU kernel as a
pure jax function (tests/lowering_harness.py) and, where the op reaches eager, the user-level call
run on the neuron device vs the CPU with no CPU fallback (tests/device_harness.py)."""
import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402

from helpers import randint, randn  # noqa: E402
from lowering_harness import chk, dev, run_lowering, tolerance  # noqa: E402

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")


# ---------------------------------------------------------------------------------------------
# matrix products


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mm_bmm_mv_dot(dtype):
    a, b = randn(17, 33, dtype=dtype), randn(33, 9, dtype=dtype)
    chk(aten.mm.default, a, b)
    chk(aten.mm.default, a.t().contiguous().t(), b)
    chk(aten.bmm.default, randn(3, 8, 16, dtype=dtype), randn(3, 16, 5, dtype=dtype))
    chk(aten.mv.default, a, randn(33, dtype=dtype))
    chk(aten.dot.default, randn(40, dtype=dtype), randn(40, dtype=dtype))
    chk(aten.vdot.default, randn(40, dtype=dtype), randn(40, dtype=dtype))
    chk(aten.mm.default, randn(0, 4, dtype=dtype), randn(4, 3, dtype=dtype))


def test_mm_float32_is_full_precision():
    a, b = randn(64, 256), randn(256, 32)
    got = run_lowering(aten.mm.default, a, b)
    want = (a.double() @ b.double()).float()
    torch.testing.assert_close(got, want, **tolerance(want, family="matmul"))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_mm_int(dtype):
    chk(aten.mm.default, randint(5, 6, dtype=dtype, lo=-10, hi=10), randint(6, 4, dtype=dtype, lo=-10, hi=10))
    chk(aten.bmm.default, randint(2, 5, 6, dtype=dtype, lo=-10, hi=10), randint(2, 6, 4, dtype=dtype, lo=-10, hi=10))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_addmm_family(dtype):
    m1, m2 = randn(6, 7, dtype=dtype), randn(7, 5, dtype=dtype)
    chk(aten.addmm.default, randn(6, 5, dtype=dtype), m1, m2)
    chk(aten.addmm.default, randn(5, dtype=dtype), m1, m2, beta=0.5, alpha=-2)
    chk(aten.addmm.default, randn(1, 5, dtype=dtype), m1, m2, beta=2, alpha=0.25)
    b1, b2 = randn(3, 6, 7, dtype=dtype), randn(3, 7, 5, dtype=dtype)
    chk(aten.baddbmm.default, randn(3, 6, 5, dtype=dtype), b1, b2)
    chk(aten.baddbmm.default, randn(6, 5, dtype=dtype), b1, b2, beta=-1, alpha=3)
    # PyTorch's CPU addbmm adds the batches one addmm at a time, rounding to bfloat16 after each
    chk(aten.addbmm.default, randn(6, 5, dtype=dtype), b1, b2, beta=0.5, alpha=2, family="addbmm")
    chk(aten.addmv.default, randn(6, dtype=dtype), m1, randn(7, dtype=dtype), beta=2, alpha=0.5)
    for gelu in (False, True):
        chk(aten._addmm_activation.default, randn(5, dtype=dtype), m1, m2, use_gelu=gelu)


def test_addmm_zero_beta_alpha_ignore_nan():
    m1, m2 = randn(4, 3), randn(3, 5)
    self_nan = torch.full((4, 5), NAN)
    chk(aten.addmm.default, self_nan, m1, m2, beta=0)
    m1n = m1.clone()
    m1n[0, 0] = NAN
    chk(aten.addmm.default, randn(4, 5), m1n, m2, alpha=0)
    chk(aten.addmv.default, torch.full((4,), NAN), m1, randn(3), beta=0)
    chk(aten.baddbmm.default, torch.full((2, 4, 5), NAN), randn(2, 4, 3), randn(2, 3, 5), beta=0)


def test_addmm_int():
    ints = functools.partial(randint, lo=-10, hi=10, dtype=torch.int64)
    chk(aten.addmm.default, ints(4, 5), ints(4, 3), ints(3, 5), beta=2, alpha=3)
    # fractional Scalars are truncated to the integer type first (0.6 -> 0, 2.6 -> 2), as ATen does
    chk(aten.addmm.default, ints(4, 5), ints(4, 3), ints(3, 5), beta=1.7, alpha=2.6)
    chk(aten.addmv.default, ints(4), ints(4, 3), ints(3), beta=0.2, alpha=0.6)
    chk(aten.baddbmm.default, ints(2, 4, 5), ints(2, 4, 3), ints(2, 3, 5), beta=1.5, alpha=-2.5)
    chk(aten.addbmm.default, ints(4, 5), ints(2, 4, 3), ints(2, 3, 5), beta=0.9, alpha=3.2)


def test_trace():
    for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.float64, torch.uint8):
        m = (torch.randn(5, 7) * 5).to(dtype)
        chk(aten.trace.default, m)
    chk(aten.trace.default, torch.randn(0, 3))
    dev(lambda t: torch.trace(t), torch.randn(6, 6), must_run="aten.trace.default")
