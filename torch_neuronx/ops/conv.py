"""Convolutions, pooling, im2col/col2im, and their backward ops.

- `convolution` is one `lax.conv_general_dilated` (any spatial rank, groups, stride, padding,
  dilation); a transposed convolution is the direct convolution of the stride-dilated input with
  the flipped, group-regrouped weight. float32 uses Precision.HIGHEST, float16/bfloat16 accumulate
  in float32 (`preferred_element_type`) and round once. `convolution_backward` is the vjp of the
  same program (XLA's transposed convolutions), plus the bias gradient as a sum.
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
  divides by its size. Their backwards, and col2im, add shifted strided copies ("overlap-add").
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..runtime.lazy_jax import jax, jnp, lax
from .dtypes import is_low_precision, opmath
from ._registry import aten, lower, require

_F32 = np.dtype(np.float32)
_I64 = np.dtype(np.int64)


# ---------------------------------------------------------------------------------------------
# helpers


def _expand(v, n: int, name: str = "") -> tuple:
    """An int or int list broadcast to n spatial dims (PyTorch accepts one value for all)."""
    if isinstance(v, int):
        return (v,) * n
    v = tuple(int(x) for x in v)
    if len(v) == 1 and n != 1:
        return v * n
    return v


def _acc(dtype):
    """The dtype sums run in: float32 for 16-bit floats, int64 for integers, else the dtype."""
    dtype = np.dtype(dtype)
    if is_low_precision(dtype):
        return _F32
    if jnp.issubdtype(dtype, np.integer) or dtype == np.bool_:
        return _I64
    return dtype


def _is_float(dtype) -> bool:
    return bool(jnp.issubdtype(np.dtype(dtype), np.inexact))


def _precision(dtype):
    return lax.Precision.HIGHEST if _is_float(dtype) else None


def _pool_out(n, k, s, p, d, ceil_mode) -> int:
    """PyTorch's pooling_output_shape."""
    out = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _pool_params(x, kernel_size, stride, padding, dilation, ceil_mode, nsp):
    k = _expand(kernel_size, nsp)
    s = _expand(stride, nsp) if stride is not None and len(stride) else k
    p = _expand(padding, nsp)
    d = _expand(dilation, nsp)
    n = tuple(x.shape[-nsp:])
    o = tuple(_pool_out(*a, ceil_mode) for a in zip(n, k, s, p, d))
    return n, k, s, p, d, o


def _window_slice(xp, off, s, d, o):
    """The strided slice of the (padded) input seen by kernel offset `off` at every output."""
    nsp = len(off)
    nb = xp.ndim - nsp
    start = (0,) * nb + tuple(oi * di for oi, di in zip(off, d))
    limit = tuple(xp.shape[:nb]) + tuple(oi * di + (on - 1) * si + 1 for oi, di, si, on in zip(off, d, s, o))
    return lax.slice(xp, start, limit, (1,) * nb + tuple(s))


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


def _overlap_add(blocks, n, k, s, p, d, o, zero):
    """Sum over kernel offsets of `blocks(off)` (..., *o), each output placed at the input
    position o*s - p + off*d; positions outside [0, n) are dropped. -> (..., *n).
    The transpose of reading windows: col2im, and the backward of average pooling."""
    nsp = len(n)
    total = None
    for off in itertools.product(*(range(ki) for ki in k)):
        b = blocks(off)
        cfg = [(0, 0, 0)] * (b.ndim - nsp)
        for i in range(nsp):
            lo = off[i] * d[i] - p[i]
            hi = n[i] - lo - (o[i] - 1) * s[i] - 1
            cfg.append((lo, hi, s[i] - 1))
        placed = lax.pad(b, zero, cfg)
        total = placed if total is None else total + placed
    return total


# ---- convolution


