"""NeuronCores as PJRT devices of the selected platform: the only module that asks jax for devices,
places arrays on one (`put`) or makes one the default (`on_device`)."""
from __future__ import annotations

import ctypes
import os
import sys
import threading

from . import lazy_jax
from . import config, host_memory, targets

_lock = threading.Lock()
_devices: list | None = None
# This process is a fork of one whose device runtime had started: jax's state came along, its threads
# did not, so the first device call would wait forever. Every entry to the device tests this flag
# (`check_not_forked`; the executor's hot path tests it inline) and raises instead.
forked_after_start = False


def _mark_forked_child() -> None:
    global forked_after_start
    forked_after_start = True
    from .. import _C

    _C._refuse_allocations(str(bad_fork_error()))  # a new storage (torch.empty) raises it too
    _keep_jax_state_forever()


def _keep_jax_state_forever() -> None:
    """Keep the jax state this child inherited alive until the process ends.

    The jax client (held by the devices) and jax's compile thread pool have destructors that join
    threads which stayed in the parent: run at this child's exit (the interpreter clears every
    module's globals), they hang or crash. One reference nobody owns, on our devices and on each
    global of jax's modules (what they reach stays alive too), keeps those destructors from ever
    running; the operating system reclaims the memory when the child ends."""
    keep = ctypes.pythonapi.Py_IncRef
    keep.argtypes = [ctypes.py_object]
    keep(_devices)
    for name, module in list(sys.modules.items()):
        if module is not None and name.partition(".")[0] in ("jax", "jaxlib"):
            for value in list(vars(module).values()):
                keep(value)


def bad_fork_error() -> RuntimeError:
    return RuntimeError(
        "Cannot re-initialize neuron in forked subprocess: this process was forked after the neuron "
        "runtime started in its parent, and the runtime's threads do not survive fork(). To use "
        "neuron with multiprocessing, you must use the 'spawn' start method "
        "(multiprocessing.set_start_method('spawn'), torch.multiprocessing.get_context('spawn'), or "
        "DataLoader(..., multiprocessing_context='spawn')), or fork before the first neuron call."
    )


def check_not_forked() -> None:
    """Raise (naming the 'spawn' start method) in a process forked after the runtime started."""
    if forked_after_start:
        raise bad_fork_error()


def set_native_count(n: int, platform_devices: list | None = None) -> None:
    """Tell the shim how many neuron devices there are, and each one's memory capacity."""
    from .. import _C

    _C._set_device_count(n)
    for i in range(n):
        _C._set_memory_capacity(i, memory_capacity(None if platform_devices is None else platform_devices[i]))


def memory_capacity(device=None) -> int:
    """A core's capacity in bytes: TORCH_NEURONX_CORE_MEMORY, else one logical core's share of the
    target chip's memory (TORCH_NEURONX_TARGET), else what the platform reports for the device
    (`bytes_limit`), else the host's physical memory (the CPU platform: every core shares it)."""
    configured = config.core_memory()
    if configured is not None:
        return configured
    target = targets.current()
    if target is not None:
        return target.memory_bytes
    try:
        limit = int((device.memory_stats() or {}).get("bytes_limit", 0)) if device is not None else 0
    except Exception:  # a platform without memory stats
        limit = 0
    return limit or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def jax_devices() -> list:
    """The PJRT devices behind neuron:0..N-1 (starts jax on first call)."""
    global _devices
    check_not_forked()
    if _devices is not None:
        return _devices
    with _lock:
        if _devices is None:
            jax = lazy_jax.load()
            plat = config.platform()
            if plat == "cpu":  # before the client's threads exist (runtime/host_memory.py)
                host_memory.configure(config.host_cache())
            try:
                available = jax.devices(plat)
            except RuntimeError as e:
                raise RuntimeError(
                    f"TORCH_NEURONX_PLATFORM={plat!r}: jax has no such platform here ({e})"
                ) from None
            devices = [available[i] for i in config.visible_cores(len(available))]
            if plat != "cpu":
                set_native_count(len(devices), devices)
            # a forked child inherits jax's state but not its threads (what CUDA calls a bad fork)
            os.register_at_fork(after_in_child=_mark_forked_child)
            _devices = devices
    return _devices


def in_bad_fork() -> bool:
    """Whether this process was forked from one whose device runtime had already started."""
    return forked_after_start


def is_initialized() -> bool:
    return _devices is not None


def device_count() -> int:
    if _devices is not None:
        return len(_devices)
    if config.platform() == "cpu":
        return config.cpu_device_count()
    return len(jax_devices())


def check_index(index: int, what: str = "neuron") -> None:
    """RuntimeError naming `index` and the device count unless `index` is a neuron device here."""
    count = device_count()
    if not 0 <= index < count:
        raise RuntimeError(f"{what}: neuron device index {index} is out of range: {count} devices")


def jax_device(index: int):
    devices = jax_devices()
    if not 0 <= index < len(devices):
        raise RuntimeError(f"neuron device index {index} is out of range: {len(devices)} devices")
    return devices[index]


def index_of(buf) -> int:
    """The neuron index of the device holding jax array `buf` (-1: several, or none of ours)."""
    try:
        (dev,) = buf.devices()
    except ValueError:
        return -1
    for i, d in enumerate(jax_devices()):
        if d == dev:
            return i
    return -1


def put(value, index: int):
    """`value` (a host array, a Python number or a jax array) as a jax array on neuron:index."""
    return _jax_module().device_put(value, jax_device(index))


def on_device(index: int):
    """A context in which jax places new arrays (and traces programs) on neuron:index."""
    return _jax_module().default_device(jax_device(index))


def _jax_module():
    return lazy_jax.load()
