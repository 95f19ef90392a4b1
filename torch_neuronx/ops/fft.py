"""FFTs: _fft_r2c, _fft_c2r, _fft_c2c (what torch.fft's functions reach the backend as).

They run jnp.fft unnormalized and scale by 1/n or 1/sqrt(n) for PyTorch's normalization modes (0
none, 1 by sqrt(n), 2 by n), n being the signal size (c2r: the output's). Inputs must be float32,
float64, complex64 or complex128, as on the CPU.
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime.lazy_jax import jnp
from .dims import wrap_dim
from ._registry import aten, lower

_F64 = np.dtype(np.float64)
_C128 = np.dtype(np.complex128)


def _fft_scale(y, n: int, normalization: int):
    if normalization == 0 or n == 0:
        return y
    if normalization == 1:
        f = 1.0 / math.sqrt(n)
    elif normalization == 2:
        f = 1.0 / n
    else:
        raise ValueError(f"fft: unknown normalization mode {normalization}")
    real = jnp.real(y).dtype
    return y * jnp.asarray(f, real)


def _fft_dims(x, dim):
    return [wrap_dim(d, x.ndim) for d in dim]


def _require_fft_dtype(x, op):
    dt = np.dtype(x.dtype)
    if dt not in (np.dtype(np.float32), _F64, np.dtype(np.complex64), _C128):
        raise TypeError(f"{op}: Unsupported dtype {dt}")


# ---------------------------------------------------------------------------------------------
# lowerings, alphabetical


# _fft_c2c(Tensor self, SymInt[] dim, int normalization, bool forward) -> Tensor
@lower(aten._fft_c2c.default)
def _fft_c2c(self, dim, normalization, forward):
    _require_fft_dtype(self, "_fft_c2c")
    axes = _fft_dims(self, dim)
    if not axes:
        return self
    if forward:
        y = jnp.fft.fftn(self, axes=axes)
    else:
        y = jnp.fft.ifftn(self, axes=axes, norm="forward")  # unnormalized inverse
    return _fft_scale(y, math.prod(self.shape[a] for a in axes), normalization)


# _fft_c2r(Tensor self, int[] dim, int normalization, SymInt last_dim_size) -> Tensor
@lower(aten._fft_c2r.default)
def _fft_c2r(self, dim, normalization, last_dim_size):
    _require_fft_dtype(self, "_fft_c2r")
    axes = _fft_dims(self, dim)
    s = [self.shape[a] for a in axes[:-1]] + [int(last_dim_size)]
    y = jnp.fft.irfftn(self, s=s, axes=axes, norm="forward")  # unnormalized inverse
    return _fft_scale(y, math.prod(s), normalization)


# _fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor
@lower(aten._fft_r2c.default)
def _fft_r2c(self, dim, normalization, onesided):
    _require_fft_dtype(self, "_fft_r2c")
    axes = _fft_dims(self, dim)
    if onesided:
        y = jnp.fft.rfftn(self, axes=axes)
    else:
        y = jnp.fft.fftn(self, axes=axes)
    return _fft_scale(y, math.prod(self.shape[a] for a in axes), normalization)
