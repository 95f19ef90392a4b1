"""Lowerings of upsampling/interpolation, reflection/replication padding and grid_sampler_2d/3d
(torch_neuronx/ops/resample.py): each compared with PyTorch's CPU kernel on its own
(tests/lowering_harness.py), and F.interpolate / F.pad / F.grid_sample with their backward run on
the neuron device vs the CPU (tests/device_harness.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from device_harness import check_device  # noqa: E402
from helpers import randn  # noqa: E402
from lowering_harness import check_lowering, run_lowering, tolerance  # noqa: E402
from tolerances import EXACT  # noqa: E402

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")




def check_vs_float32(op, *args):
    """A bfloat16/float16 op against PyTorch's float32 result rounded once, bit for bit (what the
    lowering computes: float32 math, float32 accumulation), where PyTorch's CPU kernel rounds per step."""
    dtype = next(a.dtype for a in args if isinstance(a, torch.Tensor))
    up = [a.float() if isinstance(a, torch.Tensor) else a for a in args]
    want = op(*up)
    got = run_lowering(op, *args)
    wants = want if isinstance(want, tuple) else (want,)
    gots = got if isinstance(got, tuple) else (got,)
    for w, g in zip(wants, gots):
        assert g.dtype == dtype
        torch.testing.assert_close(g, w.to(dtype), **EXACT, equal_nan=True)


# ---------------------------------------------------------------------------------------------
# nearest / nearest-exact

# (output size, scales): odd sizes, non-integer scales, downscaling, and sizes that are equal or
# double while the scale says otherwise (PyTorch's kernels special-case those)
NEAREST_2D = [
    ([10, 14], [None, None]),
    ([11, 17], [2.3, 2.5]),
    ([10, 14], [2.1, 2.0]),
    ([5, 7], [1.1, 1.05]),
    ([3, 4], [0.6, 0.65]),
    ([10, 200], [2.1, None]),  # H + W > 128: PyTorch's generic kernel, other index rule
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8, torch.float64])
def test_upsample_nearest2d(dtype):
    x = (randn(2, 3, 5, 7) * 50).to(dtype)
    for size, scales in NEAREST_2D if dtype == torch.float32 else NEAREST_2D[1:3]:
        check_lowering(aten.upsample_nearest2d.default, x, size, *scales, **EXACT)
        check_lowering(aten._upsample_nearest_exact2d.default, x, size, *scales, **EXACT)


def test_upsample_nearest1d_3d():
    x1 = randn(2, 3, 9)
    for size, scales in [([20], [None]), ([13], [1.5]), ([18], [2.05]), ([4], [None]), ([300], [None])]:
        check_lowering(aten.upsample_nearest1d.default, x1, size, *scales, **EXACT)
        check_lowering(aten._upsample_nearest_exact1d.default, x1, size, *scales, **EXACT)
    x3 = randn(1, 2, 3, 4, 5, dtype=torch.bfloat16)
    for size, scales in [([6, 8, 10], [None] * 3), ([5, 7, 9], [1.7, 1.8, 1.9]), ([2, 3, 3], [None] * 3)]:
        check_lowering(aten.upsample_nearest3d.default, x3, size, *scales, **EXACT)
        check_lowering(aten._upsample_nearest_exact3d.default, x3, size, *scales, **EXACT)


def test_upsample_nearest_backward():
    x = [2, 3, 5, 7]
    for size, scales in NEAREST_2D[:-1] + [([100, 140], [None, None])]:
        g = randn(2, 3, *size)
        tol = dict(family="upsample_backward")  # (100x140: hundreds of terms per sum)
        check_lowering(aten.upsample_nearest2d_backward.default, g, size, x, *scales, **tol)
        check_lowering(aten._upsample_nearest_exact2d_backward.default, g, size, x, *scales, **tol)
    g1 = randn(2, 3, 13)
    check_lowering(aten.upsample_nearest1d_backward.default, g1, [13], [2, 3, 9], 1.5)
    check_lowering(aten._upsample_nearest_exact1d_backward.default, g1, [13], [2, 3, 9], None)
    g3 = randn(1, 2, 5, 7, 9)
    check_lowering(aten.upsample_nearest3d_backward.default, g3, [5, 7, 9], [1, 2, 3, 4, 5], None, 1.8, 1.9)
    check_lowering(aten._upsample_nearest_exact3d_backward.default, g3, [5, 7, 9], [1, 2, 3, 4, 5], 1.7, None,
                   None)
    # bfloat16 gradients accumulate in float32
    check_vs_float32(aten.upsample_nearest2d_backward.default, randn(2, 3, 11, 17, dtype=torch.bfloat16),
                     [11, 17], x, 2.3, 2.5)


