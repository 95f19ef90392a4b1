"""PyTorch's decompositions for what the lowering table does not cover.

Eager mode's fallback and compiled mode's AOTAutograd use this one table: an op with a lowering is
never decomposed (registering a lowering removes its op, and the in-place and out= variants derived
from it, from the table)."""
from __future__ import annotations

import torch

from ._registry import LOWERINGS

_cache: tuple[int, dict] | None = None


def _lowered_packets() -> set[tuple[str, str]]:
    """(name, overload) of every lowered op and of its in-place twin (add -> add_)."""
    names = set()
    for op in LOWERINGS:
        name = op._schema.name.split("::", 1)[1]
        names.add((name, op._overloadname))
        names.add((name + "_", op._overloadname))
    return names


def decomposition_table() -> dict:
    """op -> decomposition, for ops without a lowering (rebuilt when the table grows)."""
    global _cache
    if _cache is not None and _cache[0] == len(LOWERINGS):
        return _cache[1]
    from torch._decomp import decomposition_table as pytorch_table

    lowered = _lowered_packets()
    table = {}
    for op, fn in pytorch_table.items():
        if not isinstance(op, torch._ops.OpOverload) or op in LOWERINGS:
            continue
        name = op._schema.name.split("::", 1)[1]
        functional = (name, op._overloadname)
        if functional in lowered or (op._overloadname == "out" and (name, "default") in lowered):
            continue
        table[op] = fn
    _cache = (len(LOWERINGS), table)
    return table
