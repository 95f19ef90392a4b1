"""Normalization layers: batch norm (_native_batch_norm_legit (+ .no_stats, _functional,
_no_training), _batch_norm_with_update / _no_update), native_layer_norm, native_group_norm, and
their backwards (native_batch_norm_backward, batch_norm_backward, ...).

Statistics are computed in float32 for float16/bfloat16 inputs. mean/rstd are returned in the
input's dtype, as PyTorch's CPU kernels do (layer norm keeps the normalized dims as size 1, group
norm returns (N, group)). The backwards return None for the outputs whose `output_mask` entry is
False (PyTorch's undefined tensors). `layer_norm`, `group_norm`, `rms_norm`, `_fused_rms_norm` are
CompositeImplicitAutograd and reach the backend as these ops (or elementwise ones).

Batch norm statistics are computed in float32 for 16-bit inputs; the running statistics are
updated as `(1 - momentum) * running + momentum * batch` with the unbiased batch variance.
`native_batch_norm` (what eager `BatchNorm` calls) is not lowered here: its schema does not
mark the running statistics it writes, so a functional lowering cannot update them.
"""
from __future__ import annotations

import math

from ..runtime.lazy_jax import jnp, lax
from .dtypes import opmath
from ._registry import aten, lower


# ---------------------------------------------------------------------------------------------
# batch norm helpers


def _bn_shape(x):
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _bn_axes(x):
    return (0,) + tuple(range(2, x.ndim))


def _bn_stats(x):
    """Per-channel mean and biased variance of x (already in its compute dtype), two-pass."""
    axes = _bn_axes(x)
    mean = jnp.mean(x, axis=axes)
    var = jnp.mean(jnp.square(x - mean.reshape(_bn_shape(x))), axis=axes)
    return mean, var


def _bn_apply(input, weight, bias, mean, invstd):
    x = opmath(input)
    shape = _bn_shape(x)
    scale = invstd.astype(x.dtype)
    if weight is not None:
        scale = scale * opmath(weight).astype(x.dtype)
    y = (x - mean.astype(x.dtype).reshape(shape)) * scale.reshape(shape)
    if bias is not None:
        y = y + opmath(bias).astype(x.dtype).reshape(shape)
    return y.astype(input.dtype)


def _bn_train(input, weight, bias, eps):
    """-> output, batch mean, invstd, biased variance (compute dtype)."""
    x = opmath(input)
    mean, var = _bn_stats(x)
    invstd = lax.rsqrt(var + eps)
    return _bn_apply(input, weight, bias, mean, invstd), mean, invstd, var


def _bn_update(running, batch, momentum):
    if running is None:
        return None
    acc = batch.dtype
    return ((1 - momentum) * opmath(running).astype(acc) + momentum * batch).astype(running.dtype)


def _bn_unbiased(var, x):
    """The unbiased variance from the biased one (n = 1 gives NaN: 0 / 0, as the CPU kernel)."""
    n = x.size // x.shape[1] if x.shape[1] else 0
    return (var * n) / jnp.asarray(n - 1, var.dtype)


def _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """-> output, save_mean, save_invstd, new running_mean, new running_var."""
    if training:
        out, mean, invstd, var = _bn_train(input, weight, bias, eps)
        new_mean = _bn_update(running_mean, mean, momentum)
        new_var = _bn_update(running_var, _bn_unbiased(var, input), momentum)
        return out, mean, invstd, new_mean, new_var
    # eval: normalized with the running statistics, which stay as they are. The saved statistics
    # have the meta kernel's (C,) shape (the CPU's are empty): they are the running statistics, as
    # CUDA and PyTorch's reference decomposition return them for devices other than the CPU
    mean = opmath(running_mean)
    invstd = lax.rsqrt(opmath(running_var) + eps)
    return _bn_apply(input, weight, bias, mean, invstd), mean, invstd, running_mean, running_var


