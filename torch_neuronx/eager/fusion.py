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

A run's key is a value: per op, its value key and which of the run's storages each of its slots is
(numbered in order of first use), then the storages that come out. The executable is cached like
any other (memory, then disk, kind "run").

Off with TORCH_NEURONX_EAGER_FUSION=0, or while `torch.use_deterministic_algorithms(True)` is set
(then every op is its own launch, as before); TORCH_NEURONX_EAGER_FUSION_MAX_OPS bounds a run.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time

import torch

from .. import metrics
from ..cache import executable_cache, parse_count
from ..ops import checks
from ..runtime import devices, executables, storage, streams
from ..runtime.lazy_jax import jax

ENV = "TORCH_NEURONX_EAGER_FUSION"
MAX_OPS_ENV = "TORCH_NEURONX_EAGER_FUSION_MAX_OPS"
DEFAULT_MAX_OPS = 1024
SMALL_RUN = 32  # runs of at most this many ops compile with XLA's quick options (executables.compile_lowered)

_Pending = storage.Pending
_BUFFERS = storage.BUFFERS
_deterministic = torch.are_deterministic_algorithms_enabled
_current_stream = streams.current_stream


def _read_settings():
    on = os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")
    text = os.environ.get(MAX_OPS_ENV, "").strip()
    return on, parse_count(text, MAX_OPS_ENV, "ops") if text else DEFAULT_MAX_OPS


_enabled, _max_ops = _read_settings()


def enabled() -> bool:
    """Whether eager ops are queued now (the environment, and no determinism request)."""
    return _enabled and not _deterministic()


def max_ops() -> int:
    return _max_ops


def reload_settings() -> None:
    """Read TORCH_NEURONX_EAGER_FUSION and its bound again (the queue runs first)."""
    global _enabled, _max_ops
    flush("settings")
    _enabled, _max_ops = _read_settings()


@contextlib.contextmanager
def setting(on: bool):
    """Fusion on or off inside the block, whatever the environment says (what is queued runs first)."""
    global _enabled
    flush("settings")
    before, _enabled = _enabled, on
    try:
        yield
    finally:
        flush("settings")
        _enabled = before


def disabled():
    """Every eager op its own launch inside the block."""
    return setting(False)


class _Queued:
    """One queued op: its traced entry, where its slots are among the run's storages, the run
    storages its fresh results and its writes become."""

    __slots__ = ("entry", "slot_map", "n_scalars", "fresh", "writes")

    def __init__(self, entry, slot_map, n_scalars, fresh, writes):
        self.entry = entry
        self.slot_map = slot_map
        self.n_scalars = n_scalars
        self.fresh = fresh  # run storage per fresh output (None: an empty tensor, no storage)
        self.writes = writes  # run storage per written slot


class _Queue:
    def __init__(self):
        self.clear()

    def clear(self):
        self.ops = []  # _Queued, in program order
        self.sig = []  # per op: (its value key, its slot map)
        self.index = {}  # storage key -> run storage
        self.current = []  # run storage -> the buffer it holds now (real, Pending, or None)
        self.storage_key = []  # run storage -> storage key (0: none)
        self.external = []  # run storages that came in with a real buffer, in order
        self.inputs = []  # their buffers
        self.written = set()  # run storages some queued op writes
        self.produced = []  # run storages queued ops made or wrote, each once, in order
        self.scalars = []  # the ops' traced scalar inputs (weakly typed device arrays, Python numbers, draws)
        self.device = None
        self.stream = None


_queue = _Queue()
_lock = threading.RLock()


def enqueue(spec, call, entry, scalars, fresh_keys):
    """Queue one traced op: its inputs (`call`), its traced scalar inputs, the storage keys of its
    fresh results. Their storages, and those it writes, now hold Pending buffers."""
    with _lock:
        q = _queue
        device = call.device
        stream = _current_stream(device)
        if q.ops and (q.device != device or q.stream != stream):
            _flush("device or stream change")
        if not q.ops:
            q.device, q.stream = device, stream
            storage.queued = flush
        index, current, get = q.index, q.current, _BUFFERS.get
        slot_map = []
        for k in call.keys:
            # read again under the lock: another thread's flush may have made it real since
            b = get(k) if k else None
            r = index.get(k) if k else None
            if r is None or current[r] is not b:  # a storage new to the run (or a key used again)
                if type(b) is _Pending:  # never: a flush makes every Pending it owns real
                    raise RuntimeError(f"{spec.name}: a pending buffer of no queued op")
                if isinstance(b, storage.Lost):
                    raise RuntimeError(f"{spec.name}: {b.describe()}")
                if b is not None:
                    q.external.append(len(current))
                    q.inputs.append(b)
                r = len(current)
                current.append(b)
                q.storage_key.append(k)
                if k:
                    index[k] = r
            slot_map.append(r)
        avals = entry.out_avals
        n_fresh = len(entry.fresh)
        fresh = []
        for i in range(n_fresh):
            p = _Pending(*avals[i])
            k = fresh_keys[i]
            r = len(current)
            current.append(p)
            q.storage_key.append(k)
            if k:
                index[k] = r
                _BUFFERS[k] = p
            q.produced.append(r)
            fresh.append(r)
        writes = []
        for j, slot in enumerate(entry.write_slots):
            r = slot_map[slot]
            p = _Pending(*avals[n_fresh + j])
            if r not in q.written:
                q.written.add(r)
                if r not in fresh:
                    q.produced.append(r)
            current[r] = p
            k = q.storage_key[r]
            if k:
                _BUFFERS[k] = p
            writes.append(r)
        slot_map = tuple(slot_map)
        q.ops.append(_Queued(entry, slot_map, len(scalars), fresh, writes))
        q.sig.append((entry.key, slot_map))
        q.scalars.extend(scalars)
        if entry.checks:  # its value checks: the run ends with it, and its call raises what fails
            _flush(f"value checks of {spec.name}")
        elif len(q.ops) >= _max_ops:
            _flush("length bound")


