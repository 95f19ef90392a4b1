"""Device buffers behind neuron storages, and the shim's view of a tensor's storage.

The C++ allocator gives each storage a unique (never dereferenced) address and no memory; the
storage's contents live here as a flat jax array keyed by that address. A key with no entry is a
storage nobody has written yet (reads see zeros). A buffer may also be shorter than its storage
(after a resize): the rest reads as zeros. The allocator never takes the GIL, so it queues its frees
and moves; `apply_events()` applies them, in order, before each op.

Eager fusion (`eager.fusion`) queues ops instead of launching them: a storage an unlaunched op writes
holds a `Pending` buffer (its length and dtype, what keys need) until the queue runs. Whoever reads or
writes buffers outside an eager op calls `sync()` first, which runs the queue and applies the events.
"""
from __future__ import annotations

import threading

import torch

from .. import _C

# key -> flat jax array (1-D) of the dtype that last wrote it, or a Pending one
BUFFERS: dict[int, object] = {}


class Pending:
    """The buffer a queued op will write: its shape (length,) and numpy dtype, as a jax array's."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape = shape
        self.dtype = dtype


class Lost(Pending):
    """The buffer of a storage whose queued op never ran (its fused run failed): any use raises."""

    __slots__ = ("error",)

    def __init__(self, shape, dtype, error):
        super().__init__(shape, dtype)
        self.error = error

    def describe(self) -> str:
        return f"neuron: this tensor's values were lost: the fused run computing them failed: {self.error}"

    def __getattr__(self, name):
        raise RuntimeError(self.describe())


# while ops are queued, eager fusion's flush(reason), which `sync` calls; else None
queued = None

# The shim's per-tensor reads (see csrc/module.cpp): layout (key, nbytes, sizes, strides, offset),
# info (device, key, nbytes, sizes, strides, offset, dtype, lazy flags) or None off the device.
tensor_layout = _C._tensor_layout
tensor_info = _C._tensor_info
storage_key = _C._storage_key
pending_events = _C._pending_events
# a tensor's lazy bits in `tensor_info`: its values are the storage's conjugated / negated
LAZY_CONJ, LAZY_NEG = _C.LAZY_CONJ, _C.LAZY_NEG

# Events are drained from the queue and then applied, in Python, by whichever thread syncs first.
# While one thread applies them, the queue already looks empty to the others: they must wait (a MOVE
# not applied yet reads as zeros, and a write made before it lands is overwritten), so callers check
# `applying` as well as the queue, and appliers take turns.
_lock = threading.Lock()
applying = False


def sync(reason: str = "host access") -> None:
    """Run the queued ops (`reason`: why, for the fusion metrics) and apply the allocator's events:
    after it, every buffer is a real one."""
    flush = queued
    if flush is not None:
        flush(reason)
    apply_events()


def apply_events() -> None:
    """Apply the allocator's queued frees and moves (an op's hot path: queued ops stay queued)."""
    global applying
    if not _C._pending_events() and not applying:
        return
    with _lock:
        applying = True
        try:
            for kind, key, new_key, nbytes, _device in _C._drain_events():
                if kind == _C.EVENT_FREE:
                    BUFFERS.pop(key, None)
                elif kind == _C.EVENT_MOVE:
                    buf = BUFFERS.get(key)
                    if type(buf) is Pending:  # a resized storage a queued op writes: run the queue
                        queued("resize")
                        buf = BUFFERS.get(key)
                    if buf is not None and nbytes > 0:
                        keep = nbytes // buf.dtype.itemsize
                        BUFFERS[new_key] = buf if keep >= buf.shape[0] else buf[:keep]
        finally:
            applying = False


def whole_storage_key(t) -> int:
    """The storage key if `t` is exactly its whole storage, row-major with no lazy bits; else 0."""
    key, nbytes, sizes, strides, offset = tensor_layout(t)
    if offset == 0 and t.is_contiguous() and t.numel() * t.element_size() == nbytes and not (t.is_conj() or t.is_neg()):
        return key
    return 0


def live_buffers() -> int:
    sync("memory query")
    return len(BUFFERS)


def synchronize(device: int | None = None) -> None:
    """Wait for every buffer on `device` (all devices when None) to be computed."""
    from . import devices

    devices.check_not_forked()
    sync("synchronize")
    for buf in list(BUFFERS.values()):
        if isinstance(buf, Pending):  # Lost: its run failed and raised; nothing to wait for
            continue
        if device is not None and devices.index_of(buf) != device:
            continue
        buf.block_until_ready()


def launch_error(what: str, device: int, e: Exception) -> Exception:
    """The error of a launch of `what` (an op, a fused run) that failed: out of memory, or the
    executable's own failure, naming `what` as PyTorch names the op."""
    if isinstance(e, torch.OutOfMemoryError):  # its workspace past the capacity (executables.note_workspace)
        return torch.OutOfMemoryError(f"{what}: {e}")
    oom = out_of_memory_error(device, what, e)
    return oom if oom is not None else RuntimeError(f"{what}: the executable failed: {type(e).__name__}: {e}")


def out_of_memory_error(device: int, what: str, e: BaseException) -> torch.OutOfMemoryError | None:
    """torch.OutOfMemoryError for a platform allocation failure (XLA's RESOURCE_EXHAUSTED, the host
    out of memory), counted in memory_stats()["num_ooms"]; None for any other error."""
    text = f"{type(e).__name__}: {e}"
    if not (isinstance(e, MemoryError) or "RESOURCE_EXHAUSTED" in text):
        return None
    _C._record_out_of_memory(device)
    return torch.OutOfMemoryError(
        f"{what}: neuron out of memory. The platform could not allocate on neuron:{device} "
        f"({text}). neuron:{device} has {_C._format_bytes(torch.accelerator.memory_allocated(device))} allocated "
        f"of a capacity of {_C._format_bytes(_C._memory_capacity(device))}."
    )
