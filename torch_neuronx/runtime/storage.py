"""Device buffers behind neuron storages, and the shim's view of a tensor's storage.

The C++ allocator gives each storage a unique (never dereferenced) address and no memory; the
storage's contents live here as a flat jax array keyed by that address. A key with no entry is a
storage nobody has written yet (reads see zeros). A buffer may also be shorter than its storage
(after a resize): the rest reads as zeros. The allocator never takes the GIL, so it queues its frees
and moves; `apply_events()` applies them, in order, before each op.

This module owns the buffer table: the layers above read it with `buffer`/`buffers_of` and change it
only through `set_buffer`, `set_buffers` and `replace`.

A storage whose buffer memory the host is writing in place (a collective on the CPU platform, where
Gloo works on the device buffer itself) is held (`hold`) until that write is done: whoever reads or
writes a buffer first settles the keys it uses (`settle`), which waits for their holds.

Eager fusion (`eager.fusion`) queues ops instead of launching them: a storage an unlaunched op writes
holds a `Pending` buffer (its length and dtype, what keys need) until the queue runs. Whoever reads or
writes buffers outside an eager op calls `sync()` first, which runs the queue (through the hook fusion
registers with `register_flush`) and applies the events.
"""
from __future__ import annotations

import contextlib
import gc
import sys
import threading

import torch

from .. import _C
from . import host_memory

# key -> flat jax array (1-D) of the dtype that last wrote it, or a Pending one
_buffers: dict[int, object] = {}

# the buffer of a storage key, or None (nothing written yet: zeros)
buffer = _buffers.get


def buffers_of(keys) -> list:
    """The buffer of each key (0: a storage that holds nothing: None)."""
    return list(map(_buffers.get, keys))  # key 0 is never in the table


def set_buffer(key: int, buf) -> None:
    """Storage `key` now holds `buf` (0: an empty storage, which holds nothing)."""
    if key:
        _buffers[key] = buf


# storage `key` (nonzero) now holds a buffer: the table's own setter, for hot paths that know the key is one
put_buffer = _buffers.__setitem__


def set_buffers(keys, bufs) -> None:
    for key, buf in zip(keys, bufs):
        if key:
            _buffers[key] = buf


def every_buffer() -> list:
    """Every storage's buffer now (a snapshot)."""
    return list(_buffers.values())


def replace(key: int, expected, buf) -> bool:
    """Storage `key` holds `buf` if it still holds `expected` (a queued op's Pending buffer: a later
    write or a free has replaced it otherwise); whether it was replaced."""
    if key and _buffers.get(key) is expected:
        _buffers[key] = buf
        return True
    return False


class Pending:
    """The buffer a queued op will write, as its jax `aval` (shape (length,), dtype): what keys read of
    a buffer, found where a real array keeps it (`aval` is the cheapest of a jax array's attributes)."""

    __slots__ = ("aval",)

    def __init__(self, aval):
        self.aval = aval

    @property
    def shape(self):
        return self.aval.shape

    @property
    def dtype(self):
        return self.aval.dtype


class Lost(Pending):
    """The buffer of a storage whose values were never computed (its fused run failed, the collective
    writing it failed): any use raises."""

    __slots__ = ("error", "cause")

    def __init__(self, aval, error, cause: str = "the fused run computing them"):
        super().__init__(aval)
        self.error = error
        self.cause = cause

    def describe(self) -> str:
        return f"neuron: this tensor's values were lost: {self.cause} failed: {self.error}"

    def __getattr__(self, name):
        raise RuntimeError(self.describe())


# key -> what completes the host's in-place write of its buffer (a collective's wait): see `hold`
held: dict[int, object] = {}


def hold(key: int, complete) -> None:
    """Storage `key`'s buffer memory is being written by the host (not by an executable) until
    `complete()` has run: reads and writes of it wait for that (`settle`). `complete` releases it."""
    held[key] = complete


def release(key: int) -> None:
    held.pop(key, None)


def settle(keys) -> None:
    """Wait for the host writes holding any of `keys` (each `complete()` releases its key; the hot path
    checks `held` first: empty)."""
    for k in keys:
        complete = held.get(k)
        if complete is not None:
            complete()


def settle_all() -> None:
    settle(list(held))


def exclusive(key: int) -> bool:
    """Whether storage `key`'s buffer is referenced by the table alone (no other storage shares the
    array, no queued run or host view holds it): the host may then write its memory in place."""
    buf = _buffers.get(key)
    # the table's reference, `buf`, and getrefcount's argument
    return buf is not None and not isinstance(buf, Pending) and sys.getrefcount(buf) <= 3


