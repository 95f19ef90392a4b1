"""Device configuration read from the environment; no jax here (it is read before jax starts).

TORCH_NEURONX_PLATFORM   the PJRT platform that provides NeuronCores: auto (default: a GPU if jax
                         has its CUDA plugin, else the CPU), cpu, cuda, ...
NEURON_RT_NUM_CORES      on the CPU platform, how many NeuronCores to emulate (default 2).
NEURON_RT_VISIBLE_CORES  which of them this process sees: "0", "0-3" or "0,2" (default: all; under a
                         launcher that sets LOCAL_RANK, such as torchrun, the one core LOCAL_RANK).
TORCH_NEURONX_NATIVE_KERNELS  on the CPU platform, whether executables call torch's own CPU kernels for
                         bfloat16/float16 matrix products, convolutions and attention: auto (the default:
                         where torch's kernel for that dtype is fast on this CPU), 1 (always) or 0 (never:
                         XLA's).
TORCH_NEURONX_HOST_MMAP_THRESHOLD  on the CPU platform, glibc's mmap threshold (default 8MiB; 0 leaves
                         glibc's dynamic one).

Under torchrun each process owns one core, as on Trainium: NEURON_RT_VISIBLE_CORES defaults to
LOCAL_RANK, and that core is the process's neuron:0. On the CPU platform every process emulates the
same chip: NEURON_RT_NUM_CORES cores, raised to cover LOCAL_WORLD_SIZE and the visible cores.
"""
from __future__ import annotations

import importlib.util
import os

DEFAULT_CPU_CORES = 2


def platform() -> str:
    name = os.environ.get("TORCH_NEURONX_PLATFORM", "auto").strip().lower() or "auto"
    if name != "auto":
        return name
    for plugin in ("jax_cuda13_plugin", "jax_cuda12_plugin"):
        if importlib.util.find_spec(plugin) is not None:
            return "cuda"
    return "cpu"


def _parse_cores(text: str, var: str) -> list[int]:
    cores: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = (int(p) for p in part.split("-", 1))
                cores.extend(range(lo, hi + 1))
            else:
                cores.append(int(part))
        except ValueError:
            raise ValueError(f"{var}={text!r}: expected core indices like '0', '0-3' or '0,2'") from None
    if not cores or min(cores) < 0:
        raise ValueError(f"{var}={text!r}: expected non-negative core indices like '0', '0-3' or '0,2'")
    return cores


def _visible() -> tuple[str | None, str]:
    """(the visible cores' text, the variable it came from): NEURON_RT_VISIBLE_CORES, or under a
    launcher (LOCAL_RANK set) the launcher's local rank."""
    text = os.environ.get("NEURON_RT_VISIBLE_CORES")
    if text:
        return text, "NEURON_RT_VISIBLE_CORES"
    return os.environ.get("LOCAL_RANK", "").strip() or None, "LOCAL_RANK"


def launcher_core() -> int | None:
    """The core a launcher gave this process (LOCAL_RANK, when NEURON_RT_VISIBLE_CORES is unset)."""
    text, var = _visible()
    return int(text) if var == "LOCAL_RANK" and text is not None and text.isdigit() else None


def host_device_count() -> int:
    """How many CPU devices XLA creates: every core some process may see."""
    text = os.environ.get("NEURON_RT_NUM_CORES")
    count = DEFAULT_CPU_CORES
    if text:
        try:
            count = int(text)
        except ValueError:
            raise ValueError(f"NEURON_RT_NUM_CORES={text!r}: expected a positive integer") from None
        if count < 1:
            raise ValueError(f"NEURON_RT_NUM_CORES={text!r}: expected a positive integer")
    local_world = os.environ.get("LOCAL_WORLD_SIZE", "").strip()
    if local_world.isdigit():
        count = max(count, int(local_world))
    visible, var = _visible()
    if visible:
        count = max(count, max(_parse_cores(visible, var)) + 1)
    return count


def visible_cores(available: int) -> list[int]:
    """Indices, among the platform's `available` devices, that this process uses as neuron:0..N-1."""
    visible, var = _visible()
    if not visible:
        if platform() == "cpu":
            available = min(available, host_device_count())
        return list(range(available))
    cores = _parse_cores(visible, var)
    bad = [c for c in cores if c >= available]
    if bad:
        raise ValueError(f"{var}={visible!r} names core {bad[0]}, but the platform has {available}")
    return cores


def cpu_device_count() -> int:
    """The neuron device count on the CPU platform, known without starting jax."""
    return len(visible_cores(host_device_count()))


_UNITS = {"": 1, "b": 1, "k": 2**10, "kib": 2**10, "m": 2**20, "mib": 2**20, "g": 2**30, "gib": 2**30,
          "t": 2**40, "tib": 2**40, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def _size(var: str, example: str) -> int | None:
    """A size setting ("24GiB", "512M", "2GB", a byte count; unset or empty: None)."""
    text = os.environ.get(var, "").strip()
    if not text:
        return None
    number = text.rstrip("BbIiKkMmGgTt ")
    unit = text[len(number):].strip().lower()
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in _UNITS or value < 0:
        raise ValueError(f"{var}={text!r}: expected a size such as {example} or a byte count")
    return int(value * _UNITS[unit])


def core_memory() -> int | None:
    """Each core's memory capacity from TORCH_NEURONX_CORE_MEMORY ("24GiB", "512M", "2GB", bytes),
    or None: the platform's memory."""
    value = _size("TORCH_NEURONX_CORE_MEMORY", "24GiB, 512MiB, 2GB")
    if value == 0:
        raise ValueError("TORCH_NEURONX_CORE_MEMORY=0: expected a size such as 24GiB, 512MiB, 2GB or a byte count")
    return value


DEFAULT_HOST_MMAP_THRESHOLD = 8 << 20


def host_mmap_threshold() -> int:
    """TORCH_NEURONX_HOST_MMAP_THRESHOLD (default 8MiB; 0: glibc's own): on the CPU platform, the size from
    which host allocations are their own mappings, returned to the system when freed (runtime/devices.py)."""
    value = _size("TORCH_NEURONX_HOST_MMAP_THRESHOLD", "8MiB")
    return DEFAULT_HOST_MMAP_THRESHOLD if value is None else value


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def flag(var: str, default: bool) -> bool:
    """A boolean setting: 1/true/yes/on or 0/false/no/off (unset or empty: `default`)."""
    text = os.environ.get(var, "").strip().lower()
    if not text:
        return default
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{var}={text!r}: expected 1 or 0")


def native_kernels() -> str:
    """TORCH_NEURONX_NATIVE_KERNELS: "auto" (unset, empty or auto: executables on the CPU platform call
    torch's CPU kernels for the 16-bit products torch runs fast on this CPU), "on" (1: for every 16-bit
    product) or "off" (0: XLA's own); runtime/native_kernels.py decides from it."""
    text = os.environ.get("TORCH_NEURONX_NATIVE_KERNELS", "").strip().lower()
    if text in ("", "auto"):
        return "auto"
    if text in _TRUE:
        return "on"
    if text in _FALSE:
        return "off"
    raise ValueError(f"TORCH_NEURONX_NATIVE_KERNELS={text!r}: expected auto, 1 or 0")
