"""Lowerings of ops/factory.py (arange, linspace, eye/full/zeros/ones, the *_like/new_* variants,
fill/zero) against PyTorch's CPU kernels (tests/lowering_harness.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from helpers import randint, randn  # noqa: E402
from lowering_harness import check_lowering, run_lowering  # noqa: E402

aten = torch.ops.aten
BF = torch.bfloat16
F32 = torch.float32


# ---------------------------------------------------------------------------------------------
# factories


def test_arange():
    check_lowering(aten.arange.default, 10)
    assert run_lowering(aten.arange.default, 10).dtype == torch.int64
    check_lowering(aten.arange.default, 7.5)
    check_lowering(aten.arange.start, 3, 11)
    check_lowering(aten.arange.start_step, 0, 10, 3)
    check_lowering(aten.arange.start_step, 10, -5, -3)
    check_lowering(aten.arange.start_step, 0.0, 1.0, 0.1)
    check_lowering(aten.arange.start_step, -1.5, 2.7, 0.25, dtype=torch.float64)
    check_lowering(aten.arange.start_step, 0, 5.5, 1, dtype=torch.int64)  # int64: bounds truncated first
    check_lowering(aten.arange.start_step, 0, 5.5, 1, dtype=torch.int32)
    check_lowering(aten.arange.start_step, 0, 300, 1, dtype=torch.uint8)
    check_lowering(aten.arange.start_step, 0, 64, 2, dtype=BF)
    check_lowering(aten.arange.start_step, 5, 5, 1)
    check_lowering(aten.arange.default, 3, dtype=torch.float32)


def test_linspace():
    check_lowering(aten.linspace.default, 0, 1, 11)
    check_lowering(aten.linspace.default, -2.5, 7.0, 50)
    check_lowering(aten.linspace.default, 10, -10, 7, dtype=torch.int64)
    check_lowering(aten.linspace.default, 0, 10, 4, dtype=torch.int32)
    check_lowering(aten.linspace.default, 0, 1, 1)
    check_lowering(aten.linspace.default, 0, 1, 0)
    check_lowering(aten.linspace.default, -1, 1, 33, dtype=BF)
    check_lowering(aten.linspace.default, -1, 1, 9, dtype=torch.float64)
    check_lowering(aten.linspace.Tensor_Tensor, torch.tensor(1.0), torch.tensor(4.0), 13)
    check_lowering(aten.linspace.Tensor_Scalar, torch.tensor(1.0), 4, 5)
    check_lowering(aten.linspace.Scalar_Tensor, 1, torch.tensor(-4.0), 6)


def test_eye_full_zeros_ones():
    check_lowering(aten.eye.default, 4)
    check_lowering(aten.eye.m, 3, 5, dtype=torch.int32)
    check_lowering(aten.eye.m, 5, 2, dtype=torch.bool)
    check_lowering(aten.full.default, [2, 3], 1.5)
    check_lowering(aten.full.default, [2, 3], 7)
    assert run_lowering(aten.full.default, [2, 3], 7).dtype == torch.int64
    check_lowering(aten.full.default, [2], True)
    assert run_lowering(aten.full.default, [2], True).dtype == torch.bool
    check_lowering(aten.full.default, [4], 2.7, dtype=torch.int32)
    check_lowering(aten.full.default, [4], -1.0, dtype=BF)
    check_lowering(aten.full.default, [0, 3], 1.0)
    check_lowering(aten.full.default, [], float("-inf"))
    check_lowering(aten.zeros.default, [2, 3])
    check_lowering(aten.zeros.default, [2, 3], dtype=torch.int64)
    check_lowering(aten.ones.default, [3])
    check_lowering(aten.ones.default, [3, 1], dtype=torch.bool)
    check_lowering(aten.scalar_tensor.default, 3)
    check_lowering(aten.scalar_tensor.default, 2.5, dtype=torch.float64)
    check_lowering(aten.scalar_tensor.default, 2.5, dtype=torch.int32)


def test_like_and_new():
    x = randint(2, 3, dtype=torch.int16, seed=0)
    check_lowering(aten.full_like.default, x, 4)
    check_lowering(aten.full_like.default, x, 4.5, dtype=torch.float32)
    check_lowering(aten.zeros_like.default, x)
    check_lowering(aten.ones_like.default, x, dtype=BF)
    check_lowering(aten.new_zeros.default, x, [4])
    check_lowering(aten.new_ones.default, x, [1, 2], dtype=torch.float64)
    check_lowering(aten.new_full.default, x, [3], 2.9)


def test_fill_zero():
    x = randn(2, 3, seed=0)
    check_lowering(aten.fill.Scalar, x, 0.25)
    check_lowering(aten.fill.Tensor, x, torch.tensor(-3.0))
    check_lowering(aten.fill_.Scalar, randn(2, 3, seed=0), 0.25)
    check_lowering(aten.fill_.Scalar, randint(4, seed=0), 2.9)
    check_lowering(aten.fill_.Tensor, randn(2, 3, seed=0).to(BF), torch.tensor(1.5))
    check_lowering(aten.zero_.default, randn(2, 3, seed=0))
    check_lowering(aten.zero.default, randint(5, dtype=torch.uint8, lo=0, seed=0))
