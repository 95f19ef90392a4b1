"""What `torch.profiler` sees of the neuron device.

Two things, both PyTorch's own machinery:

- **Ranges** (`range(name)`): `torch.profiler.record_function` ranges on the CPU timeline around
  what the host spends time on besides ops: eager op compiles, graph compiles, executable cache
  lookups and disk loads, host<->device transfers. Any profile that records the CPU sees them.
- **Device records** (`launch`, `moved`): when a profile asks for `ProfilerActivity.PrivateUse1`,
  Kineto starts the shim's activity profiler (csrc/profiler.cpp) and every launch (an eager op, a
  compiled graph, a transfer) is timed from launch to ready and handed to it, linked to the CPU op
  or range that made it. They become the trace's `neuron` rows and the ops' device time.

Device time here is launch-to-ready wall time: jax tells when a result is ready, not when the device
started or finished it. So while a device profile records, each launch waits for its own results
(as CUDA_LAUNCH_BLOCKING=1 does): a record then holds that op alone, not the queue before it. The
host stops running ahead of the device for those ops, so a device profile shows where time goes,
not how well the host overlaps the device.

With no profiler running all this costs one check of torch's own Python flag per call.
"""
from __future__ import annotations

import contextlib
import time

from torch.autograd import profiler as _torch_profiler
from torch.autograd.profiler import record_function

from .. import _C
from . import devices
from .lazy_jax import jax

RECORD_OP, RECORD_GRAPH, RECORD_TRANSFER = _C.RECORD_OP, _C.RECORD_GRAPH, _C.RECORD_TRANSFER
_recording = _C._profiler_recording
_correlation_id = _C._profiler_correlation_id
_record = _C._profiler_record
_now = time.time_ns  # the system clock, as Kineto's timestamps are
_NO_RANGE = contextlib.nullcontext()  # reusable: entering it does nothing


def register() -> None:
    """Make the device's activity profiler known to Kineto (at registration; imports no jax)."""
    _C._register_activity_profiler()


def active() -> bool:
    """Whether any torch profiler runs: torch's Python flag, kept for checks like this one."""
    return _torch_profiler._is_profiler_enabled


def device_recording() -> bool:
    """Whether a profile that asked for the neuron device records now."""
    return _torch_profiler._is_profiler_enabled and _recording()


def range(name: str):
    """A `record_function` range named `name` while a profiler runs, else nothing."""
    return record_function(name) if _torch_profiler._is_profiler_enabled else _NO_RANGE


def launch(kind: int, name: str, device: int, fn, inputs):
    """`fn(*inputs)`, timed launch to ready while a device profile records."""
    if not device_recording():
        return fn(*inputs)
    correlation = _correlation_id()
    start = _now()
    outs = fn(*inputs)
    jax.block_until_ready(outs)
    _record(kind, name, device, start, _now(), correlation)
    return outs


class _Moved:
    """A transfer's range; `done(arr)` ends it (waiting for `arr` while a device profile records)."""

    __slots__ = ("name", "device", "correlation", "start", "range")

    def __init__(self, name: str, device):
        self.name = name
        self.device = device  # a neuron index, or the jax array moved off the device
        self.range = record_function(name)

    def __enter__(self):
        self.range.__enter__()
        self.correlation = _correlation_id()
        self.start = _now()
        return self

    def done(self, arr):
        if _recording():
            if hasattr(arr, "block_until_ready"):  # a host copy (numpy) is complete already
                arr.block_until_ready()
            device = self.device if type(self.device) is int else max(devices.index_of(self.device), 0)
            _record(RECORD_TRANSFER, self.name, device, self.start, _now(), self.correlation)
        return arr

    def __exit__(self, *exc):
        return self.range.__exit__(*exc)


class _NotMoved:
    """What `moved` gives with no profiler: a no-op range whose `done` hands the array back."""

    __slots__ = ()

    def __enter__(self):
        return self

    def done(self, arr):
        return arr

    def __exit__(self, *exc):
        return None


_NOT_MOVED = _NotMoved()


def moved(name: str, device):
    """A transfer to neuron:`device` (an index) or from the jax array `device`:
    `with moved("neuron::host_to_device", i) as m: return m.done(jax.device_put(...))`."""
    return _Moved(name, device) if _torch_profiler._is_profiler_enabled else _NOT_MOVED
