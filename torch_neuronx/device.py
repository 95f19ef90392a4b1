"""`torch.neuron`: the device module PyTorch, diffusers and accelerate look up by device name.

It exists as soon as `import torch` returns; nothing here starts jax until a function needs the
device itself (`synchronize`, `get_device_properties`).
"""
from __future__ import annotations

import functools
from typing import Any

import torch

from .runtime import config, targets

_load_error: BaseException | None = None  # why the native part failed to load, if it did

# What torch.utils.checkpoint reads (as `torch.cuda._initialized`) before it stashes a device's RNG
# state: True once the native part (with the generators) is loaded, since a neuron tensor can exist
# from then on. It must not flip during a checkpointed forward (checkpoint raises if it does), so it
# is not `is_initialized()`, which turns True when jax starts.
_initialized = False


def _native():
    if _load_error is not None:
        raise RuntimeError(f"the neuron device is unavailable: {_load_error}")
    from . import _C

    return _C


def is_available() -> bool:
    if _load_error is not None:
        return False
    try:
        return device_count() > 0
    except Exception:
        return False


def device_count() -> int:
    if _load_error is not None:
        return 0
    from .runtime import devices

    return devices.device_count()


def is_initialized() -> bool:
    from .runtime import devices

    return devices.is_initialized()


def init() -> None:
    from .runtime import devices

    devices.jax_devices()


def _index(device) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "neuron":
            raise ValueError(f"expected a neuron device, got {device}")
        return device.index if device.index is not None else current_device()
    raise TypeError(f"expected a neuron device, an int or None, got {type(device).__name__}")


def current_device() -> int:
    return _native()._current_device()


def set_device(device) -> None:
    """Make `device` current. Under a launcher that gave this process the core LOCAL_RANK, that core
    is neuron:0, and `set_device(LOCAL_RANK)` (what CUDA scripts and DeviceMesh call) selects it."""
    index = _index(device)
    if index >= device_count() and index == config.launcher_core():
        index = 0
    _native()._set_device(index)


class device:
    """Context manager that makes `device` the current neuron device."""

    def __init__(self, device):
        self.idx = _index(device) if device is not None else -1
        self.prev = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev = current_device()
            set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.prev >= 0:
            set_device(self.prev)
        return False


def synchronize(device=None) -> None:
    """Wait for every launched op on `device` (all devices when None) to finish."""
    from .runtime import storage

    storage.synchronize(None if device is None else _index(device))


def get_device_name(device=None) -> str:
    from .runtime import devices

    idx = _index(device)
    d = devices.jax_device(idx)
    target = targets.current()
    if target is not None:  # one logical core of a Trainium chip, emulated on the platform's device
        return f"NeuronCore {idx} ({target.name} logical core, LNC={target.lnc}, on {d.platform}:{d.id})"
    return f"NeuronCore {idx} ({d.platform}:{d.id}, {getattr(d, 'device_kind', d.platform)})"


@functools.lru_cache(maxsize=None)
def _properties(idx: int):
    from .runtime import devices

    d = devices.jax_device(idx)
    target = targets.current()
    return _DeviceProperties(
        name=get_device_name(idx),
        platform=d.platform,
        device_kind=str(getattr(d, "device_kind", d.platform)),
        # TORCH_NEURONX_CORE_MEMORY, else the target's logical core, else the platform's
        total_memory=_native()._memory_capacity(idx),
        index=idx,
        target=None if target is None else target.name,  # the Trainium chip emulated (TORCH_NEURONX_TARGET)
        lnc=None if target is None else target.lnc,  # physical cores per logical core
    )


class _DeviceProperties:
    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self):
        inner = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"_NeuronDeviceProperties({inner})"


def get_device_properties(device=None):
    return _properties(_index(device))


def get_device_capability(device=None) -> tuple[int, int]:
    return (0, 0)


# ---- random numbers: one default generator per device


class _DefaultGenerators:
    def __getitem__(self, idx):
        return _native()._default_generator(idx)

    def __len__(self):
        return device_count()

    def __iter__(self):
        return (self[i] for i in range(len(self)))


default_generators = _DefaultGenerators()


def manual_seed(seed: int) -> None:
    default_generators[current_device()].manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for gen in default_generators:
        gen.manual_seed(int(seed))


def seed() -> None:
    default_generators[current_device()].seed()


def seed_all() -> None:
    for gen in default_generators:
        gen.seed()


def initial_seed() -> int:
    return default_generators[current_device()].initial_seed()


def get_rng_state(device="neuron") -> torch.Tensor:
    return default_generators[_index(device)].get_state()


def set_rng_state(new_state: torch.Tensor, device="neuron") -> None:
    default_generators[_index(device)].set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [g.get_state() for g in default_generators]


def set_rng_state_all(new_states) -> None:
    for gen, state in zip(default_generators, new_states):
        gen.set_state(state)


# ---- memory: the allocator's counters (csrc/allocator.cpp), in torch.cuda's terms


def memory_stats(device=None) -> dict[str, Any]:
    """torch.cuda.memory_stats' keys for `device`: allocated (live storages), reserved (storages whose
    buffers are not released yet), active, requested, segment, num_ooms, ..."""
    return dict(torch.accelerator.memory_stats(_index(device)))


def memory_allocated(device=None) -> int:
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device=None) -> int:
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device=None) -> int:
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device=None) -> int:
    return torch.accelerator.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device=None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device=None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def reset_max_memory_allocated(device=None) -> None:
    reset_peak_memory_stats(device)


