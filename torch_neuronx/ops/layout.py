"""Reading and writing strided views of a flat storage buffer, inside a jax program: the one
implementation eager ops, compiled graphs and the view lowerings (as_strided, as_strided_scatter) use.

All arguments but the arrays are static (known when the op is traced). A view is (sizes, strides,
offset) in elements of its dtype over a storage of `length` elements. Views whose strides nest
(each divides the next larger one, as slicing, transposing, narrowing and diagonals give) become a
reshape of a contiguous block plus a slice; anything else is a gather/scatter with computed indices.
"""
from __future__ import annotations

import math

import numpy as np

from ..runtime.lazy_jax import jnp, lax
from ..runtime.storage import LAZY_CONJ, LAZY_NEG


def is_contiguous(sizes, strides) -> bool:
    expected = 1
    for n, s in zip(reversed(sizes), reversed(strides)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def storage_elems(sizes, strides) -> int:
    """How many elements a storage needs to hold the view (sizes, strides) at offset 0."""
    if any(n == 0 for n in sizes):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(sizes, strides))


def check_bounds(sizes, strides, offset: int, length: int) -> None:
    """Raise as PyTorch's setStorage does when the view reaches past a storage of `length` elements."""
    sizes = [int(n) for n in sizes]
    strides = [int(s) for s in strides]
    if len(sizes) != len(strides):
        raise RuntimeError(f"mismatch in length of strides and shape: {len(sizes)} vs {len(strides)}")
    if any(n < 0 for n in sizes) or any(s < 0 for s in strides):
        raise RuntimeError("as_strided: negative sizes and strides are not supported")
    needed = offset + storage_elems(sizes, strides)
    if math.prod(sizes) > 0 and needed > length:
        raise RuntimeError(
            f"setStorage: sizes {sizes}, strides {strides}, storage offset {offset} requiring a storage "
            f"size of {needed} elements are out of bounds for storage of size {length} elements"
        )


def apply_lazy(x, flags: int):
    """A tensor's lazy conjugate and negative bits made real: its values as PyTorch sees them (each
    is its own inverse, so this also turns values into what a write through such a view stores)."""
    if flags & LAZY_CONJ:
        x = jnp.conj(x)
    if flags & LAZY_NEG:
        x = -x
    return x


def to_storage_dtype(buf, dtype, length: int):
    """The buffer as `length` elements of `dtype` (bit-cast if it was written as another dtype,
    zero-padded if it is shorter than the storage)."""
    dtype = np.dtype(dtype)
    if buf is None:
        return jnp.zeros((length,), dtype)
    if buf.dtype != dtype:
        buf = _bitcast_flat(buf, dtype)
    n = buf.shape[0]
    if n < length:
        buf = jnp.concatenate([buf, jnp.zeros((length - n,), dtype)])
    elif n > length:
        buf = buf[:length]
    return buf


def _bitcast_flat(buf, dtype):
    src = np.dtype(buf.dtype)
    if src == np.bool_:
        buf, src = buf.astype(np.uint8), np.dtype(np.uint8)
    if dtype == np.bool_:
        return _bitcast_flat(buf, np.dtype(np.uint8)) != 0
    if src.kind == "c":
        real = np.dtype(f"f{src.itemsize // 2}")
        buf = jnp.stack([jnp.real(buf), jnp.imag(buf)], axis=-1).reshape(-1).astype(real)
        return _bitcast_flat(buf, dtype)
    if dtype.kind == "c":
        real = np.dtype(f"f{dtype.itemsize // 2}")
        parts = _bitcast_flat(buf, real).reshape(-1, 2)
        return lax.complex(parts[:, 0], parts[:, 1])
    if src.itemsize == dtype.itemsize:
        return lax.bitcast_convert_type(buf, dtype)
    if src.itemsize > dtype.itemsize:  # one element becomes several
        return lax.bitcast_convert_type(buf, dtype).reshape(-1)
    ratio = dtype.itemsize // src.itemsize
    usable = buf.shape[0] // ratio * ratio
    return lax.bitcast_convert_type(buf[:usable].reshape(-1, ratio), dtype)


