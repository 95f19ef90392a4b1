"""Compiled executables: compiled, launched, and as bytes and back; the one place that compiles a
lowered program and knows how jax serializes one.

`compile_lowered` compiles and gives the executable its cost analysis (`costs.analyze`); `launch` runs
one (every eager op, fused run and graph), counting it against that analysis. `serialize` gives the
bytes of a compiled jax program (`jax.experimental.serialize_executable`'s payload with its argument
and result trees, and its cost analysis); `load` makes it callable again on neuron:index, whatever
device it was compiled for: the device assignment is replaced on load, so one stored executable serves
every neuron:i of a process and every torchrun rank. Loading skips tracing, lowering and XLA.
"""
from __future__ import annotations

import functools
import io
import pickle
import re
import time

from .. import _C
from . import config, costs, custom_calls, devices, host_memory, profiling, storage
from .lazy_jax import jax

FORMAT = 3  # bump when what `serialize` writes changes


# XLA's CPU backend compiles a small program about twice as fast without its fusion emitters, and
# runs it as fast (measured: add 26 -> 11 ms, softmax 48 -> 28 ms; a 4M-element chain 4.7 vs 5.0 ms)
_QUICK_CPU_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
# NEURON_COMPILER_OPT_LEVEL -> XLA's options beyond a level's defaults (-O1: XLA's defaults, and the quick
# options above for small programs on the CPU)
_LEVEL_OPTIONS = {
    0: {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True},
    1: {},
    2: {},
    3: {"exec_time_optimization_effort": 1.0},
}


@functools.cache
def opt_level() -> int:
    """The optimization level of this process's compiles (NEURON_COMPILER_OPT_LEVEL, or an -O in
    NEURON_CC_FLAGS; default 1), read at the first compile: executables in memory and every key's
    environment (cache/keys.py) were made with it."""
    return config.compiler_opt_level()


def compile_options(small: bool) -> dict:
    """XLA's compile options for a program at this process's level; `small`: one eager op or a short
    fused run."""
    level = opt_level()
    options = dict(_LEVEL_OPTIONS[level])
    if small and level <= 1 and config.platform() == "cpu":
        options.update(_QUICK_CPU_OPTIONS)
    return options


def compile_lowered(lowered, small: bool):
    """`lowered.compile()` with `compile_options(small)` (what this jaxlib does not know: its default)."""
    options = compile_options(small)
    compiled = None
    if options:
        try:
            compiled = lowered.compile(compiler_options=options)
        except Exception as e:  # a jaxlib without an option: its default
            if "compile option" not in str(e):
                raise
    if compiled is None:
        compiled = lowered.compile()
    if not small:
        host_memory.trim()  # XLA's and LLVM's working memory of a large compile (hundreds of MB)
    hlo = optimized_text(compiled)
    compiled._neuron_cost = costs.analyze(compiled, hlo)
    compiled._neuron_targets = custom_calls.referenced(hlo) if hlo is not None else None
    return compiled


def xla_compiles() -> int:
    """How many programs XLA compiled in this process: every compile, not only `compile_lowered`'s (a jax op
    run outside a program, a user's jax.jit), as jax reports them (`lazy_jax.load` listens)."""
    from . import lazy_jax

    return lazy_jax.xla_compiles


def optimized_text(compiled) -> str | None:
    """The text of XLA's optimized program (None: the platform gives none), which the cost analysis and
    the record of custom-call targets read."""
    try:
        return compiled.as_text()
    except Exception:  # noqa: BLE001
        return None


def targets_of(compiled) -> tuple | None:
    """The registered custom-call targets the executable calls (`custom_calls.referenced`)."""
    if not hasattr(compiled, "_neuron_targets"):
        hlo = optimized_text(compiled)
        compiled._neuron_targets = custom_calls.referenced(hlo) if hlo is not None else None
    return compiled._neuron_targets


def cost_of(compiled) -> "costs.Cost | None":
    """The executable's cost analysis (None: its platform has none)."""
    return getattr(compiled, "_neuron_cost", None)


class NotSerializable(Exception):
    """The executable cannot be stored (it calls back into Python, or jax refuses)."""


def serialize(compiled) -> bytes:
    """The bytes of a `jax.stages.Compiled`."""
    from jax.experimental import serialize_executable

    unloaded = getattr(compiled._executable, "_unloaded_executable", None)
    if unloaded is not None and getattr(unloaded, "host_callbacks", None):
        raise NotSerializable("it calls back into Python on the host")
    try:
        payload, in_tree, out_tree = serialize_executable.serialize(compiled)
    except (ValueError, NotImplementedError, TypeError, pickle.PicklingError) as e:
        raise NotSerializable(str(e)) from e
    cost = cost_of(compiled)
    return pickle.dumps((FORMAT, payload, in_tree, out_tree, None if cost is None else cost.stored(),
                         targets_of(compiled)), protocol=pickle.HIGHEST_PROTOCOL)


class _Unpickler(pickle.Unpickler):
    """jax's payload, with every device it names read as the target device."""

    def __init__(self, data: bytes, device):
        super().__init__(io.BytesIO(data))
        self.device = device
        self.client = device.client
        self.xla_bytes = None

    def persistent_load(self, pid):
        kind = pid[0]
        if kind == "exec":  # loaded below, once the target's device assignment is known
            self.xla_bytes = pid[1]
            return None
        if kind == "device":
            return self.device
        if kind == "client":
            return self.client
        raise pickle.UnpicklingError(f"unknown object in a serialized executable: {kind!r}")


