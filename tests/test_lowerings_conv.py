"""Lowerings of convolutions, pooling (max, average, adaptive, fractional), batch norm and
im2col/col2im (torch_neuronx/ops/conv.py):
each compared with PyTorch's CPU kernel on its own (tests/lowering_harness.py), and the user-level
calls that reach it run on the neuron device vs the CPU (tests/device_harness.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_neuronx  # noqa: E402

from device_harness import check_device  # noqa: E402
from lowering_harness import check_lowering, run_lowering, tolerance  # noqa: E402
from tolerances import EXACT  # noqa: E402

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def compare(expected, got, family=None, **tol):
    """Outputs of a lowering (None where masked off) against PyTorch's: same dtype (no cast), shape, values."""
    assert len(expected) == len(got), (len(expected), len(got))
    for e, g in zip(expected, got):
        if e is None:
            assert g is None
            continue
        assert g is not None and tuple(g.shape) == tuple(e.shape), (None if g is None else g.shape, e.shape)
        torch.testing.assert_close(g, e, equal_nan=True, **tolerance(e, family=family, **tol))


# ---------------------------------------------------------------------------------------------
# convolution

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
        compare(aten.convolution_backward.default(*args, mask), none_ok(aten.convolution_backward.default, *args, mask),
                family="conv")


def test_convolution_backward_bfloat16():
    x, w = randn(2, 4, 9, 8, dtype=torch.bfloat16), randn(6, 2, 3, 3, dtype=torch.bfloat16)
    y = aten.convolution.default(x, w, None, [2, 1], [1, 0], [1, 2], False, [0, 0], 2)
    g = torch.randn_like(y)
    check_lowering(aten.convolution_backward.default, g, x, w, [6], [2, 1], [1, 0], [1, 2], False, [0, 0], 2,
                   [True, True, True], family="conv")


# ---------------------------------------------------------------------------------------------
# pooling


MAXPOOLS = [  # kernel, stride, padding, dilation, ceil_mode
    ([2, 2], [], [0, 0], [1, 1], False),
    ([3, 3], [2, 2], [1, 1], [1, 1], True),
    ([3, 2], [2, 1], [1, 1], [2, 3], False),
    ([2, 3], [3, 2], [1, 1], [1, 1], True),
]


@pytest.mark.parametrize("cfg", MAXPOOLS)
def test_max_pool2d_with_indices(cfg):
    x = randn(2, 3, 9, 10)
    check_lowering(aten.max_pool2d_with_indices.default, x, *cfg)
    check_lowering(aten.max_pool2d_with_indices.default, x[0], *cfg)  # unbatched


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.uint8])
def test_max_pool2d_with_indices_dtypes(dtype):
    x = torch.randint(-100, 100, (2, 3, 7, 8)) if not dtype.is_floating_point else randn(2, 3, 7, 8)
    if dtype == torch.uint8:
        x = x.abs()
    check_lowering(aten.max_pool2d_with_indices.default, x.to(dtype), [3, 3], [2, 2], [1, 1], [1, 1], True)


def test_max_pool2d_ties_nan_and_inf():
    # ties: the first maximum in scan order; NaN: the last NaN; all -inf: the first valid element
    x = torch.tensor([[[[1.0, 3.0, 3.0, NAN], [3.0, NAN, 0.0, 1.0], [-INF, -INF, 2.0, 2.0], [-INF, -INF, 2.0, 2.0]]]])
    check_lowering(aten.max_pool2d_with_indices.default, x, [2, 2], [2, 2], [0, 0], [1, 1], False)
    check_lowering(aten.max_pool2d_with_indices.default, x, [1, 4], [1, 1], [0, 0], [1, 1], False)
    check_lowering(aten.max_pool2d_with_indices.default, torch.full((1, 1, 3, 3), -INF), [2, 2], [1, 1], [1, 1], [1, 1], False)
    neg = -torch.arange(1, 17).reshape(1, 1, 4, 4)
    check_lowering(aten.max_pool2d_with_indices.default, neg, [2, 2], [2, 2], [1, 1], [1, 1], False)
    check_lowering(aten.max_pool2d_with_indices.default, torch.zeros(1, 1, 4, 4, dtype=torch.uint8), [3, 3], [2, 2], [1, 1], [1, 1], True)


