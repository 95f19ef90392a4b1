"""Index tensors for `index.Tensor` and the `index_put` family, taken as ATen's own kernels take them.

These ops skip the dispatcher's same-device check (`device_check: NoCheck`): their kernels move index
tensors to the indexed tensor's device themselves, so a mask built on the host (`torch.rand(n) > 0.5`)
or a host list of positions indexes a device tensor, as on CUDA. What ATen checks of a mask before it
becomes positions (its shape against the dims it covers: an IndexError; the uint8 deprecation
warning) is checked here for device and host masks alike. A host mask that `index.Tensor` would turn
into positions becomes them on the host (`nonzero` there reads no device); one `index_put` keeps is
copied to the device whole (its lowering selects with it, no positions needed).
"""
from __future__ import annotations

import warnings

import torch

from ..ops.argument_checks import index_masks
from . import index_lengths

_MASKS = (torch.bool, torch.uint8)
UINT8_DEPRECATED = "indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead."


def check_masks(self, indices) -> None:
    """ATen's checks of the masks among `indices` (their shapes: `argument_checks.index_masks`); a uint8
    mask warns, as the CPU's `expandTensors` does."""
    index_masks(self, indices)
    if any(i is not None and i.dtype == torch.uint8 for i in indices):
        warnings.warn(UINT8_DEPRECATED, UserWarning, stacklevel=3)


def has_masks(indices) -> bool:
    return any(i is not None and i.dtype in _MASKS for i in indices)


def to_device(self, indices, *, mask_positions: bool) -> list:
    """`indices` with every host tensor on `self`'s device (one on another device is ATen's IndexError).
    A host mask becomes the positions of its True elements first (one index tensor per dim it covers)
    where `mask_positions`, else is moved."""
    device = self.device
    moved = []
    for index in indices:
        if index is None or index.device == device:
            moved.append(index)
        elif index.device.type != "cpu":
            raise IndexError(f"indices should be either on cpu or on the same device as the indexed tensor ({device})")
        elif mask_positions and index.dtype in _MASKS:
            moved.extend(p.to(device) for p in index.nonzero().unbind(1))
        else:
            moved.append(index.to(device))
    return moved


def elsewhere(self, indices) -> bool:
    """Whether an index tensor is not on `self`'s device."""
    return any(i is not None and i.device != self.device for i in indices)


def masked_fill_mask(self, indices, values):
    """The mask `_index_put_impl_` hands to `masked_fill_` instead (ATen's `canDispatchToMaskedFill`:
    one value on the host, one mask on `self`'s device and no other index), shaped to broadcast
    against `self`; else None."""
    if values.numel() != 1 or values.device.type != "cpu":
        return None
    mask, covered = None, 0
    for index in indices:
        if index is None:
            covered += 1
            continue
        if index.dtype not in _MASKS or index.device != self.device or mask is not None:
            return None
        mask = index
        index_masks(self, [None] * covered + [index])
        covered += index.dim()
    if mask is None:
        return None
    return mask.reshape(tuple(mask.shape) + (1,) * (self.dim() - covered))


def index_put_kernel(kernel, *, in_place: bool):
    """An `index_put` family kernel (self, indices, values, accumulate, ...) taking host indices: the
    masked_fill path ATen takes where it applies, the masks checked, host indices moved."""

    name = "aten.index_put_.default" if in_place else "aten.index_put.default"

    def run(self, indices, values, accumulate=False, *rest, **kwargs):
        if not accumulate and not rest and not kwargs:
            mask = masked_fill_mask(self, indices, values)
            if mask is not None:
                fill = self.masked_fill_ if in_place else self.masked_fill
                return fill(mask, values.item())
        if has_masks(indices):
            check_masks(self, indices)
        else:  # a loop over many index lengths: at the bucket of this one
            padded = index_lengths.index_put_args(name, self, indices, values, accumulate)
            if padded is not None:
                indices, values = padded
        if elsewhere(self, indices):
            indices = to_device(self, indices, mask_positions=False)
        return kernel(self, indices, values, accumulate, *rest, **kwargs)

    run.__name__ = kernel.__name__
    return run


def index_put_impl(self, indices, values, accumulate=False, unsafe=False):
    """`_index_put_impl_`: `index_put_` (`unsafe` only skips checks ATen's CUDA kernel may skip)."""
    return torch.ops.aten.index_put_.default(self, indices, values, accumulate)
