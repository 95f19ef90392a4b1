"""The variant rule: which in-place and out= overloads a functional lowering computes.

`add.Tensor`'s lowering also serves `add_.Tensor` (same arguments, written into `self`) and
`add.out` (same arguments plus out=, as many outs as returns). Eager registration installs kernels
for these variants and the decomposition table leaves them out: one rule for both.
"""
from __future__ import annotations

import functools

import torch

from ._registry import LOWERINGS

aten = torch.ops.aten


def is_view(op) -> bool:
    return any(r.alias_info is not None and not r.alias_info.is_write for r in op._schema.returns)


def _same_args(a, b) -> bool:
    return [(x.name, str(x.type)) for x in a] == [(x.name, str(x.type)) for x in b]


def variants(op) -> list:
    """The in-place and out= overloads computed by `op`'s functional lowering."""
    schema = op._schema
    if op.namespace != "aten":
        return []  # a custom kernel's op (ops/custom.py): its variants are ops of their own, if any
    if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
        return []  # already in place
    if is_view(op):
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


@functools.lru_cache(maxsize=4)
def _table(n_lowerings: int) -> dict:
    # the first functional lowering that computes a variant claims it, even where the variant has a
    # lowering of its own (fill_.Scalar: eager runs fill.Scalar's; graphs, functionalized, use neither)
    table = {}
    for op in list(LOWERINGS):
        for v in variants(op):
            if v not in table and v not in _claimed_first(v, op):
                table[v] = op
    return table


def _claimed_first(variant, op) -> tuple:
    """The variant itself when it is lowered before `op` (then it computes itself)."""
    order = list(LOWERINGS)
    if variant in LOWERINGS and order.index(variant) < order.index(op):
        return (variant,)
    return ()


def variant_table() -> dict:
    """variant overload -> the functional overload whose lowering computes it (rebuilt when the
    lowering table grows)."""
    return _table(len(LOWERINGS))


def functional_of(op):
    """The lowered overload that computes `op`: `op` itself, or the functional op of a variant."""
    functional = variant_table().get(op)
    if functional is None and op in LOWERINGS:
        return op
    if functional is None:
        raise KeyError(f"{op} has no lowering and is no in-place/out= variant of one")
    return functional
