"""Loss functions lowered as ops of their own: _ctc_loss (what F.ctc_loss calls), nll_loss_forward and
nll_loss2d_forward (their target range check is the CPU's IndexError).

`_ctc_loss` is the CPU's log-space alpha recursion (one lax.scan over time, vectorized over batch
and target positions, logsumexp with the same max shift and summation order). Its `log_alpha`
holds -inf where the CPU leaves memory unwritten (time steps past an input's length, positions past
2 * target length + 1). Target labels are checked to be in [0, num_labels) (the CPU reads out of
bounds instead).
"""
from __future__ import annotations

import numpy as np

from ..runtime.lazy_jax import jnp, lax
from ._registry import aten, lower, require_in_range
from .value_checks import VALUE

_I64 = np.dtype(np.int64)
_F64 = np.dtype(np.float64)


def _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank):
    dt = np.dtype(log_probs.dtype)
    if dt not in (np.dtype(np.float32), _F64):
        raise TypeError(f'"ctc_loss_cpu" not implemented for \'{dt.name}\'')
    if log_probs.ndim != 3:
        raise RuntimeError(f"ctc_loss: expected log_probs to be 3-D (input length, batch, labels), got {log_probs.ndim}-D")
    t_max, b, c = log_probs.shape
    il = [int(v) for v in input_lengths]
    tl = [int(v) for v in target_lengths]
    if len(il) != b:
        raise RuntimeError(f"input_lengths must be of size batch_size, got {len(il)}")
    if len(tl) != b:
        raise RuntimeError(f"target_lengths must be of size batch_size, got {len(tl)}")
    if not 0 <= blank < c:
        raise RuntimeError("blank must be in label range")
    for k in range(b):
        if tl[k] < 0:
            raise RuntimeError(f"Expected target_lengths to have value at least 0, but got value {tl[k]} "
                               f"(while checking arguments for ctc_loss_cpu)")
        if il[k] < 0:
            raise RuntimeError(f"Expected input_lengths to have value at least 0, but got value {il[k]} "
                               f"(while checking arguments for ctc_loss_cpu)")
        if il[k] > t_max:
            raise RuntimeError(f"Expected input_lengths to have value at most {t_max}, but got value {il[k]} "
                               f"(while checking arguments for ctc_loss_cpu)")
    max_tl = max(tl, default=0)
    # where each target label sits in the flattened targets (static: the lengths are Python ints)
    if targets.ndim == 1:
        if targets.shape[0] != sum(tl):
            raise RuntimeError(f"Expected tensor for argument #2 'targets' to have size {sum(tl)} at dimension 0, "
                               f"but got size {targets.shape[0]} (while checking arguments for ctc_loss_cpu)")
        starts = np.concatenate([[0], np.cumsum(tl)[:-1]]).astype(np.int64) if b else np.zeros(0, np.int64)
        stride_b, stride_k = starts, 1
    else:
        if targets.shape[0] != b:
            raise RuntimeError(f"Expected tensor for argument #2 'targets' to have size {b} at dimension 0, but got "
                               f"size {targets.shape[0]} (while checking arguments for ctc_loss_cpu)")
        if targets.shape[1] < max_tl:
            raise RuntimeError(f"Expected tensor to have size at least {max_tl} at dimension 1, but got size "
                               f"{targets.shape[1]} for argument #2 'targets' (while checking arguments for ctc_loss_cpu)")
        stride_b, stride_k = np.arange(b, dtype=np.int64) * targets.shape[1], 1
    k = np.arange(max_tl, dtype=np.int64)
    valid = k[None, :] < np.asarray(tl, np.int64)[:, None] if b else np.zeros((0, max_tl), bool)
    where = np.where(valid, np.asarray(stride_b, np.int64)[:, None] + k[None, :] * stride_k, 0) if b else \
        np.zeros((0, max_tl), np.int64)
    flat_t = targets.reshape(-1).astype(_I64)
    if flat_t.shape[0]:
        labels = jnp.where(valid, flat_t.at[where].get(mode="promise_in_bounds"), blank)
    else:
        labels = jnp.full((b, max_tl), blank, _I64)
    require_in_range(jnp.where(valid, labels, 0), c, RuntimeError,
                     f"ctc_loss: a target label is not in the label range [0, {c})", False)
    s = 2 * max_tl + 1
    # the extended target l' (blank, l1, blank, l2, ..., blank) per batch element: (B, S)
    lprime = jnp.full((b, s), blank, _I64)
    if max_tl:
        lprime = lprime.at[:, 1::2].set(labels)
    same_as_two_back = jnp.concatenate([jnp.ones((b, 2), bool), lprime[:, 2:] == lprime[:, :-2]], axis=1)
    allow_skip = ~same_as_two_back
    s_valid = np.arange(s)[None, :] < (2 * np.asarray(tl, np.int64) + 1)[:, None] if b else np.zeros((0, s), bool)
    lp = log_probs
    neginf = jnp.asarray(-np.inf, dt)
    # emissions e[t, b, s] = log_probs[t, b, l'[b, s]]
    emit = jnp.take_along_axis(lp, jnp.broadcast_to(lprime[None], (t_max, b, s)), axis=2,
                               mode="promise_in_bounds") if t_max else jnp.zeros((0, b, s), dt)
    il_arr = np.asarray(il, np.int64)
    has_input = il_arr > 0
    if t_max == 0:
        log_alpha = jnp.zeros((b, 0, s), dt)
    else:
        alpha0 = jnp.full((b, s), neginf, dt)
        alpha0 = alpha0.at[:, 0].set(emit[0, :, 0])
        if s > 1:
            alpha0 = alpha0.at[:, 1].set(jnp.where(np.asarray(tl) > 0, emit[0, :, 1], neginf))
        alpha0 = jnp.where(has_input[:, None], alpha0, neginf)

        def step(prev, xs):
            t, e_t = xs
            la1 = prev
            la2 = jnp.concatenate([jnp.full((b, 1), neginf, dt), prev[:, :-1]], axis=1)
            la3 = jnp.concatenate([jnp.full((b, 2), neginf, dt), prev[:, :-2]], axis=1)[:, :s]
            la3 = jnp.where(allow_skip, la3, neginf)
            lamax = jnp.maximum(jnp.maximum(la1, la2), la3)
            lamax = jnp.where(lamax == neginf, jnp.zeros((), dt), lamax)
            new = jnp.log(jnp.exp(la1 - lamax) + jnp.exp(la2 - lamax) + jnp.exp(la3 - lamax)) + lamax + e_t
            active = (t < jnp.asarray(il_arr))[:, None] & s_valid
            new = jnp.where(active, new, neginf)
            return new, new

        ts = jnp.arange(1, t_max, dtype=_I64)
        _, rest = lax.scan(step, alpha0, (ts, emit[1:]))
        alphas = jnp.concatenate([alpha0[None], rest], axis=0)  # (T, B, S)
        log_alpha = jnp.transpose(alphas, (1, 0, 2))
    # the likelihood: the last two alphas at each input's last time step (static positions)
    tl_arr = np.asarray(tl, np.int64)
    rows = np.arange(b)
    t_last = np.maximum(il_arr - 1, 0)
    if t_max:
        l1 = log_alpha[rows, t_last, 2 * tl_arr]
        l2 = log_alpha[rows, t_last, np.maximum(2 * tl_arr - 1, 0)]
    else:
        l1 = l2 = jnp.full((b,), neginf, dt)
    m = jnp.maximum(l1, l2)
    m = jnp.where(m == neginf, jnp.zeros((), dt), m)
    two = jnp.log(jnp.exp(l1 - m) + jnp.exp(l2 - m)) + m
    nll = -jnp.where(tl_arr == 0, l1, two)  # an empty target has no preceding blank to merge
    no_input = jnp.asarray(np.where(tl_arr == 0, 0.0, np.inf), dt)
    nll = jnp.where(has_input, nll, no_input)
    return nll.astype(dt), log_alpha.astype(dt)


