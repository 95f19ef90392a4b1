"""Copying shape ops: cat/stack/constant_pad_nd/repeat/flip/roll/tril/triu/diag_embed/index_select.

Views (view, permute, expand, squeeze, split, ...) and clone are not lowered here.
"""
from __future__ import annotations

import numpy as np

from ..runtime.lazy_jax import jnp, lax
from .dims import wrap_dim
from ._registry import aten, lower, require_in_range
from .promotion import promote_all

_I64 = np.dtype(np.int64)


# cat(Tensor[] tensors, int dim=0) -> Tensor
@lower(aten.cat.default)
def cat(tensors, dim):
    dtype = promote_all(tensors)
    # PyTorch skips legacy empty tensors of shape (0,) whatever the other tensors' rank.
    kept = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]
    if not kept:
        return tensors[0].astype(dtype)
    ndim = kept[0].ndim
    kept = [t.astype(dtype) for t in kept]
    if len(kept) == 1:
        return kept[0]
    return concatenate(kept, dim % ndim)


# XLA's CPU concatenation along the minor dimension copies element by element: 84 ms for a 1088 x 27648
# bf16 result, where the same copy as rows of a middle dimension takes 18 (torch: 17).
_MINOR_RUN = 16


def concatenate(parts, axis: int):
    """jnp.concatenate of `parts` along `axis`; along the last one as runs of their common length (when
    it is at least _MINOR_RUN elements) concatenated along a middle dimension, the same values."""
    last = parts[0].ndim - 1
    run = int(np.gcd.reduce([p.shape[-1] for p in parts])) if axis == last and last >= 0 else 0
    if run < _MINOR_RUN:
        return jnp.concatenate(parts, axis=axis)
    lead = parts[0].shape[:-1]
    rows = [p.reshape(lead + (p.shape[-1] // run, run)) for p in parts]
    out = jnp.concatenate(rows, axis=last)
    return out.reshape(lead + (out.shape[-2] * run,))


# slice_backward(Tensor grad_output, SymInt[] input_sizes, int dim, SymInt start, SymInt end, SymInt step) -> Tensor
@lower(aten.slice_backward.default)
def slice_backward(grad_output, input_sizes, dim, start, end, step):
    """Zeros of `input_sizes` with `grad_output` where the slice took its values: padding (a concatenation
    with zeros for a step of 1), not a scatter."""
    sizes = tuple(int(n) for n in input_sizes)
    dim = wrap_dim(dim, len(sizes))
    size, n, step = sizes[dim], grad_output.shape[dim], int(step)
    if n == 0:
        return jnp.zeros(sizes, grad_output.dtype)
    start = int(start)
    start = min(max(start + size if start < 0 else start, 0), size)
    after = size - start - (n - 1) * step - 1
    if step == 1:
        def zeros(width):
            return [jnp.zeros(sizes[:dim] + (width,) + sizes[dim + 1:], grad_output.dtype)] if width else []

        parts = zeros(start) + [grad_output] + zeros(after)
        return concatenate(parts, dim) if len(parts) > 1 else grad_output
    config = [(0, 0, 0)] * len(sizes)
    config[dim] = (start, after, step - 1)
    return lax.pad(grad_output, jnp.zeros((), grad_output.dtype), config)


# constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor
@lower(aten.constant_pad_nd.default)
def constant_pad_nd(self, pad, value):
    if len(pad) % 2 or len(pad) // 2 > self.ndim:
        raise ValueError(f"constant_pad_nd: invalid padding {list(pad)} for a {self.ndim}-d tensor")
    config = [(0, 0, 0)] * self.ndim
    for i in range(len(pad) // 2):
        config[self.ndim - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]), 0)
    # negative padding crops, as lax.pad does
    return lax.pad(self, jnp.asarray(value).astype(self.dtype), config)


# diag_embed(Tensor self, int offset=0, int dim1=-2, int dim2=-1) -> Tensor
@lower(aten.diag_embed.default)
def diag_embed(self, offset, dim1, dim2):
    nd = self.ndim + 1
    d1, d2 = wrap_dim(dim1, nd), wrap_dim(dim2, nd)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    x = self.reshape(1) if self.ndim == 0 else self
    length = x.shape[-1]
    m = length + abs(offset)
    i = lax.broadcasted_iota(_I64, (m, m), 0)
    j = lax.broadcasted_iota(_I64, (m, m), 1)
    on = (j - i) == offset
    k = i if offset >= 0 else j  # position along the diagonal
    vals = x.at[..., k].get(mode="fill", fill_value=0)  # (..., m, m)
    out = jnp.where(on, vals, jnp.zeros((), x.dtype))
    return jnp.moveaxis(out, (-2, -1), (d1, d2))


# flip(Tensor self, int[] dims) -> Tensor
@lower(aten.flip.default)
def flip(self, dims):
    if self.ndim == 0 or not dims:
        return self
    return jnp.flip(self, axis=tuple(sorted({d % self.ndim for d in dims})))


# index_select(Tensor self, int dim, Tensor index) -> Tensor
@lower(aten.index_select.default)
def index_select(self, dim, index):
    if self.ndim == 0:
        return self  # the only valid index is 0
    dim = dim % self.ndim
    require_in_range(index, self.shape[dim], IndexError, "index out of range in self", False)
    return self.at[(slice(None),) * dim + (index.reshape(-1),)].get(
        mode="promise_in_bounds", wrap_negative_indices=False
    )


# repeat_interleave.Tensor(Tensor repeats, *, SymInt? output_size=None) -> Tensor
@lower(aten.repeat_interleave.Tensor)
def repeat_interleave_tensor(repeats, output_size):
    # output_size is the sum of repeats; eager supplies it after one host read when the caller did not
    n = repeats.shape[0]
    return jnp.repeat(jnp.arange(n, dtype=repeats.dtype), repeats, total_repeat_length=output_size)


# repeat(Tensor self, SymInt[] repeats) -> Tensor
@lower(aten.repeat.default)
def repeat(self, repeats):
    repeats = tuple(int(r) for r in repeats)
    if len(repeats) < self.ndim:
        raise ValueError("repeat: the number of repeats can not be smaller than the number of dimensions")
    x = self.reshape((1,) * (len(repeats) - self.ndim) + tuple(self.shape))
    return jnp.tile(x, repeats)


# roll(Tensor self, SymInt[1] shifts, int[1] dims=[]) -> Tensor
@lower(aten.roll.default)
def roll(self, shifts, dims):
    if self.size == 0:
        return self
    if not dims:
        if len(shifts) != 1:
            raise ValueError("roll: without dims, shifts must have one element")
        return jnp.roll(self.reshape(-1), int(shifts[0])).reshape(self.shape)
    if len(shifts) != len(dims):
        raise ValueError("roll: shifts and dims must have the same length")
    return jnp.roll(self, tuple(int(s) for s in shifts), tuple(d % self.ndim for d in dims))


# stack(Tensor[] tensors, int dim=0) -> Tensor
@lower(aten.stack.default)
def stack(tensors, dim):
    dtype = promote_all(tensors)
    return jnp.stack([t.astype(dtype) for t in tensors], axis=dim % (tensors[0].ndim + 1))


# tril(Tensor self, SymInt diagonal=0) -> Tensor
@lower(aten.tril.default)
def tril(self, diagonal):
    return jnp.tril(self, k=int(diagonal))


# triu(Tensor self, SymInt diagonal=0) -> Tensor
@lower(aten.triu.default)
def triu(self, diagonal):
    return jnp.triu(self, k=int(diagonal))
