"""Transfers and host reads: `copy_` between devices, `_to_copy`, `_copy_from`, `.item()`.

A copy within one neuron device is an eager op (`copy_`'s executable writes the destination's view).
Host <-> device and device <-> device copies move whole buffers through the runtime, then write
them into the destination (`buffers.copy_into`).
"""
from __future__ import annotations

import torch

from ..runtime import transfer
from . import executor
from .buffers import copy_into, device_flat, item, to_host
from ..ops.specs import spec_for
from ..ops.target_policy import refuse_complex_tensor

aten = torch.ops.aten


def copy_(self, src, non_blocking=False):
    if self.dtype.is_complex or src.dtype.is_complex:  # a Trainium target has no complex dtypes
        refuse_complex_tensor("aten.copy_.default", src.dtype, self.dtype)
    if self.device.type == "neuron":
        if src.device == self.device:
            return executor.run(spec_for(aten.copy_.default), (self, src, non_blocking), {})
        if self.numel() == 0:
            return self
        if src.device.type == "neuron":
            moved = src.to(self.dtype).expand(self.shape)
            arr = transfer.between_devices(device_flat(moved), self.device.index)
        else:
            plain = src.dtype == self.dtype and src.shape == self.shape and src.is_contiguous()
            host = src if plain else src.to(self.dtype).expand(self.shape).contiguous()
            arr = transfer.to_device(transfer.torch_to_numpy(host).reshape(-1), self.device.index)
        copy_into(self, arr)
        return self
    # neuron -> cpu (or another host device)
    self.copy_(to_host(src))
    return self


def copy_from(self, dst, non_blocking=False):
    copy_(dst, self, non_blocking)
    return dst


def to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    if self.dtype.is_complex or (dtype is not None and dtype.is_complex):  # a Trainium target has none
        refuse_complex_tensor("aten._to_copy.default", self.dtype, dtype)
    target = torch.device(device) if device is not None else self.device
    if target.type == "neuron" and target.index is None:
        target = torch.device("neuron", torch.neuron.current_device())
    if target == self.device:
        kwargs = {"dtype": dtype, "memory_format": memory_format}
        return executor.run(spec_for(aten._to_copy.default), (self,), {k: v for k, v in kwargs.items() if v is not None})
    dtype = dtype if dtype is not None else self.dtype
    if dtype == self.dtype and memory_format in (None, torch.preserve_format) and not pin_memory and self.is_contiguous():
        # A plain move (a module's .to(), every offload hook's): one transfer, no empty-then-copy_
        if target.type == "neuron" and self.device.type == "cpu":
            return copy_(torch.empty(self.shape, dtype=dtype, device=target), self)
        if target.type == "cpu" and self.device.type == "neuron":
            return to_host(self)  # a fresh contiguous host copy
    if memory_format in (None, torch.preserve_format) and _dense(self):
        out = torch.empty_strided(self.shape, self.stride(), dtype=dtype, device=target, pin_memory=bool(pin_memory))
    else:
        out = torch.empty(self.shape, dtype=dtype, device=target, memory_format=memory_format or torch.contiguous_format)
    return out.copy_(self, non_blocking)


def _dense(t) -> bool:
    from torch._prims_common import is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense

    return is_non_overlapping_and_dense(t)


def local_scalar_dense(self):
    return item(self)