# ---------------------------------------------------------------------------------------------
# linear / bilinear / trilinear / bicubic

INTERP_2D = [
    ([10, 14], [None, None]),
    ([11, 17], [2.3, 2.5]),
    ([5, 7], [1.1, 1.05]),
    ([3, 4], [None, None]),
    ([2, 1], [0.5, None]),
    ([70, 80], [None, None]),  # H + W > 128: PyTorch's generic kernel (weights in the input dtype)
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("op", [aten.upsample_bilinear2d.default, aten.upsample_bicubic2d.default],
                         ids=["bilinear", "bicubic"])
def test_upsample_bilinear_bicubic2d(op, dtype):
    x = randn(2, 3, 5, 7, dtype=dtype)
    # (bfloat16 too, at torch's default tolerance: float32 math rounded once on both sides)
    for size, scales in INTERP_2D if dtype != torch.float64 else INTERP_2D[1:2]:
        for align_corners in (False, True):
            check_lowering(op, x, size, align_corners, *scales)


def test_upsample_linear1d_trilinear3d():
    for dtype in (torch.float32, torch.bfloat16):
        # (bfloat16 too, at torch's default tolerance: float32 math rounded once on both sides)
        x1 = randn(2, 3, 9, dtype=dtype)
        x3 = randn(1, 2, 3, 4, 5, dtype=dtype)
        for align_corners in (False, True):
            for size, scales in [([20], [None]), ([13], [1.5]), ([4], [None]), ([9], [1.3])]:
                check_lowering(aten.upsample_linear1d.default, x1, size, align_corners, *scales)
            for size, scales in [([6, 8, 10], [None] * 3), ([5, 7, 9], [1.7, 1.8, 1.9]), ([2, 3, 3], [None] * 3)]:
                check_lowering(aten.upsample_trilinear3d.default, x3, size, align_corners, *scales)


def test_upsample_interp_uint8():
    """uint8 bilinear/bicubic: PyTorch's fixed-point weights, bit for bit (C <= 4 and C > 4 take
    different CPU kernels, with the same results)."""
    for c, sizes in [(3, [([18, 22], [None, None]), ([4, 5], [None, None]), ([13, 7], [1.5, 0.7])]),
                     (5, [([9, 30], [None, None])])]:
        x = torch.randint(0, 256, (1, c, 9, 11), dtype=torch.uint8)
        for size, scales in sizes:
            for align_corners in (False, True):
                check_lowering(aten.upsample_bilinear2d.default, x, size, align_corners, *scales, **EXACT)
                check_lowering(aten.upsample_bicubic2d.default, x, size, align_corners, *scales, **EXACT)
            check_lowering(aten._upsample_bilinear2d_aa.default, x, size, False, *scales, **EXACT)
            check_lowering(aten._upsample_bicubic2d_aa.default, x, size, False, *scales, **EXACT)


def test_upsample_interp_rejects_integers():
    for op, args in [(aten.upsample_bilinear2d.default, ([4, 4], False)),
                     (aten.upsample_linear1d.default, ([4], False))]:
        x = torch.zeros((1, 1, 2, 2) if "bilinear" in str(op) else (1, 1, 2), dtype=torch.int32)
        with pytest.raises(NotImplementedError, match="not implemented for 'Int'"):
            run_lowering(op, x, *args)


def test_upsample_interp_nonfinite():
    # NaN/inf stay local to the outputs that read them (an inf times a zero weight is NaN, as on the CPU)
    x = randn(1, 2, 6, 7)
    x[0, 0, 2, 3] = NAN
    x[0, 1, 4, 1] = INF
    for op in (aten.upsample_bilinear2d.default, aten.upsample_bicubic2d.default):
        check_lowering(op, x, [12, 9], False, None, None)
        check_lowering(op, x, [6, 7], True, None, None)


def test_upsample_interp_backward():
    x = [2, 3, 5, 7]
    for size, scales in INTERP_2D[:-1] + [([100, 140], [None, None])]:
        g = randn(2, 3, *size)
        tol = dict(family="upsample_backward")  # (100x140: hundreds of terms per sum)
        for align_corners in (False, True):
            check_lowering(aten.upsample_bilinear2d_backward.default, g, size, x, align_corners, *scales, **tol)
            check_lowering(aten.upsample_bicubic2d_backward.default, g, size, x, align_corners, *scales, **tol)
    for align_corners in (False, True):
        check_lowering(aten.upsample_linear1d_backward.default, randn(2, 3, 13), [13], [2, 3, 9], align_corners,
                       1.5)
        check_lowering(aten.upsample_trilinear3d_backward.default, randn(1, 2, 5, 7, 9), [5, 7, 9],
                       [1, 2, 3, 4, 5], align_corners, 1.7, None, 1.9)
    check_vs_float32(aten.upsample_bilinear2d_backward.default, randn(2, 3, 11, 17, dtype=torch.bfloat16),
                     [11, 17], x, False, 2.3, 2.5)


# ---------------------------------------------------------------------------------------------
# antialiased bilinear / bicubic


@pytest.mark.parametrize("op,bwd", [
    (aten._upsample_bilinear2d_aa.default, aten._upsample_bilinear2d_aa_backward.default),
    (aten._upsample_bicubic2d_aa.default, aten._upsample_bicubic2d_aa_backward.default),
], ids=["bilinear", "bicubic"])
def test_upsample_antialias(op, bwd):
    x = randn(2, 3, 17, 23)
    # downscaling (wide filters), upscaling, mixed, given scales, equal sizes
    for size, scales, align_corners in [([5, 4], [None, None], False), ([3, 2], [None, None], True),
                                        ([34, 9], [None, None], False), ([6, 23], [0.37, None], True),
                                        ([17, 23], [None, None], False)]:
        check_lowering(op, x, size, align_corners, *scales)
        check_lowering(bwd, randn(2, 3, *size), size, list(x.shape), align_corners, *scales)
    check_lowering(op, x.double(), [6, 9], False, None, None)
    # outputs 1 wide: PyTorch's CPU kernel resamples the rows wrongly there, its transposed call is right
    got = run_lowering(op, x, [9, 1], False, None, None)
    want = op(x.transpose(2, 3).contiguous(), [1, 9], False, None, None).transpose(2, 3)
    torch.testing.assert_close(got, want)


# ---------------------------------------------------------------------------------------------
# reflection / replication padding

PADS = {
    1: [[1, 2], [3, 0], [0, 0], [-1, 2], [2, -2], [4, 4]],
    2: [[1, 2, 2, 1], [0, 0, 4, 0], [-1, 2, 1, -1], [4, 4, 3, 3]],
    3: [[1, 2, 2, 1, 1, 1], [0, 0, 0, 0, 2, 0], [3, 3, 3, 3, 2, 2], [-1, 1, 0, 2, 1, -1]],
}
SHAPES = {1: (2, 3, 5), 2: (2, 3, 5, 6), 3: (2, 3, 3, 5, 6)}
PAD_OPS = {
    (1, "reflect"): (aten.reflection_pad1d.default, aten.reflection_pad1d_backward.default),
    (2, "reflect"): (aten.reflection_pad2d.default, aten.reflection_pad2d_backward.default),
    (3, "reflect"): (aten.reflection_pad3d.default, aten.reflection_pad3d_backward.default),
    (1, "replicate"): (aten.replication_pad1d.default, aten.replication_pad1d_backward.default),
    (2, "replicate"): (aten.replication_pad2d.default, aten.replication_pad2d_backward.default),
    (3, "replicate"): (aten.replication_pad3d.default, aten.replication_pad3d_backward.default),
}


@pytest.mark.parametrize("key", list(PAD_OPS), ids=lambda k: f"{k[1]}{k[0]}d")
def test_padding(key):
    nd, _mode = key
    op, bwd = PAD_OPS[key]
    for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.uint8):
        x = (randn(*SHAPES[nd]) * 20).to(dtype)
        for pad in PADS[nd] if dtype == torch.float32 else PADS[nd][-1:]:
            check_lowering(op, x, pad, **EXACT)
    check_lowering(op, x[0], PADS[nd][0], **EXACT)  # no batch dim
    x = randn(*SHAPES[nd])
    for pad in PADS[nd][::2] + PADS[nd][-1:]:
        g = randn(*op(x, pad).shape)
        check_lowering(bwd, g, x, pad)
    xb = randn(*SHAPES[nd], dtype=torch.bfloat16)
    pad = PADS[nd][-2]
    check_vs_float32(bwd, randn(*op(xb, pad).shape, dtype=torch.bfloat16), xb, pad)


