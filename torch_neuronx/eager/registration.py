"""Registers the neuron kernels with PyTorch's dispatcher.

Every lowered overload gets a PrivateUse1 kernel that runs it through the executor, and so do the
in-place and out= variants its lowering computes (`ops.variants`). Transfers and `.item()`
(`copy_kernels`), the data-dependent sizes (`dynamic`: nonzero, masked_select, the unique family,
bincount: one host read of the size each) and a few composite kernels (`composite_kernels`) have
kernels of their own; ops whose meta function PyTorch lacks get one (`meta_kernels`). Everything
else reaches the boxed fallback (`fallback`): PyTorch's decomposition if it has one, else the CPU.
"""
from __future__ import annotations

import torch

from ..ops import LOWERINGS
from ..ops.variants import is_view, variant_table
from . import (composite_kernels, copy_kernels, dynamic, executor, fallback, host_indices, index_lengths,
               unsupported_layouts)
from .meta_kernels import META_KERNELS
from ..ops.specs import spec_for

aten = torch.ops.aten
_libs: list = []

# views whose schema does not say so: PyTorch's own kernel makes them without a copy
_NATIVE_IN_EAGER = {"aten::_unsafe_view"}

# the index_put family takes index tensors on the host, as ATen's kernels do (`host_indices`): whether
# each writes into `self`
_INDEX_PUT = {aten.index_put_.default: True, aten.index_put.default: False}


def _reaches_backend(op) -> bool:
    """An eager kernel of ours is wanted: not composite (PyTorch decomposes those above us), not one
    of the C++ shim's kernels, and not a view (eager views are native strided tensors; the table's
    functional lowerings of views serve compiled graphs)."""
    name = op.name()
    return not (
        is_view(op)
        or name in _NATIVE_IN_EAGER
        or torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd")
        or torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1")
    )


def _kernel(op):
    """The PrivateUse1 kernel of `op`; its OpSpec is looked up on first call (keeps `import torch` fast).
    An op whose lowering or compile fails for its inputs goes to TorchNeuron's recovery
    (`fallback.recover`: the CPU, unless TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1)."""
    run = executor.run
    failed = executor.LoweringFailed
    spec = None
    returns_nothing = not op._schema.returns  # `-> ()` (in-place foreach ops): the dispatcher wants None
    # a foreach op given tensors of several devices (`_foreach_copy_` from the host, addcmul's packed
    # scalars on the CPU, as CUDA takes them): PyTorch's own per-tensor path, as the CPU runs it
    mixed = executor.DeviceMismatch if op.name().startswith("aten::_foreach_") else ()

    def kernel(*args, **kwargs):
        nonlocal spec
        if spec is None:
            spec = spec_for(op)
        try:
            result = run(spec, args, kwargs)
        except mixed:
            result = op._op_dk(torch._C.DispatchKey.CompositeExplicitAutograd, *args, **kwargs)
        except failed as e:
            result = fallback.recover(op, args, kwargs, e)
        return None if returns_nothing else result

    kernel.__name__ = f"neuron_{op}"
    return kernel


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
    own = {
        aten.copy_.default: copy_kernels.copy_,
        aten._copy_from.default: copy_kernels.copy_from,
        aten._to_copy.default: copy_kernels.to_copy,
        aten._local_scalar_dense.default: copy_kernels.local_scalar_dense,
        aten._fused_sdp_choice.default: composite_kernels.fused_sdp_choice,
        aten.native_batch_norm.default: composite_kernels.native_batch_norm,
        aten.equal.default: composite_kernels.equal,
        aten.nonzero.default: dynamic.nonzero,
        aten.masked_select.default: dynamic.masked_select,
        aten._unique.default: dynamic.unique,
        aten._unique2.default: dynamic.unique2,
        aten.bincount.default: dynamic.bincount,
        aten.unique_consecutive.default: dynamic.unique_consecutive,
        aten.unique_dim.default: dynamic.unique_dim,
        aten.unique_dim_consecutive.default: dynamic.unique_dim_consecutive,
        aten.index.Tensor: dynamic.index,
        aten._index_put_impl_.default: host_indices.index_put_impl,
        aten.repeat_interleave.Tensor: dynamic.repeat_interleave,
    }
    for op, fn in own.items():
        lib.impl(op, fn, "PrivateUse1")
    for op, fn in META_KERNELS.items():
        if not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "Meta"):
            lib.impl(op, fn, "Meta")
    done = set(own)
    # every lowered overload and every variant one computes (the table `spec_for` reads too: built
    # once, here)
    for target in [*LOWERINGS, *variant_table()]:
        if target in done or not _reaches_backend(target):
            continue
        done.add(target)
        kernel = _kernel(target)
        if target in _INDEX_PUT:
            kernel = host_indices.index_put_kernel(kernel, in_place=_INDEX_PUT[target])
        elif target is aten.index_select.default:
            kernel = index_lengths.index_select_kernel(kernel)
        elif target in (aten.index_add.default, aten.index_add_.default):
            kernel = index_lengths.index_add_kernel(kernel, str(target))
        lib.impl(target, kernel, "PrivateUse1")
    boxed = torch.library.Library("_", "IMPL")
    boxed.fallback(fallback.fallback, dispatch_key="PrivateUse1")
    for key in unsupported_layouts.KEYS:
        boxed.fallback(unsupported_layouts.fallback_for(key), dispatch_key=key)
    for name in unsupported_layouts.COMPRESSED_KERNELS:
        lib.impl(name, unsupported_layouts.kernel_for(name, unsupported_layouts.COMPRESSED), unsupported_layouts.COMPRESSED)
    for name, key in unsupported_layouts.CONVERSIONS.items():
        lib.impl(name, unsupported_layouts.kernel_for(name, key), "PrivateUse1")
    _libs.extend([lib, boxed])
