"""Gathers and scatters: embedding, embedding bags (_embedding_bag, _embedding_bag_forward_only),
index.Tensor, index_put, gather, scatter*, index_add, index_copy, index_fill, index_reduce, put.

Index range checks are the executor's job: these lowerings assume in-range indices and use
XLA's native modes (gathers PROMISE_IN_BOUNDS, scatters drop out-of-range updates). Negative
indices wrap only where PyTorch allows them (index.Tensor, index_put). Accumulating scatters of
float16/bfloat16 add in float32 and round once.

Boolean (or legacy uint8) mask indices give data-dependent shapes: `index.Tensor` refuses them
(the caller must turn the mask into `nonzero()` indices first); `index_put` supports one mask,
since its result shape is static: values broadcast over the masked part become a `where`, values
with one row per True element are scattered to the first `len(values)` True positions.

Accumulating into a bool tensor (index_add, index_put/put with accumulate, scatter_reduce sum) is
a logical or and a bool product a logical and, as on the CPU: scatter-max and scatter-min.
`put` without accumulate lets the last of duplicate indices win, as the CPU's serial loop does.

`_embedding_bag` returns (output, offset2bag, bag_size, max_indices) in the shapes PyTorch's meta
function gives a non-CPU device (what eager and compiled graphs on `neuron` expect): offset2bag
has one entry per index, bag_size one per offset (the count of non-padding indices of each bag,
0 for the extra offset of include_last_offset), max_indices is (bags, D) for mode max and empty
otherwise. The CPU kernel gives some of these other shapes (offset2bag empty on its fast sum path,
bag_size zeros in sum mode); `output` is the same. Sums accumulate in float32 for 16-bit weights.
"""
from __future__ import annotations

import numpy as np

from ..runtime.lazy_jax import jnp, lax
from .dtypes import is_low_precision, to_torch_dtype
from ._registry import aten, lower, require, require_in_range
from .value_checks import POSITION, VALUE

_F32 = np.dtype(np.float32)
_I64 = np.dtype(np.int64)
_MASK_DTYPES = (np.dtype(np.bool_), np.dtype(np.uint8))


def _acc(dtype):
    return _F32 if is_low_precision(dtype) else np.dtype(dtype)


def _as_indices(indices):
    """`Tensor?[]` entries as jax arrays (None kept)."""
    return [None if i is None else jnp.asarray(i) for i in indices]


def _advanced_key(indices):
    return tuple(slice(None) if i is None else i for i in indices)


def _along_axis_key(index, dim):
    """Full index tuple addressing self[..., index[i,j,k], ...] at every position of `index`."""
    key = [lax.broadcasted_iota(index.dtype, index.shape, d) for d in range(index.ndim)]
    key[dim] = index
    return tuple(key)


def _slice_to(x, shape):
    """x[:shape[0], :shape[1], ...] (scatter/gather sources may be larger than the index)."""
    if tuple(x.shape) == tuple(shape):
        return x
    return lax.slice(x, (0,) * x.ndim, tuple(shape))


def _scatter_prepare(self, dim, index, src):
    """(self, index, dim, src, key, undo): 0-d operands viewed as 1-d, src cut (or a scalar
    broadcast) to index's shape, key addressing every target position."""
    if self.ndim == 0:
        self = self.reshape(1)
        undo = lambda y: y.reshape(())  # noqa: E731
    else:
        undo = lambda y: y  # noqa: E731
    if index.ndim == 0:
        index = index.reshape(1)
    dim = dim % self.ndim
    src = jnp.asarray(src)
    if src.ndim == 0:
        src = jnp.broadcast_to(src, index.shape)
    else:
        src = _slice_to(src, index.shape)
    return self, index, dim, src, _along_axis_key(index, dim), undo


def _check_along(x, dim, index):
    require_in_range(index, x.shape[dim], RuntimeError,
                     f"index {VALUE} is out of bounds for dimension {dim} with size {x.shape[dim]}", False)


