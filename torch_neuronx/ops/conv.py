"""Convolutions and im2col/col2im (unfold/fold), and their backward ops.

- `convolution` is one `lax.conv_general_dilated` (any spatial rank, groups, stride, padding,
  dilation); a transposed convolution is the direct convolution of the stride-dilated input with
  the flipped, group-regrouped weight. On the CPU platform float16/bfloat16 convolutions, and float32
  ones wider than 1x1, run torch's own CPU kernel inside the executable instead (`native`: oneDNN, where
  `runtime/native_kernels.py` chose it), the CPU's result bit for bit. float32 uses Precision.HIGHEST, float16/bfloat16 accumulate
  in float32 (`preferred_element_type`) and round once. `convolution_backward` is the vjp of the
  same program (XLA's transposed convolutions), plus the bias gradient as a sum.
- `im2col` stacks the strided window slice of every kernel offset (channel-major, as PyTorch);
  `col2im` adds them back in place ("overlap-add"). Both use windows.py, as pooling does.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..runtime.lazy_jax import jax, jnp, lax
from . import native
from .dtypes import opmath
from ._registry import aten, lower
from .windows import accumulation_dtype, expand, overlap_add, precision, window_slice


# ---------------------------------------------------------------------------------------------
# helpers


def _conv(x, w, stride, padding, dilation, transposed, output_padding, groups):
    """convolution without bias; float32 result for 16-bit inputs (accumulated in float32)."""
    nsp = w.ndim - 2
    stride = expand(stride, nsp)
    padding = expand(padding, nsp)
    dilation = expand(dilation, nsp)
    prec = precision(x.dtype)
    x, w, pet = native.contraction_operands(x, w)
    if not transposed:
        return lax.conv_general_dilated(
            x, w, stride, [(pi, pi) for pi in padding], rhs_dilation=dilation,
            feature_group_count=groups, precision=prec, preferred_element_type=pet,
        )
    output_padding = expand(output_padding, nsp)
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


# ---- im2col / col2im


def _unfold_params(x_spatial, kernel_size, dilation, padding, stride):
    k = expand(kernel_size, 2)
    d = expand(dilation, 2)
    p = expand(padding, 2)
    s = expand(stride, 2)
    o = tuple((ni + 2 * pi - di * (ki - 1) - 1) // si + 1 for ni, ki, si, pi, di in zip(x_spatial, k, s, p, d))
    return k, d, p, s, o


# ---------------------------------------------------------------------------------------------
# lowerings, in alphabetical order


# col2im(Tensor self, SymInt[2] output_size, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor
@lower(aten.col2im.default)
def col2im(self, output_size, kernel_size, dilation, padding, stride):
    n = expand(output_size, 2)
    k, d, p, s, o = _unfold_params(n, kernel_size, dilation, padding, stride)
    acc = accumulation_dtype(self.dtype)
    lead = self.shape[:-2]
    cols = self.astype(acc).reshape(lead + (self.shape[-2] // (k[0] * k[1]), k[0], k[1]) + o)
    nb = len(lead) + 1
    out = overlap_add(lambda off: cols[(slice(None),) * nb + off], n, k, s, p, d, o, np.array(0, acc))
    return out.astype(self.dtype)


# convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor
@lower(aten.convolution.default)
def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    x, unbatched = _batched(input, weight)
    operands = (x, weight) + (() if bias is None else (bias,))
    wide = math.prod(weight.shape[2:]) > 1  # a 1x1 kernel is a matrix product: XLA's dot is as fast
    if native.usable(native.PRODUCTS, *operands) or (wide and native.usable(native.CONVOLUTION, *operands)):
        nsp = weight.ndim - 2
        y = native.convolution(x, weight, bias, expand(stride, nsp), expand(padding, nsp), expand(dilation, nsp),
                               transposed, expand(output_padding, nsp), groups)
        return y[0] if unbatched else y
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


# im2col(Tensor self, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor
@lower(aten.im2col.default)
def im2col(self, kernel_size, dilation, padding, stride):
    k, d, p, s, o = _unfold_params(self.shape[-2:], kernel_size, dilation, padding, stride)
    nb = self.ndim - 2
    xp = jnp.pad(self, [(0, 0)] * nb + [(pi, pi) for pi in p])
    cols = [window_slice(xp, off, s, d, o) for off in itertools.product(range(k[0]), range(k[1]))]
    out = jnp.stack(cols, axis=nb)  # (..., C, K, oh, ow): channel-major, as PyTorch
    return out.reshape(self.shape[:-3] + (self.shape[-3] * k[0] * k[1], o[0] * o[1]))