# eager fusion's flush(reason), registered once (`register_flush`); called by `sync` while ops are queued
_flush = None
_unfused = None  # eager fusion's context in which the calling thread's ops are not queued
_queued = False


def register_flush(flush, unfused) -> None:
    """The function that runs queued ops (eager fusion's `flush(reason)`), and the context (a function
    returning one) inside which the calling thread's eager ops each run on their own."""
    global _flush, _unfused
    _flush, _unfused = flush, unfused


def unfused():
    """A context inside which this thread's eager ops each run on their own, what was queued having run
    first (and what they queued, after). For the device work of compiling a graph (AOTAutograd's copies
    of constants, say), which a process that loads the graph instead never does: queued with the user's
    ops it would make their fused runs differ between the two processes."""
    return _unfused() if _unfused is not None else contextlib.nullcontext()


def set_queued(queued: bool) -> None:
    """Whether ops are queued now (the fusion queue says so when it fills and when it has run)."""
    global _queued
    _queued = queued


def has_queued() -> bool:
    return _queued


def flush_queued(reason: str) -> None:
    """Run the queued ops, if any (not the allocator's events: an op's own path applies those)."""
    if _queued:
        _flush(reason)

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
    after it, every buffer is a real one. The frees come first: a storage that died since the last op is
    then no output of the run, and what only it needed is never computed."""
    apply_events()
    if _queued:
        _flush(reason)
        apply_events()


# Bytes freed since the last `_release_host_aliases`, and how many make it worth a call.
_freed_since_release = 0
_RELEASE_EVERY = 64 << 20


def apply_events() -> None:
    """Apply the allocator's queued frees and moves (an op's hot path: queued ops stay queued)."""
    global applying, _freed_since_release
    if not _C._pending_events() and not applying:
        return
    with _lock:
        applying = True
        try:
            for kind, key, new_key, nbytes, _device in _C._drain_events():
                if kind == _C.EVENT_FREE:
                    if _buffers.pop(key, None) is not None:
                        _freed_since_release += nbytes
                elif kind == _C.EVENT_MOVE:
                    settle((key,))
                    buf = _buffers.get(key)
                    if type(buf) is Pending:  # a resized storage a queued op writes: run the queue
                        _flush("resize")
                        buf = _buffers.get(key)
                    if buf is not None and nbytes > 0:
                        keep = nbytes // buf.dtype.itemsize
                        _buffers[new_key] = buf if keep >= buf.shape[0] else buf[:keep]
        finally:
            applying = False
    if _freed_since_release >= _RELEASE_EVERY:
        _freed_since_release = 0
        _release_host_aliases()
    host_memory.release_surplus()


def _release_host_aliases() -> None:
    """On the CPU platform a device buffer may be host memory jax aliases (runtime/transfer.py's large
    copies to the device), which the buffer keeps alive by a reference to its numpy array. jax drops that
    reference on its own thread when the buffer is freed, so the drop waits in jax's queue until its
    garbage-collection callback runs: until then the memory stays taken. A model moved back to the CPU
    (what `enable_model_cpu_offload` does after each model) otherwise holds its device copy beside the
    new CPU one until Python's collector happens to run: +8 GB at a 4B text encoder. A young-generation
    collection runs that callback (microseconds)."""
    gc.collect(0)


def whole_storage_key(t) -> int:
    """The storage key if `t` is exactly its whole storage, row-major with no lazy bits; else 0."""
    key, nbytes, sizes, strides, offset = tensor_layout(t)
    if offset == 0 and t.is_contiguous() and t.numel() * t.element_size() == nbytes and not (t.is_conj() or t.is_neg()):
        return key
    return 0


def live_buffers() -> int:
    sync("memory query")
    return len(_buffers)


def synchronize(device: int | None = None) -> None:
    """Wait for every buffer on `device` (all devices when None) to be computed."""
    from . import devices

    devices.check_not_forked()
    sync("synchronize")
    settle_all()
    for buf in every_buffer():
        if isinstance(buf, Pending):  # Lost: its run failed and raised; nothing to wait for
            continue
        if device is not None and devices.index_of(buf) != device:
            continue
        buf.block_until_ready()


def launch_error(what: str, device: int, e: Exception, failure=RuntimeError) -> Exception:
    """The error of a launch of `what` (an op, a fused run, a graph) that failed: out of memory, or
    the executable's own failure (a `failure`), naming `what` as PyTorch names the op."""
    if isinstance(e, torch.OutOfMemoryError):  # its workspace past the capacity (executables.note_workspace)
        return torch.OutOfMemoryError(f"{what}: {e}")
    oom = out_of_memory_error(device, what, e)
    return oom if oom is not None else failure(f"{what}: the executable failed: {type(e).__name__}: {e}")


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