def _conv(x, w, stride, padding, dilation, transposed, output_padding, groups):
    """convolution without bias; float32 result for 16-bit inputs (accumulated in float32)."""
    nsp = w.ndim - 2
    stride = _expand(stride, nsp)
    padding = _expand(padding, nsp)
    dilation = _expand(dilation, nsp)
    pet = _F32 if is_low_precision(x.dtype) else None
    prec = _precision(x.dtype)
    if not transposed:
        return lax.conv_general_dilated(
            x, w, stride, [(pi, pi) for pi in padding], rhs_dilation=dilation,
            feature_group_count=groups, precision=prec, preferred_element_type=pet,
        )
    output_padding = _expand(output_padding, nsp)
    # weight (C_in, C_out/g, *k) -> (C_out, C_in/g, *k), spatially flipped
    cin, opg = w.shape[0], w.shape[1]
    ks = w.shape[2:]
    w = w.reshape((groups, cin // groups, opg) + ks)
    w = jnp.swapaxes(w, 1, 2).reshape((groups * opg, cin // groups) + ks)
    w = jnp.flip(w, axis=tuple(range(2, 2 + nsp)))
    pads = [
        (di * (ki - 1) - pi, di * (ki - 1) - pi + opi)
        for ki, pi, di, opi in zip(ks, padding, dilation, output_padding)
    ]
    return lax.conv_general_dilated(
        x, w, (1,) * nsp, pads, lhs_dilation=stride, rhs_dilation=dilation,
        feature_group_count=groups, precision=prec, preferred_element_type=pet,
    )


def _batched(x, w):
    """aten.convolution also takes an unbatched input (C, *spatial)."""
    return (x[None], True) if x.ndim == w.ndim - 1 else (x, False)


# ---- pooling


def _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, nsp):
    """-> (values, int64 flat spatial indices), PyTorch's scan order and update rule."""
    n, k, s, p, d, o = _pool_params(x, kernel_size, stride, padding, dilation, ceil_mode, nsp)
    dtype = np.dtype(x.dtype)
    if _is_float(dtype):
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
    is_float = _is_float(dtype)
    for off in itertools.product(*(range(ki) for ki in k)):
        v = _window_slice(xp, off, s, d, o)
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
    acc = _acc(self.dtype) if _is_float(self.dtype) else np.dtype(self.dtype)
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
    if not _is_float(x.dtype):
        raise NotImplementedError(f"fractional_max_pool{nsp}d: not implemented for {np.dtype(x.dtype)}")
    unbatched = x.ndim == nsp + 1
    xb = x[None] if unbatched else x
    nb, c = xb.shape[:2]
    n = tuple(xb.shape[2:])
    k = _expand(kernel_size, nsp)
    o = _expand(output_size, nsp)
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
    acc = _acc(x.dtype)
    nb = x.ndim - nsp
    hi = [max(0, (oi - 1) * si + ki - (ni + pi)) for ni, ki, si, pi, oi in zip(n, k, s, p, o)]
    total = lax.reduce_window(
        x.astype(acc), np.array(0, acc), lax.add, (1,) * nb + k, (1,) * nb + s,
        [(0, 0)] * nb + [(pi, h) for pi, h in zip(p, hi)],
    )
    total = lax.slice(total, (0,) * x.ndim, x.shape[:nb] + o)
    div, nonempty = _avg_divisor(n, k, s, p, o, count_include_pad, divisor_override)
    if _is_float(acc):
        out = total / jnp.asarray(div.astype(acc))
    else:
        out = lax.div(total, jnp.broadcast_to(div.astype(acc), total.shape))  # C division: truncates
    out = jnp.where(jnp.asarray(nonempty), out, jnp.zeros((), acc))
    return out.astype(x.dtype)


def _avg_pool_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                       divisor_override, nsp):
    n, k, s, p, d, o = _pool_params(self, kernel_size, stride, padding, 1, ceil_mode, nsp)
    acc = _acc(self.dtype)
    div, nonempty = _avg_divisor(n, k, s, p, o, count_include_pad, divisor_override)
    g = grad_output.astype(acc)
    if _is_float(acc):
        g = g / jnp.asarray(div.astype(acc))
    else:
        g = lax.div(g, jnp.broadcast_to(div.astype(acc), g.shape))
    g = jnp.where(jnp.asarray(nonempty), g, jnp.zeros((), acc))
    out = _overlap_add(lambda off: g, n, k, s, p, d, o, np.array(0, acc))
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
    acc = _acc(x.dtype)
    n = tuple(x.shape[-nsp:])
    o = _expand(output_size, nsp)
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
    total = jnp.einsum(spec, v, *(m.astype(acc) for m in mats), precision=_precision(acc))
    return (total / jnp.asarray(_outer(list(lens), np.multiply).astype(acc))).astype(x.dtype)


def _adaptive_avg_pool_backward(grad_output, self, nsp):
    acc = _acc(self.dtype)
    n = tuple(self.shape[-nsp:])
    o = tuple(grad_output.shape[-nsp:])
    mats, lens = zip(*(_adaptive_windows(ni, oi) for ni, oi in zip(n, o)))
    g = grad_output.astype(acc) / jnp.asarray(_outer(list(lens), np.multiply).astype(acc))
    src, dst = _spatial_letters(nsp)
    spec = "..." + dst + "," + ",".join(dst[i] + src[i] for i in range(nsp)) + "->..." + src
    out = jnp.einsum(spec, g, *(m.astype(acc) for m in mats), precision=_precision(acc))
    return out.astype(self.dtype)


# ---- im2col / col2im


def _unfold_params(x_spatial, kernel_size, dilation, padding, stride):
    k = _expand(kernel_size, 2)
    d = _expand(dilation, 2)
    p = _expand(padding, 2)
    s = _expand(stride, 2)
    o = tuple((ni + 2 * pi - di * (ki - 1) - 1) // si + 1 for ni, ki, si, pi, di in zip(x_spatial, k, s, p, d))
    return k, d, p, s, o


# ---------------------------------------------------------------------------------------------
# lowerings, in alphabetical order


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


# col2im(Tensor self, SymInt[2] output_size, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor
@lower(aten.col2im.default)
def col2im(self, output_size, kernel_size, dilation, padding, stride):
    n = _expand(output_size, 2)
    k, d, p, s, o = _unfold_params(n, kernel_size, dilation, padding, stride)
    acc = _acc(self.dtype)
    lead = self.shape[:-2]
    cols = self.astype(acc).reshape(lead + (self.shape[-2] // (k[0] * k[1]), k[0], k[1]) + o)
    nb = len(lead) + 1
    out = _overlap_add(lambda off: cols[(slice(None),) * nb + off], n, k, s, p, d, o, np.array(0, acc))
    return out.astype(self.dtype)


# convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor
@lower(aten.convolution.default)
def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    x, unbatched = _batched(input, weight)
    y = _conv(x, weight, stride, padding, dilation, transposed, output_padding, groups)
    if bias is not None:
        y = y + opmath(bias).astype(y.dtype).reshape((1, -1) + (1,) * (y.ndim - 2))
    y = y.astype(input.dtype)
    return y[0] if unbatched else y


# convolution_backward(Tensor grad_output, Tensor input, Tensor weight, SymInt[]? bias_sizes, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups, bool[3] output_mask) -> (Tensor, Tensor, Tensor)
@lower(aten.convolution_backward.default)
def convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    x, unbatched = _batched(input, weight)
    g = grad_output[None] if unbatched else grad_output

    def conv(x, w):
        return _conv(x, w, stride, padding, dilation, transposed, output_padding, groups)

    gx = gw = gb = None
    if output_mask[0] or output_mask[1]:
        out, vjp = jax.vjp(conv, x, weight)
        gx, gw = vjp(g.astype(out.dtype))
        if gx is not None:
            gx = gx[0] if unbatched else gx
        gx = gx if output_mask[0] else None
        gw = gw if output_mask[1] else None
    if output_mask[2]:
        # summed in float32, returned in grad_output's dtype as the CPU kernel does
        gb = jnp.sum(opmath(g), axis=(0,) + tuple(range(2, g.ndim))).astype(g.dtype)
    return gx, gw, gb


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


# im2col(Tensor self, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor
@lower(aten.im2col.default)
def im2col(self, kernel_size, dilation, padding, stride):
    k, d, p, s, o = _unfold_params(self.shape[-2:], kernel_size, dilation, padding, stride)
    nb = self.ndim - 2
    xp = jnp.pad(self, [(0, 0)] * nb + [(pi, pi) for pi in p])
    cols = [_window_slice(xp, off, s, d, o) for off in itertools.product(range(k[0]), range(k[1]))]
    out = jnp.stack(cols, axis=nb)  # (..., C, K, oh, ow): channel-major, as PyTorch
    return out.reshape(self.shape[:-3] + (self.shape[-3] * k[0] * k[1], o[0] * o[1]))


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


