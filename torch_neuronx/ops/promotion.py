"""PyTorch's type promotion, for lowerings: the dtype categories, the result dtype of an op's operands
(`result_dtype`: dimensioned tensors > 0-d tensors > Scalars, by category, as c10's
`result_type`), the dtype the CPU kernels compute in (`compute_dtype`: float16/bfloat16 in
float32), and the dtype of a float-only op (`float_dtype`). No lowerings here: every family takes
these rules from this module.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from ..runtime.lazy_jax import jax, jnp
from .dtypes import is_low_precision, to_numpy_dtype, to_torch_dtype

__all__ = [
    "category", "is_float", "is_floatlike", "is_int", "default_float", "default_complex", "wrapped_dtype",
    "is_weak", "promote", "combine_categories", "result_dtype", "compute_dtype", "float_dtype", "promote_all",
]

_BOOL = np.dtype(np.bool_)
_F32 = np.dtype(np.float32)


def category(dt) -> int:
    """0 bool, 1 integer, 2 floating, 3 complex (PyTorch's promotion categories)."""
    dt = np.dtype(dt)
    if dt == _BOOL:
        return 0
    if jnp.issubdtype(dt, jnp.integer):
        return 1
    if jnp.issubdtype(dt, jnp.complexfloating):
        return 3
    return 2


def is_float(dt) -> bool:
    """A real floating dtype (not complex)."""
    return category(dt) == 2


def is_floatlike(dt) -> bool:
    """A floating or complex dtype."""
    return category(dt) >= 2


def is_int(dt) -> bool:
    """An integer dtype (not bool)."""
    return category(dt) == 1


def default_float():
    """torch.get_default_dtype() as a numpy dtype."""
    return to_numpy_dtype(torch.get_default_dtype())


def default_complex():
    """The complex dtype matching the default float dtype."""
    return np.dtype(np.complex128) if default_float() == np.float64 else np.dtype(np.complex64)


def wrapped_dtype(cat: int):
    """The dtype a Python Scalar of this category takes part in promotion with."""
    return (_BOOL, np.dtype(np.int64), default_float(), default_complex())[cat]


def is_weak(x) -> bool:
    """x is a weakly typed jax value (a traced Python number: a Scalar)."""
    try:
        return bool(jax.typeof(x).weak_type)
    except Exception:  # noqa: BLE001 - not a jax value
        return False


def promote(a, b):
    """jnp.promote_types of two dtypes, either of which may be None (absent)."""
    if a is None:
        return b
    if b is None:
        return a
    return np.dtype(jnp.promote_types(a, b))


def combine_categories(higher, lower):
    """c10's combine_categories: a lower-priority group only matters when it is of a higher category."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    if category(higher) == 3:
        return higher
    if category(lower) == 3:
        if category(higher) == 2:
            return np.dtype(jnp.promote_types(higher, np.complex64))
        return lower
    if category(higher) == 2:
        return higher
    if higher == _BOOL or category(lower) == 2:
        return promote(higher, lower)
    return higher


def result_dtype(*xs):
    """PyTorch's `result_type` over tensors (jax arrays), Scalars (weak 0-d jax values) and Python numbers."""
    dim = zero = wrapped = None
    for x in xs:
        if x is None:
            continue
        if isinstance(x, (bool, np.bool_)):
            wrapped = promote(wrapped, _BOOL)
        elif isinstance(x, (int, np.integer)):
            wrapped = promote(wrapped, np.dtype(np.int64))
        elif isinstance(x, (float, np.floating)):
            wrapped = promote(wrapped, default_float())
        elif isinstance(x, complex):
            wrapped = promote(wrapped, default_complex())
        else:
            dt = np.dtype(x.dtype)
            if is_weak(x):
                wrapped = promote(wrapped, wrapped_dtype(category(dt)))
            elif jnp.ndim(x) == 0:
                zero = promote(zero, dt)
            else:
                dim = promote(dim, dt)
    return combine_categories(dim, combine_categories(zero, wrapped))


def compute_dtype(dt):
    """The dtype PyTorch's CPU kernels compute `dt` in (float16/bfloat16 -> float32)."""
    dt = np.dtype(dt)
    if is_low_precision(dt) or (is_float(dt) and dt.itemsize == 1):
        return _F32
    return dt


def float_dtype(dt):
    """Result dtype of a float-only op (sin, div, ...): integers/bools go to the default dtype."""
    return np.dtype(dt) if is_floatlike(dt) else default_float()


def promote_all(tensors):
    """The dtype torch.cat/stack give a list of tensors (type promotion across all of them)."""
    dtype = functools.reduce(torch.promote_types, (to_torch_dtype(t.dtype) for t in tensors))
    return to_numpy_dtype(dtype)
