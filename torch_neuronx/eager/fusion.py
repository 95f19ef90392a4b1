"""Eager fusion (TorchNeuron's Adaptive Eager Execution): queued ops run as one executable per run.

An eager op whose signature is traced (`executor`) is not launched: it joins the queue, its results
are tensors whose storages hold `storage.Pending` buffers, and it returns. The queue runs (`flush`)
when something needs real buffers (a host read, a synchronize, a compiled graph, a collective, an
op that runs on its own, an event: they all call `storage.sync(reason)`), when the queue reaches
`max_ops()` ops, or when the next op is on another device or stream. The run is one program: each
op's traced jaxpr replayed in program order, storages flowing from op to op as traced values, so
an in-place op or a write through a view reads and writes exactly what it would op by op, and each
op keeps its own lowering's numerics (the replay adds no arithmetic: values between ops keep the
dtype each op's result has). Only the storages still alive when the run is launched come out of it;
the rest never exist.

A run's key is a `cache.Key` in namespace "run": per op, its value key and which of the run's storages
each of its slots is (numbered in order of first use), then the storages that come out. The
executable is got like any other (`ExecutableCache.acquire`: memory, then disk, else compiled).

Off with TORCH_NEURONX_ENABLE_CONCATENATION=0 (TorchNeuron's name; alias TORCH_NEURONX_EAGER_FUSION=0),
under NEURON_LAUNCH_BLOCKING=1 (each op runs to completion at its call), under
TORCH_NEURONX_TARGET_CHECK=compare (each op runs beside its exact program), or while
`torch.use_deterministic_algorithms(True)` is set (then every op is its own launch);
TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT (alias TORCH_NEURONX_EAGER_FUSION_MAX_OPS) bounds a run.
"""
from __future__ import annotations

import collections

import contextlib
import threading

import torch

from .. import metrics
from ..cache import Built, Key, executable_cache
from ..ops import protocol
from ..ops.protocol import Plan
from ..runtime import config, devices, executables, storage, streams
from ..runtime.lazy_jax import jax

ENV = "TORCH_NEURONX_ENABLE_CONCATENATION"  # TorchNeuron's name; TORCH_NEURONX_EAGER_FUSION is its alias
MAX_OPS_ENV = "TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT"  # alias TORCH_NEURONX_EAGER_FUSION_MAX_OPS
DEFAULT_MAX_OPS = config.default(MAX_OPS_ENV)
SMALL_RUN = 32  # runs of at most this many ops compile with XLA's quick options (executables.compile_lowered)

_Pending = storage.Pending
_Lost = storage.Lost
_buffer = storage.buffer
_put_buffer = storage.put_buffer
_deterministic = torch.are_deterministic_algorithms_enabled
_current_stream = streams.current_stream
RUN = "run"  # the cache namespace of fused runs' executables


def _read_settings():
    # TORCH_NEURONX_TARGET_CHECK=compare runs each op's exact program beside it, and NEURON_LAUNCH_BLOCKING
    # runs each op to completion at its call: one launch per op
    on = config.settings.eager_fusion and not _comparing() and not config.settings.launch_blocking
    return on, config.settings.eager_fusion_max_ops


def _comparing() -> bool:
    return config.settings.target_check == "compare"


_enabled, _max_ops = _read_settings()
# `setting(on)` overrides the environment for the thread inside its block only: another thread's ops
# keep queueing (or not) as its own settings say
class _ThreadSetting(threading.local):
    on = None  # None: the environment's setting (a class attribute: no lookup miss on the hot path)


_local = _ThreadSetting()
_overrides = 0  # how many `setting` blocks are open in any thread (0: no thread-local lookup per op)


def enabled() -> bool:
    """Whether this thread's eager ops are queued now (the environment or this thread's `setting`,
    and no determinism request)."""
    on = _local.on if _overrides else None
    return (_enabled if on is None else on) and not _deterministic()


def max_ops() -> int:
    return _max_ops


def reload_settings() -> None:
    """Read TORCH_NEURONX_EAGER_FUSION and its bound again (the queue runs first)."""
    global _enabled, _max_ops
    flush("settings")
    _enabled, _max_ops = _read_settings()


@contextlib.contextmanager
def setting(on: bool):
    """Fusion on or off for this thread inside the block, whatever the environment says (what is
    queued runs first)."""
    global _overrides
    flush("settings")
    with _lock:
        _overrides += 1
    before, _local.on = _local.on, on and not _comparing() and not config.settings.launch_blocking
    try:
        yield
    finally:
        flush("settings")
        _local.on = before
        with _lock:
            _overrides -= 1


def disabled():
    """Every eager op of this thread its own launch inside the block."""
    return setting(False)


