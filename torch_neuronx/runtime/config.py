"""Device configuration read from the environment; no jax here (it is read before jax starts).

TORCH_NEURONX_PLATFORM   the PJRT platform that provides NeuronCores: auto (default: a GPU if jax
                         has its CUDA plugin, else the CPU), cpu, cuda, ...
NEURON_RT_NUM_CORES      on the CPU platform, how many NeuronCores to emulate (default 2).
NEURON_RT_VISIBLE_CORES  which of them this process sees: "0", "0-3" or "0,2" (default: all).
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
    visible = os.environ.get("NEURON_RT_VISIBLE_CORES")
    if visible:
        count = max(count, max(_parse_cores(visible, "NEURON_RT_VISIBLE_CORES")) + 1)
    return count


def visible_cores(available: int) -> list[int]:
    """Indices, among the platform's `available` devices, that this process uses as neuron:0..N-1."""
    visible = os.environ.get("NEURON_RT_VISIBLE_CORES")
    if not visible:
        if platform() == "cpu":
            available = min(available, host_device_count())
        return list(range(available))
    cores = _parse_cores(visible, "NEURON_RT_VISIBLE_CORES")
    bad = [c for c in cores if c >= available]
    if bad:
        raise ValueError(
            f"NEURON_RT_VISIBLE_CORES={visible!r} names core {bad[0]}, but the platform has {available}"
        )
    return cores


def cpu_device_count() -> int:
    """The neuron device count on the CPU platform, known without starting jax."""
    return len(visible_cores(host_device_count()))
