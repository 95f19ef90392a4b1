"""The dtype rules lowerings share: the compute dtype PyTorch's CPU kernels use ("opmath") and
PyTorch's conversion semantics (`cast`). The torch <-> numpy dtype maps are the runtime's."""
from __future__ import annotations

import numpy as np
import torch

from ..runtime.numpy_dtypes import UnsupportedDtype, to_numpy_dtype, to_torch_dtype

__all__ = ["UnsupportedDtype", "to_numpy_dtype", "to_torch_dtype", "opmath", "is_low_precision", "cast"]

_F16 = np.dtype(np.float16)
_BF16 = None  # ml_dtypes' bfloat16, looked up on first use (importing ml_dtypes is slow: runtime.numpy_dtypes)


def is_low_precision(dtype) -> bool:
    """A reduced-precision float that PyTorch's CPU kernels compute in float32 ("opmath"), rounding once."""
    global _BF16
    dtype = np.dtype(dtype)
    if dtype == _F16:
        return True
    if _BF16 is None:
        _BF16 = to_numpy_dtype(torch.bfloat16)
    return dtype == _BF16


def opmath(x):
    """x in the dtype PyTorch computes it in: float16/bfloat16 go up to float32."""
    if is_low_precision(x.dtype):
        return x.astype(np.float32)
    return x


_E4M3FN_MAX = float(torch.finfo(torch.float8_e4m3fn).max)


def cast(x, dtype):
    """`x.to(dtype)` with PyTorch's CPU conversion semantics, which XLA's convert does not share:
    float -> int truncates toward zero and wraps like ATen's C++ conversion on x86 (-1.0 -> uint8 is
    255, inf and NaN -> the intermediate int's minimum; XLA saturates), anything -> bool is `x != 0`, complex -> real drops the imaginary part, and
    float -> float8_e4m3fn saturates to +-448 (inf too; XLA gives NaN). Weakly typed values
    (traced Python numbers) always become `dtype`."""
    from ..runtime.lazy_jax import jax, jnp, lax

    dtype = np.dtype(dtype)
    e4m3fn = to_numpy_dtype(torch.float8_e4m3fn)
    x = jnp.asarray(x)
    src = np.dtype(x.dtype)
    if src == dtype and not jax.typeof(x).weak_type:
        return x
    if dtype == np.bool_:
        return x != 0
    if src.kind == "c" and dtype.kind != "c":
        x = jnp.real(x)
        src = np.dtype(x.dtype)
    src_float = src.kind in "fV" or is_low_precision(src) or src == e4m3fn or "float8" in src.name
    if src_float and dtype.kind in "iu":
        # through int32 (narrow types, int32) or int64 (the rest), out of range and NaN giving that
        # type's minimum as x86's conversion does (XLA would saturate), then wrapping to `dtype`
        wide = np.dtype(np.int32) if dtype.itemsize < 4 or dtype == np.int32 else np.dtype(np.int64)
        limit = 2.0 ** (8 * wide.itemsize - 1)
        x = lax.convert_element_type(jnp.where(jnp.abs(x) < limit, x, -limit), wide)
    elif src_float and dtype == e4m3fn:
        x = jnp.clip(x, -_E4M3FN_MAX, _E4M3FN_MAX)
    return lax.convert_element_type(x, dtype)