def test_padding_edge_cases():
    check_lowering(aten.reflection_pad2d.default, randn(0, 3, 4, 5), [1, 1, 2, 2])
    check_lowering(aten.replication_pad2d.default, randn(0, 3, 4, 5), [1, 1, 2, 2])
    x = torch.tensor([[[1.0, NAN, INF, -2.0]]])
    check_lowering(aten.reflection_pad1d.default, x, [3, 3])
    check_lowering(aten.replication_pad1d.default, x, [3, 3])
    check_lowering(aten.reflection_pad1d.default, torch.randn(1, 2, 3, dtype=torch.complex64), [2, 1])


# ---------------------------------------------------------------------------------------------
# grid_sampler_2d

MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
PADDING_MODES = {"zeros": 0, "border": 1, "reflection": 2}


def _grid(n, h, w, spread=1.3, dtype=torch.float32):
    g = torch.rand(n, h, w, 2) * 2 * spread - spread
    g[0, 0, 0] = torch.tensor([-1.0, 1.0])  # corners and centre, exactly
    g[0, 0, 1] = torch.tensor([1.0, -1.0])
    g[0, 0, 2] = 0.0
    if h > 1:
        g[0, 1, :] = torch.tensor([4.7, -3.2])  # several reflections away
    return g.to(dtype)


