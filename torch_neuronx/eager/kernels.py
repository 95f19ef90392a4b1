"""Registers the neuron kernels with PyTorch's dispatcher.

Every lowered overload gets a PrivateUse1 kernel that runs it through the executor, and so do its
in-place and out= variants, derived by rule. Transfers, `.item()`, the attention backend choice, the
data-dependent sizes (nonzero, masked_select, the unique family: one host read of the size each) and
`_histogramdd_bin_edges` (a Tensor[] result) have kernels of their own. Ops whose meta function
PyTorch lacks (the histograms, fractional_max_pool3d_backward) get one here: the executor, like
compiled graphs, learns result shapes from meta. Everything else reaches the boxed fallback:
PyTorch's decomposition if it has one, else the CPU (counted, warned once per op, or an error with
TORCH_NEURONX_CPU_FALLBACK=error).
"""
from __future__ import annotations

import builtins
import functools
import os
import threading
import warnings

import torch

from .. import _C, metrics
from ..ops import LOWERINGS
from ..ops.decompositions import decomposition_table
from ..runtime import storage, transfer
from . import dynamic, executor
from .executor import OpSpec

aten = torch.ops.aten
_libs: list = []


def _is_view(op) -> bool:
    return any(r.alias_info is not None and not r.alias_info.is_write for r in op._schema.returns)


# views whose schema does not say so: PyTorch's own kernel makes them without a copy
_NATIVE_IN_EAGER = {"aten::_unsafe_view"}


def _reaches_backend(op) -> bool:
    """An eager kernel of ours is wanted: not composite (PyTorch decomposes those above us), not one
    of the C++ shim's kernels, and not a view (eager views are native strided tensors; the table's
    functional lowerings of views serve compiled graphs)."""
    name = op.name()
    return not (
        _is_view(op)
        or name in _NATIVE_IN_EAGER
        or torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd")
        or torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1")
    )


def _same_args(a, b) -> bool:
    return [(x.name, str(x.type)) for x in a] == [(x.name, str(x.type)) for x in b]


def variants(op):
    """The in-place and out= overloads computed by `op`'s functional lowering."""
    schema = op._schema
    if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
        return []  # already in place
    if _is_view(op):
        return []  # unsqueeze_, t_, ...: they change a tensor's metadata, not its values
    name = schema.name.split("::", 1)[1]
    found = []
    inplace = getattr(aten, name + "_", None)
    if inplace is not None and op._overloadname in inplace.overloads():
        ov = getattr(inplace, op._overloadname)
        if _same_args(ov._schema.arguments, schema.arguments):
            found.append(ov)
    packet = getattr(aten, name)
    for ov_name in packet.overloads():
        ov = getattr(packet, ov_name)
        args = ov._schema.arguments
        outs = [a for a in args if a.is_out]
        if outs and len(outs) == len(schema.returns) and _same_args([a for a in args if not a.is_out], schema.arguments):
            found.append(ov)
    return found


def _kernel(op, functional, lowering):
    """The PrivateUse1 kernel of `op`; its OpSpec is built on first call (keeps `import torch` fast)."""
    run = executor.run
    spec = None

    def kernel(*args, **kwargs):
        nonlocal spec
        if spec is None:
            spec = OpSpec(op, functional, lowering)
        return run(spec, args, kwargs)

    kernel.__name__ = f"neuron_{op}"
    return kernel


# ----------------------------------------------------------------------------------------------
# Transfers and host reads


def _whole_storage(t) -> int:
    """The storage key if `t` is exactly its whole storage, contiguous; else 0."""
    key, nbytes, sizes, strides, offset = _C._tensor_layout(t)
    if offset == 0 and t.is_contiguous() and t.numel() * t.element_size() == nbytes:
        return key
    return 0


@functools.cache
def _spec(op, functional=None) -> OpSpec:
    functional = functional or op
    return OpSpec(op, functional, LOWERINGS[functional])


def device_array(t: torch.Tensor):
    """`t`'s values as a jax array of shape `t.shape` on its device (one launch if `t` is a view)."""
    storage.sync()
    key = _whole_storage(t) if not (t.is_conj() or t.is_neg()) else 0
    if key:
        buf = storage.BUFFERS.get(key)
        if buf is not None and buf.dtype == transfer.to_numpy_dtype(t.dtype):
            return buf.reshape(t.shape) if t.dim() != 1 else buf
    c = executor.run(_spec(aten.clone.default), (t,), {"memory_format": torch.contiguous_format})
    buf = storage.BUFFERS.get(_C._storage_key(c))
    if buf is None:  # nothing was ever written: zeros
        from .._jax import jnp

        return jnp.zeros(tuple(t.shape), transfer.to_numpy_dtype(t.dtype))
    return buf.reshape(t.shape)