def _check_advanced(self, indices):
    """index/index_put: each index tensor within its dimension (negative ones count from the end). The
    CPU numbers a dimension among the indexed ones (a mask counts its dimensions)."""
    indexed = 0
    for d, i in enumerate(indices):
        if i is not None and np.dtype(i.dtype) not in _MASK_DTYPES:
            n = self.shape[d]
            require_in_range(i, n, IndexError, f"index {VALUE} is out of bounds for dimension {indexed} with size {n}",
                             True)
        if i is not None:
            indexed += i.ndim if np.dtype(i.dtype) in _MASK_DTYPES else 1


def _scatter(self, dim, index, src, reduce=None):
    """scatter / scatter_add / scatter.reduce ('add', 'multiply') of a tensor or scalar src."""
    if index.size == 0:
        return self
    x, index, dim, src, key, undo = _scatter_prepare(self, dim, index, src)
    _check_along(x, dim, index)
    kw = dict(mode="drop", wrap_negative_indices=False)
    if reduce is None:
        return undo(x.at[key].set(src.astype(x.dtype), **kw))
    if x.dtype == np.bool_:  # bool sums are ORs and products ANDs, as on the CPU
        s = src.astype(np.bool_)
        if reduce == "add":
            return undo(x.at[key].max(s, **kw))
        if reduce == "multiply":
            return undo(x.at[key].min(s, **kw))
    acc = _acc(x.dtype)
    xa, sa = x.astype(acc), src.astype(x.dtype).astype(acc)
    if reduce == "add":
        out = xa.at[key].add(sa, **kw)
    elif reduce == "multiply":
        out = xa.at[key].multiply(sa, **kw)
    else:
        raise ValueError(f"scatter: reduce argument must be 'add' or 'multiply', got {reduce!r}")
    return undo(out.astype(x.dtype))


def _bool_index_put(self, pos, mask, values, accumulate):
    """self[:, ..., mask] = values (mask at dims pos..pos+mask.ndim-1), static shapes only."""
    mask = mask.astype(np.bool_)
    m = mask.ndim
    post = tuple(self.shape[pos + m:])
    rank = pos + 1 + len(post)  # rank of the indexed result (..., K, *post)
    if values.ndim > rank:
        raise ValueError("index_put: values has more dims than the indexed result")
    v = values.reshape((1,) * (rank - values.ndim) + tuple(values.shape))
    if v.shape[pos] == 1:
        # values broadcast over the selected elements: a select, no scatter.
        v = v.reshape(v.shape[:pos] + (1,) * m + v.shape[pos + 1:])
        mk = mask.reshape((1,) * pos + tuple(mask.shape) + (1,) * len(post))
        if accumulate:
            if self.dtype == np.bool_:
                return self | (mk & v.astype(np.bool_))
            acc = _acc(self.dtype)
            return (self.astype(acc) + jnp.where(mk, v.astype(self.dtype).astype(acc), 0)).astype(self.dtype)
        return jnp.where(mk, v.astype(self.dtype), self)
    # one row of values per True element: the number of True elements is v.shape[pos]
    coords = jnp.nonzero(mask, size=v.shape[pos])
    key = (slice(None),) * pos + tuple(coords)
    if accumulate:
        if self.dtype == np.bool_:
            return self.at[key].max(v.astype(np.bool_), mode="drop")
        acc = _acc(self.dtype)
        return self.astype(acc).at[key].add(v.astype(self.dtype).astype(acc), mode="drop").astype(self.dtype)
    return self.at[key].set(v.astype(self.dtype), mode="drop")


