"""Ops whose result shape depends on the data (nonzero, masked_select, boolean-mask indexing,
repeat_interleave with tensor repeats).

Each waits for the device once to learn its result's size (the count of True elements), then runs
as ordinary static-shape device ops: `nonzero_static` with that size, and gathers with its result.
"""
from __future__ import annotations

import torch

from . import executor

aten = torch.ops.aten

_MASKS = (torch.bool, torch.uint8)


def nonzero(self):
    count = int(aten.ne.Scalar(self, 0).sum().item())  # the one host synchronization
    return aten.nonzero_static.default(self, size=count)


def masked_select(self, mask):
    self_b, mask_b = torch.broadcast_tensors(self, mask)
    flat = nonzero(mask_b.reshape(-1)).reshape(-1)
    return self_b.reshape(-1).index_select(0, flat)


def repeat_interleave_kernel(spec_for):
    """repeat_interleave.Tensor: its length is the sum of the repeats (one host read when the
    caller gives no output_size), then the static-shape lowering runs."""

    def repeat_interleave(repeats, *, output_size=None):
        if output_size is None:
            output_size = int(repeats.sum().item())
        return executor.run(spec_for(aten.repeat_interleave.Tensor), (repeats,), {"output_size": output_size})

    return repeat_interleave


def index_kernel(spec_for):
    """index.Tensor: boolean masks become the integer indices of their True elements, as PyTorch
    does, then the static-shape lowering runs."""

    def index(self, indices):
        if not any(i is not None and i.dtype in _MASKS for i in indices):
            return executor.run(spec_for(aten.index.Tensor), (self, indices), {})
        expanded = []
        for i in indices:
            if i is not None and i.dtype in _MASKS:
                expanded.extend(nonzero(i).unbind(1))
            else:
                expanded.append(i)
        return aten.index.Tensor(self, expanded)

    return index
