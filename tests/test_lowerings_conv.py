"""Lowerings of ops/conv.py (convolution and its backward, im2col/col2im): each compared with PyTorch's
CPU kernel on its own (tests/lowering_harness.py), and the user-level calls that reach it run on the
neuron device vs the CPU (tests/device_harness.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from device_harness import check_device  # noqa: E402
from helpers import randn  # noqa: E402
from lowering_harness import check_lowering, compare_outputs, run_lowering  # noqa: E402
from tolerances import EXACT  # noqa: E402

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")


# (input shape, weight shape, stride, padding, dilation, transposed, output_padding, groups)
CONVS = [
    ((2, 3, 11), (4, 3, 3), [1], [1], [1], False, [0], 1),
    ((2, 4, 10), (6, 2, 4), [2], [0], [2], False, [0], 2),
    ((2, 4, 9, 8), (6, 2, 3, 3), [2, 1], [1, 0], [1, 2], False, [0, 0], 2),
    ((1, 3, 7, 7), (5, 3, 1, 1), [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
    ((2, 4, 6, 6), (4, 1, 3, 3), [1, 1], [2, 2], [2, 2], False, [0, 0], 4),  # depthwise
    ((2, 2, 5, 6, 7), (4, 2, 3, 2, 3), [1, 2, 1], [1, 0, 1], [1, 1, 2], False, [0, 0, 0], 1),
    ((2, 4, 5, 6), (4, 3, 3, 3), [2, 2], [1, 0], [1, 2], True, [1, 0], 2),
    ((2, 3, 4, 4), (3, 5, 4, 4), [2, 2], [1, 1], [1, 1], True, [0, 0], 1),
    ((2, 3, 7), (3, 2, 3), [3], [4], [1], True, [2], 1),  # padding larger than the kernel reach
    ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), [2, 1, 2], [0, 1, 0], [1, 1, 1], True, [1, 0, 1], 1),
]


UNFOLDS = [  # kernel, dilation, padding, stride
    ([3, 3], [1, 1], [0, 0], [1, 1]),
    ([3, 2], [1, 2], [1, 0], [2, 1]),
    ([2, 2], [1, 1], [1, 1], [2, 2]),
]


def _conv_grads(fn):
    def run(x, w, b, gy):
        y = fn(x, w, b)
        return (y,) + torch.autograd.grad(y, (x, w) if b is None else (x, w, b), gy)

    return run


DEVICE_CONVS = [
    (F.conv1d, (2, 4, 12), (6, 2, 3), dict(stride=2, padding=1, groups=2)),
    (F.conv2d, (2, 3, 10, 9), (4, 3, 3, 3), dict(padding=1)),
    (F.conv2d, (2, 4, 9, 8), (6, 2, 3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)),
    (F.conv2d, (1, 4, 8, 8), (4, 1, 3, 3), dict(padding="same", groups=4)),
    (F.conv3d, (2, 2, 5, 6, 5), (3, 2, 3, 2, 3), dict(stride=(1, 2, 1), padding=1)),
    (F.conv_transpose2d, (2, 4, 5, 6), (4, 3, 3, 3), dict(stride=2, padding=1, output_padding=1, groups=2)),
    (F.conv_transpose2d, (2, 3, 5, 5), (3, 2, 4, 4), dict(stride=2, padding=1, dilation=2)),
]


# ---------------------------------------------------------------------------------------------
# convolution


@pytest.mark.parametrize("cfg", CONVS, ids=lambda c: f"{len(c[0]) - 2}d{'T' if c[5] else ''}")
def test_convolution(cfg):
    xs, ws, stride, padding, dilation, transposed, opad, groups = cfg
    x, w = randn(*xs), randn(*ws)
    cout = ws[1] * groups if transposed else ws[0]
    b = randn(cout)
    check_lowering(aten.convolution.default, x, w, b if cfg[0][0] == 2 else None, stride, padding, dilation,
                   transposed, opad, groups, family="conv")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_convolution_dtypes(dtype):
    x, w, b = randn(2, 4, 9, 8, dtype=dtype), randn(6, 2, 3, 3, dtype=dtype), randn(6, dtype=dtype)
    check_lowering(aten.convolution.default, x, w, b, [2, 1], [1, 0], [1, 2], False, [0, 0], 2, family="conv")
    wt = randn(4, 3, 3, 3, dtype=dtype)
    check_lowering(aten.convolution.default, x, wt, b, [2, 2], [1, 0], [1, 2], True, [1, 0], 2, family="conv")


def test_convolution_float32_is_exact_precision():
    # sums of products that bfloat16 passes would round visibly
    x = torch.full((1, 1, 1, 64), 1.0 + 2 ** -12)
    w = torch.full((1, 1, 1, 64), 1.0 + 2 ** -12)
    got = run_lowering(aten.convolution.default, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    torch.testing.assert_close(got, aten.convolution.default(x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
                               **EXACT)


def test_convolution_nan_and_inf():
    x = randn(1, 2, 5, 5)
    x[0, 0, 1, 1] = NAN
    x[0, 1, 3, 3] = INF
    w = randn(3, 2, 3, 3)
    check_lowering(aten.convolution.default, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)


@pytest.mark.parametrize("cfg", CONVS, ids=lambda c: f"{len(c[0]) - 2}d{'T' if c[5] else ''}")
def test_convolution_backward(cfg, none_ok):
    xs, ws, stride, padding, dilation, transposed, opad, groups = cfg
    x, w = randn(*xs), randn(*ws)
    y = aten.convolution.default(x, w, None, stride, padding, dilation, transposed, opad, groups)
    g = torch.randn_like(y)
    args = (g, x, w, [y.shape[1]], stride, padding, dilation, transposed, opad, groups)
    check_lowering(aten.convolution_backward.default, *args, [True, True, True], family="conv")
    if cfg not in (CONVS[2], CONVS[6]):
        return
    for mask in ([True, False, False], [False, True, True]):
        compare_outputs(aten.convolution_backward.default(*args, mask),
                        none_ok(aten.convolution_backward.default, *args, mask), family="conv")


def test_convolution_backward_bfloat16():
    x, w = randn(2, 4, 9, 8, dtype=torch.bfloat16), randn(6, 2, 3, 3, dtype=torch.bfloat16)
    y = aten.convolution.default(x, w, None, [2, 1], [1, 0], [1, 2], False, [0, 0], 2)
    g = torch.randn_like(y)
    check_lowering(aten.convolution_backward.default, g, x, w, [6], [2, 1], [1, 0], [1, 2], False, [0, 0], 2,
                   [True, True, True], family="conv")


# ---------------------------------------------------------------------------------------------
# im2col / col2im


@pytest.mark.parametrize("cfg", UNFOLDS)
def test_im2col_col2im(cfg):
    x = randn(2, 3, 9, 8)
    check_lowering(aten.im2col.default, x, *cfg)
    check_lowering(aten.im2col.default, x[0], *cfg)
    cols = aten.im2col.default(x, *cfg)
    check_lowering(aten.col2im.default, cols, [9, 8], *cfg)
    check_lowering(aten.col2im.default, cols[0], [9, 8], *cfg)


def test_im2col_col2im_bfloat16():
    x = randn(2, 3, 9, 8, dtype=torch.bfloat16)
    check_lowering(aten.im2col.default, x, *UNFOLDS[1])
    cols = aten.im2col.default(x, *UNFOLDS[1])
    check_lowering(aten.col2im.default, cols, [9, 8], *UNFOLDS[1])


# ---------------------------------------------------------------------------------------------
# on the device


@pytest.mark.parametrize("case", DEVICE_CONVS, ids=lambda c: f"{c[0].__name__}-{c[3]}")
def test_device_convolution(case):
    fn, xs, ws, kw = case
    cout = ws[1] * kw.get("groups", 1) if "transpose" in fn.__name__ else ws[0]
    x = randn(*xs).requires_grad_()
    w = randn(*ws).requires_grad_()
    b = randn(cout).requires_grad_()
    y = fn(x, w, b, **kw)
    gy = torch.randn_like(y)
    check_device(_conv_grads(lambda x, w, b: fn(x, w, b, **kw)), x, w, b, gy, family="conv",
                 must_run=["aten.convolution.default", "aten.convolution_backward.default"])
    if case in (DEVICE_CONVS[1], DEVICE_CONVS[5]):
        check_device(_conv_grads(lambda x, w, b: fn(x, w, b, **kw)), x, w, None, gy, family="conv",
                     must_run=["aten.convolution.default", "aten.convolution_backward.default"])


def test_device_convolution_bfloat16_and_channels_last():
    x = randn(2, 4, 9, 8, dtype=torch.bfloat16).requires_grad_()
    w = randn(6, 2, 3, 3, dtype=torch.bfloat16).requires_grad_()
    b = randn(6, dtype=torch.bfloat16).requires_grad_()
    conv = lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1, groups=2)  # noqa: E731
    gy = torch.randn_like(conv(x, w, b))
    check_device(_conv_grads(conv), x, w, b, gy, family="conv",
                 must_run=["aten.convolution.default", "aten.convolution_backward.default"])
    xc = randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    wc = randn(5, 3, 3, 3).contiguous(memory_format=torch.channels_last)
    check_device(lambda x, w: F.conv2d(x, w, padding=1), xc, wc, family="conv", must_run=["aten.convolution.default"])
    # unbatched input
    check_device(lambda x, w: F.conv2d(x, w, padding=1), randn(3, 7, 6), randn(4, 3, 3, 3), family="conv",
                 must_run=["aten.convolution.default"])


def test_device_unfold_fold():
    x = randn(2, 3, 9, 8).requires_grad_()
    unfold = lambda x: F.unfold(x, (3, 2), dilation=(1, 2), padding=(1, 0), stride=(2, 1))  # noqa: E731
    y = unfold(x)
    check_device(lambda x, g: (unfold(x), torch.autograd.grad(unfold(x), x, g)[0]), x, torch.randn_like(y),
                 must_run=["aten.im2col.default", "aten.col2im.default"])
    cols = randn(2, 3 * 4, 16).requires_grad_()
    fold = lambda c: F.fold(c, (8, 8), 2, stride=2)  # noqa: E731
    check_device(lambda c, g: (fold(c), torch.autograd.grad(fold(c), c, g)[0]), cols, randn(2, 3, 8, 8),
                 must_run=["aten.im2col.default", "aten.col2im.default"])
    xb = randn(2, 3, 9, 8, dtype=torch.bfloat16)
    check_device(lambda x: F.fold(F.unfold(x, 3, padding=1), (9, 8), 3, padding=1), xb,
                 must_run=["aten.im2col.default", "aten.col2im.default"])
