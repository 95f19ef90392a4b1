"""Scaled dot-product attention through the `_overrideable` fused op that PrivateUse1 backends get.

`scaled_dot_product_attention` is CompositeImplicitAutograd; on a PrivateUse1 device whose
`_fused_sdp_choice` picks the overrideable backend it reaches
`_scaled_dot_product_fused_attention_overrideable` (and its backward under autograd).

Semantics follow `_scaled_dot_product_attention_math`: scores = q @ k^T * scale (+ attn_bias;
a boolean bias masks, True = keep), is_causal keeps the lower-left triangle aligned to the top-left
corner, rows whose every score is -inf give 0 (PyTorch's `_safe_softmax`), and their logsumexp is
-inf. Grouped-query attention (fewer key/value heads dividing the query heads) is supported without
materializing repeated keys. Everything is computed in float32 (for float16/bfloat16 too, with the
probabilities rounded to the input's dtype before they multiply V where the CPU's flash kernel does);
logsumexp is float32 of shape (B, H, L) (B = 1 for 3-d inputs). Dropout is not supported: the op
has no Generator argument to draw the mask from.

Returns of the forward that PyTorch leaves undefined for dense inputs (cum_seq_q, cum_seq_k,
debug_attn_mask) are None; max_q/max_k (SymInt) are the Python ints L and S; philox seed/offset
are int64 zeros.
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime.lazy_jax import jnp, lax
from . import native
from .dtypes import opmath
from ._registry import aten, lower

_F32 = np.dtype(np.float32)
_I64 = np.dtype(np.int64)


def _check_dropout(dropout_p):
    if dropout_p > 0.0:
        raise NotImplementedError(
            "_scaled_dot_product_fused_attention_overrideable: dropout_p > 0 is not supported on the "
            "neuron device (the op has no generator to draw the dropout mask from); use dropout_p=0"
        )


def _einsum(spec, a, b):
    return jnp.einsum(spec, a, b, precision=lax.Precision.HIGHEST, preferred_element_type=_F32)


def _grouped(query, key, value):
    """float32 q (B, Hk, G, L, E), k (B, Hk, S, E), v (B, Hk, S, Ev) and (B, Hq, L, S, squeeze_batch)."""
    squeeze = query.ndim == 3
    if squeeze:
        query, key, value = query[None], key[None], value[None]
    if query.ndim != 4:
        raise ValueError("scaled_dot_product_attention: query must be 3-d or 4-d")
    B, Hq, L, E = query.shape
    Hk, S = key.shape[1], key.shape[2]
    if Hq % Hk:
        raise ValueError(f"scaled_dot_product_attention: {Hq} query heads are not a multiple of {Hk} key heads")
    G = Hq // Hk
    q = opmath(query).astype(_F32).reshape(B, Hk, G, L, E)
    k = opmath(key).astype(_F32)
    v = opmath(value).astype(_F32)
    return q, k, v, (B, Hq, L, S, squeeze)


def _forward_mha(query, key, value, attn_bias, is_causal, scale):
    """The forward for as many key/value heads as query heads, in 4-d (B, H, L, S): the grouped 5-d
    form's unit group axis makes XLA's CPU backend copy the whole score matrix into another layout
    after the first product (and again inside the softmax), a third of attention's time on FLUX.2.
    -> float32 o (B, H, L, Ev), lse (B, H, L)."""
    q = opmath(query).astype(_F32)
    k = opmath(key).astype(_F32)
    v = opmath(value).astype(_F32)
    B, H, L, E = q.shape
    S = k.shape[2]
    sc = 1.0 / math.sqrt(E) if scale is None else float(scale)
    raw = _einsum("bhle,bhse->bhls", q, k)
    s = raw * sc
    if attn_bias is not None:
        bias = jnp.broadcast_to(attn_bias, (B, H, L, S))
        if bias.dtype == np.bool_:
            s = jnp.where(bias, s, -jnp.inf)
        else:
            s = s + opmath(bias).astype(_F32)
    if is_causal:
        s = jnp.where(jnp.tril(jnp.ones((L, S), np.bool_)), s, -jnp.inf)
    if attn_bias is None and not is_causal and sc > 0:
        # rounding is monotonic, so max(raw * sc) == max(raw) * sc exactly; the max then reads the
        # product as it comes out (no scaled copy of the scores made for the reduction)
        m = jnp.max(raw, axis=-1, keepdims=True) * sc
    else:
        m = jnp.max(s, axis=-1, keepdims=True)
    m = jnp.where(jnp.isinf(m), jnp.zeros((), _F32), m)
    p = jnp.exp(s - m)
    denom = jnp.sum(p, axis=-1, keepdims=True)
    lse = (jnp.log(denom) + m)[..., 0]
    if _cpu_flash_rounds(query, value):
        p = p.astype(query.dtype).astype(_F32)
    o = _einsum("bhls,bhse->bhle", p, v)
    o = o / jnp.where(denom == 0, jnp.ones((), _F32), denom)  # fully masked rows give 0
    return o, lse


def _scores(q, k, attn_bias, is_causal, scale, dims):
    """Masked, biased scores (B, Hk, G, L, S) in float32."""
    B, Hq, L, S, squeeze = dims
    Hk, G = q.shape[1], q.shape[2]
    E = q.shape[-1]
    scale = 1.0 / math.sqrt(E) if scale is None else float(scale)
    s = _einsum("bkgle,bkse->bkgls", q, k) * scale
    if attn_bias is not None:
        bias = jnp.broadcast_to(attn_bias, (B, Hq, L, S)).reshape(B, Hk, G, L, S)
        if bias.dtype == np.bool_:
            s = jnp.where(bias, s, -jnp.inf)
        else:
            s = s + opmath(bias).astype(_F32)
    if is_causal:
        keep = jnp.tril(jnp.ones((L, S), np.bool_))
        s = jnp.where(keep, s, -jnp.inf)
    return s


def _sum_to(x, shape):
    """Sum x down to `shape` (the reverse of broadcasting)."""
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and x.shape[lead + i] != 1
    )
    if axes:
        x = jnp.sum(x, axis=axes, keepdims=True)
    return x.reshape(shape)


def _cpu_flash_rounds(query, value) -> bool:
    """Whether the CPU rounds the probabilities to the input's dtype before they multiply V: its flash
    kernel does for float16/bfloat16 (as CUDA's does), accumulating in float32; it takes that kernel for
    4-d inputs whose value head size is the query's, and the math path (float32 throughout, one
    rounding at the end) otherwise. Following its choice makes bfloat16 attention match the CPU's
    bit for bit on most elements instead of differing on a third of them."""
    reduced = jnp.issubdtype(query.dtype, jnp.floating) and query.dtype.itemsize < 4
    return reduced and query.ndim == 4 and query.shape[-1] == value.shape[-1]


def _native_flash(query, key, value, attn_bias) -> bool:
    """Whether torch's CPU flash kernel runs this attention inside the executable (`native`): 16-bit
    4-d inputs with as many key/value heads as query heads, one head size, a mask (if any) of at most 4
    dims; the CPU takes that same kernel for them."""
    return ((attn_bias is None or attn_bias.ndim <= 4) and query.ndim == 4 and key.ndim == 4 and value.ndim == 4
            and query.shape[1] == key.shape[1] == value.shape[1] and query.shape[-1] == value.shape[-1]
            and native.usable(native.ATTENTION, query, key, value))


# _scaled_dot_product_fused_attention_overrideable(Tensor query, Tensor key, Tensor value, Tensor? attn_bias=None, float dropout_p=0., bool is_causal=False, bool return_debug_mask=False, *, float? scale=None) -> (Tensor output, Tensor logsumexp, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, Tensor philox_seed, Tensor philox_offset, Tensor debug_attn_mask)
@lower(aten._scaled_dot_product_fused_attention_overrideable.default)
def _scaled_dot_product_fused_attention_overrideable(
    query, key, value, attn_bias, dropout_p, is_causal, return_debug_mask, scale
):
    _check_dropout(dropout_p)
    if _native_flash(query, key, value, attn_bias):
        o, lse = native.attention(query, key, value, attn_bias, is_causal, scale)
        zero = jnp.zeros((), _I64)
        return (o, lse, None, None, query.shape[2], key.shape[2], zero, zero, None)
    if query.ndim == 4 and key.ndim == 4 and query.shape[1] == key.shape[1]:
        o, lse = _forward_mha(query, key, value, attn_bias, is_causal, scale)
        zero = jnp.zeros((), _I64)
        return (o.astype(query.dtype), lse, None, None, query.shape[2], key.shape[2], zero, zero, None)
    q, k, v, dims = _grouped(query, key, value)
    B, Hq, L, S, squeeze = dims
    s = _scores(q, k, attn_bias, is_causal, scale, dims)
    m = jnp.max(s, axis=-1, keepdims=True)
    m = jnp.where(jnp.isinf(m), jnp.zeros((), _F32), m)
    p = jnp.exp(s - m)
    denom = jnp.sum(p, axis=-1, keepdims=True)
    lse = (jnp.log(denom) + m)[..., 0].reshape(B, Hq, L)
    if _cpu_flash_rounds(query, value):
        p = p.astype(query.dtype).astype(_F32)
    o = _einsum("bkgls,bkse->bkgle", p, v)
    o = o / jnp.where(denom == 0, jnp.ones((), _F32), denom)  # fully masked rows give 0
    o = o.reshape(B, Hq, L, v.shape[-1])
    if squeeze:
        o = o[0]
    zero = jnp.zeros((), _I64)
    return (o.astype(query.dtype), lse, None, None, L, S, zero, zero, None)


# _scaled_dot_product_fused_attention_overrideable_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor attn_bias, bool[4] grad_input_mask, Tensor out, Tensor logsumexp, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, float dropout_p, bool is_causal, Tensor philox_seed, Tensor philox_offset, *, float? scale=None) -> (Tensor grad_query, Tensor grad_key, Tensor grad_value, Tensor grad_attn_bias)
@lower(aten._scaled_dot_product_fused_attention_overrideable_backward.default)
def _scaled_dot_product_fused_attention_overrideable_backward(
    grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k,
    max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, scale,
):
    _check_dropout(dropout_p)
    # torch's CPU flash backward, as the forward's kernel (it has no gradient for the mask)
    if (_native_flash(query, key, value, attn_bias) and native.usable(native.ATTENTION, query, grad_out, out)
            and not (grad_input_mask[3] and attn_bias is not None and attn_bias.dtype != np.bool_)):
        dq, dk, dv = native.attention_backward(grad_out, query, key, value, out, logsumexp, attn_bias, is_causal,
                                               scale)
        return (dq if grad_input_mask[0] else None, dk if grad_input_mask[1] else None,
                dv if grad_input_mask[2] else None, None)
    q, k, v, dims = _grouped(query, key, value)
    B, Hq, L, S, squeeze = dims
    Hk, G, E = q.shape[1], q.shape[2], q.shape[-1]
    Ev = v.shape[-1]
    sc = 1.0 / math.sqrt(E) if scale is None else float(scale)
    s = _scores(q, k, attn_bias, is_causal, scale, dims)
    lse = logsumexp.astype(_F32).reshape(B, Hk, G, L, 1)
    p = jnp.where(jnp.isneginf(lse), jnp.zeros((), _F32), jnp.exp(s - lse))
    do = opmath(grad_out).astype(_F32).reshape(B, Hk, G, L, Ev)
    o = opmath(out).astype(_F32).reshape(B, Hk, G, L, Ev)

    dq = dk = dv = dbias = None
    if grad_input_mask[2]:
        dv = _einsum("bkgls,bkgle->bkse", p, do)
    if grad_input_mask[0] or grad_input_mask[1] or (grad_input_mask[3] and attn_bias is not None):
        dp = _einsum("bkgle,bkse->bkgls", do, v)
        delta = jnp.sum(do * o, axis=-1, keepdims=True)
        ds = p * (dp - delta)
        if grad_input_mask[0]:
            dq = (_einsum("bkgls,bkse->bkgle", ds, k) * sc).reshape(B, Hq, L, E)
        if grad_input_mask[1]:
            dk = _einsum("bkgls,bkgle->bkse", ds, q) * sc
        if grad_input_mask[3] and attn_bias is not None and attn_bias.dtype != np.bool_:
            dbias = _sum_to(ds.reshape(B, Hq, L, S), attn_bias.shape).astype(attn_bias.dtype)

    def fin(g, like):
        if g is None:
            return None
        if squeeze:
            g = g[0]
        return g.astype(like.dtype)

    return fin(dq, query), fin(dk, key), fin(dv, value), dbias

