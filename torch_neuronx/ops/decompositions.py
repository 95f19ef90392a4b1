"""PyTorch's decompositions for what the lowering table does not cover.

Eager mode's fallback and compiled mode's AOTAutograd use this one table: an op with a lowering is
never decomposed (registering a lowering removes its op, and the in-place and out= variants it
computes by `variants`' rule, from the table)."""
from __future__ import annotations

import torch

from ._registry import LOWERINGS
from .variants import variant_table

_cache: tuple[int, dict] | None = None


def decomposition_table() -> dict:
    """op -> decomposition, for ops without a lowering (rebuilt when the table grows)."""
    global _cache
    if _cache is not None and _cache[0] == len(LOWERINGS):
        return _cache[1]
    from torch._decomp import decomposition_table as pytorch_table

    lowered = variant_table()
    table = {}
    for op, fn in pytorch_table.items():
        if isinstance(op, torch._ops.OpOverload) and op not in LOWERINGS and op not in lowered:
            table[op] = fn
    _cache = (len(LOWERINGS), table)
    return table
