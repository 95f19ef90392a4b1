"""PrivateUse1 kernels of the ops whose lowering is a user's custom kernel (`ops.custom`).

Such an op runs through the executor like any lowered overload: its call is keyed, traced, queued
into the fused run (or compiled and launched on its own with fusion off), and loaded from disk by a
new process. `on_device` is the CPU kernel of an op given no CPU implementation: its neuron kernel on
copies of the CPU tensors.
"""
from __future__ import annotations

import torch
import torch.utils._pytree as pytree

from ..ops.specs import spec_for
from . import executor

_libraries: dict[str, torch.library.Library] = {}  # namespace -> the IMPL library of its kernels
_registered: set = set()


def register(op: torch._ops.OpOverload) -> None:
    """Give `op` (whose lowering `ops.custom.add` installed) its PrivateUse1 kernel, once: the kernel
    looks the op's spec up at each call, so a replaced lowering is what it runs next."""
    if op in _registered:
        return
    lib = _libraries.get(op.namespace)
    if lib is None:
        lib = _libraries[op.namespace] = torch.library.Library(op.namespace, "IMPL")
    lib.impl(op, _kernel(op), "PrivateUse1")
    _registered.add(op)


def forget_executables() -> None:
    """Drop the eager executables this process holds (a custom kernel was replaced: in memory the old
    kernel's keys equal the new one's, `protocol.KernelName` differing only in how keys are spelled)."""
    executor.clear_cache()


def _kernel(op):
    run = executor.run
    returns_nothing = not op._schema.returns  # the dispatcher wants None back, not the executor's ()

    def kernel(*args, **kwargs):
        result = run(spec_for(op), args, kwargs)
        return None if returns_nothing else result

    kernel.__name__ = f"neuron_{op}"
    return kernel


def on_device(qualname: str, name: str):
    """A CPU kernel for the custom op `qualname` ("ns::op") that runs its neuron kernel: the CPU
    tensors copied to the current neuron device, the results and the mutated arguments copied back."""

    def kernel(*args, **kwargs):
        namespace, opname = qualname.split("::")
        op = getattr(getattr(torch.ops, namespace), opname).default
        device = torch.device("neuron", torch.neuron.current_device())
        moved_args, moved_kwargs = pytree.tree_map_only(torch.Tensor, lambda t: t.to(device), (args, kwargs))
        out = op(*moved_args, **moved_kwargs)
        for i, a in enumerate(op._schema.arguments):
            if a.alias_info is not None and a.alias_info.is_write:
                original = args[i] if i < len(args) else kwargs.get(a.name)
                if isinstance(original, torch.Tensor):
                    moved = moved_args[i] if i < len(args) else moved_kwargs[a.name]
                    original.copy_(moved)
        return pytree.tree_map_only(torch.Tensor, lambda t: t.cpu(), out)

    kernel.__name__ = name  # what torch.library's messages call the op's function
    return kernel