def load(data: bytes, index: int):
    """A `jax.stages.Compiled` on neuron:index from `serialize`'s bytes, once every custom-call target
    it calls is ready in this process (`custom_calls.prepare`: raises custom_calls.Unready where one
    cannot be); raises what jax or XLA raise when the bytes do not load on this host."""
    import jaxlib.xla_client as xc
    import numpy as np

    fmt, *rest = pickle.loads(data)
    if fmt != FORMAT:
        raise ValueError(f"serialized executable format {fmt}, this package reads {FORMAT}")
    payload, in_tree, out_tree, cost, targets = rest
    device = devices.jax_device(index)  # starts jax (which registers the shim's targets) if not yet
    custom_calls.prepare(targets)
    unpickler = _Unpickler(payload, device)
    unloaded, args_info_flat, no_kwargs = unpickler.load()
    if unpickler.xla_bytes is None or not hasattr(unloaded, "xla_executable"):
        raise ValueError("the serialized executable holds no XLA executable")
    options = xc.CompileOptions()
    options.device_assignment = xc.DeviceAssignment.create(np.array([[device.id]]))
    unloaded.xla_executable = device.client.deserialize_executable(
        unpickler.xla_bytes, xc.DeviceList((device,)), options
    )
    compiled = jax.stages.Compiled(unloaded.load(), [], in_tree.unflatten(args_info_flat), out_tree,
                                   no_kwargs=no_kwargs)
    compiled._neuron_cost = None if cost is None else costs.Cost.from_stored(cost)
    compiled._neuron_targets = targets
    return compiled


def launch(fn, inputs, what: str, device: int, record=None, failure=RuntimeError):
    """`fn(*inputs)` on neuron:device, for every launch (an eager op, a fused run, a graph): its
    workspace counted first (`note_workspace`), timed in a device profile as `record` (a (kind, name)
    pair of `profiling`), and a failure raised as PyTorch names it: torch.OutOfMemoryError, or
    `failure` ("<what>: the executable failed: ..."). Under NEURON_LAUNCH_BLOCKING=1 it returns once
    the outputs are computed."""
    try:
        note_workspace(fn, device)
        host_memory.release_surplus()  # what earlier launches freed, beyond the bound
        cost = getattr(fn, "_neuron_cost", None)
        if record is not None:
            outs = profiling.launch(record[0], record[1], device, fn, inputs)
        elif cost is not None and config.settings.estimate:  # timed: the launch waits for its outputs
            start = time.perf_counter()
            outs = fn(*inputs)
            jax.block_until_ready(outs)
            costs.launched(cost, what, time.perf_counter() - start)
            return outs
        else:
            outs = fn(*inputs)
        if config.settings.launch_blocking:  # NEURON_LAUNCH_BLOCKING: its failure raised here, by its call
            jax.block_until_ready(outs)
        if cost is not None:
            costs.launched(cost, what, None)
        return outs
    except Exception as e:
        raise storage.launch_error(what, device, e, failure) from e


def note_workspace(compiled, index: int) -> None:
    """Before launching `compiled` on neuron:index: the scratch memory it takes beside its buffers while
    it runs (XLA's temporaries, from its memory analysis, read once per executable) counts in the
    device's peak memory stats, and past the core's capacity the launch is a torch.OutOfMemoryError, as
    on a device whose executables allocate their workspace from the device's memory."""
    nbytes = getattr(compiled, "_neuron_workspace", None)
    if nbytes is None:
        try:
            nbytes = int(compiled.memory_analysis().temp_size_in_bytes)
        except Exception:  # noqa: BLE001 (a platform without a memory analysis: nothing to count)
            nbytes = 0
        compiled._neuron_workspace = nbytes
    if nbytes:
        _C._note_workspace(index, nbytes)


def clear_trace_caches() -> None:
    """Drop jax's caches of traced and lowered programs. Every new signature's program leaves a
    trace in them (about 14 KB here); the executables themselves are held by their callers."""
    jax.clear_caches()


def device_kind(index: int = 0) -> str:
    """What kind of device neuron:index is (a CPU, a GPU model): part of every executable's key."""
    return devices.jax_device(index).device_kind


# /proc/cpuinfo flags that name instruction-set extensions (x86): what code XLA generates for the host
# may use. The rest (hypervisor, tsc_known_freq, ...) changes nothing an executable runs.
_ISA_FLAG = re.compile(r"^(avx|sse|ssse|fma|f16c|bmi|adx|aes|amx|sha|vaes|vpclmul|pclmul|gfni|movbe|popcnt|abm|"
                       r"lzcnt|xsave|cx16|cx8|mmx|prfchw|3dnow|rdrand|rdseed|clflushopt|clwb|movdir|serialize|"
                       r"xop|fma4|tbm|sse4a|cmov|fxsr|erms|fsrm)")


@functools.cache
def built_for() -> tuple:
    """What this process's executables are built for beyond the versions and the device kind, as a
    value for every key's environment: the PJRT platform's version (a GPU plugin's CUDA, say) and, on
    the CPU platform, the machine and its instruction-set extensions. XLA compiles for the host's
    features, so an executable stored on an AVX-512 machine may not run on an AVX2 one sharing the
    cache folder: each gets its own entries."""
    import platform

    out = (("platform_version", str(devices.jax_device(0).client.platform_version)),)
    if config.platform() == "cpu":
        out += (("machine", platform.machine()), ("cpu_features", _cpu_features()))
    return out


def _cpu_features() -> tuple:
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:  # not Linux: the processor's name is what there is
        import platform

        return (platform.processor(),)
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":  # x86: every extension and more
            return tuple(sorted({f for f in value.split() if _ISA_FLAG.match(f)}))
        if name.strip() == "Features":  # arm64: extensions only
            return tuple(sorted(set(value.split())))
    return ()
