"""Resampling ops: upsampling/interpolation (nearest, nearest-exact, linear, bilinear, trilinear,
bicubic, antialiased bilinear/bicubic), reflection and replication padding, grid_sampler_2d/3d, and
their backward ops.

Every interpolation here is separable and its source indices and weights depend only on shapes and
scales, which are static: they are computed once per signature in numpy, with PyTorch's CPU index
math emulated in its own float types (float32 `opmath` for float32/bfloat16/float16 inputs, float64
for float64), and the program is one constant-index gather (plus a weighted sum) per resized axis.
Their backward ops are the exact adjoints, written as gathers too (each input position reads the
output positions that sampled it, from a padded static table), so no scatter is emitted. Padding
ops are slices, reversals and broadcasts (forward) and pads and sums of slices (backward).
grid_sampler_2d's indices depend on the grid's values: one gather over all taps (forward) and one
scatter-add (input gradient).

PyTorch CPU quirks that are reproduced on purpose:
- nearest: the forward kernel PyTorch picks for 2-d outputs with H_out + W_out <= 128 (its
  "channels last" kernel) uses `nearest_idx` (copy when sizes are equal, `i >> 1` when doubling,
  else floor(i * scale)); larger outputs use floor(scale * i) always. When a scale_factor is given
  and the size happens to be equal or double, the two differ; the backward always uses `nearest_idx`.
- linear/cubic: the generic kernel stores weights in the input dtype (bfloat16 weights for
  bfloat16 input); the small-output 2-d bilinear kernel keeps them in float32.
- uint8 bilinear/bicubic (with or without antialias) use PyTorch's fixed-point int16 weights and
  round to uint8 after each axis.
- grid_sampler_2d follows the vectorized CPU kernel (its unnormalize/reflection arithmetic);
  grid_sampler_3d the scalar one (GridSampler.cpp: `((c + 1) / 2) * (size - 1)` or
  `((c + 1) * size - 1) / 2`, fmod-based reflection, std::min/max clipping that sends NaN to the
  last index, corners summed in tnw, tne, tsw, tse, bnw, bne, bsw, bse order). Its backward is the
  vjp of that forward (the CPU's analytic formulas, except exactly on integer or border coordinates).
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime.lazy_jax import jax, jnp, lax
from .dtypes import is_low_precision
from ._registry import aten, lower

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_U8 = np.dtype(np.uint8)


def _opmath(dtype) -> np.dtype:
    """The float type PyTorch's CPU kernels compute indices/weights in for this input dtype."""
    return _F64 if np.dtype(dtype) == _F64 else _F32


def _acc(dtype) -> np.dtype:
    return _F32 if is_low_precision(dtype) else np.dtype(dtype)


def _name(dtype) -> str:
    return {"uint8": "Byte", "int8": "Char", "int16": "Short", "int32": "Int", "int64": "Long",
            "bool": "Bool", "complex64": "ComplexFloat", "complex128": "ComplexDouble"}.get(np.dtype(dtype).name,
                                                                                              str(np.dtype(dtype)))


def _require_float(op: str, dtype) -> None:
    """PyTorch's CPU kernel's dispatch error for dtypes it has no kernel for."""
    dt = np.dtype(dtype)
    if dt == _F32 or dt == _F64 or is_low_precision(dt):
        return
    raise NotImplementedError(f'"{op}" not implemented for \'{_name(dt)}\'')


# ---------------------------------------------------------------------------------------------
# Index math of PyTorch's upsampling kernels (aten/src/ATen/native/UpSample.h), in numpy


def _scales_value(scale, in_size: int, out_size: int, T):
    """compute_scales_value<T>: 1/scale when a positive scale is given, else in/out (in T)."""
    if scale is not None and scale > 0:
        return T(1.0 / scale)
    return T(in_size) / T(out_size)


def _area_scale(in_size: int, out_size: int, align_corners: bool, scale, T):
    """area_pixel_compute_scale<T>."""
    if align_corners:
        return T(in_size - 1) / T(out_size - 1) if out_size > 1 else T(0)
    return _scales_value(scale, in_size, out_size, T)


def _source_index(scale, out_size: int, align_corners: bool, cubic: bool, T):
    """area_pixel_compute_source_index<T> for every output index."""
    i = np.arange(out_size).astype(T)
    if align_corners:
        return (scale * i).astype(T)
    src = (scale * (i + T(0.5)) - T(0.5)).astype(T)
    if not cubic:
        src = np.where(src < 0, T(0), src).astype(T)
    return src


def _floorf(x):
    """C's floorf(x) on a float or double value (a double is rounded to float first)."""
    return np.floor(np.asarray(x).astype(np.float32)).astype(np.int64)


def _nearest_index(in_size, out_size, scale, T, exact: bool, legacy: bool):
    """Source index of each output index for nearest / nearest-exact.

    legacy=True: `nearest_idx` / `nearest_exact_idx` (backward kernels, small-output 2-d forward);
    legacy=False: the generic forward kernel's HelperInterpNearest(Exact)."""
    i = np.arange(out_size)
    if legacy:
        if not exact and out_size == in_size:
            return i
        if not exact and out_size == 2 * in_size:
            return i >> 1
        s = _scales_value(scale, in_size, out_size, np.float32)
        if exact:
            src = _floorf((i + 0.5) * np.float64(s))
        else:
            src = _floorf(i.astype(np.float32) * s)
    else:
        s = _area_scale(in_size, out_size, False, scale, T)
        if exact:
            real = _source_index(s, out_size, False, False, T)
            src = _floorf(real.astype(np.float64) + 0.5)
        else:
            src = _floorf((s * i.astype(T)).astype(T))
    return np.minimum(src, in_size - 1)


def _guard(real, in_size, T):
    """guard_index_and_lambda: index = min(floorf(real), in - 1), lambda = clamp(real - index, 0, 1)."""
    idx = np.minimum(_floorf(real), in_size - 1)
    lam = np.clip((real - idx.astype(T)).astype(T), T(0), T(1)).astype(T)
    return idx, lam


def _linear_table(in_size, out_size, align_corners, scale, T, W):
    """compute_source_index_and_lambda: (out, 2) indices and weights. W is the type the weights are
    stored in (the input dtype in the generic kernel, T in the small-output 2-d kernel)."""
    if out_size == in_size:
        i = np.arange(out_size)
        idx = np.stack([i, i], 1)
        w = np.stack([np.ones(out_size), np.zeros(out_size)], 1)
        return idx, w.astype(W).astype(T)
    s = _area_scale(in_size, out_size, align_corners, scale, T)
    real = _source_index(s, out_size, align_corners, False, T)
    i0, l1 = _guard(real, in_size, T)
    i1 = i0 + (i0 < in_size - 1)
    l1 = l1.astype(W)
    l0 = (np.float32(1) - l1.astype(np.float32)).astype(W) if W != T else (T(1) - l1).astype(T)
    return np.stack([i0, i1], 1), np.stack([l0, l1], 1).astype(W).astype(T)


def _cubic1(x, A):
    return ((A + 2) * x - (A + 3)) * x * x + 1


def _cubic2(x, A):
    return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A


