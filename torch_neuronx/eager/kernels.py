"""Registers the neuron kernels with PyTorch's dispatcher.

Every lowered overload gets a PrivateUse1 kernel that runs it through the executor, and so do its
in-place and out= variants, derived by rule. Transfers, `.item()`, the attention backend choice, the
data-dependent sizes (`dynamic.py`: nonzero, masked_select, the unique family, bincount: one host
read of the size each) and
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


def device_flat(t: torch.Tensor):
    """`t`'s values as a flat jax array on its device: its storage buffer itself when `t` is the
    whole storage (no launch, no copy), else a contiguous copy (one launch)."""
    storage.sync()
    key = _whole_storage(t) if not (t.is_conj() or t.is_neg()) else 0
    if key:
        buf = storage.BUFFERS.get(key)
        if buf is not None and buf.dtype == transfer.to_numpy_dtype(t.dtype):
            return buf
    c = executor.run(_spec(aten.clone.default), (t,), {"memory_format": torch.contiguous_format})
    buf = storage.BUFFERS.get(_C._storage_key(c))
    if buf is None:  # nothing was ever written: zeros
        from ..runtime.lazy_jax import jnp

        return jnp.zeros((t.numel(),), transfer.to_numpy_dtype(t.dtype))
    return buf


def device_array(t: torch.Tensor):
    """`t`'s values as a jax array of shape `t.shape` on its device (one launch if `t` is a view)."""
    flat = device_flat(t)
    return flat if t.dim() == 1 else flat.reshape(t.shape)


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


def allow_fallback(name: str, graph: str | None = None, node: str | None = None, error=RuntimeError,
                   stacklevel: int = 3) -> None:
    """Before op `name` runs on the CPU (in eager mode, or from inside compiled `graph` at `node`):
    raise `error` under TORCH_NEURONX_CPU_FALLBACK=error, else warn once per op unless `silent`."""
    mode = os.environ.get(FALLBACK_ENV, "warn").lower()
    if mode == "error":
        metrics.fallback_refused(name)
        where = f"graph {graph}: op {name} (node '{node}')" if graph else f"neuron: {name}"
        raise error(f"{where} has no neuron lowering and {FALLBACK_ENV}=error forbids running it on the CPU")
    if mode != "silent" and name not in _warned:
        _warned.add(name)
        runs = f"the compiled graph {graph} runs it" if graph else "it runs"
        warnings.warn(
            f"neuron: {name} is not lowered; {runs} on the CPU (copying its inputs to the host and back). "
            f"torch_neuronx.get_fallback_ops() lists such ops; set {FALLBACK_ENV}=error to make this an error.",
            stacklevel=stacklevel + 1,
        )


def cpu_fallback(op, args, kwargs):
    name = str(op)
    allow_fallback(name)
    metrics.fell_back(name)
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
        aten._unique.default: dynamic._unique,
        aten._unique2.default: dynamic._unique2,
        aten.bincount.default: dynamic.bincount,
        aten.unique_consecutive.default: dynamic.unique_consecutive,
        aten.unique_dim.default: dynamic.unique_dim,
        aten.unique_dim_consecutive.default: dynamic.unique_dim_consecutive,
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