def test_max_pool3d_with_indices():
    x = randn(2, 2, 5, 6, 7)
    check_lowering(aten.max_pool3d_with_indices.default, x, [2, 3, 2], [2, 2, 1], [1, 1, 0], [1, 1, 1], True)
    check_lowering(aten.max_pool3d_with_indices.default, x[0], [3, 2, 2], [1, 2, 2], [1, 0, 1], [1, 2, 1], False)
    check_lowering(aten.max_pool3d_with_indices.default, x.to(torch.bfloat16), [2, 2, 2], [], [0, 0, 0], [1, 1, 1], False)


@pytest.mark.parametrize("cfg", MAXPOOLS)
def test_max_pool2d_with_indices_backward(cfg):
    x = randn(2, 3, 9, 10)
    v, i = aten.max_pool2d_with_indices.default(x, *cfg)
    check_lowering(aten.max_pool2d_with_indices_backward.default, torch.randn_like(v), x, *cfg, i)


def test_max_pool_backward_indices_as_given():
    # the CPU kernel adds at whatever index it is given and skips -1
    x = randn(1, 2, 4, 4)
    i = torch.tensor([[[[0, 0], [15, -1]], [[5, 5], [5, 2]]]])
    g = randn(1, 2, 2, 2)
    check_lowering(aten.max_pool2d_with_indices_backward.default, g, x, [2, 2], [2, 2], [0, 0], [1, 1], False, i)
    xb = x.to(torch.bfloat16)
    check_lowering(aten.max_pool2d_with_indices_backward.default, g.to(torch.bfloat16), xb, [2, 2], [2, 2], [0, 0],
                   [1, 1], False, i, family="pool_backward")


def test_max_pool3d_with_indices_backward():
    x = randn(2, 2, 5, 6, 7)
    cfg = ([2, 3, 2], [2, 2, 1], [1, 1, 0], [1, 1, 1], True)
    v, i = aten.max_pool3d_with_indices.default(x, *cfg)
    check_lowering(aten.max_pool3d_with_indices_backward.default, torch.randn_like(v), x, *cfg, i)


# fractional max pooling: the CPU's window starts from the given random samples, exactly (16-bit
# types too: c10 rounds after every operation), first maximum / last NaN, flat plane indices

FRACTIONAL_2D = [((2, 3, 9, 9), [3, 3], [4, 4]), ((1, 3, 9, 9), [2, 3], [2, 5]), ((3, 9, 10), [3, 2], [5, 7]),
                 ((2, 3, 7, 11), [1, 1], [7, 11]), ((1, 2, 300, 260), [3, 3], [100, 77])]
FRACTIONAL_3D = [((2, 3, 5, 5, 5), [2, 2, 2], [2, 3, 2]), ((3, 6, 5, 5), [2, 2, 2], [3, 3, 3]),
                 ((1, 2, 40, 30, 50), [3, 2, 4], [13, 20, 11])]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_fractional_max_pool(dtype):
    for cases, op, nsp in ((FRACTIONAL_2D, aten.fractional_max_pool2d.default, 2),
                           (FRACTIONAL_3D, aten.fractional_max_pool3d.default, 3)):
        for shape, k, o in cases if dtype == torch.float32 else cases[:2]:
            x = randn(*shape, dtype=dtype)
            x.view(-1)[::7] = -INF
            x.view(-1)[5] = NAN
            x.view(-1)[6] = NAN
            batch = shape[0] if len(shape) == nsp + 2 else 1
            samples = torch.rand(batch, shape[-nsp - 1], nsp).to(dtype)
            check_lowering(op, x, k, o, samples, **EXACT)
    empty = randn(0, 1, 4, 5, 4, dtype=dtype)
    check_lowering(aten.fractional_max_pool3d.default, empty, [2, 2, 2], [2, 3, 2], torch.rand(0, 1, 3).to(dtype))