def _cubic_coeffs(t, T, A=-0.75):
    """get_cubic_upsample_coefficients<T>: the 4 weights for fractional offsets t (in T)."""
    A = T(A)
    x1 = t
    c0 = _cubic2((x1.astype(np.float64) + 1.0).astype(T), A)
    c1 = _cubic1(x1, A)
    x2 = (1.0 - t.astype(np.float64)).astype(T)
    c2 = _cubic1(x2, A)
    c3 = _cubic2((x2.astype(np.float64) + 1.0).astype(T), A)
    return np.stack([c0, c1, c2, c3], 1).astype(T)


def _cubic_table(in_size, out_size, align_corners, scale, T, W):
    """HelperInterpCubic.compute_indices_weights: (out, 4) clamped indices and weights."""
    s = _area_scale(in_size, out_size, align_corners, scale, T)
    real = _source_index(s, out_size, align_corners, True, T)
    i0, t = _guard(real, in_size, T)
    idx = np.clip(i0[:, None] + np.arange(-1, 3)[None, :], 0, in_size - 1)
    return idx, _cubic_coeffs(t, T).astype(W).astype(T)


def _aa_filter(kind: str, x, T):
    x = np.abs(x)
    if kind == "linear":
        return np.where(x < 1.0, T(1) - x, T(0)).astype(T)
    a = T(-0.5)  # Keys' cubic, as Pillow
    return np.where(x < 1.0, _cubic1(x, a), np.where(x < 2.0, _cubic2(x, a), T(0))).astype(T)


def _aa_table(kind, in_size, out_size, align_corners, scale, T):
    """HelperInterpBase._compute_indices_min_size_weights_aa for every output index:
    (out, K) indices (clamped) and weights (0 past each row's size), and the max weight."""
    interp = 2 if kind == "linear" else 4
    s = _area_scale(in_size, out_size, align_corners, scale, T)
    support = T(interp * 0.5 * float(s)) if s >= 1.0 else T(interp * 0.5)
    K = int(math.ceil(float(support))) * 2 + 1
    i = np.arange(out_size)
    center = (np.float64(s) * (i + 0.5)).astype(T)
    invscale = T(1.0 / float(s)) if s >= 1.0 else T(1.0)
    xmin = np.maximum(((center - support).astype(T).astype(np.float64) + 0.5).astype(np.int64), 0)
    xmax = np.minimum(((center + support).astype(T).astype(np.float64) + 0.5).astype(np.int64), in_size)
    xsize = np.clip(xmax - xmin, 0, K)
    j = np.arange(K)
    arg = ((j[None, :] + xmin[:, None]).astype(T) - center[:, None]).astype(T)
    arg = ((arg.astype(np.float64) + 0.5) * np.float64(invscale)).astype(T)
    w = _aa_filter(kind, arg, T)
    valid = j[None, :] < xsize[:, None]
    w = np.where(valid, w, T(0)).astype(T)
    total = np.zeros(out_size, T)
    for k in range(K):  # sequential, as the kernel sums
        total = (total + w[:, k]).astype(T)
    safe = np.where(total != 0, total, T(1)).astype(T)
    w = np.where(total[:, None] != 0, (w / safe[:, None]).astype(T), w).astype(T)
    idx = np.minimum(xmin[:, None] + j[None, :], in_size - 1)
    return idx, w, xsize


def _u8_table(kind, in_size, out_size, align_corners, scale, antialias):
    """Fixed-point weights of PyTorch's uint8 bilinear/bicubic path
    (_compute_index_ranges_int16_weights): (out, K) indices, int32 weights, and the precision."""
    D = np.float64
    if antialias:
        idx, w, _ = _aa_table(kind, in_size, out_size, align_corners, scale, D)
        wt_max = float(w.max()) if w.size else 0.0
    else:
        K = 2 if kind == "linear" else 4
        s = _area_scale(in_size, out_size, align_corners, scale, D)
        real = _source_index(s, out_size, align_corners, K > 2, D)
        i0, lam = _guard(real, in_size, D)
        support = int(K * 0.5)
        umin = i0 - support + 1
        imin = np.maximum(umin, 0)
        isize = np.clip(np.minimum(i0 + support + 1, in_size) - imin, 0, K)
        w = np.zeros((out_size, K), D)
        wt_max = 0.0
        for o in range(out_size):  # static table, one row per output index
            widx = 0
            for j in range(K):
                x = abs(float(j + 1 - support) - float(lam[o]))
                if kind == "linear":
                    f = 1.0 - x if x < 1.0 else 0.0
                else:
                    f = _cubic1(x, -0.75) if x < 1.0 else (_cubic2(x, -0.75) if x < 2.0 else 0.0)
                if umin[o] + j <= 0:
                    widx = 0
                elif umin[o] + j >= in_size - 1:
                    widx = isize[o] - 1
                w[o, widx] += f
                wt_max = max(wt_max, w[o, widx])
                widx += 1
        w = np.where(np.arange(K)[None, :] < isize[:, None], w, 0.0)
        idx = np.minimum(imin[:, None] + np.arange(K)[None, :], in_size - 1)
    prec = 0
    while prec < 22:
        if int(0.5 + wt_max * (1 << (prec + 1))) >= (1 << 15):
            break
        prec += 1
    v = w * (1 << prec)
    w16 = np.where(v < 0, np.trunc(-0.5 + v), np.trunc(0.5 + v)).astype(np.int16).astype(np.int32)
    return idx, w16, prec


# ---------------------------------------------------------------------------------------------
# Applying a per-axis table (jax)


def _take(x, idx, axis):
    return jnp.take(x, np.asarray(idx, np.int32), axis=axis, mode="clip")


def _bcast(w, ndim, axis):
    return np.asarray(w).reshape((-1,) + (1,) * (ndim - axis - 1))