def _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                   include_last_offset, padding_idx):
    num_weights, d = weight.shape
    n = indices.shape[0]
    n_off = offsets.shape[0]
    bags = n_off - 1 if include_last_offset else n_off
    if bags < 0:
        raise RuntimeError("include_last_offset: numBags should be at least 1")
    if mode not in (0, 1, 2):
        raise RuntimeError(f"embedding_bag: unknown mode {mode}")
    if per_sample_weights is not None and mode != 0:
        raise RuntimeError("embedding_bag: per_sample_weights only supported with mode='sum'")
    idx = indices.astype(_I64)
    off = offsets.astype(_I64)
    require_in_range(idx, num_weights, RuntimeError,
                     f"Index {POSITION} of input takes value {VALUE} which is not in the valid range "
                     f"[0, {num_weights})", False)
    if n_off > 0:
        require(off[0] == 0, RuntimeError, "offsets[0] has to be 0, i.e., the first sequence in the "
                "mini-batch has to start from position 0")
        require(off[-1] <= n, RuntimeError, f"offsets[-1] can not be greater than input's length {n}")
    # offset2bag as the CPU's make_offset2bag: (number of bag starts <= i) - 1
    starts = jnp.zeros((n + 1,), _I64).at[off[:bags]].add(1, mode="drop", wrap_negative_indices=False)
    bag = (jnp.cumsum(starts) - 1)[:n]
    valid = jnp.ones((n,), bool) if padding_idx < 0 else idx != padding_idx
    counts = jnp.zeros((max(bags, 0),), _I64).at[bag].add(valid.astype(_I64), mode="drop",
                                                         wrap_negative_indices=False)
    bag_size = jnp.concatenate([counts, jnp.zeros((n_off - bags,), _I64)]) if n_off > bags else counts
    acc = _acc(weight.dtype)
    rows = weight.at[idx].get(mode="promise_in_bounds")
    kw = dict(mode="drop", wrap_negative_indices=False)
    if mode == 2:  # max: the first maximal row element per bag (NaN only if the bag's first)
        is_nan = jnp.isnan(rows)
        pos = jnp.arange(n, dtype=_I64)
        first = jnp.full((bags,), n, _I64).at[bag].min(jnp.where(valid, pos, n), **kw)
        first_row = rows.at[first].get(mode="fill", fill_value=0)
        nonempty = first < n
        cand = valid[:, None] & ~is_nan
        neg = jnp.full((), -np.inf, rows.dtype)
        best = jnp.full((bags, d), -np.inf, rows.dtype).at[bag].max(jnp.where(cand, rows, neg), **kw)
        hit = cand & (rows == best.at[bag].get(mode="fill", fill_value=0))
        best_pos = jnp.full((bags, d), n, _I64).at[bag].min(jnp.where(hit, pos[:, None], n), **kw)
        first_nan = jnp.isnan(first_row)
        any_hit = best_pos < n
        out = jnp.where(first_nan, first_row, jnp.where(any_hit, best, first_row))
        arg_pos = jnp.where(first_nan | ~any_hit, first[:, None], best_pos)
        max_indices = idx.at[arg_pos].get(mode="fill", fill_value=0)
        out = jnp.where(nonempty[:, None], out, jnp.zeros((), rows.dtype))
        max_indices = jnp.where(nonempty[:, None], max_indices, 0)
        return out.astype(weight.dtype), bag, bag_size, max_indices
    vals = rows.astype(acc)
    if per_sample_weights is not None:
        vals = vals * per_sample_weights.astype(weight.dtype).astype(acc)[:, None]
    vals = jnp.where(valid[:, None], vals, jnp.zeros((), acc))
    out = jnp.zeros((bags, d), acc).at[bag].add(vals, **kw)
    if mode == 1:
        out = out / jnp.maximum(counts, 1).astype(acc)[:, None]
    return out.astype(weight.dtype), bag, bag_size, jnp.zeros((0,), _I64)


# _embedding_bag(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1) -> (Tensor, Tensor, Tensor, Tensor)
@lower(aten._embedding_bag.default)
def _embedding_bag_lowering(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                            include_last_offset, padding_idx):
    return _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                          include_last_offset, padding_idx)


# _embedding_bag_forward_only(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1) -> (Tensor, Tensor, Tensor, Tensor)
@lower(aten._embedding_bag_forward_only.default)
def _embedding_bag_forward_only(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                                include_last_offset, padding_idx):
    return _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                          include_last_offset, padding_idx)


# embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False) -> Tensor
@lower(aten.embedding.default)
def embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse):
    require_in_range(indices, weight.shape[0], IndexError, "index out of range in self", False)
    return weight.at[indices].get(mode="promise_in_bounds", wrap_negative_indices=False)


