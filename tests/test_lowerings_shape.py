"""Lowerings of ops/shape.py (cat, stack, constant_pad_nd, repeat/flip/roll, tril/triu, diag_embed,
index_select): each compared with PyTorch's CPU kernel as a pure jax function (tests/lowering_harness.py) and,
where the op reaches eager, the user-level call run on the neuron device vs the CPU with no CPU
fallback (tests/device_harness.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from helpers import randint, randn  # noqa: E402
from lowering_harness import chk, dev, run_lowering  # noqa: E402

aten = torch.ops.aten


# ---------------------------------------------------------------------------------------------
# shape copies


def test_cat():
    a, b = randn(2, 3), randn(4, 3)
    chk(aten.cat.default, [a, b])
    chk(aten.cat.default, [randn(2, 3), randn(2, 5)], -1)
    chk(aten.cat.default, [a, torch.empty(0), b])  # legacy (0,) tensors are skipped
    chk(aten.cat.default, [torch.empty(0), a])
    chk(aten.cat.default, [a, randint(1, 3, lo=-10, hi=10, dtype=torch.int64)])  # float + int -> float
    chk(aten.cat.default, [randint(2, 3, dtype=torch.int8, lo=-10, hi=10), torch.ones(1, 3, dtype=torch.bool)])
    chk(aten.cat.default,
        [randint(2, 3, lo=-10, hi=10, dtype=torch.uint8), randint(2, 3, lo=-10, hi=10, dtype=torch.int8)], 1)
    chk(aten.cat.default, [a.bfloat16(), b.bfloat16()])
    chk(aten.cat.default, [a])
    chk(aten.cat.default, [torch.empty(0), torch.empty(0)])
    chk(aten.cat.default, [randn(2, 0, 3), randn(2, 4, 3)], 1)
    assert run_lowering(aten.cat.default, [a, randint(1, 3, lo=-10, hi=10, dtype=torch.int64)]).dtype == torch.float32


def test_cat_along_the_last_dim_in_runs():
    """Along the last dim, inputs whose widths share a run of 16 or more are concatenated as rows of those
    runs (XLA's CPU copies the minor dim element by element): the same values, every dtype."""
    for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.bool):
        parts = [randn(3, 5, w).to(dtype) for w in (48, 16, 80)]
        chk(aten.cat.default, parts, -1)
        chk(aten.cat.default, parts, 2)
    chk(aten.cat.default, [randn(4, 32), randn(4, 64).bfloat16()], 1)  # promoted, then in runs of 32
    chk(aten.cat.default, [randn(64), randn(32)])  # 1-d: the last dim is dim 0
    chk(aten.cat.default, [randn(2, 24), randn(2, 20)], 1)  # a common run of 4: as it is


def test_slice_backward():
    """slice_backward (a slice's gradient: zeros with the gradient where the slice took its values) as
    padding: steps 1 and more, negative and out-of-range bounds, an empty slice, the last and other dims."""
    g = randn(4, 6, 32)
    chk(aten.slice_backward.default, g, [4, 6, 96], 2, 32, 64, 1)
    chk(aten.slice_backward.default, g.bfloat16(), [4, 6, 96], 2, 0, 32, 1)
    chk(aten.slice_backward.default, g, [4, 6, 96], -1, -32, 2 ** 62, 1)
    chk(aten.slice_backward.default, g, [4, 6, 95], 2, 1, 95, 3)
    chk(aten.slice_backward.default, g, [9, 6, 32], 0, 2, 6, 1)
    chk(aten.slice_backward.default, randn(4, 3, 32), [4, 6, 32], 1, 0, 6, 2)
    chk(aten.slice_backward.default, randn(4, 0, 32), [4, 6, 32], 1, 6, 6, 1)
    chk(aten.slice_backward.default, randint(4, 6, 8, lo=-9, hi=9, dtype=torch.int64), [4, 6, 16], 2, 8, 16, 1)


def test_stack():
    chk(aten.stack.default, [randn(2, 3), randn(2, 3), randn(2, 3)])
    chk(aten.stack.default, [randn(2, 3), randn(2, 3)], -1)
    chk(aten.stack.default, [randn(2, 3), randn(2, 3)], 1)
    chk(aten.stack.default, [randint(2, 3, lo=-10, hi=10, dtype=torch.int64), randn(2, 3).bfloat16()], 2)


def test_constant_pad_nd():
    x = randn(2, 3, 4)
    chk(aten.constant_pad_nd.default, x, [1, 2])
    chk(aten.constant_pad_nd.default, x, [1, 2, 0, 3], 1.5)
    chk(aten.constant_pad_nd.default, x, [-1, 2, 1, -2, 1, 1], -7.0)
    chk(aten.constant_pad_nd.default, randint(3, 3, lo=-10, hi=10, dtype=torch.int64), [2, 2], 9)
    chk(aten.constant_pad_nd.default, torch.ones(2, 2, dtype=torch.bool), [1, 0])
    chk(aten.constant_pad_nd.default, x.bfloat16(), [0, 1], 0.5)


def test_repeat_flip_roll():
    x = randn(2, 3)
    chk(aten.repeat.default, x, [2, 3])
    chk(aten.repeat.default, x, [2, 1, 2])
    chk(aten.repeat.default, x, [0, 2])
    chk(aten.repeat.default, torch.tensor(3), [4])
    y = randn(2, 3, 4)
    chk(aten.flip.default, y, [0])
    chk(aten.flip.default, y, [-1, 1])
    chk(aten.flip.default, y, [])
    chk(aten.roll.default, y, [1])
    chk(aten.roll.default, y, [-2], [1])
    chk(aten.roll.default, y, [5, -1], [-1, 0])
    chk(aten.roll.default, randint(3, 4, lo=-10, hi=10, dtype=torch.int64), [7], [1])


def test_tril_triu():
    for x, d in ((randn(4, 6), 0), (randn(2, 5, 3), 1), (torch.ones(3, 3, dtype=torch.bool), -2),
                 (randint(4, 4, lo=-10, hi=10, dtype=torch.int64), 10)):
        chk(aten.tril.default, x, d)
        chk(aten.triu.default, x, -d)


def test_index_select():
    x = randn(5, 4, 3)
    chk(aten.index_select.default, x, 0, torch.tensor([4, 0, 0, 2]))
    chk(aten.index_select.default, x, -1, torch.tensor([2, 1], dtype=torch.int32))
    chk(aten.index_select.default, x, 1, torch.tensor(3))
    chk(aten.index_select.default, x, 1, torch.tensor([], dtype=torch.int64))
    chk(aten.index_select.default, torch.tensor(2.0), 0, torch.tensor([0]))
    chk(aten.index_select.default, randint(5, 2, lo=-10, hi=10, dtype=torch.int64).bfloat16(), 0, torch.tensor([1, 1]))


def test_diag_embed():
    v = torch.randn(2, 4)
    for offset, d1, d2 in [(0, -2, -1), (1, 0, 2), (-2, 2, 0), (3, 1, 2)]:
        chk(aten.diag_embed.default, v, offset, d1, d2)
    chk(aten.diag_embed.default, torch.randn(3).to(torch.bfloat16))
    chk(aten.diag_embed.default, torch.randint(0, 9, (2, 3)), -1)
    dev(lambda t: torch.diag_embed(t, offset=1), v, must_run="aten.diag_embed.default")