def _bn_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, output_mask):
    x = opmath(input)
    g = opmath(grad_out).astype(x.dtype)
    shape = _bn_shape(x)
    axes = _bn_axes(x)
    if train:
        mean = opmath(save_mean).astype(x.dtype)
        invstd = opmath(save_invstd).astype(x.dtype)
    else:
        mean = opmath(running_mean).astype(x.dtype)
        invstd = lax.rsqrt(opmath(running_var).astype(x.dtype) + eps)
    n = x.size // x.shape[1] if x.shape[1] else 1
    xc = x - mean.reshape(shape)
    sum_g = jnp.sum(g, axis=axes)
    dot = jnp.sum(g * xc, axis=axes)
    dx = dw = db = None
    if output_mask[0]:
        scale = invstd if weight is None else invstd * opmath(weight).astype(x.dtype)
        if train:
            proj = xc * (dot / n * invstd * invstd).reshape(shape)
            dx = (g - proj - (sum_g / n).reshape(shape)) * scale.reshape(shape)
        else:
            dx = g * scale.reshape(shape)
        dx = dx.astype(input.dtype)
    if output_mask[1]:
        dw = dot * invstd
    if output_mask[2]:
        db = sum_g
    return dx, dw, db


# ---------------------------------------------------------------------------------------------
# lowerings, alphabetical


# _batch_norm_no_update(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor)
@lower(aten._batch_norm_no_update.default)
def _batch_norm_no_update(input, weight, bias, running_mean, running_var, momentum, eps):
    training = running_mean is None or running_var is None
    out, mean, invstd, _, _ = _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps)
    return out, mean, invstd, None


# _batch_norm_with_update(Tensor input, Tensor? weight, Tensor? bias, Tensor(a!) running_mean, Tensor(b!) running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor)
@lower(aten._batch_norm_with_update.default)
def _batch_norm_with_update(input, weight, bias, running_mean, running_var, momentum, eps):
    out, mean, invstd, new_mean, new_var = _bn_forward(
        input, weight, bias, running_mean, running_var, True, momentum, eps
    )
    return out, mean, invstd, None, new_mean, new_var


# _native_batch_norm_legit(Tensor input, Tensor? weight, Tensor? bias, Tensor(a!) running_mean, Tensor(b!) running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)
@lower(aten._native_batch_norm_legit.default)
def _native_batch_norm_legit(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps)


# _native_batch_norm_legit.no_stats(Tensor input, Tensor? weight, Tensor? bias, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)
@lower(aten._native_batch_norm_legit.no_stats)
def _native_batch_norm_legit_no_stats(input, weight, bias, training, momentum, eps):
    out, mean, invstd, _ = _bn_train(input, weight, bias, eps)
    return out, mean, invstd


# _native_batch_norm_legit_functional(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor running_mean_out, Tensor running_var_out)
@lower(aten._native_batch_norm_legit_functional.default)
def _native_batch_norm_legit_functional(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps)


# _native_batch_norm_legit_no_training(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor)
@lower(aten._native_batch_norm_legit_no_training.default)
def _native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, momentum, eps):
    out, mean, invstd, _, _ = _bn_forward(input, weight, bias, running_mean, running_var, False, momentum, eps)
    return out, mean, invstd


# batch_norm_backward(Tensor grad_out, Tensor input, Tensor weight, Tensor? running_mean, Tensor? running_var, Tensor? save_mean, Tensor? save_var, bool update, float eps, bool[3] output_mask, Tensor reserve) -> (Tensor, Tensor, Tensor)
@lower(aten.batch_norm_backward.default)
def batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps,
                        output_mask, reserve):
    # save_var holds the saved invstd (the CPU kernel forwards it to native_batch_norm_backward)
    return _bn_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps,
                        output_mask)


# native_batch_norm_backward(Tensor grad_out, Tensor input, Tensor? weight, Tensor? running_mean, Tensor? running_var, Tensor? save_mean, Tensor? save_invstd, bool train, float eps, bool[3] output_mask) -> (Tensor, Tensor, Tensor)
@lower(aten.native_batch_norm_backward.default)
def native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train,
                               eps, output_mask):
    return _bn_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                        output_mask)


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