def _resample_axis(x, axis, idx, w=None):
    """out[.., o, ..] = sum_k x[.., idx[o, k], ..] * w[o, k]; with w None (nearest) a plain gather."""
    in_size = x.shape[axis]
    out_size = idx.shape[0]
    if w is None:
        src = idx[:, 0]
        if out_size == in_size and np.array_equal(src, np.arange(in_size)):
            return x
        if out_size % in_size == 0 and np.array_equal(src, np.arange(out_size) // (out_size // in_size)):
            return jnp.repeat(x, out_size // in_size, axis=axis)
        return _take(x, src, axis)
    return _weighted_taps(x, axis, idx, np.asarray(w).astype(x.dtype))


def _weighted_taps(x, axis, idx, w):
    """sum_k take(x, idx[:, k]) * w[:, k] along axis: a few taps one by one (PyTorch's order of
    summation), many taps (antialiased downscaling) as one gather and a reduction."""
    out_size, K = idx.shape
    if K <= 4:
        acc = None
        for k in range(K):
            term = _take(x, idx[:, k], axis) * _bcast(w[:, k], x.ndim, axis)
            acc = term if acc is None else acc + term
        return acc
    picked = _take(x, idx.reshape(-1), axis).reshape(x.shape[:axis] + (out_size, K) + x.shape[axis + 1:])
    return jnp.sum(picked * w.reshape((out_size, K) + (1,) * (x.ndim - axis - 1)), axis=axis + 1, dtype=x.dtype)


def _transpose_table(idx, w, in_size):
    """For the adjoint: for each input position, the (output, tap) pairs that read it, as a padded
    (in, R) table of output positions (`out` = a zero row) and their weights."""
    out_size, K = idx.shape
    flat_in = idx.reshape(-1)
    flat_out = np.repeat(np.arange(out_size), K)
    flat_w = np.ones(flat_in.shape) if w is None else np.asarray(w, np.float64).reshape(-1)
    order = np.argsort(flat_in, kind="stable")
    counts = np.bincount(flat_in, minlength=in_size)
    R = max(int(counts.max()) if counts.size else 0, 1)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    sorted_in = flat_in[order]
    rank = np.arange(len(order)) - starts[sorted_in]
    table = np.full((in_size, R), out_size, np.int64)
    weights = np.zeros((in_size, R), np.float64)
    table[sorted_in, rank] = flat_out[order]
    weights[sorted_in, rank] = flat_w[order]
    return table, weights


def _adjoint_axis(g, axis, idx, w, in_size):
    """The transpose of `_resample_axis` (g has the output size along axis; result the input size)."""
    out_size = idx.shape[0]
    if w is None:
        src = idx[:, 0]
        if out_size == in_size and np.array_equal(src, np.arange(in_size)):
            return g
        k = out_size // in_size
        if out_size % in_size == 0 and np.array_equal(src, np.arange(out_size) // k):
            shape = g.shape[:axis] + (in_size, k) + g.shape[axis + 1:]
            return jnp.sum(g.reshape(shape), axis=axis + 1)
    table, weights = _transpose_table(idx, w, in_size)
    zero = jnp.zeros(g.shape[:axis] + (1,) + g.shape[axis + 1:], g.dtype)
    gp = jnp.concatenate([g, zero], axis=axis)
    R = table.shape[1]
    picked = _take(gp, table.reshape(-1), axis)
    picked = picked.reshape(g.shape[:axis] + (in_size, R) + g.shape[axis + 1:])
    if w is not None:
        picked = picked * np.asarray(weights).reshape((in_size, R) + (1,) * (g.ndim - axis - 1)).astype(g.dtype)
    return jnp.sum(picked, axis=axis + 1)


def _spatial(x, n: int):
    """The axes of the n spatial dims, last first (PyTorch's inner loop)."""
    return [x.ndim - 1 - k for k in range(n)]


def _nearest_table(dtype, exact: bool, legacy: bool):
    """table(d, in, out, scale) -> ((out, 1) source indices, None) for nearest / nearest-exact."""
    T = _opmath(dtype).type  # uint8 indices are computed in float, as float32's

    def table(d, in_size, out_size, scale):
        return _nearest_index(in_size, out_size, scale, T, exact, legacy)[:, None], None

    return table


def _upsample(x, sizes, scales, table, compute):
    """Resize the trailing len(sizes) dims of x (computing in `compute`, if given);
    table(d, in, out, scale) -> (idx, w) for spatial dim d."""
    n = len(sizes)
    dt = x.dtype
    y = x.astype(compute) if compute is not None else x
    for k, axis in enumerate(_spatial(x, n)):
        d = n - 1 - k  # index into sizes/scales
        idx, w = table(d, x.shape[axis], sizes[d], scales[d])
        y = _resample_axis(y, axis, idx, w)
    return y.astype(dt) if compute is not None else y


def _upsample_backward(g, input_size, sizes, scales, table, compute):
    n = len(sizes)
    dt = g.dtype
    y = g.astype(compute)
    for k, axis in reversed(list(enumerate(_spatial(g, n)))):
        d = n - 1 - k
        idx, w = table(d, input_size[axis], sizes[d], scales[d])
        y = _adjoint_axis(y, axis, idx, w, input_size[axis])
    return y.astype(dt)


def _nearest(x, sizes, scales, exact):
    legacy = len(sizes) == 2 and sizes[0] + sizes[1] <= 128  # PyTorch's kernel choice, see above
    return _upsample(x, sizes, scales, _nearest_table(x.dtype, exact, legacy), None)


def _nearest_backward(g, sizes, input_size, scales, exact):
    return _upsample_backward(g, input_size, sizes, scales, _nearest_table(g.dtype, exact, True), _acc(g.dtype))


def _weights_type(dtype, small: bool):
    """The type the generic kernel stores weights in (the input dtype), or opmath (small 2-d)."""
    dt = np.dtype(dtype)
    return _opmath(dt).type if small else dt.type


def _interp(x, sizes, align_corners, scales, kind, op):
    """upsample_linear1d / bilinear2d / trilinear3d / bicubic2d forward."""
    if np.dtype(x.dtype) == _U8 and len(sizes) == 2:
        return _u8_resample(x, sizes, align_corners, scales, kind, False)
    _require_float(op, x.dtype)
    T = _opmath(x.dtype).type
    small = kind == "linear" and len(sizes) == 2 and sizes[0] + sizes[1] <= 128
    W = _weights_type(x.dtype, small)
    maker = _linear_table if kind == "linear" else _cubic_table

    def table(d, i, o, s):
        return maker(i, o, align_corners, s, T, W)

    return _upsample(x, sizes, scales, table, _acc(x.dtype))


def _interp_backward(g, sizes, input_size, align_corners, scales, kind, op):
    _require_float(op, g.dtype)
    T = _opmath(g.dtype).type
    maker = _linear_table if kind == "linear" else _cubic_table

    def table(d, i, o, s):
        return maker(i, o, align_corners, s, T, T)

    return _upsample_backward(g, input_size, sizes, scales, table, _acc(g.dtype))


def _aa(x, sizes, align_corners, scales, kind, op):
    """Antialiased bilinear/bicubic forward: one pass per resized axis (W first), equal sizes skipped."""
    if np.dtype(x.dtype) == _U8:
        return _u8_resample(x, sizes, align_corners, scales, kind, True)
    _require_float(op, x.dtype)
    T = _opmath(x.dtype).type
    y = x.astype(_acc(x.dtype))
    for k, axis in enumerate(_spatial(x, 2)):
        d = 1 - k
        if x.shape[axis] == sizes[d]:
            continue
        idx, w, _ = _aa_table(kind, x.shape[axis], sizes[d], align_corners, scales[d], T)
        y = _resample_axis(y, axis, idx, w)
    return y.astype(x.dtype)


def _aa_backward(g, sizes, input_size, align_corners, scales, kind, op):
    _require_float(op, g.dtype)
    T = _opmath(g.dtype).type
    y = g.astype(_acc(g.dtype))
    for k, axis in reversed(list(enumerate(_spatial(g, 2)))):
        d = 1 - k
        idx, w, _ = _aa_table(kind, input_size[axis], sizes[d], align_corners, scales[d], T)
        y = _adjoint_axis(y, axis, idx, w, input_size[axis])
    return y.astype(g.dtype)


def _u8_resample(x, sizes, align_corners, scales, kind, antialias):
    """PyTorch's uint8 path: int16 fixed-point weights, rounding to uint8 after each axis (W first)."""
    y = x
    for k, axis in enumerate(_spatial(x, 2)):
        d = 1 - k
        if x.shape[axis] == sizes[d]:
            continue
        idx, w16, prec = _u8_table(kind, x.shape[axis], sizes[d], align_corners, scales[d], antialias)
        acc = _weighted_taps(y.astype(np.int32), axis, idx, w16.astype(np.int32)) + np.int32(1 << (prec - 1))
        y = jnp.clip(lax.shift_right_arithmetic(acc, np.int32(prec)), 0, 255).astype(_U8)
    return y


# ---------------------------------------------------------------------------------------------
# Reflection / replication padding: each padded axis is a few runs of the input (slices, reversed
# slices, or one edge element repeated)


def _pad_index(n: int, lo: int, hi: int, reflect: bool):
    """PyTorch's padding index map: source index of each output position along one axis."""
    j = np.arange(n + lo + hi)
    i_start, o_start = max(0, -lo), max(0, lo)
    if reflect:
        ip = np.where(j < lo, 2 * lo - j, np.where(j < n + lo, j, 2 * (n + lo - 1) - j))
    else:
        ip = np.where(j < lo, lo, np.where(j < n + lo, j, n + lo - 1))
    return ip - o_start + i_start


def _runs(idx):
    """Split an index map into runs (out_start, in_start, length, step) with step in {1, -1, 0}."""
    n = len(idx)
    d = np.diff(idx)
    runs, j = [], 0
    while j < n:
        if j == n - 1 or d[j] not in (-1, 0, 1):
            runs.append((j, int(idx[j]), 1, 1))
            j += 1
            continue
        step = int(d[j])
        bad = np.nonzero(d[j:] != step)[0]
        last = j + (int(bad[0]) if len(bad) else n - 1 - j)
        runs.append((j, int(idx[j]), last - j + 1, step))
        j = last + 1
    return runs


def _pad_axis(x, axis, idx):
    pieces = []
    for _o, s, length, step in _runs(idx):
        if step == 1:
            pieces.append(lax.slice_in_dim(x, s, s + length, axis=axis))
        elif step == -1:
            pieces.append(lax.rev(lax.slice_in_dim(x, s - length + 1, s + 1, axis=axis), (axis,)))
        else:
            edge = lax.slice_in_dim(x, s, s + 1, axis=axis)
            shape = list(x.shape)
            shape[axis] = length
            pieces.append(jnp.broadcast_to(edge, tuple(shape)))
    if len(pieces) == 1:
        return pieces[0]
    return jnp.concatenate(pieces, axis=axis)


def _pad_axis_adjoint(g, axis, idx, n):
    total = None
    for o, s, length, step in _runs(idx):
        part = lax.slice_in_dim(g, o, o + length, axis=axis)
        if step == -1:
            part, lo = lax.rev(part, (axis,)), s - length + 1
        elif step == 0:
            part, lo = jnp.sum(part, axis=axis, keepdims=True), s
        else:
            lo = s
        width = part.shape[axis]
        config = [(0, 0, 0)] * g.ndim
        config[axis] = (lo, n - lo - width, 0)
        part = lax.pad(part, jnp.zeros((), g.dtype), config)
        total = part if total is None else total + part
    return total


def _pad(x, padding, reflect):
    y = x
    for k in range(len(padding) // 2):
        axis = x.ndim - 1 - k
        idx = _pad_index(x.shape[axis], int(padding[2 * k]), int(padding[2 * k + 1]), reflect)
        y = _pad_axis(y, axis, idx)
    return y


def _pad_backward(g, x, padding, reflect):
    y = g.astype(_acc(g.dtype))
    for k in range(len(padding) // 2):
        axis = x.ndim - 1 - k
        n = x.shape[axis]
        idx = _pad_index(n, int(padding[2 * k]), int(padding[2 * k + 1]), reflect)
        y = _pad_axis_adjoint(y, axis, idx, n)
    return y.astype(g.dtype)


# ---------------------------------------------------------------------------------------------
# grid_sampler_2d (the vectorized CPU kernel's arithmetic, aten/src/ATen/native/cpu/GridSamplerKernel.cpp)

_BILINEAR, _NEAREST, _BICUBIC = 0, 1, 2
_ZEROS, _BORDER, _REFLECTION = 0, 1, 2


class _Axis:
    """ComputeLocation for one spatial dim of the input."""

    def __init__(self, size, padding, align_corners, T):
        self.size, self.padding, self.align, self.T = size, padding, align_corners, T
        if align_corners:
            self.scaling = T(size - 1) / T(2)
            self.low = T(0)
            self.twice_span = T(size - 1) * T(2)
            self.empty = size <= 1
        else:
            self.scaling = T(size) / T(2)
            self.low = T(-0.5)
            self.twice_span = T(size) * T(2)
            self.empty = size <= 0
        self.max_val = T(size - 1)

    def unnormalize(self, c):
        y = (c + 1) * self.scaling
        return y if self.align else y - self.T(0.5)

    def clip(self, c):
        return jnp.minimum(jnp.where(c > 0, c, 0), self.max_val)  # NaN -> 0

    def clip_grad(self, c):
        return self.clip(c), ((c > 0) & (c < self.max_val))

    def reflect(self, c, with_grad=False):
        if self.empty:
            z = jnp.zeros_like(c)
            return (z, z) if with_grad else z
        shifted = c - self.low
        a = jnp.abs(shifted)
        extra = a - jnp.trunc(a / self.twice_span) * self.twice_span
        reflected = self.twice_span - extra
        flip = extra > reflected
        value = jnp.where(flip, reflected, extra) + self.low
        if not with_grad:
            return value
        return value, jnp.where(flip ^ (shifted < 0), -1, 1).astype(c.dtype)

    def compute(self, c):
        """compute_coordinates: padding applied to an unnormalized coordinate."""
        if self.padding == _BORDER:
            return self.clip(c)
        if self.padding == _REFLECTION:
            return self.clip(self.reflect(c))
        return c

    def apply(self, c):
        return self.compute(self.unnormalize(c))

    def apply_get_grad(self, c):
        x = self.unnormalize(c)
        if self.padding == _ZEROS:
            return x, jnp.full_like(x, self.scaling)
        if self.padding == _BORDER:
            x, ok = self.clip_grad(x)
            return x, jnp.where(ok, self.scaling, 0).astype(x.dtype)
        x, g = self.reflect(x, with_grad=True)
        g = g * self.scaling
        x, ok = self.clip_grad(x)
        return x, jnp.where(ok, g, 0).astype(x.dtype)


def _taps(fx, fy, H, W, always_in):
    """Integer linear indices (clamped into range) and validity of float tap coordinates (any
    trailing tap dims), for one gather/scatter over all taps at once."""
    ok = (fx > -1) & (fx < W) & (fy > -1) & (fy < H)
    if always_in is not None:
        ok = always_in(fx, fy)
    ix = jnp.clip(jnp.where(ok, fx, 0), 0, W - 1).astype(np.int32)
    iy = jnp.clip(jnp.where(ok, fy, 0), 0, H - 1).astype(np.int32)
    return iy * W + ix, ok


def _gather_taps(flat, lin, ok):
    """flat (N, C, H*W); lin/ok (N, P, *taps) -> values (N, C, P, *taps), 0 where not ok."""
    N, C = flat.shape[:2]
    tail = lin.shape[1:]
    vals = jax.vmap(lambda f, i: jnp.take(f, i, axis=1, mode="clip"))(flat, lin.reshape(N, -1))
    return jnp.where(ok[:, None], vals.reshape((N, C) + tail), 0)


def _scatter_taps(shape, lin, ok, vals):
    """Adds vals (N, C, P, *taps) where ok into zeros of shape (N, C, H*W) at lin (N, P, *taps)."""
    N, C = shape[:2]
    vals = jnp.where(ok[:, None], vals, 0).reshape(N, C, -1)
    zeros = jnp.zeros(shape, vals.dtype)
    return jax.vmap(lambda z, i, v: z.at[:, i].add(v, mode="promise_in_bounds"))(zeros, lin.reshape(N, -1), vals)


def _bilinear_params(x, y, H, W, padding):
    """Corner taps nw, ne, sw, se (last dim) of unnormalized, padded coordinates x/y (N, P)."""
    x_w, y_n = jnp.floor(x), jnp.floor(y)
    w = x - x_w
    e = 1 - w
    n = y - y_n
    s = 1 - n
    dx = np.array([0, 1, 0, 1], np.float32)
    dy = np.array([0, 0, 1, 1], np.float32)
    fx = x_w[..., None] + dx.astype(x.dtype)
    fy = y_n[..., None] + dy.astype(y.dtype)
    # with border/reflection padding the coordinates are clipped into range: only +1 taps may leave it
    always = None if padding == _ZEROS else (lambda fx, fy: (fx < W) & (fy < H))
    lin, ok = _taps(fx, fy, H, W, always)
    weights = jnp.stack([s * e, s * w, n * e, n * w], axis=-1)
    return (n, s, w, e), lin, ok, weights


def _cubic_coeffs_jax(t):
    """The 4 cubic convolution weights (A = -0.75) of fractional offsets t, as the vectorized kernel."""
    A = -0.75
    x0, x1, x2, x3 = t + 1, t, 1 - t, 2 - t
    return [((A * x0 - 5 * A) * x0 + 8 * A) * x0 - 4 * A,
            ((A + 2) * x1 - (A + 3)) * x1 * x1 + 1,
            ((A + 2) * x2 - (A + 3)) * x2 * x2 + 1,
            ((A * x3 - 5 * A) * x3 + 8 * A) * x3 - 4 * A]


def _cubic_coeffs_grad_jax(t):
    """d weight / d t of `_cubic_coeffs_jax` (with the kernel's sign convention)."""
    A = -0.75
    x0, x1, x2, x3 = -1 - t, -t, 1 - t, 2 - t
    return [(-3 * A * x0 - 10 * A) * x0 - 8 * A,
            (-3 * (A + 2) * x1 - 2 * (A + 3)) * x1,
            (3 * (A + 2) * x2 - 2 * (A + 3)) * x2,
            (3 * A * x3 - 10 * A) * x3 + 8 * A]


def _bicubic_taps(x, y, ax_w, ax_h, H, W, padding):
    """The 4x4 taps (N, P, 4 rows j, 4 columns i) around floor(x), floor(y), each coordinate padded."""
    ix0, iy0 = jnp.floor(x), jnp.floor(y)
    off = np.arange(-1, 3).astype(x.dtype)
    fx = jnp.trunc(ax_w.compute(ix0[..., None] + off))  # (N, P, 4) columns
    fy = jnp.trunc(ax_h.compute(iy0[..., None] + off))  # (N, P, 4) rows
    fx, fy = jnp.broadcast_arrays(fx[..., None, :], fy[..., :, None])
    always = None if padding == _ZEROS else (lambda fx, fy: jnp.ones(fx.shape, bool))
    lin, ok = _taps(fx, fy, H, W, always)
    return ix0, iy0, lin, ok


def _grid_setup(input, grid, padding, align_corners):
    T = _opmath(input.dtype).type
    N, C, H, W = input.shape
    g = grid.astype(T)
    gx = g[..., 0].reshape(N, -1)
    gy = g[..., 1].reshape(N, -1)
    ax_w = _Axis(W, padding, align_corners, T)
    ax_h = _Axis(H, padding, align_corners, T)
    flat = input.astype(T).reshape(N, C, H * W)
    return T, (N, C, H, W), gx, gy, ax_w, ax_h, flat


def _sum_taps(vals, coeffs):
    """sum_k vals[..., k] * coeffs[k] in order, coeffs (N, P) broadcast over C."""
    out = None
    for k, c in enumerate(coeffs):
        term = vals[..., k] * c[:, None]
        out = term if out is None else out + term
    return out


def _grid_sample(input, grid, mode, padding, align_corners):
    N, C = input.shape[:2]
    Ho, Wo = grid.shape[1], grid.shape[2]
    if N * C * Ho * Wo == 0:
        return jnp.zeros((N, C, Ho, Wo), input.dtype)
    T, (N, C, H, W), gx, gy, ax_w, ax_h, flat = _grid_setup(input, grid, padding, align_corners)
    if mode == _BILINEAR:
        x, y = ax_w.apply(gx), ax_h.apply(gy)
        _, lin, ok, weights = _bilinear_params(x, y, H, W, padding)
        vals = _gather_taps(flat, lin, ok)
        out = _sum_taps(vals, [weights[..., k] for k in range(4)])
    elif mode == _NEAREST:
        x, y = jnp.round(ax_w.apply(gx)), jnp.round(ax_h.apply(gy))
        always = None if padding == _ZEROS else (lambda fx, fy: jnp.ones(fx.shape, bool))
        lin, ok = _taps(x, y, H, W, always)
        out = _gather_taps(flat, lin, ok)
    else:
        x, y = ax_w.unnormalize(gx), ax_h.unnormalize(gy)
        ix0, iy0, lin, ok = _bicubic_taps(x, y, ax_w, ax_h, H, W, padding)
        vals = _gather_taps(flat, lin, ok)  # (N, C, P, 4 rows, 4 columns)
        cx, cy = _cubic_coeffs_jax(x - ix0), _cubic_coeffs_jax(y - iy0)
        rows = jnp.stack([_sum_taps(vals[..., j, :], cx) for j in range(4)], axis=-1)
        out = _sum_taps(rows, cy)
    return out.reshape(N, C, Ho, Wo).astype(input.dtype)


def _grid_sample_backward(grad_output, input, grid, mode, padding, align_corners, output_mask):
    if grad_output.size == 0:  # nothing sampled: zero gradients
        return (jnp.zeros(input.shape, input.dtype) if output_mask[0] else None), jnp.zeros(grid.shape, grid.dtype)
    T, (N, C, H, W), gx, gy, ax_w, ax_h, flat = _grid_setup(input, grid, padding, align_corners)
    gout = grad_output.astype(T).reshape(N, C, -1)
    want_input = bool(output_mask[0])
    shape = (N, C, H * W)
    g_in = None
    if mode == _BILINEAR:
        x, gx_mult = ax_w.apply_get_grad(gx)
        y, gy_mult = ax_h.apply_get_grad(gy)
        (n, s, w, e), lin, ok, weights = _bilinear_params(x, y, H, W, padding)
        vals = _gather_taps(flat, lin, ok)
        nw, ne, sw, se = (vals[..., k] for k in range(4))
        ggx = jnp.sum(((ne - nw) * s[:, None] + (se - sw) * n[:, None]) * gout, axis=1) * gx_mult
        ggy = jnp.sum(((sw - nw) * e[:, None] + (se - ne) * w[:, None]) * gout, axis=1) * gy_mult
        if want_input:
            g_in = _scatter_taps(shape, lin, ok, weights[:, None] * gout[..., None])
    elif mode == _NEAREST:
        ggx = ggy = jnp.zeros(gx.shape, T)
        if want_input:
            x, y = jnp.round(ax_w.apply(gx)), jnp.round(ax_h.apply(gy))
            always = None if padding == _ZEROS else (lambda fx, fy: jnp.ones(fx.shape, bool))
            lin, ok = _taps(x, y, H, W, always)
            g_in = _scatter_taps(shape, lin, ok, gout)
    else:
        x, y = ax_w.unnormalize(gx), ax_h.unnormalize(gy)
        ix0, iy0, lin, ok = _bicubic_taps(x, y, ax_w, ax_h, H, W, padding)
        tx, ty = x - ix0, y - iy0
        cx, cy = jnp.stack(_cubic_coeffs_jax(tx), -1), jnp.stack(_cubic_coeffs_jax(ty), -1)  # (N, P, 4)
        dx, dy = jnp.stack(_cubic_coeffs_grad_jax(tx), -1), jnp.stack(_cubic_coeffs_grad_jax(ty), -1)
        vals = _gather_taps(flat, lin, ok)  # (N, C, P, 4 rows j, 4 columns i)
        vg = jnp.sum(vals * gout[..., None, None], axis=1)  # (N, P, j, i)
        ggx = -jnp.sum(vg * dx[:, :, None, :] * cy[:, :, :, None], axis=(2, 3)) * ax_w.scaling
        ggy = -jnp.sum(vg * dy[:, :, :, None] * cx[:, :, None, :], axis=(2, 3)) * ax_h.scaling
        if want_input:
            wts = cx[:, :, None, :] * cy[:, :, :, None]  # (N, P, j, i)
            g_in = _scatter_taps(shape, lin, ok, gout[..., None, None] * wts[:, None])
    grad_grid = jnp.stack([ggx, ggy], axis=-1).reshape(grid.shape).astype(grid.dtype)
    grad_input = g_in.reshape(input.shape).astype(input.dtype) if want_input else None
    return grad_input, grad_grid


# ---------------------------------------------------------------------------------------------
# grid_sampler_3d (the scalar CPU kernel's arithmetic, aten/src/ATen/native/GridSampler.cpp)


def _clip_scalar(c, size):
    """std::min(size - 1, std::max(c, 0)): NaN becomes size - 1."""
    m = jnp.where(c < 0, jnp.zeros((), c.dtype), c)
    hi = jnp.asarray(size - 1, c.dtype)
    return jnp.where(m < hi, m, hi)


def _reflect_scalar(c, twice_low: int, twice_high: int):
    if twice_low == twice_high:
        return jnp.zeros_like(c)
    low = jnp.asarray(twice_low, c.dtype) / 2
    span = jnp.asarray(twice_high - twice_low, c.dtype) / 2
    a = jnp.abs(c - low)
    extra = jnp.fmod(a, span)
    even = jnp.fmod(jnp.floor(a / span), 2) == 0
    return jnp.where(even, extra + low, span - extra + low)


def _source_index_scalar(coord, size: int, padding: int, align_corners: bool):
    """grid_sampler_compute_source_index of the scalar CPU kernel."""
    if align_corners:
        c = ((coord + 1) / 2) * (size - 1)
    else:
        c = ((coord + 1) * size - 1) / 2
    if padding == _BORDER:
        c = _clip_scalar(c, size)
    elif padding == _REFLECTION:
        c = _reflect_scalar(c, 0, 2 * (size - 1)) if align_corners else _reflect_scalar(c, -1, 2 * size - 1)
        c = _clip_scalar(c, size)
    return c


_CORNERS_3D = [(dz, dy, dx) for dz in (0, 1) for dy in (0, 1) for dx in (0, 1)]  # tnw, tne, tsw, tse, bnw, ...


def _grid_sample_3d_f(input, grid, mode, padding, align_corners):
    """grid_sampler_3d in the opmath type: (N, C, Do, Ho, Wo)."""
    N, C, D, H, W = input.shape
    out_sp = tuple(grid.shape[1:4])
    T = input.dtype
    g = grid.reshape(N, -1, 3)
    ix = _source_index_scalar(g[..., 0], W, padding, align_corners)
    iy = _source_index_scalar(g[..., 1], H, padding, align_corners)
    iz = _source_index_scalar(g[..., 2], D, padding, align_corners)
    flat = input.reshape(N, C, D * H * W)

    def taps(fx, fy, fz):
        ok = (fx > -1) & (fx < W) & (fy > -1) & (fy < H) & (fz > -1) & (fz < D)
        cx = jnp.clip(jnp.where(ok, fx, 0), 0, W - 1).astype(np.int32)
        cy = jnp.clip(jnp.where(ok, fy, 0), 0, H - 1).astype(np.int32)
        cz = jnp.clip(jnp.where(ok, fz, 0), 0, D - 1).astype(np.int32)
        return (cz * H + cy) * W + cx, ok

    if mode == _NEAREST:
        lin, ok = taps(jnp.round(ix), jnp.round(iy), jnp.round(iz))
        out = _gather_taps(flat, lin, ok)
    else:
        x0, y0, z0 = jnp.floor(ix), jnp.floor(iy), jnp.floor(iz)
        one = jnp.ones((), T)
        fx = jnp.stack([x0 + dx for _dz, _dy, dx in _CORNERS_3D], axis=-1)
        fy = jnp.stack([y0 + dy for _dz, dy, _dx in _CORNERS_3D], axis=-1)
        fz = jnp.stack([z0 + dz for dz, _dy, _dx in _CORNERS_3D], axis=-1)
        lin, ok = taps(fx, fy, fz)
        vals = _gather_taps(flat, lin, ok)  # (N, C, P, 8)

        def w(i, i0, d):
            return (i - i0) if d else ((i0 + one) - i)

        # a corner out of bounds is skipped (its weight may be NaN for a NaN coordinate)
        weights = [jnp.where(ok[..., k], (w(ix, x0, dx) * w(iy, y0, dy)) * w(iz, z0, dz), 0)
                   for k, (dz, dy, dx) in enumerate(_CORNERS_3D)]
        out = _sum_taps(vals, weights)
    return out.reshape((N, C) + out_sp)


def _grid_sample_3d_check(input, grid, mode, op):
    _require_float(op, input.dtype)
    if mode == _BICUBIC:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    if mode not in (_BILINEAR, _NEAREST):
        raise RuntimeError(f"grid_sampler(): unknown interpolation mode {mode}")


def _grid_sample_3d(input, grid, mode, padding, align_corners):
    N, C = input.shape[:2]
    out_shape = (N, C) + tuple(grid.shape[1:4])
    if math.prod(out_shape) == 0:
        return jnp.zeros(out_shape, input.dtype)
    T = _opmath(input.dtype)
    out = _grid_sample_3d_f(input.astype(T), grid.astype(T), mode, padding, align_corners)
    return out.astype(input.dtype)


def _grid_sample_3d_backward(grad_output, input, grid, mode, padding, align_corners, output_mask):
    T = _opmath(input.dtype)
    if grad_output.size == 0 or input.size == 0:
        g_in = jnp.zeros(input.shape, input.dtype) if output_mask[0] else None
        return g_in, jnp.zeros(grid.shape, grid.dtype)
    f = lambda x, g: _grid_sample_3d_f(x, g, mode, padding, align_corners)  # noqa: E731
    _, vjp = jax.vjp(f, input.astype(T), grid.astype(T))
    g_in, g_grid = vjp(grad_output.astype(T))
    if mode == _NEAREST:
        g_grid = jnp.zeros_like(g_grid)
    return (g_in.astype(input.dtype) if output_mask[0] else None), g_grid.astype(grid.dtype)


def _sizes(output_size):
    return [int(s) for s in output_size]


# ---------------------------------------------------------------------------------------------
# Lowerings, alphabetical


# _upsample_bicubic2d_aa(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor
@lower(aten._upsample_bicubic2d_aa.default)
def _upsample_bicubic2d_aa(self, output_size, align_corners, scales_h, scales_w):
    return _aa(self, _sizes(output_size), align_corners, [scales_h, scales_w], "cubic", "upsample_bicubic2d_aa")


# _upsample_bicubic2d_aa_backward(Tensor grad_output, SymInt[2] output_size, SymInt[4] input_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor
@lower(aten._upsample_bicubic2d_aa_backward.default)
def _upsample_bicubic2d_aa_backward(grad_output, output_size, input_size, align_corners, scales_h, scales_w):
    return _aa_backward(grad_output, _sizes(output_size), _sizes(input_size), align_corners, [scales_h, scales_w],
                        "cubic", "upsample_bicubic2d_aa_backward")


# _upsample_bilinear2d_aa(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor
@lower(aten._upsample_bilinear2d_aa.default)
def _upsample_bilinear2d_aa(self, output_size, align_corners, scales_h, scales_w):
    return _aa(self, _sizes(output_size), align_corners, [scales_h, scales_w], "linear", "upsample_bilinear2d_aa")


# _upsample_bilinear2d_aa_backward(Tensor grad_output, SymInt[2] output_size, SymInt[4] input_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor
@lower(aten._upsample_bilinear2d_aa_backward.default)
def _upsample_bilinear2d_aa_backward(grad_output, output_size, input_size, align_corners, scales_h, scales_w):
    return _aa_backward(grad_output, _sizes(output_size), _sizes(input_size), align_corners, [scales_h, scales_w],
                        "linear", "upsample_bilinear2d_aa_backward")


# _upsample_nearest_exact1d(Tensor self, SymInt[1] output_size, float? scales=None) -> Tensor
@lower(aten._upsample_nearest_exact1d.default)
def _upsample_nearest_exact1d(self, output_size, scales):
    return _nearest(self, _sizes(output_size), [scales], True)


# _upsample_nearest_exact1d_backward(Tensor grad_output, SymInt[1] output_size, SymInt[3] input_size, float? scales=None) -> Tensor
@lower(aten._upsample_nearest_exact1d_backward.default)
def _upsample_nearest_exact1d_backward(grad_output, output_size, input_size, scales):
    return _nearest_backward(grad_output, _sizes(output_size), _sizes(input_size), [scales], True)


# _upsample_nearest_exact2d(Tensor self, SymInt[2] output_size, float? scales_h=None, float? scales_w=None) -> Tensor
@lower(aten._upsample_nearest_exact2d.default)
def _upsample_nearest_exact2d(self, output_size, scales_h, scales_w):
    return _nearest(self, _sizes(output_size), [scales_h, scales_w], True)


# _upsample_nearest_exact2d_backward(Tensor grad_output, SymInt[2] output_size, SymInt[4] input_size, float? scales_h=None, float? scales_w=None) -> Tensor
@lower(aten._upsample_nearest_exact2d_backward.default)
def _upsample_nearest_exact2d_backward(grad_output, output_size, input_size, scales_h, scales_w):
    return _nearest_backward(grad_output, _sizes(output_size), _sizes(input_size), [scales_h, scales_w], True)


# _upsample_nearest_exact3d(Tensor self, SymInt[3] output_size, float? scales_d=None, float? scales_h=None, float? scales_w=None) -> Tensor
@lower(aten._upsample_nearest_exact3d.default)
def _upsample_nearest_exact3d(self, output_size, scales_d, scales_h, scales_w):
    return _nearest(self, _sizes(output_size), [scales_d, scales_h, scales_w], True)


# _upsample_nearest_exact3d_backward(Tensor grad_output, SymInt[3] output_size, SymInt[5] input_size, float? scales_d=None, float? scales_h=None, float? scales_w=None) -> Tensor
@lower(aten._upsample_nearest_exact3d_backward.default)
def _upsample_nearest_exact3d_backward(grad_output, output_size, input_size, scales_d, scales_h, scales_w):
    return _nearest_backward(grad_output, _sizes(output_size), _sizes(input_size), [scales_d, scales_h, scales_w],
                             True)


# grid_sampler_2d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) -> Tensor
@lower(aten.grid_sampler_2d.default)
def grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners):
    _require_float("grid_sampler_2d_cpu", input.dtype)
    return _grid_sample(input, grid, int(interpolation_mode), int(padding_mode), bool(align_corners))


# grid_sampler_2d_backward(Tensor grad_output, Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners, bool[2] output_mask) -> (Tensor, Tensor)
@lower(aten.grid_sampler_2d_backward.default)
def grid_sampler_2d_backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask):
    _require_float("grid_sampler_2d_backward_cpu", input.dtype)
    return _grid_sample_backward(grad_output, input, grid, int(interpolation_mode), int(padding_mode),
                                 bool(align_corners), output_mask)


# grid_sampler_3d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) -> Tensor
@lower(aten.grid_sampler_3d.default)
def grid_sampler_3d(input, grid, interpolation_mode, padding_mode, align_corners):
    _grid_sample_3d_check(input, grid, int(interpolation_mode), "grid_sampler_3d_cpu")
    return _grid_sample_3d(input, grid, int(interpolation_mode), int(padding_mode), bool(align_corners))


# grid_sampler_3d_backward(Tensor grad_output, Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners, bool[2] output_mask) -> (Tensor, Tensor)
@lower(aten.grid_sampler_3d_backward.default)
def grid_sampler_3d_backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask):
    _grid_sample_3d_check(input, grid, int(interpolation_mode), "grid_sampler_3d_backward_cpu")
    return _grid_sample_3d_backward(grad_output, input, grid, int(interpolation_mode), int(padding_mode),
                                    bool(align_corners), output_mask)


# reflection_pad1d(Tensor self, SymInt[2] padding) -> Tensor
@lower(aten.reflection_pad1d.default)
def reflection_pad1d(self, padding):
    return _pad(self, padding, True)


# reflection_pad1d_backward(Tensor grad_output, Tensor self, SymInt[2] padding) -> Tensor
@lower(aten.reflection_pad1d_backward.default)
def reflection_pad1d_backward(grad_output, self, padding):
    return _pad_backward(grad_output, self, padding, True)


# reflection_pad2d(Tensor self, SymInt[4] padding) -> Tensor
@lower(aten.reflection_pad2d.default)
def reflection_pad2d(self, padding):
    return _pad(self, padding, True)


# reflection_pad2d_backward(Tensor grad_output, Tensor self, SymInt[4] padding) -> Tensor
@lower(aten.reflection_pad2d_backward.default)
def reflection_pad2d_backward(grad_output, self, padding):
    return _pad_backward(grad_output, self, padding, True)


# reflection_pad3d(Tensor self, SymInt[6] padding) -> Tensor
@lower(aten.reflection_pad3d.default)
def reflection_pad3d(self, padding):
    return _pad(self, padding, True)


# reflection_pad3d_backward(Tensor grad_output, Tensor self, SymInt[6] padding) -> Tensor
@lower(aten.reflection_pad3d_backward.default)
def reflection_pad3d_backward(grad_output, self, padding):
    return _pad_backward(grad_output, self, padding, True)


# replication_pad1d(Tensor self, SymInt[2] padding) -> Tensor
@lower(aten.replication_pad1d.default)
def replication_pad1d(self, padding):
    return _pad(self, padding, False)


# replication_pad1d_backward(Tensor grad_output, Tensor self, SymInt[2] padding) -> Tensor
@lower(aten.replication_pad1d_backward.default)
def replication_pad1d_backward(grad_output, self, padding):
    return _pad_backward(grad_output, self, padding, False)


# replication_pad2d(Tensor self, SymInt[4] padding) -> Tensor
@lower(aten.replication_pad2d.default)
def replication_pad2d(self, padding):
    return _pad(self, padding, False)


# replication_pad2d_backward(Tensor grad_output, Tensor self, SymInt[4] padding) -> Tensor
@lower(aten.replication_pad2d_backward.default)
def replication_pad2d_backward(grad_output, self, padding):
    return _pad_backward(grad_output, self, padding, False)


# replication_pad3d(Tensor self, SymInt[6] padding) -> Tensor
@lower(aten.replication_pad3d.default)
def replication_pad3d(self, padding):
    return _pad(self, padding, False)


# replication_pad3d_backward(Tensor grad_output, Tensor self, SymInt[6] padding) -> Tensor
@lower(aten.replication_pad3d_backward.default)
def replication_pad3d_backward(grad_output, self, padding):
    return _pad_backward(grad_output, self, padding, False)


# upsample_bicubic2d(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor
@lower(aten.upsample_bicubic2d.default)
def upsample_bicubic2d(self, output_size, align_corners, scales_h, scales_w):
    return _interp(self, _sizes(output_size), align_corners, [scales_h, scales_w], "cubic",
                   "compute_indices_weights_cubic")


# upsample_bicubic2d_backward(Tensor grad_output, SymInt[2] output_size, SymInt[4] input_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor
@lower(aten.upsample_bicubic2d_backward.default)
def upsample_bicubic2d_backward(grad_output, output_size, input_size, align_corners, scales_h, scales_w):
    if _sizes(output_size) == _sizes(input_size)[2:]:
        _require_float("upsample_bicubic2d_backward_out_frame", grad_output.dtype)
        return grad_output  # PyTorch copies when the sizes match, whatever the scales
    return _interp_backward(grad_output, _sizes(output_size), _sizes(input_size), align_corners,
                            [scales_h, scales_w], "cubic", "upsample_bicubic2d_backward_out_frame")


# upsample_bilinear2d(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor
@lower(aten.upsample_bilinear2d.default)
def upsample_bilinear2d(self, output_size, align_corners, scales_h, scales_w):
    return _interp(self, _sizes(output_size), align_corners, [scales_h, scales_w], "linear",
                   "compute_indices_weights_linear")


# upsample_bilinear2d_backward(Tensor grad_output, SymInt[2] output_size, SymInt[4] input_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor
@lower(aten.upsample_bilinear2d_backward.default)
def upsample_bilinear2d_backward(grad_output, output_size, input_size, align_corners, scales_h, scales_w):
    return _interp_backward(grad_output, _sizes(output_size), _sizes(input_size), align_corners,
                            [scales_h, scales_w], "linear", "upsample_bilinear2d_backward_out_frame")


# upsample_linear1d(Tensor self, SymInt[1] output_size, bool align_corners, float? scales=None) -> Tensor
@lower(aten.upsample_linear1d.default)
def upsample_linear1d(self, output_size, align_corners, scales):
    return _interp(self, _sizes(output_size), align_corners, [scales], "linear", "compute_indices_weights_linear")


# upsample_linear1d_backward(Tensor grad_output, SymInt[1] output_size, SymInt[3] input_size, bool align_corners, float? scales=None) -> Tensor
@lower(aten.upsample_linear1d_backward.default)
def upsample_linear1d_backward(grad_output, output_size, input_size, align_corners, scales):
    return _interp_backward(grad_output, _sizes(output_size), _sizes(input_size), align_corners, [scales],
                            "linear", "upsample_linear1d_backward_out_frame")


# upsample_nearest1d(Tensor self, SymInt[1] output_size, float? scales=None) -> Tensor
@lower(aten.upsample_nearest1d.default)
def upsample_nearest1d(self, output_size, scales):
    return _nearest(self, _sizes(output_size), [scales], False)


# upsample_nearest1d_backward(Tensor grad_output, SymInt[1] output_size, SymInt[3] input_size, float? scales=None) -> Tensor
@lower(aten.upsample_nearest1d_backward.default)
def upsample_nearest1d_backward(grad_output, output_size, input_size, scales):
    return _nearest_backward(grad_output, _sizes(output_size), _sizes(input_size), [scales], False)


# upsample_nearest2d(Tensor self, SymInt[2] output_size, float? scales_h=None, float? scales_w=None) -> Tensor
@lower(aten.upsample_nearest2d.default)
def upsample_nearest2d(self, output_size, scales_h, scales_w):
    return _nearest(self, _sizes(output_size), [scales_h, scales_w], False)


# upsample_nearest2d_backward(Tensor grad_output, SymInt[2] output_size, SymInt[4] input_size, float? scales_h=None, float? scales_w=None) -> Tensor
@lower(aten.upsample_nearest2d_backward.default)
def upsample_nearest2d_backward(grad_output, output_size, input_size, scales_h, scales_w):
    return _nearest_backward(grad_output, _sizes(output_size), _sizes(input_size), [scales_h, scales_w], False)


# upsample_nearest3d(Tensor self, SymInt[3] output_size, float? scales_d=None, float? scales_h=None, float? scales_w=None) -> Tensor
@lower(aten.upsample_nearest3d.default)
def upsample_nearest3d(self, output_size, scales_d, scales_h, scales_w):
    return _nearest(self, _sizes(output_size), [scales_d, scales_h, scales_w], False)


# upsample_nearest3d_backward(Tensor grad_output, SymInt[3] output_size, SymInt[5] input_size, float? scales_d=None, float? scales_h=None, float? scales_w=None) -> Tensor
@lower(aten.upsample_nearest3d_backward.default)
def upsample_nearest3d_backward(grad_output, output_size, input_size, scales_d, scales_h, scales_w):
    return _nearest_backward(grad_output, _sizes(output_size), _sizes(input_size), [scales_d, scales_h, scales_w],
                             False)


# upsample_trilinear3d(Tensor self, SymInt[3] output_size, bool align_corners, float? scales_d=None, float? scales_h=None, float? scales_w=None) -> Tensor
@lower(aten.upsample_trilinear3d.default)
def upsample_trilinear3d(self, output_size, align_corners, scales_d, scales_h, scales_w):
    return _interp(self, _sizes(output_size), align_corners, [scales_d, scales_h, scales_w], "linear",
                   "compute_indices_weights_linear")


# upsample_trilinear3d_backward(Tensor grad_output, SymInt[3] output_size, SymInt[5] input_size, bool align_corners, float? scales_d=None, float? scales_h=None, float? scales_w=None) -> Tensor
@lower(aten.upsample_trilinear3d_backward.default)
def upsample_trilinear3d_backward(grad_output, output_size, input_size, align_corners, scales_d, scales_h, scales_w):
    return _interp_backward(grad_output, _sizes(output_size), _sizes(input_size), align_corners,
                            [scales_d, scales_h, scales_w], "linear", "upsample_trilinear3d_backward_out_frame")
