"""Lowerings of ops/loss.py (_ctc_loss): each compared with PyTorch's CPU kernel as a pure jax function
(tests/lowering_harness.py) and, where the op reaches eager, the user-level call run on the neuron
device vs the CPU with no CPU fallback (tests/device_harness.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from device_harness import check_device  # noqa: E402
from lowering_harness import run_lowering  # noqa: E402

aten = torch.ops.aten


def ctc_case(T=50, B=16, C=20, S=30):
    lp = torch.randn(T, B, C).log_softmax(2)
    tl = torch.randint(0, S, (B,))
    il = torch.randint(1, T + 1, (B,))
    tl[0], tl[1] = 0, S  # an empty target, a full one
    il[2], il[3], tl[3], il[4] = 0, 0, 0, 1  # no input (with and without a target), a single step
    targets = torch.randint(1, C, (B, S))
    return lp, targets, il.tolist(), tl.tolist()


# ---------------------------------------------------------------------------------------------
# CTC loss


def test_ctc_loss():
    lp, targets, il, tl = ctc_case()
    want = aten._ctc_loss(lp, targets, il, tl)
    got = run_lowering(aten._ctc_loss.default, lp, targets, il, tl)
    torch.testing.assert_close(got[0], want[0])
    # log_alpha where the CPU writes it
    for b in range(len(il)):
        if il[b]:
            torch.testing.assert_close(got[1][b, :il[b], :2 * tl[b] + 1], want[1][b, :il[b], :2 * tl[b] + 1])
    flat = torch.cat([targets[b, :tl[b]] for b in range(len(tl))])  # concatenated targets
    torch.testing.assert_close(run_lowering(aten._ctc_loss.default, lp, flat, il, tl)[0],
                               aten._ctc_loss(lp, flat, il, tl)[0])
    # repeated labels need a blank between them: too short an input is impossible (inf)
    rep = torch.tensor([[1, 1, 2, 2, 2, 3]])
    for t in (10, 5):
        x = torch.randn(t, 1, 5).log_softmax(2)
        torch.testing.assert_close(run_lowering(aten._ctc_loss.default, x, rep, [t], [6], 4)[0],
                                   aten._ctc_loss(x, rep, [t], [6], 4)[0])


def test_device_ctc_loss():
    lp, targets, il, tl = ctc_case(T=20, B=6, C=7, S=8)
    for reduction in ("none", "mean", "sum"):
        for zero_infinity in (True, False):
            check_device(lambda lp, tg: F.ctc_loss(lp, tg, il, tl, reduction=reduction, zero_infinity=zero_infinity),
                         lp, targets, must_run=["aten._ctc_loss.default"])
    check_device(lambda lp, tg, il, tl: F.ctc_loss(lp, tg, il, tl), lp, targets, torch.tensor(il), torch.tensor(tl),
                 must_run=["aten._ctc_loss.default"])
    with pytest.raises(RuntimeError, match="label range"):
        F.ctc_loss(lp.to("neuron"), (targets + 10).to("neuron"), il, tl, reduction="none").cpu()