def test_fractional_max_pool_backward():
    x = randn(2, 3, 9, 9)
    v, i = aten.fractional_max_pool2d(x, [3, 3], [4, 4], torch.rand(2, 3, 2))
    check_lowering(aten.fractional_max_pool2d_backward.default, torch.randn_like(v), x, [3, 3], [4, 4], i)
    x = randn(2, 3, 5, 6, 7)
    v, i = aten.fractional_max_pool3d(x, [2, 2, 2], [3, 3, 3], torch.rand(2, 3, 3))
    check_lowering(aten.fractional_max_pool3d_backward.default, torch.randn_like(v), x, [2, 2, 2], [3, 3, 3], i)


def test_device_fractional_max_pool():
    def grads(pool):
        def fn(x, s):
            out, idx = pool(x, s)
            return out, idx, torch.autograd.grad(out.sin().sum(), x)[0]
        return fn

    x, s = randn(2, 3, 9, 9).requires_grad_(), torch.rand(2, 3, 2)
    check_device(grads(lambda x, s: F.fractional_max_pool2d(x, 3, output_size=4, return_indices=True,
                                                            _random_samples=s)), x, s,
                 must_run=["aten.fractional_max_pool2d.default", "aten.fractional_max_pool2d_backward.default"])
    x, s = randn(2, 3, 5, 6, 7).requires_grad_(), torch.rand(2, 3, 3)
    check_device(grads(lambda x, s: F.fractional_max_pool3d(x, 2, output_ratio=0.5, return_indices=True,
                                                            _random_samples=s)), x, s,
                 must_run=["aten.fractional_max_pool3d.default", "aten.fractional_max_pool3d_backward.default"])
    # without _random_samples the samples come from the device generator: same shapes, values in the input
    d = torch.randn(1, 2, 9, 9, device="neuron")
    out, idx = F.fractional_max_pool2d(d, 2, output_size=5, return_indices=True)
    assert "aten.fractional_max_pool2d.default" in torch_neuronx.get_executed_ops()
    assert out.shape == (1, 2, 5, 5) and torch.equal(out.cpu(), d.cpu().flatten(2).gather(2, idx.cpu().flatten(2)).view_as(out))


AVGPOOLS = [  # kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    ([2, 2], [], [0, 0], False, True, None),
    ([3, 3], [2, 2], [1, 1], True, False, None),
    ([3, 2], [2, 3], [1, 1], True, True, None),
    ([3, 2], [2, 3], [1, 0], False, False, 5),
    ([3, 3], [3, 3], [1, 1], True, True, None),  # a ceil_mode window in the padding only
]


@pytest.mark.parametrize("cfg", AVGPOOLS)
def test_avg_pool2d(cfg):
    x = randn(2, 3, 9, 10)
    check_lowering(aten.avg_pool2d.default, x, *cfg)
    check_lowering(aten.avg_pool2d.default, x[0], *cfg)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int64])
def test_avg_pool2d_dtypes(dtype):
    x = torch.randint(-50, 50, (2, 3, 7, 8)).to(dtype) if not dtype.is_floating_point else randn(2, 3, 7, 8, dtype=dtype)
    for cfg in AVGPOOLS[1:4]:
        check_lowering(aten.avg_pool2d.default, x, *cfg)


@pytest.mark.parametrize("cfg", AVGPOOLS)
def test_avg_pool2d_backward(cfg):
    x = randn(2, 3, 9, 10)
    y = aten.avg_pool2d.default(x, *cfg)
    check_lowering(aten.avg_pool2d_backward.default, torch.randn_like(y), x, *cfg)


def test_avg_pool2d_backward_bfloat16():
    x = randn(2, 3, 9, 10, dtype=torch.bfloat16)
    cfg = AVGPOOLS[2]
    y = aten.avg_pool2d.default(x, *cfg)
    check_lowering(aten.avg_pool2d_backward.default, torch.randn_like(y), x, *cfg, family="pool_backward")


