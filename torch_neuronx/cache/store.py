"""The disk layer: one file per executable, written whole or not at all, verified when read.

Layout: `<root>/torch_neuronx/v<FORMAT>/<digest[:2]>/<digest>.entry`, where the digest is the sha256
of the entry's key bytes (`keys.entry_key`). An entry is a fixed header, then its name, its kind, its
key bytes and its body:

    magic      8 bytes  b"TNXEXEC\\0"
    format     u32      keys.FORMAT
    reserved   u32
    hits       u64      loads from disk (updated in place; not covered by the checksum)
    created    f64      unix time the entry was written
    key sha256 32 bytes must equal the digest in the file name and the key's own digest
    body sha256 32 bytes
    name, kind, key, body lengths: u32, u32, u32, u64

Writers write a temporary file in the same folder and rename it into place, so a reader sees a whole
entry or none, whatever runs at the same time. A reader checks the header, the key and the checksum;
a bad entry is deleted with one warning and reported as a miss. Loading from disk rewrites the hits
field, which moves the file's modification time: that time is the last use, and `prune` removes the
least recently used entries first. An unwritable or full folder turns writing off with one warning.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import os
import pathlib
import secrets
import struct
import time
import warnings

from .keys import FORMAT

MAGIC = b"TNXEXEC\0"
_HEADER = struct.Struct("<8sIIQd32s32sIIIQ")
_HITS_OFFSET = 16  # where the hits field lies: after magic, format and reserved
_TMP_MAX_AGE_S = 3600  # a temporary file this old belongs to a writer that died


class BadEntry(Exception):
    """An entry that is not a whole, valid entry for its key."""


@dataclasses.dataclass
class EntryInfo:
    path: pathlib.Path
    name: str
    kind: str
    key: bytes
    hits: int
    created: float
    size: int  # bytes on disk
    last_used: float  # modification time


def encode(name: str, kind: str, key: bytes, body: bytes, created: float | None = None) -> bytes:
    n, k = name.encode(), kind.encode()
    header = _HEADER.pack(MAGIC, FORMAT, 0, 0, time.time() if created is None else created,
                          hashlib.sha256(key).digest(), hashlib.sha256(body).digest(),
                          len(n), len(k), len(key), len(body))
    return b"".join((header, n, k, key, body))


def decode(data: bytes, digest: str | None = None) -> tuple[EntryInfo, bytes]:
    """(its header, its body) of an entry's bytes; raises BadEntry saying what is wrong."""
    if len(data) < _HEADER.size:
        raise BadEntry(f"truncated: {len(data)} bytes, shorter than the header")
    magic, fmt, _r, hits, created, key_sha, body_sha, ln, lk, lkey, lbody = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise BadEntry("not an executable cache entry (wrong magic bytes)")
    if fmt != FORMAT:
        raise BadEntry(f"entry format {fmt}, this package reads format {FORMAT}")
    start = _HEADER.size
    end = start + ln + lk + lkey + lbody
    if len(data) != end:
        raise BadEntry(f"truncated or padded: {len(data)} bytes where the header says {end}")
    name = data[start:start + ln].decode(errors="replace")
    kind = data[start + ln:start + ln + lk].decode(errors="replace")
    key = data[start + ln + lk:start + ln + lk + lkey]
    body = data[end - lbody:]
    if hashlib.sha256(key).digest() != key_sha:
        raise BadEntry("its key does not match the key's checksum in its header")
    if digest is not None and key_sha.hex() != digest:
        raise BadEntry("it holds another key than its file name says")
    if hashlib.sha256(body).digest() != body_sha:
        raise BadEntry("its contents do not match their checksum (corrupt)")
    info = EntryInfo(pathlib.Path(), name, kind, key, hits, created, len(data), 0.0)
    return info, body


