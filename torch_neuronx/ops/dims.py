"""Dimension arguments, for lowerings: `wrap_dim` normalizes a dim as ATen's maybe_wrap_dim does.
No lowerings here.
"""
from __future__ import annotations

__all__ = ["wrap_dim"]


def wrap_dim(dim: int, ndim: int) -> int:
    """`dim` in [0, ndim) as ATen's maybe_wrap_dim: negative dims count from the end, a 0-d tensor
    takes 0 and -1; otherwise IndexError with ATen's message."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n
