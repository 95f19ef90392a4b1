"""torch dtype <-> the numpy dtype of a device buffer (what jax stores).

bfloat16 and float8 are ml_dtypes' types, as in jax itself. ml_dtypes is imported when the map is
first used, not at `import torch`: its import takes about half a second (it registers its types'
ufunc loops with numpy), and jax imports it on first device use anyway. `TORCH_TO_NUMPY` and
`NUMPY_TO_TORCH` are built then too (module attributes read through `__getattr__`).
"""
from __future__ import annotations

import numpy as np
import torch

_torch_to_numpy: dict | None = None
_numpy_to_torch: dict | None = None


def _build() -> dict:
    import ml_dtypes

    return {
        torch.float32: np.dtype(np.float32),
        torch.float64: np.dtype(np.float64),
        torch.float16: np.dtype(np.float16),
        torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
        torch.float8_e4m3fn: np.dtype(ml_dtypes.float8_e4m3fn),
        torch.float8_e5m2: np.dtype(ml_dtypes.float8_e5m2),
        torch.int8: np.dtype(np.int8),
        torch.int16: np.dtype(np.int16),
        torch.int32: np.dtype(np.int32),
        torch.int64: np.dtype(np.int64),
        torch.uint8: np.dtype(np.uint8),
        torch.uint16: np.dtype(np.uint16),
        torch.uint32: np.dtype(np.uint32),
        torch.uint64: np.dtype(np.uint64),
        torch.bool: np.dtype(np.bool_),
        torch.complex64: np.dtype(np.complex64),
        torch.complex128: np.dtype(np.complex128),
    }


def _tables() -> tuple[dict, dict]:
    """(torch -> numpy, numpy -> torch), built once (two threads at once build equal tables)."""
    global _torch_to_numpy, _numpy_to_torch
    if _numpy_to_torch is None:
        table = _build()
        _torch_to_numpy = table
        _numpy_to_torch = {v: k for k, v in table.items()}
    return _torch_to_numpy, _numpy_to_torch


def __getattr__(name: str):
    if name == "TORCH_TO_NUMPY":
        return _tables()[0]
    if name == "NUMPY_TO_TORCH":
        return _tables()[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class UnsupportedDtype(NotImplementedError):
    """A dtype the device does not carry (complex32). Not a TypeError: Python's operators would take
    it for "not this operand type" and raise their own "unsupported operand type(s)" instead."""


def to_numpy_dtype(dtype: torch.dtype) -> np.dtype:
    try:
        return (_torch_to_numpy or _tables()[0])[dtype]
    except KeyError:
        raise UnsupportedDtype(f"dtype {dtype} is not supported on the neuron device") from None


def to_torch_dtype(dtype) -> torch.dtype:
    return (_numpy_to_torch or _tables()[1])[np.dtype(dtype)]