def test_avg_pool3d_and_backward():
    x = randn(2, 2, 5, 6, 7)
    for cfg in ([[2, 3, 2], [2, 2, 1], [1, 1, 0], True, False, None], [[3, 2, 2], [], [1, 0, 1], False, True, 3]):
        check_lowering(aten.avg_pool3d.default, x, *cfg)
        y = aten.avg_pool3d.default(x, *cfg)
        check_lowering(aten.avg_pool3d_backward.default, torch.randn_like(y), x, *cfg)
    check_lowering(aten.avg_pool3d.default, torch.randint(-9, 9, (1, 2, 4, 4, 4)), [2, 2, 2], [1, 1, 1], [1, 1, 1],
                   False, True, None)


@pytest.mark.parametrize("out", [[4, 5], [3, 1], [1, 1], [9, 10], [7, 3]])
def test_adaptive_avg_pool2d(out):
    x = randn(2, 3, 9, 10)
    check_lowering(aten._adaptive_avg_pool2d.default, x, out)
    y = aten._adaptive_avg_pool2d.default(x, out)
    check_lowering(aten._adaptive_avg_pool2d_backward.default, torch.randn_like(y), x)


def test_adaptive_avg_pool2d_dtypes_and_unbatched():
    x = randn(3, 9, 10)
    check_lowering(aten._adaptive_avg_pool2d.default, x, [4, 4])
    check_lowering(aten._adaptive_avg_pool2d_backward.default, randn(3, 4, 4), x)
    xb = randn(2, 3, 9, 10, dtype=torch.bfloat16)
    check_lowering(aten._adaptive_avg_pool2d.default, xb, [4, 5])
    check_lowering(aten._adaptive_avg_pool2d_backward.default, randn(2, 3, 4, 5, dtype=torch.bfloat16), xb,
                   family="pool_backward")


def test_adaptive_avg_pool3d():
    x = randn(2, 2, 5, 6, 7)
    for out in ([2, 4, 3], [5, 3, 7], [1, 1, 1]):
        check_lowering(aten._adaptive_avg_pool3d.default, x, out)
        y = aten._adaptive_avg_pool3d.default(x, out)
        check_lowering(aten._adaptive_avg_pool3d_backward.default, torch.randn_like(y), x)


# ---------------------------------------------------------------------------------------------
# im2col / col2im

UNFOLDS = [  # kernel, dilation, padding, stride
    ([3, 3], [1, 1], [0, 0], [1, 1]),
    ([3, 2], [1, 2], [1, 0], [2, 1]),
    ([2, 2], [1, 1], [1, 1], [2, 2]),
]


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
# batch norm


def bn_args(shape=(4, 3, 5, 6), dtype=torch.float32, affine=True):
    c = shape[1]
    x = randn(*shape, dtype=dtype)
    w, b = (randn(c), randn(c)) if affine else (None, None)
    return x, w, b, randn(c), torch.rand(c) + 0.5


