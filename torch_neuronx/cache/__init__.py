"""The executable cache shared by eager mode (one executable per op signature) and compiled mode (one
per graph and input signature): a memory layer, bounded and least recently used out first, over a
disk layer that outlives the process (`store.DiskStore`).

Every executable (an eager op, a fused run, a compiled graph) is got through one call,
`executable_cache().acquire(key, name, build, from_disk)`: memory (the hot path), else under a lock
that other processes building the same key wait on, the disk (`from_disk` makes the layer's value from
what was stored), else `build()` (which compiles through `runtime.executables`) and a save to disk with
the metadata the layer needs to use it (the output plan), so that a hit in a new process skips the meta
call, the trace, the lowering and XLA; then the value goes into memory, and the metrics count each step.
A key is a `keys.Key` (namespace, value, device); an entry on disk is named by its namespace and value
(`keys.entry_key`) and its executable loads on any device (`runtime.executables`). Records that are not
executables (an op's output plan, an AOTAutograd graph) use `load_record`/`save_record`.

Settings (rows of runtime/config.py's table; read when the cache is first used, and again by `reset()`):

TORCH_NEURONX_NEFF_CACHE_DIR             the disk layer's folder (default /tmp/neff_cache)
TORCH_NEURONX_DISABLE_NEFF_CACHE=1       no disk layer (alias TORCH_NEURONX_NEFF_DISABLE_CACHE)
TORCH_NEURONX_NEFF_CACHE_MAX_SIZE        bound of the disk layer: bytes, or 500M, 20G (default: none)
NEURON_COMPILATION_CACHE_MAX_ENTRIES     executables kept in memory (default 2048; 0: no bound; alias
                                         TORCH_NEURONX_NEFF_CACHE_MEMORY_ENTRIES)
NEURON_COMPILATION_CACHE_MAX_SIZE_MB     their serialized size kept in memory, MiB (default 1024; 0: no
                                         bound; alias TORCH_NEURONX_NEFF_CACHE_MEMORY_SIZE, a size)
TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT    how long a compile waits on another process's (default 1200 s)
TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR       the lock files' folder (default: the cache folder's locks/)
"""
from __future__ import annotations

import contextlib
import math
import pickle
import threading
import time
import warnings
from typing import NamedTuple

from .. import metrics
from ..runtime import config, custom_calls, executables, profiling
from . import artifacts, keys
from .memory import MemoryCache
from .keys import Key
from .store import BadEntry, DiskStore, decode, encode

DIR_ENV = "TORCH_NEURONX_NEFF_CACHE_DIR"
DISABLE_ENV = "TORCH_NEURONX_DISABLE_NEFF_CACHE"  # alias TORCH_NEURONX_NEFF_DISABLE_CACHE
MAX_SIZE_ENV = "TORCH_NEURONX_NEFF_CACHE_MAX_SIZE"
MEMORY_ENTRIES_ENV = "NEURON_COMPILATION_CACHE_MAX_ENTRIES"  # alias TORCH_NEURONX_NEFF_CACHE_MEMORY_ENTRIES
MEMORY_SIZE_ENV = "NEURON_COMPILATION_CACHE_MAX_SIZE_MB"  # alias TORCH_NEURONX_NEFF_CACHE_MEMORY_SIZE
DEFAULT_DIR = config.default(DIR_ENV)
DEFAULT_MEMORY_ENTRIES = config.default(MEMORY_ENTRIES_ENV)
DEFAULT_MEMORY_BYTES = config.default(MEMORY_SIZE_ENV)
# the settings' parsers (the command line's --max-size takes a size too)
parse_size = config.parse_size
parse_count = config.parse_count
# entries recorded as torch.compiler cache artifacts: a compiled model's (eager ones travel with the folder)
_ARTIFACT_KINDS = ("graph", "aot")

def disk_enabled() -> bool:
    return not config.settings.neff_disable_cache


def directory() -> str:
    return config.settings.neff_cache_dir