def empty_cache() -> None:
    """Release the device buffers of every storage that has died (they are released lazily otherwise),
    and on the CPU platform give the host memory kept for reuse back to the system.

    Like CUDA's, it runs no garbage collection: a tensor kept alive only by a reference cycle is freed
    when Python's collector runs (call gc.collect() first to free those too). It is called often:
    accelerate calls it after placing each tensor (set_module_tensor_to_device), so it must cost
    nothing when nothing died."""
    from .runtime import host_memory, storage

    storage.apply_events()
    host_memory.release_surplus(0, now=True)


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of the core: its capacity (TORCH_NEURONX_CORE_MEMORY, else the platform's
    memory) less what this process holds on it (reserved)."""
    return torch.accelerator.get_memory_info(_index(device))


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A table of the allocator's counters, laid out as torch.cuda.memory_summary's."""
    idx = _index(device)
    stats = memory_stats(idx)
    fmt = _native()._format_bytes
    rows = [("Allocated memory", "allocated_bytes", fmt), ("Active memory", "active_bytes", fmt),
            ("Requested memory", "requested_bytes", fmt), ("Reserved memory", "reserved_bytes", fmt),
            ("Allocations", "allocation", str), ("Active allocs", "active", str),
            ("Device buffers", "segment", str)]
    width = 75
    lines = ["=" * width, f" neuron:{idx} memory summary (capacity {fmt(_native()._memory_capacity(idx))})".ljust(width),
             "-" * width, f"{'Metric':<26}|{'Cur Usage':>12}|{'Peak Usage':>12}|{'Tot Alloc':>12}|{'Tot Freed':>9}",
             "-" * width]
    for title, key, show in rows:
        cells = [show(stats.get(f"{key}.all.{part}", 0)) for part in ("current", "peak", "allocated", "freed")]
        lines.append(f"{title:<26}|{cells[0]:>12}|{cells[1]:>12}|{cells[2]:>12}|{cells[3]:>9}")
    lines.append("-" * width)
    lines.append(f"{'Out-of-memory errors':<26}|{stats.get('num_ooms', 0):>12}|"
                 f"{'Device allocs':>12}|{stats.get('num_device_alloc', 0):>12}|")
    lines.append("=" * width)
    return "\n".join(lines) + "\n"


# ---- autocast and misc. hooks PyTorch asks a device module for


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled("neuron")


def get_autocast_dtype() -> torch.dtype:
    return torch.get_autocast_dtype("neuron")


def set_autocast_enabled(enabled: bool) -> None:
    torch.set_autocast_enabled("neuron", enabled)


def set_autocast_dtype(dtype: torch.dtype) -> None:
    torch.set_autocast_dtype("neuron", dtype)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def _is_in_bad_fork() -> bool:
    from .runtime import devices

    return devices.in_bad_fork()


def _lazy_init() -> None:
    init()


# ---- streams and events (the device guard's; what they guarantee: runtime/streams.py)


class Stream(torch.Stream):
    """A neuron stream: work launched while it is current completes in order, and `wait_event` /
    `wait_stream` order its later work after another stream's. `torch.neuron.Stream()` is a new
    stream on the current device, like torch.cuda.Stream()."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        if kwargs:  # (stream_id=, device_index=, device_type=): an existing stream
            return super().__new__(cls, **kwargs)
        with globals()["device"](device):
            return super().__new__(cls, device=torch.device("neuron", current_device()), priority=priority)

    def wait_event(self, event) -> None:
        event.wait(self)

    def wait_stream(self, stream) -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event


class Event(torch.Event):
    """A neuron event: `record` marks the work launched on a stream so far; `query`, `synchronize`,
    `wait` and (with enable_timing=True) `elapsed_time` as torch.cuda.Event's."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        if interprocess:
            raise RuntimeError("neuron events cannot be shared between processes (interprocess=True)")
        return super().__new__(cls, device="neuron", enable_timing=enable_timing, blocking=blocking)

    def record(self, stream=None) -> None:
        super().record(current_stream() if stream is None else stream)

    def wait(self, stream=None) -> None:
        super().wait(current_stream() if stream is None else stream)

    def elapsed_time(self, end_event) -> float:
        """Milliseconds from this event's completion to `end_event`'s (waits for both)."""
        # torch.Event's own method accepts only an exact torch.Event as the other one
        from .runtime import streams

        if not (self.event_id and end_event.event_id):
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return streams.elapsed_time(self.event_id, end_event.event_id)


def _wrap_stream(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device=None) -> Stream:
    return _wrap_stream(torch.accelerator.current_stream(_index(device)))


def default_stream(device=None) -> Stream:
    idx = _index(device)
    return Stream(stream_id=0, device_index=idx, device_type=current_stream(idx).device_type)


def set_stream(stream) -> None:
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    """`with torch.neuron.stream(s):` makes `s` current on its device (and that device current)."""

    def __init__(self, stream):
        self.stream = stream
        self.prev_stream = None
        self.prev_device = -1

    def __enter__(self):
        s = self.stream
        if s is None:
            return self
        self.prev_device = current_device()
        if s.device_index != self.prev_device:
            set_device(s.device_index)
        self.prev_stream = torch.accelerator.current_stream(s.device_index)
        torch.accelerator.set_stream(s)
        return self

    def __exit__(self, *exc):
        if self.stream is not None:
            torch.accelerator.set_stream(self.prev_stream)
            set_device(self.prev_device)
        return False


def stream(s=None) -> StreamContext:
    return StreamContext(s)


def platform() -> str:
    """The PJRT platform that provides the NeuronCores ('cpu', 'cuda', ...)."""
    return config.platform()


def get_dynamo_metrics() -> dict:
    """Compiled mode's record: graphs compiled, per-graph compile time and node count, recompiles with
    their reason, executions (see torch_neuronx.metrics.get_dynamo_metrics)."""
    from . import metrics

    return metrics.get_dynamo_metrics()


def reset_dynamo_metrics() -> None:
    from . import metrics

    metrics.reset_dynamo_metrics()
