"""Lowerings of ops/fft.py (_fft_r2c, _fft_c2r, _fft_c2c): each compared with PyTorch's CPU kernel as a
pure jax function (tests/lowering_harness.py) and, where the op reaches eager, the user-level call
run on the neuron device vs the CPU with no CPU fallback (tests/device_harness.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from lowering_harness import chk, dev  # noqa: E402

aten = torch.ops.aten


def test_fft_lowerings():
    x = torch.randn(4, 6, 8)
    for norm in (0, 1, 2):
        chk(aten._fft_r2c.default, x, [2], norm, True)
        chk(aten._fft_r2c.default, x, [0, 2], norm, False)
        c = torch.randn(4, 6, 5, dtype=torch.complex64)
        chk(aten._fft_c2r.default, c, [2], norm, 8)
        chk(aten._fft_c2r.default, c, [1, 2], norm, 9)
        chk(aten._fft_c2c.default, c, [0, 2], norm, True)
        chk(aten._fft_c2c.default, c, [1], norm, False)
    chk(aten._fft_r2c.default, x, [1, 0], 0, True)  # the LAST listed dim is halved
    chk(aten._fft_r2c.default, x.double(), [0, 1, 2], 2, True)
    chk(aten._fft_c2c.default, torch.randn(2, 3, 4, 5, dtype=torch.complex64), [0, 1, 2, 3], 1, True)


def test_fft_device():
    x = torch.randn(4, 16)
    dev(lambda t: torch.fft.rfft(t), x, must_run="aten._fft_r2c.default")
    dev(lambda t: torch.fft.fft(t, norm="ortho"), x, must_run="aten._fft_r2c.default")
    dev(lambda t: torch.fft.irfft(torch.fft.rfft(t), n=16), x, must_run="aten._fft_c2r.default")
    c = torch.randn(4, 16, dtype=torch.complex64)
    dev(lambda t: torch.fft.ifft2(t, norm="forward"), c, must_run="aten._fft_c2c.default")
    dev(lambda t: torch.fft.fftn(t), c, must_run="aten._fft_c2c.default")