def _nested_plan(sizes, strides):
    """For views whose non-broadcast strides nest: (order, block_shape, span), else None."""
    dims = [i for i, n in enumerate(sizes) if n != 1 and strides[i] != 0]
    if any(strides[i] < 0 for i in dims):
        return None
    order = sorted(dims, key=lambda i: -strides[i])
    if not order:
        return order, [], 1
    s = [strides[i] for i in order]
    n = [sizes[i] for i in order]
    block = [n[0]]
    for j in range(len(order) - 1):
        if s[j] % s[j + 1] or n[j + 1] > s[j] // s[j + 1]:
            return None
        block.append(s[j] // s[j + 1])
    block.append(s[-1])
    return order, block, math.prod(block)


def _padded(flat, end):
    if end > flat.shape[0]:
        return jnp.concatenate([flat, jnp.zeros((end - flat.shape[0],), flat.dtype)])
    return flat


def _indices(sizes, strides, offset):
    idx = np.full((), offset, np.int64)
    for d, (n, s) in enumerate(zip(sizes, strides)):
        shape = [1] * len(sizes)
        shape[d] = n
        idx = idx + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    return np.broadcast_to(idx, tuple(sizes))


def read(flat, sizes, strides, offset):
    """The view (sizes, strides, offset) of a flat storage, as an array of shape `sizes`."""
    sizes, strides = tuple(sizes), tuple(strides)
    numel = math.prod(sizes)
    length = flat.shape[0]
    if numel == 0:
        return jnp.zeros(sizes, flat.dtype)
    if is_contiguous(sizes, strides):
        if offset == 0 and numel == length:
            return flat.reshape(sizes)
        return lax.slice(flat, (offset,), (offset + numel,)).reshape(sizes)
    plan = _nested_plan(sizes, strides)
    if plan is None:
        return flat[_indices(sizes, strides, offset)]
    order, block, span = plan
    if not order:
        x = lax.slice(flat, (offset,), (offset + 1,)).reshape(())
        return jnp.broadcast_to(x, sizes)
    flat = _padded(flat, offset + span)
    x = lax.slice(flat, (offset,), (offset + span,)).reshape(block)
    x = lax.slice(x, (0,) * len(block), tuple(sizes[i] for i in order) + (1,))
    x = x.reshape([sizes[i] for i in order])
    x = jnp.transpose(x, np.argsort(order))  # back to the view's dimension order
    kept = sorted(order)
    shape = [sizes[i] if i in kept else 1 for i in range(len(sizes))]
    return jnp.broadcast_to(x.reshape(shape), sizes)


def write(flat, value, sizes, strides, offset):
    """The flat storage with the view (sizes, strides, offset) replaced by `value` (shape `sizes`)."""
    sizes, strides = tuple(sizes), tuple(strides)
    numel = math.prod(sizes)
    length = flat.shape[0]
    value = jnp.broadcast_to(value.astype(flat.dtype), sizes)
    if numel == 0:
        return flat
    if is_contiguous(sizes, strides):
        if offset == 0 and numel == length:
            return value.reshape(-1)
        return lax.dynamic_update_slice(flat, value.reshape(-1), (offset,))
    plan = _nested_plan(sizes, strides)
    if plan is None or len(plan[0]) != sum(1 for n in sizes if n != 1):
        # Irregular strides: scatter. (Views broadcast in a written dim were rejected by the caller.)
        return flat.at[_indices(sizes, strides, offset).reshape(-1)].set(value.reshape(-1))
    order, block, span = plan
    if not order:
        return lax.dynamic_update_slice(flat, value.reshape(1), (offset,))
    padded = _padded(flat, offset + span)
    x = lax.slice(padded, (offset,), (offset + span,)).reshape(block)
    v = jnp.transpose(value.reshape([sizes[i] for i in sorted(order)]), np.argsort(np.argsort(order)))
    v = v.reshape([sizes[i] for i in order] + [1])
    x = lax.dynamic_update_slice(x, v, (0,) * len(block))
    padded = lax.dynamic_update_slice(padded, x.reshape(-1), (offset,))
    return padded[:length] if padded.shape[0] != length else padded


def window(flat, offset, span: int):
    """`span` elements of the storage from `offset` (a traced int): the part a view at offset reads."""
    if span == 0:
        return flat[:0]
    return lax.dynamic_slice(flat, (offset,), (span,))


def put_window(flat, values, offset):
    """The storage with `values` (a `window`) written back at `offset` (a traced int)."""
    return lax.dynamic_update_slice(flat, values, (offset,))


def fresh(value, sizes, strides, length):
    """A new storage of `length` elements holding `value` laid out with `strides`."""
    sizes, strides = tuple(sizes), tuple(strides)
    if is_contiguous(sizes, strides) and math.prod(sizes) == length:
        return value.reshape(-1)
    plan = _nested_plan(sizes, strides)
    if plan is not None and plan[2] == length and len(plan[0]) == sum(1 for n in sizes if n != 1):
        # dense in another dimension order (e.g. a transposed result): permute, then flatten
        order = plan[0]
        full_order = order + [i for i in range(len(sizes)) if i not in order]
        return jnp.transpose(value, full_order).reshape(-1)
    return write(jnp.zeros((length,), value.dtype), value, sizes, strides, 0)