@pytest.mark.parametrize("mode", list(MODES))
def test_grid_sampler_2d(mode):
    x = randn(2, 3, 5, 7)
    grid = _grid(2, 4, 6)
    for padding in PADDING_MODES.values():
        for align_corners in (False, True):
            check_lowering(aten.grid_sampler_2d.default, x, grid, MODES[mode], padding, align_corners)
    x64, grid64 = x.double(), grid.double()
    check_lowering(aten.grid_sampler_2d.default, x64, grid64, MODES[mode], 2, False)
    # NaN coordinates: zeros padding reads nothing, border/reflection clamp them to 0
    grid[1, 1, 1, 0] = NAN
    for padding in (0, 2):
        check_lowering(aten.grid_sampler_2d.default, x, grid, MODES[mode], padding, False)
    # bfloat16: float32 coordinate math, rounded once (PyTorch's CPU kernel rounds every step)
    xb, gb = randn(1, 2, 6, 5, dtype=torch.bfloat16), _grid(1, 3, 4, dtype=torch.bfloat16)
    check_vs_float32(aten.grid_sampler_2d.default, xb, gb, MODES[mode], 1, False)


@pytest.mark.parametrize("mode", list(MODES))
def test_grid_sampler_2d_backward(mode, none_ok):
    x = randn(2, 3, 5, 7)
    grid = _grid(2, 4, 6)
    gy = randn(2, 3, 4, 6)
    for padding in PADDING_MODES.values():
        for align_corners in (False, True):
            want = aten.grid_sampler_2d_backward(gy, x, grid, MODES[mode], padding, align_corners, [True, True])
            got = none_ok(aten.grid_sampler_2d_backward.default, gy, x, grid, MODES[mode], padding, align_corners,
                          [True, True])
            torch.testing.assert_close(got[0], want[0])
            torch.testing.assert_close(got[1], want[1], **tolerance(want[1], family="grid_sample_backward"))
    # input gradient not wanted: undefined, as PyTorch returns it; the grid gradient is still computed
    got = none_ok(aten.grid_sampler_2d_backward.default, gy, x, grid, MODES[mode], 0, False, [False, True])
    want = aten.grid_sampler_2d_backward(gy, x, grid, MODES[mode], 0, False, [False, True])
    assert got[0] is None and want[0] is None
    torch.testing.assert_close(got[1], want[1], **tolerance(want[1], family="grid_sample_backward"))


# ---------------------------------------------------------------------------------------------
# grid_sampler_3d (bilinear = trilinear, nearest; the scalar CPU kernel's arithmetic)