# embedding_dense_backward(Tensor grad_output, Tensor indices, SymInt num_weights, SymInt padding_idx, bool scale_grad_by_freq) -> Tensor
@lower(aten.embedding_dense_backward.default)
def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    d = grad_output.shape[-1]
    idx = indices.reshape(-1)
    acc = _acc(grad_output.dtype)
    g = grad_output.reshape(idx.shape[0], d).astype(acc)
    if padding_idx >= 0:
        g = jnp.where((idx == padding_idx)[:, None], jnp.zeros((), acc), g)
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), acc).at[idx].add(1, mode="drop", wrap_negative_indices=False)
        g = g / counts.at[idx].get(mode="promise_in_bounds", wrap_negative_indices=False)[:, None]
    out = jnp.zeros((num_weights, d), acc).at[idx].add(g, mode="drop", wrap_negative_indices=False)
    return out.astype(grad_output.dtype)


# embedding_renorm_(Tensor(a!) self, Tensor indices, float max_norm, float norm_type) -> Tensor(a!)
@lower(aten.embedding_renorm_.default)
def embedding_renorm_(self, indices, max_norm, norm_type):
    # rows looked up by `indices` (each once, however often it appears) whose norm exceeds
    # max_norm are scaled down to it, as F.embedding(max_norm=...) does before the lookup
    require_in_range(indices, self.shape[0], IndexError, "index out of range in self", False)
    acc = _acc(self.dtype)
    x = self.astype(acc)
    if norm_type == 2:
        norm = jnp.sqrt(jnp.sum(x * x, axis=1))
    else:
        norm = jnp.sum(jnp.abs(x) ** norm_type, axis=1) ** (1.0 / norm_type)
    hit = jnp.zeros((self.shape[0],), bool).at[indices.reshape(-1)].set(True, mode="drop")
    scale = jnp.where(hit & (norm > max_norm), max_norm / (norm + 1e-7), 1.0)
    return (x * scale[:, None].astype(acc)).astype(self.dtype)


# gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor
@lower(aten.gather.default)
def gather(self, dim, index, sparse_grad):
    if index.size == 0:
        return jnp.zeros(index.shape, self.dtype)
    if self.ndim == 0:
        return self.reshape(index.shape)  # the only valid index is 0
    if index.ndim == 0:
        index = index.reshape(1)
    dim = dim % self.ndim
    _check_along(self, dim, index)
    shape = tuple(index.shape[d] if d != dim else self.shape[d] for d in range(self.ndim))
    x = _slice_to(self, shape)
    return jnp.take_along_axis(x, index, axis=dim, mode="promise_in_bounds", wrap_negative_indices=False)


# index.Tensor(Tensor self, Tensor?[] indices) -> Tensor
@lower(aten.index.Tensor)
def index_tensor(self, indices):
    indices = _as_indices(indices)
    for i in indices:
        if i is not None and np.dtype(i.dtype) in _MASK_DTYPES:
            raise NotImplementedError(
                "index.Tensor with a boolean/uint8 mask has a data-dependent shape; "
                "index with mask.nonzero() indices instead"
            )
    if all(i is None for i in indices):
        return self
    _check_advanced(self, indices)
    return self.at[_advanced_key(indices)].get(mode="promise_in_bounds")


# index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor
@lower(aten.index_add.default)
def index_add(self, dim, index, source, alpha):
    if self.dtype == np.bool_:  # self | (source & alpha), as the CPU's bool add
        src = source.astype(np.bool_) & jnp.asarray(alpha).astype(np.bool_)
        if self.ndim == 0:
            return self | jnp.any(src)
        dim = dim % self.ndim
        require_in_range(index, self.shape[dim], IndexError, "index_add: index out of range in self", False)
        key = (slice(None),) * dim + (index.reshape(-1),)
        return self.at[key].max(src.reshape(1) if source.ndim == 0 else src, mode="drop",
                                wrap_negative_indices=False)
    acc = _acc(self.dtype)
    if self.ndim == 0:
        return (self.astype(acc) + alpha * source.reshape(()).astype(acc)).astype(self.dtype)
    dim = dim % self.ndim
    require_in_range(index, self.shape[dim], IndexError, "index_add: index out of range in self", False)
    src = source.astype(acc) * alpha
    if source.ndim == 0:
        src = src.reshape(1)
    key = (slice(None),) * dim + (index.reshape(-1),)
    return self.astype(acc).at[key].add(src, mode="drop", wrap_negative_indices=False).astype(self.dtype)


