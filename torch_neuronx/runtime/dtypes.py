"""torch dtype <-> the numpy dtype of a device buffer (what jax stores)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

# numpy dtypes jax accepts; bfloat16 and float8 come from ml_dtypes, as in jax itself.
TORCH_TO_NUMPY = {
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
NUMPY_TO_TORCH = {v: k for k, v in TORCH_TO_NUMPY.items()}


class UnsupportedDtype(TypeError):
    pass


def to_numpy_dtype(dtype: torch.dtype) -> np.dtype:
    try:
        return TORCH_TO_NUMPY[dtype]
    except KeyError:
        raise UnsupportedDtype(f"dtype {dtype} is not supported on the neuron device") from None


def to_torch_dtype(dtype) -> torch.dtype:
    return NUMPY_TO_TORCH[np.dtype(dtype)]