def check_written(op, *args, n_out, written, equal_nan=False):
    """Compare an op that writes some of its arguments: its returns, then the written arguments (same
    dtype as PyTorch's, no cast; batch norm tolerances)."""
    cpu_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    expected = op(*cpu_args)
    got = run_lowering(op, *[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    assert len(got) == n_out + len(written)
    if not args[5] and expected[1].numel() == 0:  # eval mode: the CPU's statistics are empty, the
        rm, rv, eps = args[3], args[4], args[7]  # device's the running ones (CUDA's convention)
        expected = (expected[0], rm.float(), torch.rsqrt(rv.float() + eps)) + tuple(expected[3:])
    for e, g in list(zip(expected[:n_out], got[:n_out])) + [(cpu_args[i], g) for i, g in zip(written, got[n_out:])]:
        torch.testing.assert_close(g, e, equal_nan=equal_nan, **tolerance(e, family="batch_norm"))


@pytest.mark.parametrize("dtype,shape", [
    (torch.float32, (4, 3, 5, 6)), (torch.bfloat16, (4, 3, 5, 6)), (torch.float32, (8, 5)), (torch.float32, (2, 3, 2, 3, 4)),
])
def test_native_batch_norm_legit(dtype, shape, none_ok):
    x, w, b, rm, rv = bn_args(shape, dtype)
    for training in (True, False):
        check_written(aten._native_batch_norm_legit.default, x, w, b, rm, rv, training, 0.1, 1e-5, n_out=3,
                      written=(3, 4))
    check_lowering(aten._native_batch_norm_legit.no_stats, x, w, b, True, 0.1, 1e-5, family="batch_norm")
    check_lowering(aten._native_batch_norm_legit.no_stats, x, None, None, True, 0.1, 1e-5, family="batch_norm")
    out = none_ok(aten._native_batch_norm_legit_no_training.default, x, w, b, rm, rv, 0.1, 1e-5)
    want = aten._native_batch_norm_legit_no_training.default(x, w, b, rm, rv, 0.1, 1e-5)
    torch.testing.assert_close(out[0], want[0], **tolerance(want[0], family="batch_norm"))
    # eval-mode statistics: the CPU's are empty; the device's are the running statistics (the
    # convention of CUDA and of PyTorch's reference decomposition), computed here on the CPU
    assert want[1].numel() == want[2].numel() == 0
    torch.testing.assert_close(out[1], rm.float(), **EXACT)
    torch.testing.assert_close(out[2], torch.rsqrt(rv.float() + 1e-5))


def test_native_batch_norm_legit_functional_and_batch_norm_update_ops(none_ok):
    x, w, b, rm, rv = bn_args()
    check_lowering(aten._native_batch_norm_legit_functional.default, x, w, b, rm, rv, True, 0.1, 1e-5,
                   family="batch_norm")
    check_lowering(aten._native_batch_norm_legit_functional.default, x, None, b, rm, rv, True, 0.3, 1e-3,
                   family="batch_norm")
    # _batch_norm_with_update writes the running stats; its 4th return (reserve) is empty
    ra, rb = rm.clone(), rv.clone()
    exp = aten._batch_norm_with_update.default(x, w, b, ra, rb, 0.1, 1e-5)
    got = none_ok(aten._batch_norm_with_update.default, x, w, b, rm.clone(), rv.clone(), 0.1, 1e-5)
    compare(exp[:3] + (ra, rb), got[:3] + got[4:], family="batch_norm")
    assert got[3] is None
    exp = aten._batch_norm_no_update.default(x, w, b, rm, rv, 0.1, 1e-5)
    got = none_ok(aten._batch_norm_no_update.default, x, w, b, rm, rv, 0.1, 1e-5)
    torch.testing.assert_close(got[0], exp[0], **tolerance(exp[0], family="batch_norm"))


def test_batch_norm_running_var_single_value_is_nan():
    x, w, b, rm, rv = bn_args((1, 3, 1, 1))
    check_written(aten._native_batch_norm_legit.default, x, w, b, rm, rv, True, 0.1, 1e-5, n_out=3, written=(3, 4),
                  equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_batch_norm_backward(dtype, none_ok):
    x, w, b, rm, rv = bn_args(dtype=dtype)
    _, sm, si = aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5)
    g = torch.randn_like(x)
    for train in (True, False):
        args = (g, x, w, rm, rv, sm, si, train, 1e-5)
        check_lowering(aten.native_batch_norm_backward.default, *args, [True, True, True], family="batch_norm")
        compare(aten.native_batch_norm_backward.default(*args, [False, True, False]),
                none_ok(aten.native_batch_norm_backward.default, *args, [False, True, False]), family="batch_norm")
    args = (g, x, None, rm, rv, sm, si, True, 1e-5)
    compare(aten.native_batch_norm_backward.default(*args, [True, False, False]),
            none_ok(aten.native_batch_norm_backward.default, *args, [True, False, False]), family="batch_norm")


def test_batch_norm_backward(none_ok):
    x, w, b, rm, rv = bn_args()
    _, sm, si, reserve = aten._batch_norm_with_update.default(x, w, b, rm.clone(), rv.clone(), 0.1, 1e-5)
    g = torch.randn_like(x)
    check_lowering(aten.batch_norm_backward.default, g, x, w, rm, rv, sm, si, True, 1e-5, [True, True, True], reserve,
                   family="batch_norm")


# ---------------------------------------------------------------------------------------------
# on the device


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


def _pool_grads(fn):
    def run(x, gy):
        y = fn(x)
        v = y[0] if isinstance(y, tuple) else y
        return (y, torch.autograd.grad(v, x, gy)[0])

    return run


def _check_pool(fn, x, ops):
    y = fn(x)
    v = y[0] if isinstance(y, tuple) else y
    # (bfloat16: the CPU adds overlapping windows' gradients in bfloat16, the device in float32)
    check_device(_pool_grads(fn), x.requires_grad_(), torch.randn_like(v), must_run=ops, family="pool_backward")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_device_max_pool(dtype):
    ops = ["aten.max_pool2d_with_indices.default", "aten.max_pool2d_with_indices_backward.default"]
    x = randn(2, 3, 9, 10, dtype=dtype)
    _check_pool(lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True), x, ops)
    _check_pool(lambda x: F.max_pool2d(x, (3, 2), (2, 1), 1, dilation=(2, 1)), x, ops)
    _check_pool(lambda x: F.max_pool1d(x[0], 3, 2, return_indices=True), x, ops)
    ops3 = ["aten.max_pool3d_with_indices.default", "aten.max_pool3d_with_indices_backward.default"]
    _check_pool(lambda x: F.max_pool3d(x, 2, 2, 1, return_indices=True), randn(1, 2, 5, 6, 7, dtype=dtype), ops3)


def test_device_max_pool_nan_and_ints():
    x = torch.tensor([[[[1.0, 3.0, 3.0, NAN], [3.0, NAN, 0.0, 1.0], [-INF, -INF, 2.0, 2.0], [-INF, -INF, 2.0, 2.0]]]])
    check_device(lambda x: F.max_pool2d(x, 2, return_indices=True), x,
                 must_run=["aten.max_pool2d_with_indices.default"])
    for dtype in (torch.int64, torch.uint8):
        xi = torch.randint(0, 100, (2, 3, 7, 8)).to(dtype)
        check_device(lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True), xi,
                     must_run=["aten.max_pool2d_with_indices.default"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_device_avg_pool(dtype):
    ops = ["aten.avg_pool2d.default", "aten.avg_pool2d_backward.default"]
    x = randn(2, 3, 9, 10, dtype=dtype)
    _check_pool(lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), x, ops)
    _check_pool(lambda x: F.avg_pool2d(x, (3, 2), (2, 3), 1, divisor_override=4), x, ops)
    _check_pool(lambda x: F.avg_pool1d(x[0], 3, 2, 1), x, ops)
    if dtype == torch.float32:  # the CPU has no 16-bit avg_pool3d
        ops3 = ["aten.avg_pool3d.default", "aten.avg_pool3d_backward.default"]
        _check_pool(lambda x: F.avg_pool3d(x, 3, 2, 1, ceil_mode=True), randn(1, 2, 5, 6, 7), ops3)


def test_device_avg_pool_int64():
    x = torch.randint(-50, 50, (2, 3, 7, 8))
    check_device(lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), x, must_run=["aten.avg_pool2d.default"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_device_adaptive_avg_pool(dtype):
    ops = ["aten._adaptive_avg_pool2d.default", "aten._adaptive_avg_pool2d_backward.default"]
    x = randn(2, 3, 9, 10, dtype=dtype)
    _check_pool(lambda x: F.adaptive_avg_pool2d(x, (4, 3)), x, ops)
    _check_pool(lambda x: F.adaptive_avg_pool2d(x, (3, 5)), x, ops)
    ops3 = ["aten._adaptive_avg_pool3d.default", "aten._adaptive_avg_pool3d_backward.default"]
    _check_pool(lambda x: F.adaptive_avg_pool3d(x, (2, 3, 4)), randn(1, 2, 5, 6, 7, dtype=dtype), ops3)


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_device_batch_norm_module(dtype):
    x = randn(4, 3, 5, 6, dtype=dtype).requires_grad_()
    w = randn(3).requires_grad_()
    b = randn(3).requires_grad_()
    rm, rv = randn(3), torch.rand(3) + 0.5

    def train(x, w, b, rm, rv, gy):
        bn = torch.nn.BatchNorm2d(3, momentum=0.2, device=x.device, dtype=torch.float32)
        with torch.no_grad():
            bn.weight.copy_(w)
            bn.bias.copy_(b)
            bn.running_mean.copy_(rm)
            bn.running_var.copy_(rv)
        bn.train()
        y = bn(x)
        gx, gw, gb = torch.autograd.grad(y, (x, bn.weight, bn.bias), gy)
        return y, gx, gw, gb, bn.running_mean, bn.running_var, bn.num_batches_tracked

    def evaluate(x, w, b, rm, rv, gy):
        y = F.batch_norm(x, rm, rv, w, b, training=False, eps=1e-3)
        return (y,) + torch.autograd.grad(y, (x, w, b), gy)

    gy = randn(4, 3, 5, 6, dtype=dtype)  # float32 parameters with a 16-bit input, as autocast leaves them
    check_device(train, x, w, b, rm, rv, gy, must_run=["aten.native_batch_norm_backward.default"], family="batch_norm")
    check_device(evaluate, x, w, b, rm, rv, gy, must_run=["aten.native_batch_norm_backward.default"], family="batch_norm")


def test_device_batch_norm_ops():
    x, w, b, rm, rv = bn_args()

    def legit(x, w, b, rm, rv):
        rm, rv = rm.clone(), rv.clone()  # written in place
        out = aten._native_batch_norm_legit.default(x, w, b, rm, rv, True, 0.1, 1e-5)
        return out + (rm, rv)

    check_device(legit, x, w, b, rm, rv, family="batch_norm", must_run=["aten._native_batch_norm_legit.default"])
    check_device(lambda x, w, b, rm, rv: aten._native_batch_norm_legit.default(x, w, b, rm, rv, False, 0.1, 1e-5)[0],
                 x, w, b, rm, rv, family="batch_norm", must_run=["aten._native_batch_norm_legit.default"])
    check_device(lambda x, w, b: aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5), x, w, b, family="batch_norm",
                 must_run=["aten._native_batch_norm_legit.no_stats"])
    check_device(lambda *a: aten._native_batch_norm_legit_no_training.default(*a, 0.1, 1e-5)[0], x, w, b, rm, rv, family="batch_norm",
                 must_run=["aten._native_batch_norm_legit_no_training.default"])
    check_device(lambda *a: aten._native_batch_norm_legit_functional.default(*a, True, 0.1, 1e-5), x, w, b, rm, rv,
                 family="batch_norm", must_run=["aten._native_batch_norm_legit_functional.default"])

    def with_update(x, w, b, rm, rv):
        rm, rv = rm.clone(), rv.clone()
        out = aten._batch_norm_with_update.default(x, w, b, rm, rv, 0.1, 1e-5)
        return out[:3] + (rm, rv)

    check_device(with_update, x, w, b, rm, rv, family="batch_norm", must_run=["aten._batch_norm_with_update.default"])
    check_device(lambda *a: aten._batch_norm_no_update.default(*a, 0.1, 1e-5)[0], x, w, b, rm, rv, family="batch_norm",
                 must_run=["aten._batch_norm_no_update.default"])
    _, sm, si, reserve = aten._batch_norm_with_update.default(x, w, b, rm.clone(), rv.clone(), 0.1, 1e-5)
    g = torch.randn_like(x)
    check_device(lambda *a: aten.batch_norm_backward.default(*a[:-1], True, 1e-5, [True, True, True], a[-1]),
                 g, x, w, rm, rv, sm, si, reserve, family="batch_norm", must_run=["aten.batch_norm_backward.default"])
