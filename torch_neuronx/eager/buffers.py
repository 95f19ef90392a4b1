"""A neuron tensor's values as a jax array, and writes of one: the eager side's buffer access.

A tensor that is its whole storage (row-major, offset 0, no lazy bits) is its buffer: no launch, no
copy. Anything else (a view) goes through one eager `clone` (read) or `copy_` (write) launch, whose
executable reads or writes the view inside itself.
"""
from __future__ import annotations

import numpy as np
import torch

from .. import metrics
from ..ops.protocol import wrap_contiguous
from ..runtime import storage, streams, transfer
from . import executor
from ..ops.specs import spec_for

aten = torch.ops.aten


def device_flat(t: torch.Tensor):
    """`t`'s values as a flat row-major jax array on its device."""
    storage.sync("device read")
    key = storage.whole_storage_key(t)
    if key:
        storage.settle((key,))
        buf = storage.buffer(key)
        if buf is not None and buf.dtype == transfer.to_numpy_dtype(t.dtype):
            return buf
    c = executor.run(spec_for(aten.clone.default), (t,), {"memory_format": torch.contiguous_format})
    storage.sync("device read")  # the clone may be queued (eager fusion)
    buf = storage.buffer(storage.storage_key(c))
    if buf is None:  # nothing was ever written: zeros (put, not made by a jax op: no compile)
        return transfer.to_device(np.zeros((t.numel(),), transfer.to_numpy_dtype(t.dtype)), t.device.index)
    return buf


def to_host(t: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU copy of a neuron tensor (waits for the device): exactly one copy, into memory
    the caller owns (writing it never touches the device buffer). A whole storage's buffer is read as
    it is and shaped, or reinterpreted (a dtype view such as view_as_real), on the host: no launch,
    where a jax reshape or bitcast is a dispatch and a compile per new shape. On the CPU platform,
    where the host sees the device buffer itself, a view is read there too (strided, from the
    buffer's memory): no `clone` launch, no compile for a new view layout."""
    if t.numel() == 0:
        return torch.empty(t.shape, dtype=t.dtype)
    host = _host_values(t)
    if host is None:
        host = transfer.host_view(device_flat(t))
    metrics.host_read(t.numel() * t.element_size())
    return transfer.copy_to_torch(host, t.shape, t.dtype)


def item(t: torch.Tensor):
    """`t.item()` of a one-element neuron tensor: the element read on the host, no copy of the tensor
    (on the CPU platform none at all: the buffer's memory is read in place)."""
    host = _host_values(t) if t.numel() == 1 else None
    if host is None:
        return to_host(t).item()
    metrics.host_read(t.element_size())
    value = host.reshape(-1)[0]
    if t.dtype in _NO_NUMPY_ITEM:
        value = float(value)
    return value.item() if hasattr(value, "item") else value


def _host_values(t: torch.Tensor):
    """`t`'s values as host numpy of `t`'s shape (read-only, any layout, over the device buffer on
    the CPU platform) when they can be read without a launch; else None. Waits for the buffer."""
    storage.sync("host read")
    key, nbytes, sizes, strides, offset = storage.tensor_layout(t)
    storage.settle((key,))
    buf = storage.buffer(key)
    if buf is None:  # never written: zeros, made on the device (device_flat)
        return None
    esize = t.element_size()
    # a buffer is flat: its length from the shape (jax's nbytes property costs ~10 µs a call)
    held = buf.shape[0] * buf.dtype.itemsize
    if offset == 0 and t.numel() * esize == nbytes == held and t.is_contiguous() and not (t.is_conj() or t.is_neg()):
        return transfer.typed_flat(transfer.host_view(buf), t.dtype)  # the whole storage
    if not transfer.host_views_device() or t.is_conj() or t.is_neg():
        return None
    extent = offset + 1 + sum((n - 1) * s for n, s in zip(sizes, strides))
    if extent * esize > held:  # past a shorter buffer's end (after a resize): those read as zeros
        return None
    flat = transfer.typed_flat(transfer.host_view(buf), t.dtype)
    return np.ndarray(tuple(sizes), flat.dtype, buffer=flat, offset=offset * esize,
                      strides=tuple(s * esize for s in strides))


def host_alias(t: torch.Tensor, *, write: bool) -> torch.Tensor | None:
    """A CPU tensor over `t`'s own memory in its device buffer (the CPU platform), for a host library
    that reads it (`write=False`) or writes it in place: no copy either way. None where there is none:
    another platform, a tensor that is not contiguous or has lazy bits, a storage nothing has written
    (zeros) or whose buffer is shorter than `t`, a dtype DLPack does not carry, and for a write a buffer
    that is not the storage's alone (another storage or a host view shares it).

    Waits for the buffer to be computed; for a write also for every launch on the current stream (any
    may read the buffer), as a collective waits for the stream it is called on. A writer holds the
    storage (`storage.hold`) until it is done, so that later ops wait for it."""
    if t.numel() == 0 or not t.is_contiguous() or t.is_conj() or t.is_neg() or not transfer.host_views_device():
        return None
    storage.sync("host alias")
    key, nbytes, sizes, strides, offset = storage.tensor_layout(t)
    storage.settle((key,))
    if write:
        if not storage.exclusive(key):
            return None
        streams.synchronize_stream(t.device.index, streams.current_stream(t.device.index))
    buf = storage.buffer(key)
    if buf is None or isinstance(buf, storage.Pending):
        return None
    esize = t.element_size()
    start, end = offset * esize, (offset + t.numel()) * esize
    if end > buf.shape[0] * buf.dtype.itemsize:
        return None
    try:
        whole = transfer.host_alias(buf)
    except (BufferError, TypeError, RuntimeError):  # a dtype DLPack has no code for
        return None
    if whole.dtype == t.dtype and start == 0 and whole.numel() == t.numel():
        return whole.view(t.shape)
    return whole.view(torch.uint8)[start:end].view(t.dtype).view(t.shape)


_NO_NUMPY_ITEM = (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)


def copy_into(dst: torch.Tensor, arr) -> None:
    """Write a flat jax array (dst's dtype, dst.numel() values, on dst's device) into dst. Queued ops
    need not run first: they hold the buffers they read, and a queued write of dst's storage does
    not land over this one (a fused run stores only where its Pending buffer still is)."""
    storage.apply_events()
    key = storage.whole_storage_key(dst)
    if key:
        storage.settle((key,))  # the host may still write the old buffer: this write comes after
        storage.set_buffer(key, arr)
        streams.launched(dst.device.index, arr)  # a transfer is work on the current stream too
        return
    tmp = wrap_contiguous(arr, dst.shape, dst.dtype, dst.device)
    executor.run(spec_for(aten.copy_.default), (dst, tmp), {})


def take_from_host(dst: torch.Tensor, host: torch.Tensor) -> None:
    """Write a contiguous CPU tensor of dst's dtype and shape into neuron tensor dst; `host` is
    handed over (on the CPU platform the device buffer may alias it): the caller must not touch it."""
    arr = transfer.hand_to_device(transfer.torch_to_numpy(host).reshape(-1), dst.device.index)
    copy_into(dst, arr)
