"""The host memory behind device buffers on the CPU platform: glibc's heap made a caching allocator.

On the CPU platform a device buffer is host memory that XLA (its results and its executables' workspace)
and numpy (the copies jax aliases, runtime/transfer.py) allocate through glibc's malloc. glibc gives
every allocation over its mmap threshold (8 MiB as configured below; 32 MiB at most) a mapping of its
own and unmaps it when freed, so the next buffer of that size is fresh memory, and the kernel clears
each of its pages on first touch: ~2.3 s a GB on the VMs the figures come from, a quarter to a third of
a 1024x1024 VAE decode (docs/benchmarks.md). What CUDA's caching allocator does for device memory,
glibc's heap does here once it keeps what was freed:

- `configure(limit)`, before jax's CPU client starts its threads. With `limit` 0 (the default), glibc's
  mmap threshold is fixed at 8 MiB (glibc's own grows to 32 MiB and keeps freed buffers below it
  resident): every buffer of 8 MiB and more goes back when freed, and the peak is the live memory.
  Otherwise (TORCH_NEURONX_HOST_CACHE): one arena for every thread (XLA allocates on its worker
  threads, whose own arenas would map anything over 64 MiB anyway), no mappings of their own
  (everything comes from the heap and goes back to it when freed), and the heap's free top kept up to
  `limit`. A 1024x1024 VAE decode then clears 2-4 s of pages where it cleared 9-10 s (10-15% faster),
  but the peak grows by 1.5-2 GB, and in the page's whole pipeline, whose 16 GB of weights share the
  heap, it gained nothing measurable and cost 1.4 GB of peak (docs/benchmarks.md): so it is opt-in.
- `release_surplus()`, at every launch and as the storage layer frees buffers: free memory still
  resident beyond `limit` goes back to the system (malloc_trim), so a model moved back to the CPU
  (offload) returns its device memory, and the peak is the live memory plus at most `limit`.
- `trim()`: everything free goes back (after a large compile; torch.neuron.empty_cache()).

How much is cached is measured, not tracked: the process's resident anonymous memory less what malloc
has handed out, less the same difference right after the last trim (what is resident outside the
heap). Other allocators than glibc's have none of these calls; then nothing changes.
"""
from __future__ import annotations

import ctypes
import threading
import time

from . import config

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
_INT_MAX = 2**31 - 1
_MMAP_THRESHOLD = 8 << 20  # without the cache
_NOISE = 16 << 20  # what a surplus must exceed to be worth a trim (the measure moves by pages)
_EVERY = 0.05      # seconds between two measures (one costs ~0.1 ms: /proc and malloc's counters)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


_lock = threading.Lock()
_libc: ctypes.CDLL | None = None
_limit: int | None = None   # the cache's bound while the policy is on; None: glibc's own behaviour
_outside_heap = 0           # resident bytes malloc did not hand out, right after the last trim
_measured_at = 0.0


def _glibc() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        try:
            libc = ctypes.CDLL(None)
            libc.mallinfo2.restype = _Mallinfo2
            libc.malloc_trim, libc.mallopt  # noqa: B018 (glibc's: a missing one raises AttributeError)
        except (OSError, AttributeError):
            return None
        _libc = libc
    return _libc


def configure(limit: int) -> None:
    """Make glibc's heap the cache of freed device memory, keeping up to `limit` bytes (0: no cache,
    a fixed 8 MiB mmap threshold). Called once, before the CPU client's threads exist: a thread keeps
    the arena of its first allocation."""
    global _limit
    libc = _glibc()
    if libc is None:
        return
    if limit <= 0:
        libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(_MMAP_THRESHOLD))
        return
    with _lock:
        if not (libc.mallopt(_M_ARENA_MAX, 1) and libc.mallopt(_M_MMAP_MAX, 0)):
            return
        libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(min(limit, _INT_MAX)))
        _limit = limit
        _reset_baseline(libc)


def _in_use(libc) -> int:
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


def _resident_anonymous() -> int:
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_baseline(libc) -> None:
    global _outside_heap
    _outside_heap = _resident_anonymous() - _in_use(libc)


def cached_bytes() -> int:
    """Free memory glibc's heap keeps resident for the next allocations (0 when the policy is off)."""
    if _limit is None:
        return 0
    return max(0, _resident_anonymous() - _in_use(_libc) - _outside_heap)


def release_surplus(limit: int | None = None, now: bool = False) -> None:
    """Give back to the system what the heap keeps beyond `limit` bytes (None: the setting as it is
    now). Called at every launch and as buffers are freed: with the cache off it returns at once, and
    otherwise it measures at most every 50 ms unless `now`."""
    global _limit, _measured_at
    if _limit is None:
        return
    if limit is None:
        limit = config.host_cache()
    clock = time.monotonic()
    if not now and clock - _measured_at < _EVERY:
        return
    _measured_at = clock
    if limit != _limit and limit > 0:
        _libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(min(limit, _INT_MAX)))
        _limit = limit
    if cached_bytes() > max(limit, _NOISE):
        trim()


def trim() -> None:
    """Give every free page of the heap back to the system."""
    libc = _glibc()
    if libc is None:
        return
    with _lock:
        libc.malloc_trim(0)
        if _limit is not None:
            _reset_baseline(libc)