def _grid3d(n, d, h, w, spread=1.3, dtype=torch.float32):
    g = torch.rand(n, d, h, w, 3) * 2 * spread - spread
    g[0, 0, 0, 0] = torch.tensor([-1.0, 1.0, 1.0])  # corners and centre, exactly
    g[0, 0, 0, 1] = 0.0
    g[0, 0, 1, :] = torch.tensor([4.7, -3.2, 2.9])  # several reflections away
    g[0, 0, 0, 2] = torch.tensor([NAN, 0.3, 0.2])  # NaN: zeros padding reads nothing, clipping gives size - 1
    g[0, 0, 0, 3] = torch.tensor([1e20, -1e20, 0.2])  # far out of range
    return g.to(dtype)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sampler_3d(mode):
    x = randn(2, 3, 4, 5, 6)
    grid = _grid3d(2, 3, 4, 5)
    for padding in PADDING_MODES.values():
        for align_corners in (False, True):
            # (weights and sums agree to an ulp: the CPU build may contract a * b + c into an fma)
            check_lowering(aten.grid_sampler_3d.default, x, grid, MODES[mode], padding, align_corners)
    check_lowering(aten.grid_sampler_3d.default, x.double(), grid.double(), MODES[mode], 2, False)
    # bfloat16: float32 math, rounded once (PyTorch's CPU kernel rounds every step)
    xb, gb = randn(1, 2, 3, 4, 5, dtype=torch.bfloat16), _grid3d(1, 2, 3, 4, dtype=torch.bfloat16)
    check_vs_float32(aten.grid_sampler_3d.default, xb, gb, MODES[mode], 1, False)
    with pytest.raises(RuntimeError, match="bicubic"):
        run_lowering(aten.grid_sampler_3d.default, x, grid, 2, 0, False)


def test_grid_sampler_3d_backward(none_ok):
    x = randn(2, 3, 4, 5, 6)
    grid = torch.rand(2, 3, 4, 5, 3) * 2.6 - 1.3  # no exactly integer coordinates (where the vjp and the
    gy = randn(2, 3, 3, 4, 5)  # CPU's formulas pick different one-sided derivatives)
    for mode, padding, align_corners in [(0, 0, False), (0, 1, True), (0, 2, False), (0, 2, True), (1, 0, False),
                                         (1, 2, True)]:
        want = aten.grid_sampler_3d_backward(gy, x, grid, mode, padding, align_corners, [True, True])
        got = none_ok(aten.grid_sampler_3d_backward.default, gy, x, grid, mode, padding, align_corners, [True, True])
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[1], want[1], **tolerance(want[1], family="grid_sample_backward"))
    got = none_ok(aten.grid_sampler_3d_backward.default, gy, x, grid, 0, 0, False, [False, True])
    assert got[0] is None


def test_device_grid_sample_3d():
    x = randn(1, 2, 3, 4, 5).requires_grad_()
    grid = (torch.rand(1, 2, 3, 2, 3) * 2.2 - 1.1).requires_grad_()
    for mode in ("bilinear", "nearest"):
        for padding_mode in PADDING_MODES:
            _check_grads(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding_mode, align_corners=False),
                         x, grid, family="grid_sample_backward",
                         must_run=["aten.grid_sampler_3d.default", "aten.grid_sampler_3d_backward.default"])


def test_empty_inputs(none_ok):
    for xs, gs in [((0, 3, 5, 7), (0, 4, 6, 2)), ((2, 0, 5, 7), (2, 4, 6, 2)), ((2, 3, 5, 7), (2, 0, 6, 2))]:
        x, grid = randn(*xs), torch.rand(*gs) * 2 - 1
        check_lowering(aten.grid_sampler_2d.default, x, grid, 0, 0, False)
        gy = randn(xs[0], xs[1], gs[1], gs[2])
        want = aten.grid_sampler_2d_backward(gy, x, grid, 0, 0, False, [True, True])
        got = none_ok(aten.grid_sampler_2d_backward.default, gy, x, grid, 0, 0, False, [True, True])
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[1], want[1])
    x = randn(0, 3, 5, 7)
    check_lowering(aten.upsample_bilinear2d.default, x, [9, 9], False, None, None)
    check_lowering(aten.upsample_nearest2d_backward.default, randn(0, 3, 9, 9), [9, 9], [0, 3, 5, 7], None, None)