class DiskStore:
    def __init__(self, root: str | os.PathLike, max_bytes: int | None = None,
                 lock_dir: str | os.PathLike | None = None):
        self.top = pathlib.Path(root)
        self.root = self.top / "torch_neuronx" / f"v{FORMAT}"
        # TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR: lock files on a local disk when the cache folder is shared
        self.lock_dir = pathlib.Path(lock_dir) if lock_dir else self.root / "locks"
        self.max_bytes = max_bytes
        self.writable = True
        self.write_problem: str | None = None
        self._estimate: int | None = None  # bytes on disk as last scanned, plus this process's writes
        self._written_since_scan = 0
        self.pruned = 0  # entries this process removed to keep under max_bytes

    def path(self, digest: str) -> pathlib.Path:
        return self.root / digest[:2] / f"{digest}.entry"

    # ---- reading

    def read(self, key: bytes, digest: str) -> tuple[bytes, bytes] | None:
        """(the entry's whole bytes, its body), or None on a miss. A bad entry raises BadEntry
        (after it is removed)."""
        path = self.path(digest)
        try:
            fd = os.open(path, os.O_RDWR if self.writable else os.O_RDONLY)
        except FileNotFoundError:
            return None
        except PermissionError:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                return None
        try:
            data = _read_all(fd)
            try:
                info, body = decode(data, digest)
                if info.key != key:
                    raise BadEntry("it holds another key than the one looked up")
            except BadEntry:
                self.remove(path)
                raise
            try:  # one more hit, which also marks the entry used now
                os.pwrite(fd, struct.pack("<Q", info.hits + 1), _HITS_OFFSET)
            except OSError:
                pass
            return data, body
        finally:
            os.close(fd)

    def entries(self):
        """Every entry: (EntryInfo, None) for a good one, (EntryInfo with what is known, problem) for a
        bad one. Reads each whole entry (the CLI's `ls` and `verify`)."""
        for path in self._entry_paths():
            try:
                st = path.stat()
                data = path.read_bytes()
            except OSError:
                continue  # removed meanwhile
            try:
                info, _body = decode(data, path.stem)
            except BadEntry as e:
                yield EntryInfo(path, "?", "?", b"", 0, st.st_mtime, st.st_size, st.st_mtime), str(e)
                continue
            info.path, info.last_used = path, st.st_mtime
            yield info, None

    def read_body(self, path: pathlib.Path) -> bytes:
        return decode(path.read_bytes(), path.stem)[1]

    def _entry_paths(self):
        if not self.root.is_dir():
            return
        for sub in sorted(self.root.iterdir()):
            if sub.is_dir() and len(sub.name) == 2:
                yield from sorted(sub.glob("*.entry"))

    # ---- writing

    def write(self, digest: str, data: bytes) -> bool:
        """Store an entry's bytes (from `encode`) under `digest`: whole or not at all."""
        if not self.writable:
            return False
        path = self.path(digest)
        tmp = path.with_name(f".{digest}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            self._stop_writing(e)
            return False
        if self.max_bytes is not None:
            self._account(len(data))
        return True

    def _stop_writing(self, e: OSError) -> None:
        self.writable = False
        why = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
               errno.EROFS: "it is on a read-only file system", errno.EACCES: "it is not writable",
               errno.EPERM: "it is not writable", errno.EFBIG: "the file size limit is reached"}.get(e.errno, f"{type(e).__name__}: {e}")
        self.write_problem = why
        warnings.warn(
            f"torch_neuronx: the executable cache cannot write to {self.top} ({why}); this process goes on "
            f"with its in-memory cache only (set TORCH_NEURONX_NEFF_CACHE_DIR to a writable folder, or "
            f"TORCH_NEURONX_DISABLE_NEFF_CACHE=1)",
            RuntimeWarning, stacklevel=3,
        )

    def remove(self, path: pathlib.Path) -> bool:
        try:
            os.unlink(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            return False

    # ---- size

    def _account(self, nbytes: int) -> None:
        """Keep the folder under max_bytes without scanning it on every write: scan once, add this
        process's writes, and scan again when they pass a tenth of the limit (other processes write
        too) or the estimate passes the limit (then prune)."""
        if self._estimate is None:
            self._estimate = self.total_bytes()
        else:
            self._estimate += nbytes
        self._written_since_scan += nbytes
        if self._written_since_scan > self.max_bytes // 10:
            self._estimate = self.total_bytes()
            self._written_since_scan = 0
        if self._estimate > self.max_bytes:
            removed, _freed, self._estimate = self.prune(int(self.max_bytes * 0.8))
            self.pruned += removed
            self._written_since_scan = 0

    def total_bytes(self) -> int:
        return sum(size for _m, size, _p in self._scan())

    def _scan(self):
        """(modification time, size, path) of every entry, and stale temporary files removed."""
        out = []
        if not self.root.is_dir():
            return out
        now = time.time()
        with os.scandir(self.root) as subs:
            for sub in subs:
                if not sub.is_dir() or len(sub.name) != 2:
                    continue
                with os.scandir(sub.path) as files:
                    for f in files:
                        try:
                            st = f.stat()
                        except OSError:
                            continue
                        if f.name.endswith(".entry"):
                            out.append((st.st_mtime, st.st_size, pathlib.Path(f.path)))
                        elif f.name.endswith(".tmp") and now - st.st_mtime > _TMP_MAX_AGE_S:
                            self.remove(pathlib.Path(f.path))
        return out

    def prune(self, max_bytes: int) -> tuple[int, int, int]:
        """Remove least recently used entries until the folder holds at most `max_bytes`:
        (entries removed, bytes freed, bytes left)."""
        entries = sorted(self._scan())
        total = sum(size for _m, size, _p in entries)
        removed = freed = 0
        for _mtime, size, path in entries:
            if total <= max_bytes:
                break
            if self.remove(path):
                total -= size
                freed += size
                removed += 1
        return removed, freed, total

    def clear(self) -> int:
        """Remove every entry (and lock file); returns how many entries."""
        n = 0
        for _m, _s, path in self._scan():
            n += self.remove(path)
        locks = self.lock_dir
        if locks.is_dir():
            for p in locks.glob("*.lock"):
                self.remove(p)
        return n

    # ---- one compile per key across processes

    @contextlib.contextmanager
    def lock(self, digest: str, name: str = "", timeout: float = 1200.0):
        """Held while this process compiles `digest` (`name`), so that other processes compiling the
        same key wait and then load its entry. Waits at most `timeout` seconds
        (TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT), then warns and compiles anyway; holds nothing when the
        lock folder is not writable. A process that dies releases its lock."""
        fd = None
        if self.writable:
            try:
                self.lock_dir.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.lock_dir / f"{digest}.lock", os.O_RDWR | os.O_CREAT, 0o666)
            except OSError:
                fd = None
        if fd is not None:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        warnings.warn(
                            f"torch_neuronx: waited {timeout:g} s for another process compiling {name or digest[:16]} "
                            f"(lock {self.lock_dir / digest[:16]}...); compiling it here too "
                            f"(TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT)", RuntimeWarning, stacklevel=4)
                        break
                    time.sleep(0.02)
                except OSError:
                    break
        try:
            yield
        finally:
            if fd is not None:
                os.close(fd)  # releases the lock


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks = []
    while size > 0:
        chunk = os.read(fd, size)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
