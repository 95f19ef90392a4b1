"""Every Core ATen operator (`torch.Tag.core`) runs on the device without the CPU fallback, in eager
mode (a neuron kernel, or PyTorch's native view machinery) and in compiled mode (a lowering)."""
import torch

import torch_neuronx  # noqa: F401
from torch_neuronx.ops import LOWERINGS

_has = torch._C._dispatch_has_kernel_for_dispatch_key

# Core ops a static compiled graph never holds: shape queries (ints in a static graph), ops with a
# data-dependent result (Dynamo breaks the graph there and they run eagerly), resize_ (functionalized)
NOT_IN_STATIC_GRAPHS = {
    "aten._local_scalar_dense.default", "aten.nonzero.default", "aten.resize_.default",
    "aten.sym_is_contiguous.default", "aten.sym_numel.default", "aten.sym_size.int",
    "aten.sym_storage_offset.default", "aten.sym_stride.int",
}


def core_ops():
    ops = []
    for name in torch._C._dispatch_get_all_op_names():
        ns, _, rest = name.partition("::")
        base, _, overload = rest.partition(".")
        packet = getattr(torch.ops.aten, base, None) if ns == "aten" else None
        op = getattr(packet, overload or "default", None) if packet is not None else None
        if op is not None and torch.Tag.core in op.tags:
            ops.append(op)
    return ops


def test_there_is_a_core_set():
    assert len(core_ops()) > 150


def test_every_core_op_has_a_neuron_kernel_in_eager_mode():
    missing = []
    for op in core_ops():
        name = op.name()
        if _has(name, "CompositeImplicitAutograd") or _has(name, "PrivateUse1"):
            continue  # decomposed above the backend, or ours
        is_view = any(r.alias_info is not None and not r.alias_info.is_write for r in op._schema.returns)
        if is_view and op in LOWERINGS:
            continue  # a native strided view in eager (as_strided over the same storage)
        missing.append(str(op))
    assert missing == []


def test_every_core_op_is_lowered_for_compiled_graphs():
    missing = []
    for op in core_ops():
        if _has(op.name(), "CompositeImplicitAutograd") or str(op) in NOT_IN_STATIC_GRAPHS:
            continue
        if op in LOWERINGS:
            continue
        out_of = [a for a in op._schema.arguments if a.is_out]
        if out_of:  # an out= overload: compiled graphs are functional, they hold its functional twin
            continue
        missing.append(str(op))
    assert missing == []