# ---------------------------------------------------------------------------------------------
# on the device: the user-level calls, forward and backward


def _grads(fn):
    """fn's output and the gradients of its floating tensor inputs for a given output gradient."""

    def run(*args):
        *inputs, gy = args
        y = fn(*inputs)
        wrt = [a for a in inputs if isinstance(a, torch.Tensor) and a.requires_grad]
        return (y, *torch.autograd.grad(y, wrt, gy))

    return run


def _check_grads(fn, *inputs, must_run, **tol):
    gy = torch.randn_like(fn(*inputs))
    check_device(_grads(fn), *inputs, gy, must_run=must_run, **tol)


INTERPOLATE = [
    # (F.interpolate kwargs, forward op, backward op)
    (dict(scale_factor=2), "upsample_nearest2d"),
    (dict(scale_factor=2.5), "upsample_nearest2d"),
    (dict(size=(9, 4)), "upsample_nearest2d"),
    (dict(scale_factor=(1.7, 0.6), mode="nearest-exact"), "_upsample_nearest_exact2d"),
    (dict(size=(11, 10), mode="nearest-exact"), "_upsample_nearest_exact2d"),
    (dict(scale_factor=1.7, mode="bilinear"), "upsample_bilinear2d"),
    (dict(size=(9, 13), mode="bilinear", align_corners=True), "upsample_bilinear2d"),
    (dict(scale_factor=2.3, mode="bilinear", recompute_scale_factor=True), "upsample_bilinear2d"),
    (dict(size=(4, 3), mode="bilinear"), "upsample_bilinear2d"),
    (dict(scale_factor=1.5, mode="bicubic", align_corners=True), "upsample_bicubic2d"),
    (dict(size=(3, 4), mode="bilinear", antialias=True), "_upsample_bilinear2d_aa"),
    (dict(size=(3, 4), mode="bicubic", antialias=True), "_upsample_bicubic2d_aa"),
]


@pytest.mark.parametrize("case", INTERPOLATE, ids=lambda c: f"{c[1]}-{'-'.join(map(str, c[0].values()))}")
def test_device_interpolate(case):
    kw, op = case
    x = randn(2, 3, 5, 7).requires_grad_()
    _check_grads(lambda x: F.interpolate(x, **kw), x, must_run=[f"aten.{op}.default", f"aten.{op}_backward.default"])


def test_device_interpolate_1d_3d_bfloat16():
    x1 = randn(2, 3, 9).requires_grad_()
    _check_grads(lambda x: F.interpolate(x, scale_factor=1.6, mode="linear"), x1,
                 must_run=["aten.upsample_linear1d.default", "aten.upsample_linear1d_backward.default"])
    _check_grads(lambda x: F.interpolate(x, size=13), x1,
                 must_run=["aten.upsample_nearest1d.default", "aten.upsample_nearest1d_backward.default"])
    x3 = randn(1, 2, 3, 4, 5).requires_grad_()
    _check_grads(lambda x: F.interpolate(x, scale_factor=(1.5, 2, 0.6), mode="trilinear", align_corners=True),
                 x3,
                 must_run=["aten.upsample_trilinear3d.default", "aten.upsample_trilinear3d_backward.default"])
    _check_grads(lambda x: F.interpolate(x, size=(5, 7, 9), mode="nearest-exact"), x3,
                 must_run=["aten._upsample_nearest_exact3d.default", "aten._upsample_nearest_exact3d_backward.default"])
    xb = randn(2, 3, 6, 5, dtype=torch.bfloat16)
    check_device(lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear"), xb,
                 must_run=["aten.upsample_bilinear2d.default"])
    check_device(lambda x: F.interpolate(x, scale_factor=2.2, mode="nearest"), xb,
                 must_run=["aten.upsample_nearest2d.default"])


