"""Normalization layers: native_layer_norm / native_group_norm and their backwards.

Statistics are computed in float32 for float16/bfloat16 inputs. mean/rstd are returned in the
input's dtype, as PyTorch's CPU kernels do (layer norm keeps the normalized dims as size 1, group
norm returns (N, group)). The backwards return None for the outputs whose `output_mask` entry is
False (PyTorch's undefined tensors). `layer_norm`, `group_norm`, `rms_norm`, `_fused_rms_norm` are
CompositeImplicitAutograd and reach the backend as these ops (or elementwise ones).
"""
from __future__ import annotations

import math

from ..runtime.lazy_jax import jnp, lax
from .dtypes import opmath
from ._registry import aten, lower


# native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW, int group, float eps) -> (Tensor, Tensor, Tensor)
@lower(aten.native_group_norm.default)
def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    D = C // group
    x = opmath(input).reshape(N, group, D * HxW)
    mean = jnp.mean(x, axis=-1, keepdims=True)
    xc = x - mean
    var = jnp.mean(jnp.square(xc), axis=-1, keepdims=True)
    rstd = lax.rsqrt(var + eps)
    y = (xc * rstd).reshape(N, C, HxW)
    if weight is not None:
        y = y * opmath(weight).reshape(1, C, 1)
    if bias is not None:
        y = y + opmath(bias).reshape(1, C, 1)
    dt = input.dtype
    return y.reshape(input.shape).astype(dt), mean.reshape(N, group).astype(dt), rstd.reshape(N, group).astype(dt)


# native_group_norm_backward(Tensor grad_out, Tensor input, Tensor mean, Tensor rstd, Tensor? weight, SymInt N, SymInt C, SymInt HxW, int group, bool[3] output_mask) -> (Tensor, Tensor, Tensor)
@lower(aten.native_group_norm_backward.default)
def native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask):
    D = C // group
    x = opmath(input).reshape(N, group, D, HxW)
    g = opmath(grad_out).reshape(N, group, D, HxW)
    mean4 = opmath(mean).reshape(N, group, 1, 1)
    rstd4 = opmath(rstd).reshape(N, group, 1, 1)
    x_hat = (x - mean4) * rstd4
    dx = dw = db = None
    if output_mask[0]:
        gw = g * opmath(weight).reshape(1, group, D, 1) if weight is not None else g
        m = D * HxW
        a = jnp.sum(gw, axis=(2, 3), keepdims=True) / m
        b = jnp.sum(gw * x_hat, axis=(2, 3), keepdims=True) / m
        dx = (rstd4 * (gw - a - x_hat * b)).reshape(input.shape).astype(input.dtype)
    if output_mask[1]:
        dw = jnp.sum(g * x_hat, axis=(0, 3)).reshape(C).astype(input.dtype if weight is None else weight.dtype)
    if output_mask[2]:
        db = jnp.sum(g, axis=(0, 3)).reshape(C).astype(input.dtype if weight is None else weight.dtype)
    return dx, dw, db


# native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)
@lower(aten.native_layer_norm.default)
def native_layer_norm(input, normalized_shape, weight, bias, eps):
    axis = input.ndim - len(normalized_shape)
    axes = tuple(range(axis, input.ndim))
    x = opmath(input)
    mean = jnp.mean(x, axis=axes, keepdims=True)
    xc = x - mean
    var = jnp.mean(jnp.square(xc), axis=axes, keepdims=True)
    rstd = lax.rsqrt(var + eps)
    y = xc * rstd
    if weight is not None:
        y = y * opmath(weight)
    if bias is not None:
        y = y + opmath(bias)
    # mean and rstd stay in the computation dtype (float32 for 16-bit input), as the meta kernel (and
    # the CPU with float32 weights) give them: rounding them to the input's dtype first would lose
    # precision the executor's cast to meta's float32 cannot restore
    return y.astype(input.dtype), mean, rstd


# native_layer_norm_backward(Tensor grad_out, Tensor input, SymInt[] normalized_shape, Tensor mean, Tensor rstd, Tensor? weight, Tensor? bias, bool[3] output_mask) -> (Tensor, Tensor, Tensor)
@lower(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
    axis = input.ndim - len(normalized_shape)
    inner = tuple(range(axis, input.ndim))
    outer = tuple(range(axis))
    stat_shape = tuple(input.shape[:axis]) + (1,) * len(normalized_shape)
    x = opmath(input)
    g = opmath(grad_out)
    mean = opmath(mean).reshape(stat_shape)
    rstd = opmath(rstd).reshape(stat_shape)
    x_hat = (x - mean) * rstd
    dx = dw = db = None
    if output_mask[0]:
        gw = g * opmath(weight) if weight is not None else g
        n = math.prod(normalized_shape)
        a = jnp.sum(gw, axis=inner, keepdims=True) / n
        b = jnp.sum(gw * x_hat, axis=inner, keepdims=True) / n
        dx = (rstd * (gw - a - x_hat * b)).astype(input.dtype)
    if output_mask[1]:
        dw = jnp.sum(g * x_hat, axis=outer).astype(input.dtype if weight is None else weight.dtype)
    if output_mask[2]:
        db = jnp.sum(g, axis=outer).astype(input.dtype if bias is None else bias.dtype)
    return dx, dw, db
