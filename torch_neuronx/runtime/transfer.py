"""Host <-> device copies. Host data is numpy (jax's own host format); torch CPU tensors convert
without a copy where numpy has the dtype, through a same-width integer view where it has not
(bfloat16, float8)."""
from __future__ import annotations

import numpy as np
import torch

from .dtypes import to_numpy_dtype, to_torch_dtype
from .devices import jax_device
from .lazy_jax import jax

_VIEW_AS_INT = {1: (torch.uint8, np.uint8), 2: (torch.int16, np.int16)}
_NO_NUMPY = {torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2}


def torch_to_numpy(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor's data as numpy (no copy for contiguous tensors)."""
    t = t.detach().resolve_conj().resolve_neg()
    if t.dtype in _NO_NUMPY:
        tview, _ = _VIEW_AS_INT[t.element_size()]
        return t.contiguous().view(tview).numpy().view(to_numpy_dtype(t.dtype))
    to_numpy_dtype(t.dtype)  # raises a clear error for dtypes we do not carry
    return t.numpy()


def numpy_to_torch(a: np.ndarray) -> torch.Tensor:
    dtype = to_torch_dtype(a.dtype)
    a = np.ascontiguousarray(a)
    if not a.flags.writeable:
        a = a.copy()
    if dtype in _NO_NUMPY:
        _, nview = _VIEW_AS_INT[a.dtype.itemsize]
        return torch.from_numpy(a.view(nview)).view(dtype)
    return torch.from_numpy(a)


def to_device(a: np.ndarray, index: int):
    """Copy host data to neuron:index; later writes to `a` are not seen.

    On the CPU platform jax may alias an aligned host array instead of copying it (even with
    may_alias=False), so the copy is made here: the device buffer then owns the only reference."""
    return jax.device_put(np.array(a, copy=True), jax_device(index))


def hand_to_device(a: np.ndarray, index: int):
    """Move host data that nobody else will touch again to neuron:index, without the defensive copy
    of `to_device`: where jax aliases it (the CPU platform), the device buffer keeps `a` alive."""
    return jax.device_put(a, jax_device(index))


def to_host(arr) -> np.ndarray:
    """Wait for `arr` and copy it to the host."""
    return np.asarray(arr)


def between_devices(arr, index: int):
    return jax.device_put(arr, jax_device(index))