class _Storage:
    """One storage of the run: its key (0: none), what it holds now (a real buffer, a Pending one of
    a queued op, or None), the real buffer it came in with (an input of the run's executable), and
    whether a queued op writes it (its input is donated)."""

    __slots__ = ("key", "buffer", "input", "written")

    def __init__(self, key, buffer, input):
        self.key = key
        self.buffer = buffer
        self.input = input
        self.written = False


class _Queued:
    """One queued op: its traced entry, where its slots are among the run's storages, the run
    storages its fresh results and its writes become."""

    __slots__ = ("entry", "slot_map", "n_scalars", "fresh", "writes", "sig")

    def __init__(self, entry, slot_map, n_scalars, fresh, writes):
        self.entry = entry
        self.slot_map = slot_map
        self.sig = (entry.key.value, slot_map)  # its part of the run's key
        self.n_scalars = n_scalars
        self.fresh = fresh  # run storage per fresh output
        self.writes = writes  # run storage per written slot


class Run:
    """The queued ops of one device and stream, and the storages they use, numbered in order of first use."""

    def __init__(self, device, stream):
        self.device = device
        self.stream = stream
        self.ops = []  # _Queued, in program order
        self.storages = []  # _Storage per run storage
        self.index = {}  # storage key -> run storage
        self.produced = []  # run storages queued ops made or wrote, each once, in order
        self.scalars = []  # the ops' traced scalar inputs (weakly typed device arrays, Python numbers, draws)

    def add(self, spec, entry, keys, fresh_keys, n_scalars) -> None:
        """Queue one traced op: `keys` are its storages (its slots), `fresh_keys` its fresh results'.
        Their storages, and those it writes, now hold Pending buffers. (The hot path of every eager
        op: locals, no calls per storage.)"""
        storages, index, produced = self.storages, self.index, self.produced
        slot_map = []
        for k in keys:
            # read under the lock: another thread's flush may have made it real
            b = _buffer(k) if k else None
            r = index.get(k) if k else None
            if r is None or storages[r].buffer is not b:  # a storage new to the run (or a key used again)
                if type(b) is _Pending:  # never: a flush makes every Pending it owns real
                    raise RuntimeError(f"{spec.name}: a pending buffer of no queued op")
                if type(b) is _Lost:
                    raise RuntimeError(f"{spec.name}: {b.describe()}")
                r = len(storages)
                storages.append(_Storage(k, b, b))
                if k:
                    index[k] = r
            slot_map.append(r)
        slot_map = tuple(slot_map)
        avals = entry.out_avals
        fresh = []
        for i, k in enumerate(fresh_keys):
            r = len(storages)
            p = _Pending(avals[i])
            storages.append(_Storage(k, p, None))
            if k:
                index[k] = r
                _put_buffer(k, p)
            produced.append(r)
            fresh.append(r)
        writes = []
        n_fresh = len(fresh)
        for j, slot in enumerate(entry.write_slots):
            r = slot_map[slot]
            st = storages[r]
            if not st.written:
                st.written = True
                if r not in fresh:
                    produced.append(r)
            st.buffer = p = _Pending(avals[n_fresh + j])
            if st.key:
                _put_buffer(st.key, p)
            writes.append(r)
        self.ops.append(_Queued(entry, slot_map, n_scalars, fresh, writes))

    def store(self, live, bufs) -> None:
        """After the launch: each live run storage's new buffer, stored where its queued op's Pending
        buffer still is (a later write or a free has replaced it otherwise)."""
        for r, buf in zip(live, bufs):
            st = self.storages[r]
            storage.replace(st.key, st.buffer, buf)

    def inputs(self) -> list:
        """The run storages that came in with a real buffer, in order (the executable's inputs)."""
        return [r for r, st in enumerate(self.storages) if st.input is not None]

    def live(self) -> list:
        """The produced storages still alive: what comes out of the run (what died never does: each op,
        and `storage.sync`, apply the frees before it; in a run the length bound ends, the few freed since
        the last op count as alive: applying them here could meet a resize of a storage still queued)."""
        storages = self.storages
        return [r for r in self.produced if storages[r].key and _buffer(storages[r].key) is storages[r].buffer]

    def key(self, live) -> Key:
        """Per op, its value key and which run storages its slots are; then the storages that come out."""
        return Key(RUN, (tuple([op.sig for op in self.ops]), tuple(live)), self.device)

    def describe(self) -> str:
        names = [op.entry.name for op in self.ops]
        return names[0] if len(names) == 1 else f"a fused run of {len(names)} ops ({names[0]} ... {names[-1]})"


_run: Run | None = None
_lock = threading.RLock()