# ---------------------------------------------------------------------------------------------
# lowerings


# _ctc_loss(Tensor log_probs, Tensor targets, int[] input_lengths, int[] target_lengths, int blank=0, bool zero_infinity=False) -> (Tensor, Tensor)
@lower(aten._ctc_loss.default)
def _ctc_loss_lowering(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity):
    # zero_infinity matters to the backward only (ctc_loss itself zeroes infinite losses)
    return _ctc_loss(log_probs, targets, input_lengths, target_lengths, int(blank))


# nll_loss_forward(Tensor self, Tensor target, Tensor? weight, int reduction, SymInt ignore_index)
#     -> (Tensor output, Tensor total_weight); nll_loss2d_forward likewise for (N, C, H, W)
@lower(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)
def nll_loss_forward(self, target, weight, reduction, ignore_index):
    """-self[target] along the class dimension, times the class weight (0 where target is ignore_index),
    reduced as asked (mean: over the weights' sum). A target outside [0, C) that is not ignore_index
    raises the CPU's IndexError. 16-bit inputs sum in float32."""
    cdim = 0 if self.ndim == 1 else 1
    classes = self.shape[cdim]
    dt = np.dtype(self.dtype)
    acc = np.dtype(np.float32) if dt.itemsize == 2 else dt
    ignored = target == ignore_index
    safe = jnp.where(ignored, 0, target)
    require_in_range(safe, classes, IndexError, f"Target {VALUE} is out of bounds.", False)
    picked = jnp.take_along_axis(self, jnp.expand_dims(safe, cdim), axis=cdim, mode="promise_in_bounds")
    picked = jnp.squeeze(picked, cdim).astype(acc)
    w = jnp.ones(safe.shape, acc) if weight is None else weight.astype(acc)[safe]
    w = jnp.where(ignored, jnp.zeros((), acc), w)
    loss = -picked * w
    if reduction == 0:  # none
        return loss.astype(dt), jnp.zeros((), dt)
    total = jnp.sum(w)
    out = jnp.sum(loss)
    if reduction == 1:  # mean
        out = out / total
    return out.astype(dt), total.astype(dt)