def flush(reason: str = "host access") -> None:
    """Run the queued ops, if any, as one executable; `reason` says why (the metrics)."""
    with _lock:
        if _queue.ops:
            _flush(reason)


RUN = ("run",)  # what a run's key starts with


def _flush(reason: str) -> None:
    q = _queue
    # what died never comes out of the run (each op applies the frees before it; the few freed since
    # the last op count as alive: applying them here could meet a resize of a storage still queued)
    current, keys = q.current, q.storage_key
    live = [r for r in q.produced if keys[r] and _BUFFERS.get(keys[r]) is current[r]]
    device = q.device
    n_ops = len(q.ops)
    key = (RUN, tuple(q.sig), tuple(live), device)
    cache = executable_cache()
    try:
        fn = cache.get(key)  # the run's executable
        if fn is None:
            fn = _load_or_compile(q, key, live, device)
        try:
            executables.note_workspace(fn, device)
            outs = fn(*q.inputs, *q.scalars)
        except Exception as e:
            raise storage.launch_error(_describe_run(q), device, e) from e
    except BaseException as e:
        _lose(q, live, e)
        q.clear()
        storage.queued = None
        raise
    for buf in outs:  # each: the launch is done when any one is, and some may die first
        streams.launched(device, buf, q.stream)
    for r, buf in zip(live, outs):
        k = keys[r]
        if _BUFFERS.get(k) is current[r]:
            _BUFFERS[k] = buf
    storage.queued = None  # only now: a reader that found it set waits on the lock for these buffers
    metrics.fused_run(n_ops, reason)
    last = q.ops[-1].entry
    q.clear()
    if last.checks:  # the last op's failure flags came out last (its writes are stored, as op by op)
        failed = checks.first_failure(outs[-1], last.checks)
        if failed is not None:
            error, message = failed
            raise error(f"{last.key[1]}: {message}")


def _lose(q, live, error) -> None:
    """A run that failed: the storages it would have written raise `error` when used."""
    for r in live:
        k = q.storage_key[r]
        p = q.current[r]
        if _BUFFERS.get(k) is p:
            _BUFFERS[k] = storage.Lost(p.shape, p.dtype, f"{type(error).__name__}: {error}")


def _describe_run(q) -> str:
    names = [op.entry.key[1] for op in q.ops]
    return names[0] if len(names) == 1 else f"a fused run of {len(names)} ops ({names[0]} ... {names[-1]})"


def _load_or_compile(q, key, live, device):
    cache = executable_cache()
    name = f"fused run of {len(q.ops)} ops"
    found = cache.load("run", name, key)
    if found is not None:
        fn, nbytes = found.executable, found.nbytes
        metrics.run_loaded()
    else:
        start = time.perf_counter()
        fn = _compile(q, live, device)
        metrics.run_compiled(time.perf_counter() - start)
        nbytes = cache.save("run", name, key, (), fn)
    cache.put(key, fn, nbytes)
    return fn


def _compile(q, live, device):
    """XLA's executable of the queued ops: their jaxprs replayed in order over the run's storages."""
    from jax.extend.core import jaxpr_as_fun

    ops = [(jaxpr_as_fun(op.entry.jaxpr), op.slot_map, op.n_scalars, op.fresh, op.writes) for op in q.ops]
    flags = bool(q.ops[-1].entry.checks)  # only the last op of a run has value checks
    n_storages = len(q.current)
    external = list(q.external)
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

    donate = tuple(i for i, r in enumerate(external) if r in q.written)
    with devices.on_device(device):
        # traced with this launch's own scalars: weakly typed as the op's probes were
        lowered = jax.jit(program, donate_argnums=donate).lower(*q.inputs, *q.scalars)
        return executables.compile_lowered(lowered, small=len(ops) <= SMALL_RUN)
