"""The memory layer: executables of this process by full key, least recently used out first once
there are more than `max_entries` of them or they weigh more than `max_bytes` (an executable weighs
its serialized size, the best measure of it jax gives on every platform). An evicted executable is
gone from this process only: the disk layer gives it back."""
from __future__ import annotations

import collections
import threading


class MemoryCache:
    def __init__(self, max_entries: int, max_bytes: int):
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.entries: collections.OrderedDict = collections.OrderedDict()  # key -> (value, nbytes)
        self.nbytes = 0
        self.evictions = 0
        self._lock = threading.Lock()

    def get(self, key):
        """The value under `key` (now the most recently used), or None."""
        item = self.entries.get(key)
        if item is None:
            return None
        try:
            self.entries.move_to_end(key)
        except KeyError:  # evicted by another thread meanwhile; the caller holds it still
            pass
        return item[0]

    def put(self, key, value, nbytes: int = 0) -> list:
        """Keep `value`; returns the values evicted to make room."""
        evicted = []
        with self._lock:
            old = self.entries.pop(key, None)
            if old is not None:
                self.nbytes -= old[1]
            self.entries[key] = (value, nbytes)
            self.nbytes += nbytes
            while len(self.entries) > 1 and (len(self.entries) > self.max_entries or self.nbytes > self.max_bytes):
                _k, (v, n) = self.entries.popitem(last=False)
                self.nbytes -= n
                self.evictions += 1
                evicted.append(v)
        return evicted

    def pop(self, key):
        with self._lock:
            item = self.entries.pop(key, None)
            if item is not None:
                self.nbytes -= item[1]
        return None if item is None else item[0]

    def clear(self, keep=None) -> None:
        """Forget every executable (those `keep(key)` accepts stay)."""
        with self._lock:
            for key in [k for k in self.entries if keep is None or not keep(k)]:
                self.nbytes -= self.entries.pop(key)[1]

    def __len__(self) -> int:
        return len(self.entries)

    def keys(self) -> list:
        return list(self.entries)
