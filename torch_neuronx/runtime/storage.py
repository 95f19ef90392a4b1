"""Device buffers behind neuron storages.

The C++ allocator gives each storage a unique (never dereferenced) address and no memory; the
storage's contents live here as a flat jax array keyed by that address. A key with no entry is a
storage nobody has written yet (reads see zeros). A buffer may also be shorter than its storage
(after a resize): the rest reads as zeros. The allocator never takes the GIL, so it queues its frees
and moves; `sync()` applies them, in order, before each op.
"""
from __future__ import annotations

import threading

from .. import _C

# key -> flat jax array (1-D) of the dtype that last wrote it
BUFFERS: dict[int, object] = {}

_FREE, _MOVE = 0, 1

# Events are drained from the queue and then applied, in Python, by whichever thread syncs first.
# While one thread applies them, the queue already looks empty to the others: they must wait (a MOVE
# not applied yet reads as zeros, and a write made before it lands is overwritten), so callers check
# `applying` as well as the queue, and appliers take turns.
_lock = threading.Lock()
applying = False


def sync() -> None:
    global applying
    if not _C._pending_events() and not applying:
        return
    with _lock:
        applying = True
        try:
            for kind, key, new_key, nbytes, _device in _C._drain_events():
                if kind == _FREE:
                    BUFFERS.pop(key, None)
                elif kind == _MOVE:
                    buf = BUFFERS.get(key)
                    if buf is not None and nbytes > 0:
                        keep = nbytes // buf.dtype.itemsize
                        BUFFERS[new_key] = buf if keep >= buf.shape[0] else buf[:keep]
        finally:
            applying = False


def live_buffers() -> int:
    sync()
    return len(BUFFERS)