def to_host(t: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU copy of a neuron tensor (waits for the device)."""
    return transfer.numpy_to_torch(transfer.to_host(device_array(t))).reshape(t.shape)


def _wrap(arr, shape, dtype, device) -> torch.Tensor:
    t = torch.empty(shape, dtype=dtype, device=device)
    key = _C._storage_key(t)
    if key:
        storage.BUFFERS[key] = arr.reshape(-1)
    return t


def _copy_into(dst: torch.Tensor, arr) -> None:
    """Write a flat jax array (dst's dtype, dst.numel() values, on dst's device) into dst."""
    storage.sync()
    key = _whole_storage(dst)
    if key:
        storage.BUFFERS[key] = arr
        return
    tmp = _wrap(arr, dst.shape, dst.dtype, dst.device)
    executor.run(_spec(aten.copy_.default, aten.copy.default), (dst, tmp), {})


def copy_(self, src, non_blocking=False):
    if self.device.type == "neuron":
        if src.device == self.device:
            return executor.run(_spec(aten.copy_.default, aten.copy.default), (self, src, non_blocking), {})
        if self.numel() == 0:
            return self
        if src.device.type == "neuron":
            moved = src.to(self.dtype).expand(self.shape)
            arr = transfer.between_devices(device_array(moved).reshape(-1), self.device.index)
        else:
            host = src.to(self.dtype).expand(self.shape).contiguous()
            arr = transfer.to_device(transfer.torch_to_numpy(host).reshape(-1), self.device.index)
        _copy_into(self, arr)
        return self
    # neuron -> cpu (or another host device)
    self.copy_(to_host(src))
    return self


def _copy_from(self, dst, non_blocking=False):
    copy_(dst, self, non_blocking)
    return dst


def _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    target = torch.device(device) if device is not None else self.device
    if target.type == "neuron" and target.index is None:
        target = torch.device("neuron", torch.neuron.current_device())
    if target == self.device:
        kwargs = {"dtype": dtype, "memory_format": memory_format}
        return executor.run(_spec(aten._to_copy.default), (self,), {k: v for k, v in kwargs.items() if v is not None})
    dtype = dtype if dtype is not None else self.dtype
    if memory_format in (None, torch.preserve_format) and _dense(self):
        out = torch.empty_strided(self.shape, self.stride(), dtype=dtype, device=target, pin_memory=bool(pin_memory))
    else:
        out = torch.empty(self.shape, dtype=dtype, device=target, memory_format=memory_format or torch.contiguous_format)
    return out.copy_(self, non_blocking)


def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """BatchNorm's eager op writes its running stats although its schema does not say so; the
    `_legit` ops that say so carry the lowerings, so one executable updates them in place."""
    if running_mean is None or running_var is None:
        return aten._native_batch_norm_legit.no_stats(input, weight, bias, training, momentum, eps)
    if training:
        return aten._native_batch_norm_legit.default(input, weight, bias, running_mean, running_var, True, momentum, eps)
    return aten._native_batch_norm_legit_no_training.default(input, weight, bias, running_mean, running_var, momentum, eps)


def equal(self, other) -> bool:
    """torch.equal returns a Python bool: same shape, then one reduction on the device and a read."""
    if self.device != other.device:
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, "
            f"{self.device} and {other.device}! (when checking argument other in aten.equal.default)"
        )
    if self.shape != other.shape:
        return False
    return bool(aten.eq.Tensor(self, other).all().item())


def _dense(t) -> bool:
    from torch._prims_common import is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense

    return is_non_overlapping_and_dense(t)


def _local_scalar_dense(self):
    return to_host(self).item()


def _fused_sdp_choice(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
    # the same choice as csrc/attention.cpp's dispatch stub, for callers of the op itself
    backend = torch.nn.attention.SDPBackend
    return int((backend.MATH if dropout_p > 0 else backend.OVERRIDEABLE).value)


# ----------------------------------------------------------------------------------------------
# unique and its variants: data-dependent result sizes


@functools.cache
def _unique_programs():
    """The two jitted device programs of every unique op (built on first use: no jax at import).

    `find(x, sort, rows)`: x is (N,) or, for the dim variants, (N, M) rows. Sorts it (stably;
    floats as PyTorch's sort orders them: -0.0 == 0.0, NaNs last) unless consecutive, marks the
    elements (rows) that differ from their predecessor (NaN differs from everything, as in
    PyTorch's `!=`), and counts the groups. `gather(x, perm, new, k)`: with the group count k known
    on the host, the first element (row) of each group in sorted order (its first occurrence),
    each input element's group index, and each group's size."""
    import numpy as np

    from .._jax import jax, jnp, lax

    def keys_of(x):
        return x.astype(np.uint8) if x.dtype == np.bool_ else x

    def row_order(x, iota):
        """A stable lexicographic order of the rows of x (N, M): one sort keyed on all M columns
        when M is small, else M two-key sorts in a scan (each refining the rows' ranks so far
        by the next column), so the program does not grow with M."""
        n, m = x.shape
        if m <= 8:
            cols = tuple(keys_of(x[:, j]) for j in range(m))
            return lax.sort(cols + (iota,), num_keys=m, is_stable=True)[-1]

        def refine(rank, col):
            r, c, idx = lax.sort((rank, keys_of(col), iota), num_keys=2, is_stable=True)
            step = jnp.concatenate([jnp.zeros((1,), np.int64),
                                    ((r[1:] != r[:-1]) | (c[1:] != c[:-1])).astype(np.int64)])
            return jnp.zeros((n,), np.int64).at[idx].set(jnp.cumsum(step), mode="promise_in_bounds"), None

        rank, _ = lax.scan(refine, jnp.zeros((n,), np.int64), x.T)
        return lax.sort((rank, iota), num_keys=1, is_stable=True)[1]

    def find(x, sort: bool, rows: bool):
        n = x.shape[0]
        iota = lax.iota(np.int64, n)
        if sort:
            if rows:
                perm = row_order(x, iota)
            else:
                perm = lax.sort((keys_of(x), iota), num_keys=1, is_stable=True)[1]
            vals = x.at[perm].get(mode="promise_in_bounds")
        else:
            perm, vals = iota, x
        differ = vals[1:] != vals[:-1]
        if rows:
            differ = jnp.any(differ, axis=1)
        new = jnp.concatenate([jnp.ones((1,), bool), differ])
        return vals, perm, new, jnp.sum(new, dtype=np.int64)

    def gather(vals, perm, new, k: int):
        n = vals.shape[0]
        group = jnp.cumsum(new.astype(np.int64)) - 1
        starts = jnp.nonzero(new, size=k, fill_value=n)[0].astype(np.int64)
        out = vals.at[starts].get(mode="promise_in_bounds")
        inverse = jnp.zeros((n,), np.int64).at[perm].set(group, mode="promise_in_bounds")
        counts = jnp.diff(jnp.concatenate([starts, jnp.full((1,), n, np.int64)]))
        return out, inverse, counts

    return (jax.jit(find, static_argnames=("sort", "rows")), jax.jit(gather, static_argnames=("k",)))


def _unique_core(name, x, sort: bool, rows: bool):
    """(output, inverse, counts) as jax arrays for x (N,) or (N, ...) rows (N > 0). One host
    synchronization: the number of groups."""
    find, gather = _unique_programs()
    arr = device_array(x)
    if rows:
        arr = arr.reshape(x.shape[0], -1)
    vals, perm, new, count = find(arr, sort=sort, rows=rows)
    k = int(count)  # the one host synchronization
    return gather(vals, perm, new, k=k)


def _empty_long(shape, device):
    return torch.empty(shape, dtype=torch.long, device=device)


def _unique_flat(name, self, sort, return_inverse, return_counts):
    metrics.executed(name)
    dev = self.device
    if self.numel() == 0:
        return (torch.empty((0,), dtype=self.dtype, device=dev),
                _empty_long(self.shape if return_inverse else (0,), dev), _empty_long((0,), dev))
    out, inverse, counts = _unique_core(name, self.reshape(-1), sort, False)
    k = out.shape[0]
    return (_wrap(out, (k,), self.dtype, dev),
            _wrap(inverse, self.shape, torch.long, dev) if return_inverse else _empty_long((0,), dev),
            _wrap(counts, (k,), torch.long, dev) if return_counts else _empty_long((0,), dev))


def _unique_rows(name, self, dim, sort):
    """unique_dim / unique_dim_consecutive: the slices along `dim` as rows; every output returned."""
    metrics.executed(name)
    if self.dim() == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    dim = dim % self.dim()
    dev = self.device
    if self.size(dim) == 0:
        if sum(1 for n in self.shape if n == 0) != 1:
            raise RuntimeError("Number of zero sized dimensions is more than one, so unique cannot be applied ")
        return torch.empty(self.shape, dtype=self.dtype, device=dev), _empty_long((0,), dev), _empty_long((0,), dev)
    if self.numel() == 0:
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
    moved = self.movedim(dim, 0)
    out, inverse, counts = _unique_core(name, moved, sort, True)
    k = out.shape[0]
    shape = (k,) + tuple(moved.shape[1:])
    output = _wrap(out, shape, self.dtype, dev).movedim(0, dim)
    return output, _wrap(inverse, (self.size(dim),), torch.long, dev), _wrap(counts, (k,), torch.long, dev)


def _unique(self, sorted=True, return_inverse=False):
    out, inverse, _ = _unique_flat("aten._unique.default", self, True, return_inverse, False)
    return out, inverse


def _unique2(self, sorted=True, return_inverse=False, return_counts=False):
    """torch.unique (dim=None). Always sorted, as PyTorch's CPU kernel (`sorted=False` too).
    Sorts on the device, waits once for the number of distinct values, then gathers."""
    return _unique_flat("aten._unique2.default", self, True, return_inverse, return_counts)


def bincount(self, weights=None, minlength=0):
    """torch.bincount: the output's length is max(self) + 1 (at least minlength), a data-dependent
    shape: one host synchronization (min and max together), then an accumulating index_put."""
    if self.dim() != 1 or self.dtype.is_floating_point or self.dtype.is_complex or self.dtype == torch.bool:
        if self.dtype.is_floating_point:
            raise NotImplementedError(f'"bincount_cpu" not implemented for \'{str(self.dtype).removeprefix("torch.")}\'')
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is not None and (weights.dim() != 1 or weights.size(0) != self.size(0)):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    n = minlength
    if self.numel():
        low, high = (int(v) for v in to_host(torch.stack([self.min(), self.max()]).to(torch.int64)).tolist())
        if low < 0:
            raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
        n = max(n, high + 1)
    if weights is None:
        dtype, values = torch.int64, torch.ones((), dtype=torch.int64, device=self.device).expand(self.shape)
    else:
        dtype = torch.float32 if weights.dtype == torch.float32 else torch.float64
        values = weights.to(dtype)
    out = torch.zeros(n, dtype=dtype, device=self.device)
    return out.index_put_((self.to(torch.int64),), values, accumulate=True)


def unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    """torch.unique_consecutive: groups of equal neighbours; one host synchronization (their count)."""
    if dim is None or (self.dim() == 1 and dim in (0, -1)):
        return _unique_flat("aten.unique_consecutive.default", self, False, return_inverse, return_counts)
    return _unique_rows("aten.unique_consecutive.default", self, dim, False)


def unique_dim(self, dim, sorted=True, return_inverse=False, return_counts=False):
    """torch.unique(dim=...): the distinct slices along `dim`, sorted lexicographically; one host
    synchronization. (Slices holding NaN never compare equal, as on the CPU; where the CPU's order
    of NaN-holding slices is unspecified, they sort as lax.sort orders NaN: last.)"""
    return _unique_rows("aten.unique_dim.default", self, dim, True)


def unique_dim_consecutive(self, dim, return_inverse=False, return_counts=False):
    return _unique_rows("aten.unique_dim_consecutive.default", self, dim, False)


# ----------------------------------------------------------------------------------------------
# Ops returning Tensor[]: the executor returns tensors and tuples only


def _histogramdd_bin_edges(self, bins, *, range=None, weight=None, density=False):
    """torch.histogramdd's bin edges (a Tensor[]): each dimension's are the edges
    `histogram.bin_ct` computes for that column alone (the same outer edges, from that column's
    min and max or its part of `range`, and the same linspace), one launch per dimension."""
    n = self.size(-1)
    if len(bins) != n:
        raise RuntimeError("histogramdd: The size of bins must be equal to the innermost dimension of the input.")
    if range is not None and len(range) != 2 * n:
        raise RuntimeError(f"histogramdd: for a {n}-dimensional histogram range should have {2 * n} elements, "
                           f"but got {len(range)}")
    flat = self.reshape(-1, n)
    return [
        aten.histogram.bin_ct(flat[:, d], int(bins[d]), range=None if range is None else list(range[2 * d: 2 * d + 2]))[1]
        for d in builtins.range(n)
    ]


# ----------------------------------------------------------------------------------------------
# Meta kernels PyTorch lacks (the executor learns result shapes from meta; so do compiled graphs)


def _meta_hist_check(self, op):
    if self.dtype not in (torch.float32, torch.float64):
        raise RuntimeError(f'"{op}" not implemented for \'{str(self.dtype).removeprefix("torch.")}\'')


def _meta_histogram_bin_ct(self, bins=100, *, range=None, weight=None, density=False):
    _meta_hist_check(self, "histogram_cpu")
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    return self.new_empty((bins,)), self.new_empty((bins + 1,))


def _meta_histogram_bins_tensor(self, bins, *, weight=None, density=False):
    _meta_hist_check(self, "histogram_cpu")
    if bins.dim() != 1:
        raise RuntimeError(f"torch.histogram(): bins tensor should have one dimension, but got {bins.dim()} dimensions")
    if bins.numel() <= 0:
        raise RuntimeError("torch.histogram(): bins tensor should have at least 1 element, but got 0 elements")
    return self.new_empty((bins.numel() - 1,)), self.new_empty(bins.shape)


def _meta_histogramdd_bin_edges(self, bins, *, range=None, weight=None, density=False):
    _meta_hist_check(self, "histogramdd")
    return [self.new_empty((int(b) + 1,)) for b in bins]


def _meta_histogramdd_from_bin_cts(self, bins, *, range=None, weight=None, density=False):
    _meta_hist_check(self, "histogramdd")
    return self.new_empty(tuple(int(b) for b in bins))


def _meta_histogramdd_from_bin_tensors(self, bins, *, weight=None, density=False):
    _meta_hist_check(self, "histogramdd")
    return self.new_empty(tuple(b.numel() - 1 for b in bins))


def _meta_fractional_max_pool3d_backward(grad_output, self, kernel_size, output_size, indices):
    return self.new_empty(self.shape)


_META_KERNELS = {
    aten.fractional_max_pool3d_backward.default: _meta_fractional_max_pool3d_backward,
    aten.histogram.bin_ct: _meta_histogram_bin_ct,
    aten.histogram.bins_tensor: _meta_histogram_bins_tensor,
    aten._histogramdd_bin_edges.default: _meta_histogramdd_bin_edges,
    aten._histogramdd_from_bin_cts.default: _meta_histogramdd_from_bin_cts,
    aten._histogramdd_from_bin_tensors.default: _meta_histogramdd_from_bin_tensors,
}


# ----------------------------------------------------------------------------------------------
# The fallback: decompositions, then the CPU

_state = threading.local()
_warned: set[str] = set()
FALLBACK_ENV = "TORCH_NEURONX_CPU_FALLBACK"


def _decomposition(op):
    return decomposition_table().get(op)


def _fallback(op, *args, **kwargs):
    active = getattr(_state, "decomposing", None)
    if active is None:
        active = _state.decomposing = set()
    decomp = _decomposition(op)
    if decomp is not None and op not in active:
        metrics.decomposed(str(op))
        active.add(op)
        try:
            out = decomp(*args, **kwargs)
        finally:
            active.discard(op)
        if out is not NotImplemented:
            return out
    return cpu_fallback(op, args, kwargs)


def _neuron_device(args, kwargs):
    for v in list(args) + list(kwargs.values()):
        if isinstance(v, torch.Tensor) and v.device.type == "neuron":
            return v.device
        if isinstance(v, (list, tuple)):
            for x in v:
                if isinstance(x, torch.Tensor) and x.device.type == "neuron":
                    return x.device
    dev = kwargs.get("device")
    if dev is not None:
        dev = torch.device(dev)
        return dev if dev.index is not None else torch.device("neuron", torch.neuron.current_device())
    return torch.device("neuron", torch.neuron.current_device())


def cpu_fallback(op, args, kwargs):
    name = str(op)
    mode = os.environ.get(FALLBACK_ENV, "warn").lower()
    if mode == "error":
        raise RuntimeError(
            f"neuron: {name} has no neuron lowering and {FALLBACK_ENV}=error forbids running it on the CPU"
        )
    metrics.fell_back(name)
    if mode != "silent" and name not in _warned:
        _warned.add(name)
        warnings.warn(
            f"neuron: {name} is not lowered; it runs on the CPU (copying its inputs to the host and back). "
            f"torch_neuronx.get_fallback_ops() lists such ops; set {FALLBACK_ENV}=error to make this an error.",
            stacklevel=3,
        )
    device = _neuron_device(args, kwargs)

    def to_cpu(v):
        if isinstance(v, torch.Tensor) and v.device.type == "neuron":
            # a CPU tensor of its own (to_host's may wrap numpy memory, which cannot be resized
            # when the op resizes an out= argument)
            return to_host(v).clone()
        if isinstance(v, (list, tuple)):
            return type(v)(to_cpu(x) for x in v)
        if isinstance(v, torch.device) and v.type == "neuron":
            return torch.device("cpu")
        if isinstance(v, str) and v.startswith("neuron"):
            return "cpu"
        if isinstance(v, torch.Generator) and v.device.type == "neuron":
            return None
        return v

    cpu_args = [to_cpu(a) for a in args]
    cpu_kwargs = {k: to_cpu(v) for k, v in kwargs.items()}
    out = op(*cpu_args, **cpu_kwargs)
    schema = op._schema
    names = [a.name for a in schema.arguments]
    by_alias = {}
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            orig = args[i] if i < len(args) else kwargs.get(a.name)
            new = cpu_args[i] if i < len(args) else cpu_kwargs.get(a.name)
            if isinstance(orig, torch.Tensor) and orig.device.type == "neuron":
                if tuple(orig.shape) != tuple(new.shape):
                    orig.resize_(new.shape)
                orig.copy_(new)
            by_alias[frozenset(a.alias_info.before_set)] = orig

    def to_device(v):
        if isinstance(v, torch.Tensor):
            return v.to(device)
        if isinstance(v, (list, tuple)):
            return type(v)(to_device(x) for x in v)
        return v

    rets = schema.returns
    if len(rets) == 1:
        r = rets[0]
        if r.alias_info is not None and frozenset(r.alias_info.before_set) in by_alias:
            return by_alias[frozenset(r.alias_info.before_set)]
        return to_device(out)
    results = []
    for r, v in zip(rets, out):
        if r.alias_info is not None and frozenset(r.alias_info.before_set) in by_alias:
            results.append(by_alias[frozenset(r.alias_info.before_set)])
        else:
            results.append(to_device(v))
    del names
    return tuple(results)


# ----------------------------------------------------------------------------------------------


def register() -> None:
    """Install every neuron kernel (idempotent). Imports no jax."""
    if _libs:
        return
    lib = torch.library.Library("aten", "IMPL")
    try:
        _register_into(lib)
    except BaseException:
        lib._destroy()
        raise


def _register_into(lib) -> None:
    special = {
        aten.copy_.default: copy_,
        aten._copy_from.default: _copy_from,
        aten._to_copy.default: _to_copy,
        aten._local_scalar_dense.default: _local_scalar_dense,
        aten._fused_sdp_choice.default: _fused_sdp_choice,
        aten.nonzero.default: dynamic.nonzero,
        aten.masked_select.default: dynamic.masked_select,
        aten._unique.default: _unique,
        aten._unique2.default: _unique2,
        aten.bincount.default: bincount,
        aten.unique_consecutive.default: unique_consecutive,
        aten.unique_dim.default: unique_dim,
        aten.unique_dim_consecutive.default: unique_dim_consecutive,
        aten._histogramdd_bin_edges.default: _histogramdd_bin_edges,
        aten.index.Tensor: dynamic.index_kernel(_spec),
        aten.repeat_interleave.Tensor: dynamic.repeat_interleave_kernel(_spec),
        aten.native_batch_norm.default: native_batch_norm,
        aten.equal.default: equal,
    }
    for op, fn in special.items():
        lib.impl(op, fn, "PrivateUse1")
    for op, fn in _META_KERNELS.items():
        if not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "Meta"):
            lib.impl(op, fn, "Meta")
    done = set(special)
    for op in list(LOWERINGS):
        for target in [op] + variants(op):
            if target in done or not _reaches_backend(target):
                continue
            done.add(target)
            lib.impl(target, _kernel(target, op, LOWERINGS[op]), "PrivateUse1")
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(_fallback, dispatch_key="PrivateUse1")
    _libs.extend([lib, fallback])


def registered_ops() -> set[str]:
    return {str(op) for op in LOWERINGS}
