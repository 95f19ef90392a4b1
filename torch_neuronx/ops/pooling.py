"""Pooling: max pooling (max_pool2d/3d_with_indices), fractional max pooling
(fractional_max_pool2d/3d), average pooling (avg_pool2d/3d), adaptive average pooling
(_adaptive_avg_pool2d/3d), adaptive max pooling (adaptive_max_pool2d), and their backward ops.

- Max pooling walks the kernel offsets in PyTorch's scan order with PyTorch's update rule
  (`val > max or isnan(val)`: the first maximum wins, the last NaN wins; an index is a flat index
  into the input's spatial dims), fused by XLA into one elementwise loop. Its backward scatters
  the gradient at the given indices (-1 and out-of-range ones are dropped, as the CPU kernel skips
  -1 and does not check others).
- Fractional max pooling computes each plane's window starts from its random sample exactly as the
  CPU's `generate_intervals` (in the input's float type, 16-bit types rounding after every
  operation as c10's BFloat16/Half arithmetic does), gathers the windows and picks by the same rule
  (first maximum, last NaN); its indices are flat within each plane. Its backward is max pooling's.
- Average pooling is a `reduce_window` sum divided by PyTorch's divisor (count_include_pad counts
  padding but not the ceil_mode overhang; windows with no input element give 0; integer inputs
  divide truncating). Adaptive average pooling sums each window with 0/1 matrices (separable) and
  divides by its size. Their backwards add shifted strided copies (windows.py's "overlap-add", as
  col2im does).
- Adaptive max pooling (adaptive_max_pool2d): first maximum wins, a NaN wins over numbers (the last
  NaN of a window), indices are int64 flat positions in H*W.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..runtime.lazy_jax import jnp, lax
from .dtypes import cast, is_low_precision
from ._registry import aten, lower, require, require_in_range
from .promotion import compute_dtype
from .windows import accumulation_dtype, expand, is_inexact, overlap_add, precision, window_slice

_F32 = np.dtype(np.float32)
_I64 = np.dtype(np.int64)


# ---------------------------------------------------------------------------------------------
# helpers


def _pool_out(n, k, s, p, d, ceil_mode) -> int:
    """PyTorch's pooling_output_shape."""
    out = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _pool_params(x, kernel_size, stride, padding, dilation, ceil_mode, nsp):
    k = expand(kernel_size, nsp)
    s = expand(stride, nsp) if stride is not None and len(stride) else k
    p = expand(padding, nsp)
    d = expand(dilation, nsp)
    n = tuple(x.shape[-nsp:])
    o = tuple(_pool_out(*a, ceil_mode) for a in zip(n, k, s, p, d))
    return n, k, s, p, d, o


def _outer(parts, op):
    """Combine one 1-D array per spatial dim into an array over all of them (broadcast `op`)."""
    nsp = len(parts)
    out = None
    for i, a in enumerate(parts):
        shape = [1] * nsp
        shape[i] = a.shape[0]
        a = a.reshape(shape)
        out = a if out is None else op(out, a)
    return out