class Built(NamedTuple):
    """What a layer's `build` made: the value memory holds, and what the disk keeps of it (None: an
    executable-less value, kept in memory only)."""

    value: object
    executable: object = None  # a jax.stages.Compiled to store
    meta: object = None  # stored beside it: what the layer needs to use it in a new process


class Found(NamedTuple):
    meta: object  # what the layer saved with the executable
    executable: object  # a jax.stages.Compiled on the device asked for
    nbytes: int  # its serialized size (what the memory bound counts)


class _Read(NamedTuple):
    digest: str
    data: bytes  # the entry as stored
    body: bytes  # what its layer wrote


class ExecutableCache:
    def __init__(self, memory: MemoryCache, disk: DiskStore | None):
        self.memory = memory
        self.disk = disk
        self._environment = None
        self._checked = disk is None  # whether loading from disk was tried on this host
        self._evicted_since_clear = 0
        self._unready_warned: set = set()  # what Unready said, warned about once each
        self._lock = threading.Lock()
        # the last key spelled and its spelling: one acquisition locks, loads and saves the same key,
        # and a fused run's key is thousands of values long
        self._last_spelled = (None, None)

    # ---- memory

    def acquire(self, key: Key, name: str, build, from_disk=None):
        """The value of `key`: from memory; else (under the key's lock, which other processes building
        it wait on) from disk, made by `from_disk(found)`; else `build()` -> Built, saved to disk. Put in
        memory either way. `from_disk` None: the kind has nothing on disk (built each process, no lock).
        `build()` may return None (the call must be described again): nothing is stored."""
        value = self.get(key)
        if value is not None:
            return value
        got = self.fetch(key, name, build, from_disk)
        if got is None:
            return None
        value, nbytes = got
        self.put(key, value, nbytes)
        return value

    def fetch(self, key: Key, name: str, build, from_disk=None):
        """What `acquire` does past the memory layer: (value, its serialized size) from disk or built and
        saved, or None where `build()` returned None. Also for a value memory holds without its
        executable (an eager op traced under fusion that now runs on its own): its executable is got
        here as any other, from disk where a process stored it."""
        metrics.cache_miss(key.namespace, name)
        metrics.executable_wanted(key.namespace, name, key.value)
        lock = self.compiling(key, name) if from_disk is not None else contextlib.nullcontext()
        with lock:
            found = self.load(key, name) if from_disk is not None else None
            if found is not None:
                metrics.loaded(key.namespace, name)
                return from_disk(found), found.nbytes
            start = time.perf_counter()
            built = build()
            if built is None:
                return None
            nbytes = 0
            if built.executable is not None:
                metrics.built(key.namespace, name, time.perf_counter() - start)
                nbytes = self.save(key, name, built.meta, built.executable)
            return built.value, nbytes

    def get(self, key):
        if profiling.active():  # a hit is most launches' only cache work: show it in a profile
            with profiling.range("neuron::cache_memory_lookup"):
                return self.memory.get(key)
        return self.memory.get(key)

    def put(self, key, value, nbytes: int) -> None:
        evicted = self.memory.put(key, value, nbytes)
        if evicted:
            metrics.cache_event("memory_evictions", len(evicted))
            # a process that meets more signatures than memory holds would keep growing by what jax
            # remembers of each trace: forget it each time half the bound has been evicted
            self._evicted_since_clear += len(evicted)
            if self._evicted_since_clear >= max(self.memory.max_entries // 2, 1):
                self._evicted_since_clear = 0
                executables.clear_trace_caches()

    # ---- disk

    def environment(self) -> tuple:
        if self._environment is None:
            self._environment = keys.environment(config.platform(), executables.device_kind())
        return self._environment

    def _entry_key(self, key: Key) -> bytes | None:
        last, spelled = self._last_spelled
        if last is key:
            return spelled
        try:
            spelled = keys.entry_key(self.environment(), key.namespace, key.value)
        except TypeError:  # a key with a value that has no stable spelling: memory only
            spelled = None
        self._last_spelled = (key, spelled)
        return spelled

    def load(self, key: Key, name: str) -> Found | None:
        """The executable of `key` (loaded on `key.device`) and its metadata, from disk; None on a miss.
        A bad or unloadable entry is removed, warned about once and reported as a miss."""
        if self.disk is None or not self._loads_work():
            return None
        with profiling.range(f"neuron::cache_disk_load {key.namespace}"):
            return self._load(key, name)

    def _load(self, key: Key, name: str) -> Found | None:
        start = time.perf_counter()
        got = self._read(key, name)
        if got is None:
            return None
        digest, data, body = got
        try:
            meta, blob = pickle.loads(body)
            exe = executables.load(blob, key.device)
        except custom_calls.Unready as e:  # not bad: compiled here (and stored over), kept for others
            metrics.cache_event("unready_entries")
            if e.args[0] not in self._unready_warned:
                self._unready_warned.add(e.args[0])
                warnings.warn(f"torch_neuronx: the cached executable of {name} ({digest[:16]}) is compiled again "
                              f"instead of loaded: {e}", RuntimeWarning, stacklevel=4)
            return None
        except Exception as e:  # XLA may reject a CPU executable it wrote itself (jax issue 38445)
            self.disk.remove(self.disk.path(digest))
            self._bad(digest, name, f"it could not be loaded: {type(e).__name__}: {e}")
            return None
        metrics.disk_hit(key.namespace, time.perf_counter() - start, len(data))
        return Found(meta, exe, len(blob))

    def save(self, key: Key, name: str, meta, executable) -> int:
        """Store a new executable with its metadata; returns its serialized size (0 when it cannot be
        serialized: it stays in memory only)."""
        if self.disk is None and key.namespace != "graph":
            return 0
        try:
            blob = executables.serialize(executable)
        except executables.NotSerializable:
            metrics.cache_event("unstorable")
            return 0
        if self.disk is None or not self._loads_work():
            return len(blob)
        try:
            body = pickle.dumps((meta, blob), protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):  # metadata with a local class
            metrics.cache_event("unstorable")
            return len(blob)
        self._write(key, name, body)
        return len(blob)

    def load_record(self, key: Key, name: str) -> bytes | None:
        """The body of a record that is not an executable (what a layer learned that saves it work
        in a new process), from disk; None on a miss or a bad entry (removed, warned once)."""
        got = self._read(key, name) if self.disk is not None else None
        return None if got is None else got.body

    def save_record(self, key: Key, name: str, body: bytes) -> bool:
        return self._write(key, name, body) if self.disk is not None else False

    def remove_record(self, key: Key) -> None:
        ek = self._entry_key(key) if self.disk is not None else None
        if ek is not None:
            self.disk.remove(self.disk.path(keys.digest(ek)))

    def _read(self, key: Key, name: str) -> "_Read | None":
        """The entry's digest, bytes and body from disk, or None (a miss, a bad entry)."""
        kind = key.namespace
        ek = self._entry_key(key)
        if ek is None:
            return None
        digest = keys.digest(ek)
        try:
            got = self.disk.read(ek, digest)
        except BadEntry as e:
            self._bad(digest, name, str(e))
            return None
        if got is None:
            metrics.disk_miss(kind)
            return None
        data, body = got
        if kind in _ARTIFACT_KINDS:
            artifacts.record(digest, data)
        return _Read(digest, data, body)

    def _write(self, key: Key, name: str, body: bytes) -> bool:
        kind = key.namespace
        ek = self._entry_key(key)
        if ek is None:
            metrics.cache_event("unstorable")
            return False
        digest = keys.digest(ek)
        data = encode(name, kind, ek, body)
        if not self.disk.write(digest, data):
            metrics.cache_event("write_failures")
            return False
        metrics.disk_written(kind, len(data))
        if self.disk.pruned:
            metrics.cache_event("disk_evictions", self.disk.pruned)
            self.disk.pruned = 0
        if kind in _ARTIFACT_KINDS:
            artifacts.record(digest, data)
        return True

    def compiling(self, key: Key, name: str = ""):
        """A context held while compiling `key` (`name`): another process compiling the same key waits
        for it (then finds the entry on disk), at most TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT seconds.
        Holds nothing without a disk layer."""
        if self.disk is None:
            return contextlib.nullcontext()
        ek = self._entry_key(key)
        if ek is None:
            return contextlib.nullcontext()
        return self.disk.lock(keys.digest(ek), name, config.settings.neff_cache_lock_timeout)

    def import_entry(self, digest: str, data: bytes) -> bool:
        """Store an entry's bytes that came from elsewhere (`torch.compiler.load_cache_artifacts`),
        after checking them."""
        if self.disk is None:
            return False
        try:
            decode(data, digest)
        except BadEntry as e:
            warnings.warn(f"torch_neuronx: a cache artifact was not imported: {e}", RuntimeWarning, stacklevel=2)
            return False
        return self.disk.write(digest, data)

    def _bad(self, digest: str, name: str, why: str) -> None:
        metrics.cache_event("bad_entries")
        warnings.warn(
            f"torch_neuronx: the cached executable of {name} ({digest[:16]}, in {self.disk.top}) was removed "
            f"and is compiled again: {why}", RuntimeWarning, stacklevel=4,
        )

    def _loads_work(self) -> bool:
        """Whether executables load from disk on this host: checked once, on a small program stored
        like any other (XLA's CPU executables can fail to reload on some hosts: jax issue 38445).
        If they do not, the disk layer is turned off with one warning and everything compiles."""
        if self._checked or self.disk is None:
            return self.disk is not None
        with self._lock:
            if self._checked:
                return self.disk is not None
            try:
                _check_loading(self)
            except Exception as e:
                warnings.warn(
                    f"torch_neuronx: executables do not load from the disk cache on this host "
                    f"({type(e).__name__}: {e}); the disk cache is off for this process",
                    RuntimeWarning, stacklevel=4,
                )
                self.disk = None
            self._checked = True
        return self.disk is not None


def _check_loading(cache: ExecutableCache) -> None:
    """Load (or first store, then load) the probe entry and run it."""
    import numpy as np

    from ..runtime import devices
    from ..runtime.lazy_jax import jax

    ek = keys.entry_key(cache.environment(), "probe", ("probe", 1))
    digest = keys.digest(ek)
    try:
        got = cache.disk.read(ek, digest)
    except BadEntry:
        got = None
    if got is None:
        with devices.on_device(0):
            lowered = jax.jit(lambda a: a * 2 + 1).lower(np.arange(4, dtype=np.float32))
            compiled = executables.compile_lowered(lowered, small=True)
        blob = executables.serialize(compiled)
        cache.disk.write(digest, encode("probe", "probe", ek, pickle.dumps((None, blob))))
    else:
        blob = pickle.loads(got[1])[1]
    exe = executables.load(blob, 0)
    out = np.asarray(exe(devices.put(np.arange(4, dtype=np.float32), 0)))
    if not np.array_equal(out, np.arange(4, dtype=np.float32) * 2 + 1):
        raise RuntimeError(f"the probe executable computed {out.tolist()}")


_cache: ExecutableCache | None = None
_cache_lock = threading.Lock()


def executable_cache() -> ExecutableCache:
    """The process's executable cache, made from the settings on first use."""
    global _cache
    if _cache is None:
        with _cache_lock:
            if _cache is None:
                _cache = _make()
    return _cache


def _make() -> ExecutableCache:
    entries, size = config.settings.neff_cache_memory_entries, config.settings.neff_cache_memory_size
    memory = MemoryCache(math.inf if entries is None else entries, math.inf if size is None else size)
    disk = None
    if disk_enabled():
        disk = DiskStore(directory(), config.settings.neff_cache_max_size, config.settings.neff_local_cache_dir)
    return ExecutableCache(memory, disk)


def reset() -> None:
    """Forget the executables in memory and read the settings again (tests; a changed folder)."""
    global _cache
    with _cache_lock:
        if _cache is not None:
            _cache.memory.clear()
        _cache = None


def clear_memory(keep=None) -> None:
    """Drop executables from memory (`keep(key)` true: kept); the disk layer keeps its entries."""
    if _cache is not None:
        _cache.memory.clear(keep)