# index_copy(Tensor self, int dim, Tensor index, Tensor source) -> Tensor
@lower(aten.index_copy.default)
def index_copy(self, dim, index, source):
    """self with its slices `index` along dim replaced by source's, in order (the last of duplicate
    indices wins, as in the CPU's serial loop); out-of-range indices (negative ones too) raise the
    CPU's IndexError."""
    if self.ndim == 0:
        require_in_range(index, 1, IndexError, f"index_copy_(): index {VALUE} is out of bounds for dimension 0 "
                         f"with size 1", False)
        return source.reshape(()).astype(self.dtype)
    dim = dim % self.ndim
    n = self.shape[dim]
    require_in_range(index, n, IndexError,
                     f"index_copy_(): index {VALUE} is out of bounds for dimension {dim} with size {n}", False)
    src = source.astype(self.dtype)
    if source.ndim == 0:
        src = src.reshape((1,) * self.ndim)
    key = (slice(None),) * dim + (index.reshape(-1),)
    return self.at[key].set(src, mode="drop", wrap_negative_indices=False)


# index_fill.int_Scalar(Tensor self, int dim, Tensor index, Scalar value) -> Tensor (int_Tensor: a 0-dim value)
@lower(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def index_fill(self, dim, index, value):
    """self with its slices `index` along dim set to value (cast to self's dtype as the CPU casts it);
    negative indices count from the end, others out of range raise the CPU's IndexError."""
    v = jnp.asarray(value).astype(self.dtype)
    n = 1 if self.ndim == 0 else self.shape[dim % self.ndim]
    dim = 0 if self.ndim == 0 else dim % self.ndim
    require_in_range(index, n, IndexError, f"index {VALUE} is out of bounds for dimension {dim} with size {n}", True)
    if self.ndim == 0:
        return v if index.size else self
    idx = index.reshape(-1)
    idx = jnp.where(idx < 0, idx + n, idx)
    return self.at[(slice(None),) * dim + (idx,)].set(v, mode="drop", wrap_negative_indices=False)


# index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor
@lower(aten.index_put.default)
def index_put(self, indices, values, accumulate):
    indices = _as_indices(indices)
    masks = [p for p, i in enumerate(indices) if i is not None and np.dtype(i.dtype) in _MASK_DTYPES]
    if masks:
        others = [i for p, i in enumerate(indices) if i is not None and p != masks[0]]
        if len(masks) > 1 or others:
            raise NotImplementedError("index_put: a boolean mask combined with other indices is not supported")
        # dims before the mask are full slices (None entries)
        return _bool_index_put(self, masks[0], indices[masks[0]], values, accumulate)
    if all(i is None for i in indices):
        v = jnp.broadcast_to(values.astype(self.dtype), self.shape)
        if accumulate:
            if self.dtype == np.bool_:
                return self | v
            acc = _acc(self.dtype)
            return (self.astype(acc) + v.astype(acc)).astype(self.dtype)
        return v
    _check_advanced(self, indices)
    key = _advanced_key(indices)
    if accumulate:
        if self.dtype == np.bool_:
            return self.at[key].max(values.astype(np.bool_), mode="drop")
        acc = _acc(self.dtype)
        return self.astype(acc).at[key].add(values.astype(self.dtype).astype(acc), mode="drop").astype(self.dtype)
    return self.at[key].set(values.astype(self.dtype), mode="drop")


def _reduce_at(xa, key, sa, reduce, include_self, kw):
    """`xa` with `sa` reduced into `xa[key]` by sum, prod, amax or amin, starting from the
    reduction's identity where `include_self` is False (index_reduce, scatter_reduce). Bool sums
    are ORs and products ANDs, as on the CPU."""
    dt = np.dtype(xa.dtype)
    if dt == np.bool_:
        ident = reduce in ("prod", "amin")
        combine = "max" if reduce in ("sum", "amax") else "min"
    elif reduce in ("sum", "prod"):
        ident, combine = (0, "add") if reduce == "sum" else (1, "multiply")
    else:
        if dt.kind == "f":
            low, high = -np.inf, np.inf
        else:
            low, high = np.iinfo(dt).min, np.iinfo(dt).max
        ident, combine = (low, "max") if reduce == "amax" else (high, "min")
    base = xa if include_self else xa.at[key].set(ident, **kw)
    return getattr(base.at[key], combine)(sa, **kw)


# index_reduce(Tensor self, int dim, Tensor index, Tensor source, str reduce, *, bool include_self=True) -> Tensor
@lower(aten.index_reduce.default)
def index_reduce(self, dim, index, source, reduce, include_self):
    # The CPU applies source slice i to self slice index[i] in order (16-bit floats round at each
    # step there; here they reduce in float32 and round once). Without include_self the indexed
    # slices start from the reduction's identity; mean divides by the number of contributions
    # (plus one with include_self; never by 0), flooring for integers; amax/amin propagate NaN.
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got {reduce}.")
    dt = np.dtype(self.dtype)
    if dt == np.bool_ or dt.kind == "c":
        raise TypeError(f'"index_reduce_func_exclude_input_init" not implemented for \'{dt.name}\'')
    x = self.reshape(1) if self.ndim == 0 else self
    dim = dim % x.ndim
    n = x.shape[dim]
    idx = index.reshape(-1)
    require_in_range(idx, n, IndexError, "index out of range in self", False)
    if idx.size == 0:
        return self
    src = source.reshape(x.shape[:dim] + (idx.size,) + x.shape[dim + 1:])
    acc = _acc(dt)
    xa, sa = x.astype(acc), src.astype(acc)
    key = (slice(None),) * dim + (idx,)
    kw = dict(mode="drop", wrap_negative_indices=False)
    is_float = acc.kind == "f"
    if reduce != "mean":
        out = _reduce_at(xa, key, sa, reduce, include_self, kw)
    else:
        total = _reduce_at(xa, key, sa, "sum", include_self, kw)
        count = jnp.full((n,), 1 if include_self else 0, np.int64).at[idx].add(1, **kw)
        count = jnp.maximum(count, 1).reshape((n,) + (1,) * (x.ndim - dim - 1))
        out = total / count.astype(acc) if is_float else jnp.floor_divide(total, count.astype(acc))
    return out.astype(dt).reshape(self.shape)


# nonzero_static(Tensor self, *, SymInt size, int fill_value=-1) -> Tensor
@lower(aten.nonzero_static.default)
def nonzero_static(self, size, fill_value):
    if self.ndim == 0:
        return jnp.zeros((size, 0), np.int64)
    idx = jnp.nonzero(self, size=size, fill_value=fill_value)
    return jnp.stack(idx, axis=-1).astype(np.int64)


# put(Tensor self, Tensor index, Tensor source, bool accumulate=False) -> Tensor
# (eager's put_ is derived from it)
@lower(aten.put.default)
def put(self, index, source, accumulate):
    # self viewed as 1-d in its logical (row-major) order; negative indices count from the end
    n = self.size
    idx = index.reshape(-1).astype(np.int64)
    src = source.reshape(-1).astype(self.dtype)
    if idx.size == 0:
        return self
    require_in_range(idx, n, IndexError, f"out of range: tried to access index {VALUE} on a tensor of {n} elements.",
                     True)
    idx = jnp.where(idx < 0, idx + n, idx)
    flat = self.reshape(-1)
    kw = dict(mode="drop", wrap_negative_indices=False)
    if accumulate:
        if self.dtype == np.bool_:
            return flat.at[idx].max(src, **kw).reshape(self.shape)
        acc = _acc(self.dtype)
        return flat.astype(acc).at[idx].add(src.astype(acc), **kw).astype(self.dtype).reshape(self.shape)
    # the last of duplicate indices wins, as in the CPU's serial loop
    last = jnp.full((n,), -1, np.int64).at[idx].max(jnp.arange(idx.size, dtype=np.int64), **kw)
    picked = src.at[jnp.maximum(last, 0)].get(mode="promise_in_bounds")
    return jnp.where(last >= 0, picked, flat).reshape(self.shape)


# take(Tensor self, Tensor index) -> Tensor
@lower(aten.take.default)
def take(self, index):
    # Lowered rather than decomposed: PyTorch's decomposition (self.reshape(-1)[index]) reads a 0-d
    # index as a Python int (.item()), which fails on AOTAutograd's fake tensors.
    # self is read as 1-d in its logical (row-major) order; negative indices count from the end.
    if np.dtype(index.dtype) != np.int64:
        # (the meta kernel's message: eager and compiled mode meet it first)
        raise RuntimeError(f"take(): Expected a long tensor for index, but got {to_torch_dtype(index.dtype)}")
    n = self.size
    if index.size == 0:
        return jnp.zeros(index.shape, self.dtype)
    if n == 0:
        raise IndexError("take(): tried to take from an empty tensor")
    require_in_range(index, n, IndexError, f"out of range: tried to access index {VALUE} on a tensor of {n} elements.",
                     True)
    idx = jnp.where(index < 0, index + n, index)
    return self.reshape(-1).at[idx].get(mode="promise_in_bounds")


# scatter.reduce(Tensor self, int dim, Tensor index, Tensor src, *, str reduce) -> Tensor
@lower(aten.scatter.reduce)
def scatter_reduce_legacy(self, dim, index, src, reduce):
    return _scatter(self, dim, index, src, reduce)


# scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor
@lower(aten.scatter.src)
def scatter_src(self, dim, index, src):
    return _scatter(self, dim, index, src)


# scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor
@lower(aten.scatter.value)
def scatter_value(self, dim, index, value):
    return _scatter(self, dim, index, value)


# scatter.value_reduce(Tensor self, int dim, Tensor index, Scalar value, *, str reduce) -> Tensor
@lower(aten.scatter.value_reduce)
def scatter_value_reduce(self, dim, index, value, reduce):
    return _scatter(self, dim, index, value, reduce)


# scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor
@lower(aten.scatter_add.default)
def scatter_add(self, dim, index, src):
    return _scatter(self, dim, index, src, "add")


# scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> Tensor
@lower(aten.scatter_reduce.two)
def scatter_reduce_two(self, dim, index, src, reduce, include_self):
    if index.size == 0:
        return self
    x, index, dim, src, key, undo = _scatter_prepare(self, dim, index, src)
    _check_along(x, dim, index)
    kw = dict(mode="drop", wrap_negative_indices=False)
    acc = _acc(x.dtype)
    xa, sa = x.astype(acc), src.astype(x.dtype).astype(acc)
    is_float = jnp.issubdtype(acc, np.floating)
    if acc == np.bool_ and reduce == "mean":
        raise TypeError('"scatter_gather_tensor_cpu_reduce_mean" not implemented for \'Bool\'')
    if reduce in ("sum", "prod", "amax", "amin"):
        out = _reduce_at(xa, key, sa, reduce, include_self, kw)
    elif reduce == "mean":
        total = _reduce_at(xa, key, sa, "sum", include_self, kw)
        ones = jnp.ones(x.shape, acc if is_float else np.int64)
        count = (ones if include_self else ones.at[key].set(0, **kw)).at[key].add(1, **kw)
        count = jnp.maximum(count, 1)
        if is_float:
            out = total / count
        else:
            out = jnp.floor_divide(total, count.astype(acc))
    else:
        raise ValueError(f"scatter_reduce: reduce must be sum, prod, mean, amax or amin, got {reduce!r}")
    return undo(out.astype(x.dtype))