def _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, nsp):
    """-> (values, int64 flat spatial indices), PyTorch's scan order and update rule."""
    n, k, s, p, d, o = _pool_params(x, kernel_size, stride, padding, dilation, ceil_mode, nsp)
    dtype = np.dtype(x.dtype)
    if is_inexact(dtype):
        lowest = -np.inf
    elif dtype == np.bool_:
        lowest = False
    else:
        lowest = np.iinfo(dtype).min
    lowest = np.array(lowest, dtype)
    nb = x.ndim - nsp
    hi = [max(0, (oi - 1) * si + di * (ki - 1) + 1 - (ni + pi)) for ni, ki, si, pi, di, oi in zip(n, k, s, p, d, o)]
    xp = lax.pad(x, lowest, [(0, 0, 0)] * nb + [(pi, h, 0) for pi, h in zip(p, hi)])
    # flat index weights of the spatial dims
    weights = [math.prod(n[i + 1:]) for i in range(nsp)]
    starts = [np.arange(oi, dtype=np.int64) * si - pi for oi, si, pi in zip(o, s, p)]
    # the first valid position of each window (the CPU kernel's initial index)
    firsts = []
    for st, di in zip(starts, d):
        neg = st < 0
        firsts.append(np.where(neg, st + ((-st + di - 1) // di) * di, st))
    best_idx = jnp.asarray(_outer([f * w for f, w in zip(firsts, weights)], np.add))
    best = jnp.full(x.shape[:nb] + o, lowest, dtype)
    best_idx = jnp.broadcast_to(best_idx, best.shape)
    is_float = is_inexact(dtype)
    for off in itertools.product(*(range(ki) for ki in k)):
        v = window_slice(xp, off, s, d, o)
        pos = [st + oi * di for st, oi, di in zip(starts, off, d)]
        valid = _outer([(q >= 0) & (q < ni) for q, ni in zip(pos, n)], np.logical_and)
        flat = _outer([q * w for q, w in zip(pos, weights)], np.add)
        take = v > best
        if is_float:
            take = take | jnp.isnan(v)
        take = take & jnp.asarray(valid)
        best = jnp.where(take, v, best)
        best_idx = jnp.where(take, jnp.asarray(flat), best_idx)
    return best, best_idx


def _max_pool_backward(grad_output, self, indices, nsp):
    acc = accumulation_dtype(self.dtype) if is_inexact(self.dtype) else np.dtype(self.dtype)
    nb = self.ndim - nsp
    batch = math.prod(self.shape[:nb])
    n_in = math.prod(self.shape[nb:])
    g = grad_output.astype(acc).reshape(batch, -1)
    idx = indices.astype(_I64).reshape(batch, -1)
    rows = jnp.arange(batch, dtype=_I64)[:, None]
    out = jnp.zeros((batch, n_in), acc).at[rows, idx].add(g, mode="drop", wrap_negative_indices=False)
    return out.reshape(self.shape).astype(self.dtype)


def _fractional_intervals(sample, in_size: int, out_size: int, pool: int, dtype):
    """generate_intervals of FractionalMaxPooling.h for samples (...): window starts (..., out_size),
    computed in the sample's type (16-bit floats rounded after each operation, as c10 does)."""
    dt = np.dtype(dtype)
    if is_low_precision(dt):
        cd = _F32

        def rnd(v):
            return v.astype(dt).astype(cd)
    else:
        cd = dt

        def rnd(v):
            return v
    s = sample.astype(cd)
    last = jnp.full(sample.shape + (1,), in_size - pool, _I64)
    if out_size <= 1:
        return last
    alpha = rnd(rnd(jnp.asarray(in_size - pool, cd)) / rnd(jnp.asarray(out_size - 1, cd)))
    i = rnd(jnp.arange(out_size - 1).astype(cd))
    first = rnd(rnd(i + s[..., None]) * alpha).astype(_I64)
    base = rnd(s * alpha).astype(_I64)
    return jnp.concatenate([first - base[..., None], last], axis=-1)


def _fractional_max_pool(x, kernel_size, output_size, random_samples, nsp):
    """-> (values, int64 indices flat within each plane)."""
    if not is_inexact(x.dtype):
        raise NotImplementedError(f"fractional_max_pool{nsp}d: not implemented for {np.dtype(x.dtype)}")
    unbatched = x.ndim == nsp + 1
    xb = x[None] if unbatched else x
    nb, c = xb.shape[:2]
    n = tuple(xb.shape[2:])
    k = expand(kernel_size, nsp)
    o = expand(output_size, nsp)
    # the sample components: 2-d (W, H), 3-d (T, H, W)
    comp = (1, 0) if nsp == 2 else (0, 1, 2)
    if xb.size == 0:
        shape = x.shape[:x.ndim - nsp] + o
        return jnp.zeros(shape, x.dtype), jnp.zeros(shape, _I64)
    smp = random_samples.reshape(nb, c, nsp)
    pos = []  # per spatial dim: (N, C, o_i, k_i) input positions of each window
    for i in range(nsp):
        st = _fractional_intervals(smp[..., comp[i]], n[i], o[i], k[i], x.dtype)
        require(jnp.all((st >= 0) & (st <= n[i] - k[i])), RuntimeError,
                f"fractional_max_pool{nsp}d(): a pooling window is outside the input (random_samples not in [0, 1))")
        pos.append(st[..., None] + jnp.arange(k[i], dtype=_I64))
    # flat plane index of every (output position, kernel offset), laid out (N, C, *o, *k)
    lin = None
    for i in range(nsp):
        stride = math.prod(n[i + 1:])
        p = pos[i]  # (N, C, o_i, k_i)
        shape = [nb, c] + [1] * nsp + [1] * nsp
        shape[2 + i] = o[i]
        shape[2 + nsp + i] = k[i]
        term = p.reshape(shape) * stride
        lin = term if lin is None else lin + term
    lin = jnp.broadcast_to(lin, (nb, c) + o + k).reshape(nb, c, math.prod(o), math.prod(k))
    flat = xb.reshape(nb, c, -1, 1)
    vals = jnp.take_along_axis(flat, lin.reshape(nb, c, -1, 1), axis=2,
                               mode="promise_in_bounds").reshape(lin.shape)
    # the CPU's rule, walking the window in scan order: `val > max or isnan(val)` from -inf
    nan = jnp.isnan(vals)
    kk = vals.shape[-1]
    last_nan = kk - 1 - jnp.argmax(nan[..., ::-1], axis=-1)
    first_max = jnp.argmax(jnp.where(nan, -jnp.inf, vals), axis=-1)
    pick = jnp.where(jnp.any(nan, axis=-1), last_nan, first_max)[..., None]
    out = jnp.take_along_axis(vals, pick, axis=-1)[..., 0].reshape((nb, c) + o)
    idx = jnp.take_along_axis(lin, pick, axis=-1)[..., 0].reshape((nb, c) + o)
    if unbatched:
        out, idx = out[0], idx[0]
    return out, idx


def _avg_divisor(n, k, s, p, o, count_include_pad, divisor_override):
    """-> (divisor over the output positions, mask of windows holding an input element)."""
    pool, valid = [], []
    for ni, ki, si, pi, oi in zip(n, k, s, p, o):
        start = np.arange(oi, dtype=np.int64) * si - pi
        end = np.minimum(start + ki, ni + pi)
        pool.append(end - start)
        valid.append(np.minimum(end, ni) - np.maximum(start, 0))
    nonempty = _outer([v > 0 for v in valid], np.logical_and)
    if divisor_override is not None:
        div = np.full(nonempty.shape, divisor_override, np.int64)
    elif count_include_pad:
        div = _outer(pool, np.multiply)
    else:
        div = _outer([np.maximum(v, 1) for v in valid], np.multiply)
    return div, nonempty


def _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, nsp):
    n, k, s, p, d, o = _pool_params(x, kernel_size, stride, padding, 1, ceil_mode, nsp)
    acc = accumulation_dtype(x.dtype)
    nb = x.ndim - nsp
    hi = [max(0, (oi - 1) * si + ki - (ni + pi)) for ni, ki, si, pi, oi in zip(n, k, s, p, o)]
    total = lax.reduce_window(
        x.astype(acc), np.array(0, acc), lax.add, (1,) * nb + k, (1,) * nb + s,
        [(0, 0)] * nb + [(pi, h) for pi, h in zip(p, hi)],
    )
    total = lax.slice(total, (0,) * x.ndim, x.shape[:nb] + o)
    div, nonempty = _avg_divisor(n, k, s, p, o, count_include_pad, divisor_override)
    if is_inexact(acc):
        out = total / jnp.asarray(div.astype(acc))
    else:
        out = lax.div(total, jnp.broadcast_to(div.astype(acc), total.shape))  # C division: truncates
    out = jnp.where(jnp.asarray(nonempty), out, jnp.zeros((), acc))
    return out.astype(x.dtype)


def _avg_pool_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                       divisor_override, nsp):
    n, k, s, p, d, o = _pool_params(self, kernel_size, stride, padding, 1, ceil_mode, nsp)
    acc = accumulation_dtype(self.dtype)
    div, nonempty = _avg_divisor(n, k, s, p, o, count_include_pad, divisor_override)
    g = grad_output.astype(acc)
    if is_inexact(acc):
        g = g / jnp.asarray(div.astype(acc))
    else:
        g = lax.div(g, jnp.broadcast_to(div.astype(acc), g.shape))
    g = jnp.where(jnp.asarray(nonempty), g, jnp.zeros((), acc))
    out = overlap_add(lambda off: g, n, k, s, p, d, o, np.array(0, acc))
    return out.astype(self.dtype)


def _adaptive_windows(n: int, o: int):
    """0/1 matrix (o, n) of PyTorch's adaptive windows [floor(i*n/o), ceil((i+1)*n/o)), and their lengths."""
    i = np.arange(o, dtype=np.int64)
    start = (i * n) // o
    end = ((i + 1) * n + o - 1) // o
    j = np.arange(n, dtype=np.int64)
    m = (j[None, :] >= start[:, None]) & (j[None, :] < end[:, None])
    return m, end - start


def _spatial_letters(nsp):
    return "xyz"[:nsp], "XYZ"[:nsp]


def _adaptive_avg_pool(x, output_size, nsp):
    acc = accumulation_dtype(x.dtype)
    n = tuple(x.shape[-nsp:])
    o = expand(output_size, nsp)
    v = x.astype(acc)
    if all(ni % oi == 0 for ni, oi in zip(n, o)) and all(oi > 0 for oi in o):
        # equal windows: a reshape and a mean
        nb = x.ndim - nsp
        shape = x.shape[:nb] + tuple(itertools.chain.from_iterable((oi, ni // oi) for ni, oi in zip(n, o)))
        total = jnp.sum(v.reshape(shape), axis=tuple(nb + 2 * i + 1 for i in range(nsp)))
        return (total / math.prod(ni // oi for ni, oi in zip(n, o))).astype(x.dtype)
    mats, lens = zip(*(_adaptive_windows(ni, oi) for ni, oi in zip(n, o)))
    src, dst = _spatial_letters(nsp)
    spec = "..." + src + "," + ",".join(dst[i] + src[i] for i in range(nsp)) + "->..." + dst
    total = jnp.einsum(spec, v, *(m.astype(acc) for m in mats), precision=precision(acc))
    return (total / jnp.asarray(_outer(list(lens), np.multiply).astype(acc))).astype(x.dtype)


def _adaptive_avg_pool_backward(grad_output, self, nsp):
    acc = accumulation_dtype(self.dtype)
    n = tuple(self.shape[-nsp:])
    o = tuple(grad_output.shape[-nsp:])
    mats, lens = zip(*(_adaptive_windows(ni, oi) for ni, oi in zip(n, o)))
    g = grad_output.astype(acc) / jnp.asarray(_outer(list(lens), np.multiply).astype(acc))
    src, dst = _spatial_letters(nsp)
    spec = "..." + dst + "," + ",".join(dst[i] + src[i] for i in range(nsp)) + "->..." + src
    out = jnp.einsum(spec, g, *(m.astype(acc) for m in mats), precision=precision(acc))
    return out.astype(self.dtype)


def _adaptive_max_windows(size: int, out: int):
    """adaptive_max_pool2d's windows along one dim: (out, k) clamped input positions, which are valid, k."""
    starts = [(i * size) // out for i in range(out)]
    ends = [-((-(i + 1) * size) // out) for i in range(out)]
    k = max(e - s for s, e in zip(starts, ends))
    idx = np.array([[min(s + j, size - 1) for j in range(k)] for s in starts], np.int64)
    valid = np.array([[s + j < e for j in range(k)] for s, e in zip(starts, ends)])
    return idx, valid, k


# ---------------------------------------------------------------------------------------------
# lowerings, alphabetical


# _adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor
@lower(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool2d(self, output_size):
    return _adaptive_avg_pool(self, output_size, 2)


# _adaptive_avg_pool2d_backward(Tensor grad_output, Tensor self) -> Tensor
@lower(aten._adaptive_avg_pool2d_backward.default)
def _adaptive_avg_pool2d_backward(grad_output, self):
    return _adaptive_avg_pool_backward(grad_output, self, 2)


# _adaptive_avg_pool3d(Tensor self, SymInt[3] output_size) -> Tensor
@lower(aten._adaptive_avg_pool3d.default)
def _adaptive_avg_pool3d(self, output_size):
    return _adaptive_avg_pool(self, output_size, 3)


# _adaptive_avg_pool3d_backward(Tensor grad_output, Tensor self) -> Tensor
@lower(aten._adaptive_avg_pool3d_backward.default)
def _adaptive_avg_pool3d_backward(grad_output, self):
    return _adaptive_avg_pool_backward(grad_output, self, 3)


# adaptive_max_pool2d(Tensor self, int[2] output_size) -> (Tensor, Tensor)
@lower(aten.adaptive_max_pool2d.default)
def adaptive_max_pool2d(self, output_size):
    oh, ow = output_size
    H, W = self.shape[-2:]
    if self.ndim not in (3, 4) or H == 0 or W == 0:
        raise RuntimeError("adaptive_max_pool2d(): Expected 3D or 4D tensor with non-zero spatial dims")
    ri, rv, kh = _adaptive_max_windows(H, oh)
    ci, cv, kw = _adaptive_max_windows(W, ow)
    # (..., oh, kh, ow, kw) -> (..., oh, ow, kh*kw)
    v = self[..., ri[:, :, None, None], ci[None, None, :, :]]
    v = jnp.moveaxis(v, -3, -2).reshape(*self.shape[:-2], oh, ow, kh * kw)
    mask = (rv[:, :, None, None] & cv[None, None, :, :]).transpose(0, 2, 1, 3).reshape(oh, ow, kh * kw)
    flat = (ri[:, :, None, None] * W + ci[None, None, :, :]).transpose(0, 2, 1, 3).reshape(oh, ow, kh * kw)
    neg = jnp.asarray(-jnp.inf, self.dtype) if jnp.issubdtype(self.dtype, jnp.floating) else jnp.iinfo(self.dtype).min
    v = jnp.where(mask, v, neg)
    if jnp.issubdtype(self.dtype, jnp.floating):
        nan = jnp.isnan(v) & mask
        last_nan = kh * kw - 1 - jnp.argmax(nan[..., ::-1], axis=-1)
        pos = jnp.where(jnp.any(nan, axis=-1), last_nan, jnp.argmax(v, axis=-1))
    else:
        pos = jnp.argmax(v, axis=-1)
    vals = jnp.take_along_axis(v, pos[..., None], axis=-1)[..., 0]
    idx = jnp.take_along_axis(jnp.broadcast_to(jnp.asarray(flat), v.shape), pos[..., None], axis=-1)[..., 0]
    return vals, idx.astype(jnp.int64)


# adaptive_max_pool2d_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor
@lower(aten.adaptive_max_pool2d_backward.default)
def adaptive_max_pool2d_backward(grad_output, self, indices):
    H, W = self.shape[-2:]
    require_in_range(indices, H * W, RuntimeError, "adaptive_max_pool2d_backward: index out of range", False)
    lead = self.shape[:-2]
    n = int(np.prod(lead)) if lead else 1
    g = cast(grad_output, compute_dtype(self.dtype)).reshape(n, -1)
    i = indices.reshape(n, -1)
    rows = jnp.arange(n)[:, None]
    out = jnp.zeros((n, H * W), g.dtype).at[rows, i].add(g)
    return cast(out.reshape(self.shape), self.dtype)


# avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor
@lower(aten.avg_pool2d.default)
def avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return _avg_pool(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2)


# avg_pool2d_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor
@lower(aten.avg_pool2d_backward.default)
def avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    return _avg_pool_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                              divisor_override, 2)


# avg_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor
@lower(aten.avg_pool3d.default)
def avg_pool3d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return _avg_pool(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3)


# avg_pool3d_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] stride, int[3] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor
@lower(aten.avg_pool3d_backward.default)
def avg_pool3d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    return _avg_pool_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                              divisor_override, 3)


# fractional_max_pool2d(Tensor self, int[2] kernel_size, int[2] output_size, Tensor random_samples) -> (Tensor, Tensor)
@lower(aten.fractional_max_pool2d.default)
def fractional_max_pool2d(self, kernel_size, output_size, random_samples):
    return _fractional_max_pool(self, kernel_size, output_size, random_samples, 2)


# fractional_max_pool2d_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] output_size, Tensor indices) -> Tensor
@lower(aten.fractional_max_pool2d_backward.default)
def fractional_max_pool2d_backward(grad_output, self, kernel_size, output_size, indices):
    return _max_pool_backward(grad_output, self, indices, 2)


# fractional_max_pool3d(Tensor self, int[3] kernel_size, int[3] output_size, Tensor random_samples) -> (Tensor, Tensor)
@lower(aten.fractional_max_pool3d.default)
def fractional_max_pool3d(self, kernel_size, output_size, random_samples):
    return _fractional_max_pool(self, kernel_size, output_size, random_samples, 3)


# fractional_max_pool3d_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] output_size, Tensor indices) -> Tensor
@lower(aten.fractional_max_pool3d_backward.default)
def fractional_max_pool3d_backward(grad_output, self, kernel_size, output_size, indices):
    return _max_pool_backward(grad_output, self, indices, 3)


# max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)
@lower(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode):
    return _max_pool(self, kernel_size, stride, padding, dilation, ceil_mode, 2)


# max_pool2d_with_indices_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode, Tensor indices) -> Tensor
@lower(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices):
    return _max_pool_backward(grad_output, self, indices, 2)


# max_pool3d_with_indices(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, int[3] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)
@lower(aten.max_pool3d_with_indices.default)
def max_pool3d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode):
    return _max_pool(self, kernel_size, stride, padding, dilation, ceil_mode, 3)


# max_pool3d_with_indices_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] stride, int[3] padding, int[3] dilation, bool ceil_mode, Tensor indices) -> Tensor
@lower(aten.max_pool3d_with_indices_backward.default)
def max_pool3d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices):
    return _max_pool_backward(grad_output, self, indices, 3)