def test_device_interpolate_uint8_images():
    img = torch.randint(0, 256, (2, 3, 20, 24), dtype=torch.uint8)
    check_device(lambda x: F.interpolate(x, size=(9, 11), mode="bilinear", antialias=True), img, **EXACT,
                 must_run=["aten._upsample_bilinear2d_aa.default"])
    check_device(lambda x: F.interpolate(x, scale_factor=1.5, mode="bicubic"), img, **EXACT,
                 must_run=["aten.upsample_bicubic2d.default"])
    check_device(lambda x: F.interpolate(x, scale_factor=0.7, mode="nearest"), img,
                 must_run=["aten.upsample_nearest2d.default"])


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
def test_device_pad(mode):
    names = {"constant": "constant_pad_nd", "reflect": "reflection_pad{}d", "replicate": "replication_pad{}d"}
    for shape, pad in [((2, 3, 7), (2, 3)), ((2, 3, 5, 6), (1, 2, 3, 1)), ((1, 2, 3, 4, 5), (1, 1, 2, 0, 1, 2)),
                       ((3, 5, 6), (-1, 2, 2, -1))]:
        nd = len(pad) // 2
        name = names[mode].format(nd)
        ops = [f"aten.{name}.default"]
        if mode != "constant":
            ops.append(f"aten.{name}_backward.default")
        x = randn(*shape).requires_grad_()
        _check_grads(lambda x: F.pad(x, pad, mode=mode), x, must_run=ops)
    check_device(lambda x: F.pad(x, (2, 2, 1, 1), mode=mode), torch.randint(0, 9, (2, 3, 4, 5)),
                 must_run=[f"aten.{names[mode].format(2)}.default"])


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("padding_mode", list(PADDING_MODES))
def test_device_grid_sample(mode, padding_mode):
    x = randn(2, 3, 5, 7).requires_grad_()
    grid = _grid(2, 4, 6).requires_grad_()
    for align_corners in (False, True) if mode == "bilinear" else (padding_mode == "border",):
        _check_grads(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding_mode,
                                                align_corners=align_corners),
                     x, grid, family="grid_sample_backward",
                     must_run=["aten.grid_sampler_2d.default", "aten.grid_sampler_2d_backward.default"])


def test_device_grid_sample_affine_grid():
    """A spatial-transformer warp whose grid needs no gradient: only the input's is computed."""
    theta = torch.tensor([[[0.9, -0.2, 0.1], [0.3, 1.1, -0.2]], [[1.2, 0.0, 0.0], [0.0, 0.8, 0.3]]])
    grid = F.affine_grid(theta, [2, 3, 6, 7], align_corners=False)
    x = randn(2, 3, 8, 9).requires_grad_()
    _check_grads(lambda x, g: F.grid_sample(x, g, align_corners=False), x, grid, family="grid_sample_backward",
                 must_run=["aten.grid_sampler_2d.default", "aten.grid_sampler_2d_backward.default"])


# ---------------------------------------------------------------------------------------------
# long sweep: random sizes and scales, every mode, bit-exact or float32-close


@pytest.mark.slow
def test_upsample_random_sweep():
    gen = torch.Generator().manual_seed(1)
    for _ in range(40):
        hi, wi = torch.randint(1, 12, (2,), generator=gen).tolist()
        sh, sw = (0.3 + 3 * torch.rand(2, generator=gen)).tolist()
        ho, wo = max(1, int(hi * sh)), max(1, int(wi * sw))
        x = torch.randn(1, 2, hi, wi, generator=gen)
        for scales in ([None, None], [sh, sw]):
            check_lowering(aten.upsample_nearest2d.default, x, [ho, wo], *scales, **EXACT)
            check_lowering(aten._upsample_nearest_exact2d.default, x, [ho, wo], *scales, **EXACT)
            for ac in (False, True):
                check_lowering(aten.upsample_bilinear2d.default, x, [ho, wo], ac, *scales)
                check_lowering(aten.upsample_bicubic2d.default, x, [ho, wo], ac, *scales)
            xu = (x * 60 + 128).clamp(0, 255).to(torch.uint8)
            check_lowering(aten.upsample_bilinear2d.default, xu, [ho, wo], False, *scales, **EXACT)
            if wo > 1:  # PyTorch's CPU antialias kernel is wrong for outputs 1 wide (test_upsample_antialias)
                check_lowering(aten._upsample_bilinear2d_aa.default, x, [ho, wo], False, *scales)
                check_lowering(aten._upsample_bicubic2d_aa.default, xu, [ho, wo], False, *scales, **EXACT)
            g = torch.randn(1, 2, ho, wo, generator=gen)
            check_lowering(aten.upsample_nearest2d_backward.default, g, [ho, wo], [1, 2, hi, wi], *scales)
            check_lowering(aten.upsample_bilinear2d_backward.default, g, [ho, wo], [1, 2, hi, wi], False, *scales)
