"""Host <-> device copies. Host data is numpy (jax's own host format); torch CPU tensors convert
without a copy where numpy has the dtype, through a same-width integer view where it has not
(bfloat16, float8)."""
from __future__ import annotations

import ctypes
import math
import mmap
import os

import numpy as np
import torch

from .numpy_dtypes import to_numpy_dtype, to_torch_dtype
from . import profiling
from .devices import check_not_forked, jax_device
from .lazy_jax import jax

_VIEW_AS_INT = {1: (torch.uint8, np.uint8), 2: (torch.int16, np.int16)}
_NO_NUMPY = {torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2}


def torch_to_numpy(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor's data as numpy (no copy)."""
    t = t.detach().resolve_conj().resolve_neg()
    dtype = to_numpy_dtype(t.dtype)  # raises a clear error for dtypes we do not carry
    if t.dtype in _NO_NUMPY:  # numpy has no such type code: the bytes as integers, viewed as ml_dtypes'
        _, nview = _VIEW_AS_INT[t.element_size()]
        return _host_view(t, np.dtype(nview)).view(dtype)
    return _host_view(t, dtype)


class _HostView:
    """numpy's view of a CPU tensor's memory. `Tensor.numpy()` would mark the storage non-resizable for
    good, so a user's tensor once moved to neuron could no longer be resized (`out=` arguments, a
    CPU tensor a neuron generator fills), which a copy to CUDA never does. The view holds the tensor:
    its memory lives as long as the array."""

    __slots__ = ("__array_interface__", "tensor")

    def __init__(self, t: torch.Tensor, dtype: np.dtype):
        size = t.element_size()
        self.tensor = t
        self.__array_interface__ = {"data": (t.data_ptr(), False), "shape": tuple(t.shape), "typestr": dtype.str,
                                    "strides": tuple(s * size for s in t.stride()), "version": 3}


def _host_view(t: torch.Tensor, dtype: np.dtype) -> np.ndarray:
    if t.numel() == 0:  # no memory to view (its data pointer may be null)
        return np.empty(tuple(t.shape), dtype)
    return np.asarray(_HostView(t, dtype))


# XLA's CPU client aliases host memory aligned to 64 bytes instead of copying it (numpy aligns to
# 16): a host copy made here goes back to the device without another copy
_XLA_ALIGN = 64


def _aligned_empty(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """Uninitialized host memory aligned for XLA, from numpy (which, unlike torch, asks for huge
    pages: filling 64 MB fresh takes 8 ms, not 38)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + _XLA_ALIGN, np.uint8)
    start = -raw.ctypes.data % _XLA_ALIGN
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def _aligned_copy(a: np.ndarray) -> np.ndarray:
    out = _aligned_empty(a.shape, a.dtype)
    np.copyto(out, a)
    return out


def host_empty(shape, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialized CPU tensor that a later `hand_to_device` takes without a copy."""
    shape = tuple(shape)
    return numpy_to_torch(_aligned_empty(shape, to_numpy_dtype(dtype))).reshape(shape)  # 0-d stays 0-d


def numpy_to_torch(a: np.ndarray) -> torch.Tensor:
    dtype = to_torch_dtype(a.dtype)
    a = np.ascontiguousarray(a)
    if not a.flags.writeable:  # jax's own (on the CPU platform: the device buffer itself)
        a = _aligned_copy(a)
    if dtype in _NO_NUMPY:
        _, nview = _VIEW_AS_INT[a.dtype.itemsize]
        return torch.from_numpy(a.view(nview)).view(dtype)
    return torch.from_numpy(a)


def to_device(a: np.ndarray, index: int):
    """Copy host data to neuron:index; later writes to `a` are not seen.

    On the CPU platform jax may alias an aligned host array instead of copying it (even with
    may_alias=False), so a copy is made first that the device buffer then owns alone: by XLA where
    jax's put takes a copy flag (small arrays: 14 µs for 4 KB, where numpy's takes 65), by numpy
    from `_LARGE` up (numpy asks for huge pages: 64 MB in 7.6 ms, where XLA's copy takes 37)."""
    with profiling.moved("neuron::host_to_device", index) as m:
        if a.nbytes >= _LARGE or _batched_put() is None:
            out = m.done(_put(_aligned_copy(a), index))
        else:
            out = m.done(_put(a, index, copy=True))
    if a.nbytes >= _RELEASE_FROM:
        _release_file_pages(a)
    return out


_LARGE = 8 << 20
_RELEASE_FROM = 1 << 20
_MADV_PAGEOUT = 21  # linux/mman.h, Linux 5.4+ (an older kernel answers EINVAL: nothing happens)
_libc: list = []


def _release_file_pages(a: np.ndarray) -> None:
    """Take the pages of a file mapping that `a` was just copied from out of this process's resident
    memory. A model loaded from safetensors holds its weights in the file's mapping; moved to the device,
    each weight would stay resident twice, as the file's pages and as its device buffer (host memory on
    the CPU platform), until the mapping is closed. MADV_PAGEOUT is a hint: the data is unchanged, and
    pages read again come back from the file. Memory that is not a file's is never touched."""
    start, end = a.ctypes.data, a.ctypes.data + a.nbytes
    try:
        names = os.listdir("/proc/self/map_files")  # one "start-end" entry per file-backed mapping
    except OSError:
        return
    for name in names:
        lo, _, hi = name.partition("-")
        if int(lo, 16) <= start and end <= int(hi, 16):
            break
    else:
        return
    page = mmap.PAGESIZE
    first, last = -(-start // page) * page, end // page * page  # whole pages of `a` only
    if last <= first:
        return
    if not _libc:
        _libc.append(ctypes.CDLL(None, use_errno=True))
    _libc[0].madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), _MADV_PAGEOUT)


def hand_to_device(a: np.ndarray, index: int):
    """Move host data that nobody else will touch again to neuron:index, without the defensive copy
    of `to_device`: where jax aliases it (the CPU platform), the device buffer keeps `a` alive."""
    with profiling.moved("neuron::host_to_device", index) as m:
        return m.done(_put(a, index))


def _put(a: np.ndarray, index: int, copy: bool = False):
    """jax.device_put of one numpy array, less its ~25 µs of argument handling (a module's .to()
    moves hundreds of small tensors): the call it ends in, where this jax has it. `copy`: never
    alias `a`."""
    device = jax_device(index)
    put = _batched_put()
    if put is None:
        return jax.device_put(a, device)
    core, xc = put
    sharding = _SHARDINGS.get(device)
    if sharding is None:
        sharding = _SHARDINGS[device] = jax.sharding.SingleDeviceSharding(device)
    return xc.batched_device_put(core.ShapedArray(a.shape, a.dtype), sharding, [a], [device], True, copy)


_PUT: list = []
_SHARDINGS: dict = {}


def _batched_put():
    """jax's internal put, if this jax has it with the arguments `_put` passes (tried once on a
    one-element array, copied and read back); else None and `_put` uses jax.device_put."""
    if not _PUT:
        try:
            from jax._src import core
            from jax._src.lib import xla_client as xc

            probe, device = np.arange(1, 2, dtype=np.float32), jax_device(0)
            got = xc.batched_device_put(
                core.ShapedArray(probe.shape, probe.dtype), jax.sharding.SingleDeviceSharding(device), [probe],
                [device], True, True,
            )
            probe[0] = 0
            ok = np.asarray(got).tolist() == [1.0]
        except Exception:  # noqa: BLE001 (any change of jax's internals: use the public call)
            ok = False
        _PUT.append((core, xc) if ok else None)
    return _PUT[0]


def to_host(arr) -> np.ndarray:
    """Wait for `arr` and copy it to the host."""
    check_not_forked()
    with profiling.moved("neuron::device_to_host", arr) as m:
        return m.done(np.asarray(arr))


def host_view(arr) -> np.ndarray:
    """`arr`'s values on the host, read-only, once it is computed. On the CPU platform this is a view
    of the device buffer itself (no copy; the array holds a reference that keeps the buffer alive),
    elsewhere jax's one host copy. (`np.asarray` is jax's fastest way there: ~1 µs, where
    `__array__`, `_value`, the PJRT buffer's `__dlpack__` take 4 to 7.)"""
    check_not_forked()
    with profiling.moved("neuron::device_to_host", arr) as m:
        return m.done(np.asarray(arr))


def host_alias(arr) -> torch.Tensor:
    """A CPU tensor over the device buffer's own memory (the CPU platform only), for
    a host library that reads or writes it in place (Gloo); waits for the buffer to be computed. Through
    DLPack: the tensor holds a reference that keeps the buffer alive, and while it lives jax donates no
    launch the buffer (it copies it instead), so the memory stays the tensor's. Writing it is the
    caller's to order (`storage.hold`)."""
    check_not_forked()
    arr.block_until_ready()
    return torch.from_dlpack(arr)


_VIEWS_DEVICE: list = []


def host_views_device() -> bool:
    """Whether `host_view` is the device buffer itself (the CPU platform), so that reading a whole
    buffer to the host costs nothing and a view of it can be read there, with no launch."""
    if not _VIEWS_DEVICE:
        _VIEWS_DEVICE.append(jax_device(0).platform == "cpu")
    return _VIEWS_DEVICE[0]


# a host read below this size is copied by numpy as it likes (16-byte aligned); above it, into memory
# aligned for XLA, so that handing it back to the device (`hand_to_device`) copies nothing
_ALIGN_FROM = 1 << 20


def copy_to_torch(host: np.ndarray, shape, dtype: torch.dtype) -> torch.Tensor:
    """A new contiguous CPU tensor of `shape` and `dtype` holding `host` (numpy of the same number of
    elements, any layout; read-only is fine): the one copy of a host read, into memory the tensor
    owns (through numpy's array; ~2 µs for 16 KB, where torch.empty and a copy take 6)."""
    shape = tuple(shape)
    host = host.reshape(shape)
    out = np.array(host, order="C") if host.nbytes < _ALIGN_FROM else _aligned_copy(host)
    if dtype in _NO_NUMPY:
        tview, nview = _VIEW_AS_INT[out.dtype.itemsize]
        return torch.from_numpy(out.view(nview)).view(dtype)
    return torch.from_numpy(out)


def typed_flat(host: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """A flat host buffer's bytes as `dtype` (a storage read through a tensor of another dtype, such as
    view_as_real's): as many whole elements as it holds."""
    np_dtype = np.dtype(to_numpy_dtype(dtype))
    if host.dtype == np_dtype:
        return host
    raw = host.reshape(-1).view(np.uint8)
    return raw[:raw.shape[0] - raw.shape[0] % np_dtype.itemsize].view(np_dtype)


def between_devices(arr, index: int):
    with profiling.moved("neuron::device_to_device", index) as m:
        return m.done(jax.device_put(arr, jax_device(index)))