def enqueue(spec, call, entry, scalars, fresh_keys):
    """Queue one traced op: its inputs (`call`), its traced scalar inputs, the storage keys of its
    fresh results. Their storages, and those it writes, now hold Pending buffers."""
    global _run
    with _lock:
        device = call.device
        stream = _current_stream(device)
        if _run is not None and (_run.device != device or _run.stream != stream):
            _flush("device or stream change")
        run = _run if _run is not None else Run(device, stream)
        run.add(spec, entry, call.keys, fresh_keys, len(scalars))  # a run it failed to join is never installed
        if _run is None:
            _run = run
            storage.set_queued(True)
        run.scalars.extend(scalars)
        if entry.checks:  # its value checks: the run ends with it, and its call raises what fails
            _flush(f"value checks of {spec.name}")
        elif len(run.ops) >= _max_ops:
            _flush("length bound")


def flush(reason: str = "host access") -> None:
    """Run the queued ops, if any, as one executable; `reason` says why (the metrics)."""
    with _lock:
        if _run is not None:
            _flush(reason)


storage.register_flush(flush, disabled)


def _flush(reason: str) -> None:
    global _run
    run, _run = _run, None
    live = run.live()
    device = run.device
    inputs = [run.storages[r].input for r in run.inputs()]
    try:
        fn = executable_cache().acquire(run.key(live), f"fused run of {len(run.ops)} ops",
                                        lambda: _build(run, live, inputs), lambda found: found.executable)
        outs = executables.launch(fn, inputs + run.scalars, run.describe(), device)
    except BaseException as e:
        _lose(run, live, e)
        storage.set_queued(False)
        raise
    for buf in outs:  # each: the launch is done when any one is, and some may die first
        streams.launched(device, buf, run.stream)
    # the ops' results were wrapped when they were queued: what comes out is the live storages' new
    # buffers, then the last op's check flags (its writes are stored before its check raises, as op by op)
    plan = Plan([], [], live, run.ops[-1].entry.checks)
    try:
        protocol.finish(plan, outs, run, None, device, run.describe())
    finally:
        storage.set_queued(False)  # only now: a reader that found ops queued waits on the lock for these buffers
        metrics.fused_run(len(run.ops), reason)


def _lose(run: Run, live, error) -> None:
    """A run that failed: the storages it would have written raise `error` when used."""
    for r in live:
        st = run.storages[r]
        p = st.buffer
        storage.replace(st.key, p, storage.Lost(p.aval, f"{type(error).__name__}: {error}"))


def _donated(run: Run, external, outputs) -> tuple:
    """The input positions whose buffers the run donates: storages a queued op writes, each as long as
    an output of its shape and dtype is left to take its memory (jax matches them by shape; one that no
    output can take is not donated: jax would warn that it went unused)."""
    free = collections.Counter((run.storages[r].buffer.aval.shape, run.storages[r].buffer.aval.dtype)
                               for r in outputs)
    donate = []
    for i, r in enumerate(external):
        st = run.storages[r]
        if not st.written:
            continue
        aval = (st.input.aval.shape, st.input.aval.dtype)
        if free[aval]:
            free[aval] -= 1
            donate.append(i)
    return tuple(donate)


def _build(run: Run, live, inputs) -> Built:
    """XLA's executable of the queued ops: their jaxprs replayed in order over the run's storages."""
    from jax.extend.core import jaxpr_as_fun

    ops = [(jaxpr_as_fun(op.entry.jaxpr), op.slot_map, op.n_scalars, op.fresh, op.writes) for op in run.ops]
    flags = bool(run.ops[-1].entry.checks)  # only the last op of a run has value checks
    n_storages = len(run.storages)
    external = run.inputs()
    n_ext = len(external)
    outputs = list(live)

    def program(*args):
        env = [None] * n_storages
        for r, b in zip(external, args[:n_ext]):
            env[r] = b
        scalars = args[n_ext:]
        at = 0
        for fn, slot_map, n_scalars, fresh, writes in ops:
            ins = [env[r] for r in slot_map]
            ins = [b for b in ins if b is not None]
            ins.extend(scalars[at:at + n_scalars])
            at += n_scalars
            outs = fn(*ins)
            for r, v in zip(fresh, outs):
                env[r] = v
            for r, v in zip(writes, outs[len(fresh):]):
                env[r] = v
        return tuple(env[r] for r in outputs) + ((outs[-1],) if flags else ())

    donate = _donated(run, external, outputs)
    with devices.on_device(run.device):
        # traced with this launch's own scalars: weakly typed as the op's probes were
        lowered = jax.jit(program, donate_argnums=donate).lower(*inputs, *run.scalars)
        fn = executables.compile_lowered(lowered, small=len(ops) <= SMALL_RUN)
    return Built(fn, fn, ())
