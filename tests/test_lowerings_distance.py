"""Lowerings of ops/distance.py (_cdist_forward, _pdist_forward): each compared with PyTorch's CPU
kernel as a pure jax function (tests/lowering_harness.py) and, where the op reaches eager, the
user-level call run on the neuron device vs the CPU with no CPU fallback (tests/device_harness.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from lowering_harness import chk, dev  # noqa: E402

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")


def test_cdist_pdist():
    a, b = torch.randn(2, 7, 5), torch.randn(2, 6, 5)
    for p in (0.0, 1.0, 2.0, 3.0, 0.5, INF):
        chk(aten._cdist_forward.default, a, b, p, None)
    for mode in (0, 1, 2):  # p=2: the matrix-product form for mode 1 (and mode 0 past 25 rows)
        chk(aten._cdist_forward.default, a, b, 2.0, mode)
    big = torch.randn(30, 4)
    chk(aten._cdist_forward.default, big, torch.randn(8, 4), 2.0, None)
    chk(aten._cdist_forward.default, torch.randn(3, 1, 4, 3), torch.randn(2, 5, 3), 1.0, None)  # batch broadcast
    chk(aten._cdist_forward.default, torch.randn(4, 0), torch.randn(3, 0), 2.0, None)
    chk(aten._cdist_forward.default, a.double(), b.double(), 2.0, 1)
    x = torch.randn(7, 4)
    for p in (0.0, 1.0, 2.0, 1.5, INF):
        chk(aten._pdist_forward.default, x, p)
    chk(aten._pdist_forward.default, torch.randn(1, 3), 2.0)
    chk(aten._pdist_forward.default, torch.randn(4, 0), 2.0)


def test_cdist_pdist_device():
    a, b = torch.randn(2, 7, 5), torch.randn(6, 5)
    dev(lambda x, y: torch.cdist(x, y), a, b, must_run="aten._cdist_forward.default")
    dev(lambda x, y: torch.cdist(x, y, p=1), a, b, must_run="aten._cdist_forward.default")
    dev(lambda x, y: torch.cdist(x, y, p=INF), a, b, must_run="aten._cdist_forward.default")
    dev(lambda x: F.pdist(x), torch.randn(9, 3), must_run="aten._pdist_forward.default")
