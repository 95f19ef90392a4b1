"""The dtype rules lowerings share: the compute dtype PyTorch's CPU kernels use ("opmath") and
PyTorch's conversion semantics (`cast`). The torch <-> numpy dtype maps are the runtime's."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..runtime.dtypes import UnsupportedDtype, to_numpy_dtype, to_torch_dtype

__all__ = ["UnsupportedDtype", "to_numpy_dtype", "to_torch_dtype", "opmath", "is_low_precision", "cast"]

# Reduced-precision floats that PyTorch's CPU kernels compute in float32 ("opmath"), rounding once.
_LOW_PRECISION = {np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}


def opmath(x):
    """x in the dtype PyTorch computes it in: float16/bfloat16 go up to float32."""
    if np.dtype(x.dtype) in _LOW_PRECISION:
        return x.astype(np.float32)
    return x


def is_low_precision(dtype) -> bool:
    return np.dtype(dtype) in _LOW_PRECISION


_E4M3FN = np.dtype(ml_dtypes.float8_e4m3fn)
_E4M3FN_MAX = float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max)


def cast(x, dtype):
    """`x.to(dtype)` with PyTorch's CPU conversion semantics, which XLA's convert does not share:
    float -> int truncates toward zero and wraps like ATen's C++ conversion on x86 (-1.0 -> uint8 is
    255, inf and NaN -> the intermediate int's minimum; XLA saturates), anything -> bool is `x != 0`, complex -> real drops the imaginary part, and
    float -> float8_e4m3fn saturates to +-448 (inf too; XLA gives NaN). Weakly typed values
    (traced Python numbers) always become `dtype`."""
    from ..runtime.lazy_jax import jax, jnp, lax

    dtype = np.dtype(dtype)
    x = jnp.asarray(x)
    src = np.dtype(x.dtype)
    if src == dtype and not jax.typeof(x).weak_type:
        return x
    if dtype == np.bool_:
        return x != 0
    if src.kind == "c" and dtype.kind != "c":
        x = jnp.real(x)
        src = np.dtype(x.dtype)
    src_float = src.kind in "fV" or src in _LOW_PRECISION or src == _E4M3FN or "float8" in src.name
    if src_float and dtype.kind in "iu":
        # through int32 (narrow types, int32) or int64 (the rest), out of range and NaN giving that
        # type's minimum as x86's conversion does (XLA would saturate), then wrapping to `dtype`
        wide = np.dtype(np.int32) if dtype.itemsize < 4 or dtype == np.int32 else np.dtype(np.int64)
        limit = 2.0 ** (8 * wide.itemsize - 1)
        x = lax.convert_element_type(jnp.where(jnp.abs(x) < limit, x, -limit), wide)
    elif src_float and dtype == _E4M3FN:
        x = jnp.clip(x, -_E4M3FN_MAX, _E4M3FN_MAX)
    return lax.convert_element_type(x, dtype)
