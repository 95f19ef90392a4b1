"""View ops as functional lowerings, and the functional scatters into views.

Eager neuron views are native strided tensors sharing storage (the C++ shim's kernels), so the view
lowerings here are never registered as eager kernels (their returns alias `self`): they serve
compiled graphs, where a view is just a value. They take `self` as a dense array, so `as_strided`
(and `as_strided_scatter`) index `self`'s elements in row-major order as if `self` were contiguous
with storage offset 0 (a functional graph's view of it).

The `*_scatter` ops (select/slice/diagonal/as_strided_scatter, masked_scatter) are ordinary
functional ops: they reach eager too. masked_scatter consumes `source` in row-major order of the
True mask elements (a cumulative sum of the mask picks each one), with static shapes; too small a
source raises as on the CPU.

Static arguments (dims, indices, sizes) are checked in Python as PyTorch's meta functions check them.
"""
from __future__ import annotations

import numpy as np
import torch

from ..runtime.lazy_jax import jnp, lax
from .dims import wrap_dim
from .dtypes import cast, to_numpy_dtype
from . import layout
from ._registry import aten, lower, require

_I64 = np.dtype(np.int64)
_BOOL = np.dtype(np.bool_)
_INT64_MAX = 2**63 - 1


# ---------------------------------------------------------------------------------------------
# helpers


def _slice_bounds(size: int, start, end, step: int):
    """(start, stop) of slice.Tensor, clamped exactly as PyTorch clamps them."""
    if step <= 0:
        raise ValueError("slice step must be positive")
    start = 0 if start is None else int(start)
    end = _INT64_MAX if end is None else int(end)
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return start, end


def _select_index(x, dim: int, index: int) -> tuple[int, int]:
    if x.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d = wrap_dim(dim, x.ndim)
    n = x.shape[d]
    if not -n <= index < n:
        raise IndexError(
            f"select(): index {index} out of range for tensor of size {list(x.shape)} at dimension {dim}"
        )
    return d, index % n


def _diag_positions(shape, offset, dim1, dim2):
    """(d1, d2, length, first row, first col) of diagonal(offset, dim1, dim2)."""
    ndim = len(shape)
    d1, d2 = wrap_dim(dim1, ndim), wrap_dim(dim2, ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    if offset >= 0:
        length = max(min(shape[d1], shape[d2] - offset), 0)
        r0, c0 = 0, offset
    else:
        length = max(min(shape[d1] + offset, shape[d2]), 0)
        r0, c0 = -offset, 0
    return d1, d2, length, r0, c0


def _bitcast(x, dtype):
    """view.dtype: the same bytes read as `dtype` (little-endian); a size change scales the last dim."""
    src = np.dtype(x.dtype)
    dst = np.dtype(dtype)
    if src == dst:
        return x
    if src.kind == "c":  # complex: its (real, imag) pairs, as floats of half the size
        parts = jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)
        return _bitcast(parts.reshape(x.shape[:-1] + (x.shape[-1] * 2,)) if x.ndim else parts, dst)
    if dst.kind == "c":
        half = np.dtype(np.float32) if dst.itemsize == 8 else np.dtype(np.float64)
        f = _bitcast(x, half)
        f = f.reshape(f.shape[:-1] + (f.shape[-1] // 2, 2))
        return lax.complex(f[..., 0], f[..., 1])
    if src == _BOOL:
        x = x.astype(np.uint8)
        src = np.dtype(np.uint8)
    if dst == _BOOL:
        return _bitcast(x, np.uint8) != 0
    if src.itemsize == dst.itemsize:
        return lax.bitcast_convert_type(x, dst)
    if x.ndim == 0:
        raise RuntimeError(
            "self.dim() cannot be 0 to view a tensor as a dtype with a different element size"
        )
    if src.itemsize > dst.itemsize:
        y = lax.bitcast_convert_type(x, dst)  # (..., n, ratio)
        return y.reshape(x.shape[:-1] + (x.shape[-1] * (src.itemsize // dst.itemsize),))
    ratio = dst.itemsize // src.itemsize
    if x.shape[-1] % ratio:
        raise RuntimeError(
            f"self.size(-1) must be divisible by {ratio} to view {src} as {dst} (different element sizes)"
        )
    y = x.reshape(x.shape[:-1] + (x.shape[-1] // ratio, ratio))
    return lax.bitcast_convert_type(y, dst)


# ---------------------------------------------------------------------------------------------
# lowerings, alphabetical


# _unsafe_view(Tensor self, SymInt[] size) -> Tensor
@lower(aten._unsafe_view.default)
def _unsafe_view(self, size):
    return jnp.reshape(self, tuple(int(s) for s in size))


# alias(Tensor(a) self) -> Tensor(a)
@lower(aten.alias.default)
def alias(self):
    return self


# as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor(a)
@lower(aten.as_strided.default)
def as_strided(self, size, stride, storage_offset):
    offset = 0 if storage_offset is None else int(storage_offset)
    flat = self.reshape(-1)
    layout.check_bounds(size, stride, offset, flat.shape[0])
    return layout.read(flat, tuple(int(n) for n in size), tuple(int(s) for s in stride), offset)


# as_strided_scatter(Tensor self, Tensor src, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor
@lower(aten.as_strided_scatter.default)
def as_strided_scatter(self, src, size, stride, storage_offset):
    offset = 0 if storage_offset is None else int(storage_offset)
    flat = self.reshape(-1)
    size = tuple(int(s) for s in size)
    if tuple(src.shape) != size:
        raise RuntimeError(
            f"expected src to have a size equal to the slice of self. src size = {list(src.shape)}, "
            f"slice size = {list(size)}"
        )
    layout.check_bounds(size, stride, offset, flat.shape[0])
    stride = tuple(int(s) for s in stride)
    return layout.write(flat, cast(src, self.dtype), size, stride, offset).reshape(self.shape)


# diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)
@lower(aten.diagonal.default)
def diagonal(self, offset, dim1, dim2):
    d1, d2, length, r0, c0 = _diag_positions(self.shape, offset, dim1, dim2)
    if length == 0:
        rest = tuple(n for i, n in enumerate(self.shape) if i not in (d1, d2))
        return jnp.zeros(rest + (0,), self.dtype)
    return jnp.diagonal(self, offset, d1, d2)


# diagonal_scatter(Tensor self, Tensor src, int offset=0, int dim1=0, int dim2=1) -> Tensor
@lower(aten.diagonal_scatter.default)
def diagonal_scatter(self, src, offset, dim1, dim2):
    d1, d2, length, r0, c0 = _diag_positions(self.shape, offset, dim1, dim2)
    rest = tuple(n for i, n in enumerate(self.shape) if i not in (d1, d2))
    if tuple(src.shape) != rest + (length,):
        raise RuntimeError(
            f"expected src to have a size equal to the slice of self. src size = {list(src.shape)}, "
            f"slice size = {list(rest + (length,))}"
        )
    if length == 0:
        return self
    x = jnp.moveaxis(self, (d1, d2), (-2, -1))
    k = jnp.arange(length, dtype=_I64)
    x = x.at[..., k + r0, k + c0].set(cast(src, self.dtype), mode="promise_in_bounds")
    return jnp.moveaxis(x, (-2, -1), (d1, d2))


# expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)
@lower(aten.expand.default)
def expand(self, size, implicit):
    size = [int(s) for s in size]
    lead = len(size) - self.ndim
    if lead < 0:
        raise RuntimeError(
            f"expand: the number of sizes provided ({len(size)}) must be greater or equal to the number "
            f"of dimensions in the tensor ({self.ndim})"
        )
    shape = []
    for i, s in enumerate(size):
        if i < lead:
            if s < 0:
                raise RuntimeError(
                    f"expand: the expanded size of the tensor (-1) isn't allowed in a leading, non-existing "
                    f"dimension {i}"
                )
            shape.append(s)
        else:
            cur = self.shape[i - lead]
            if s == -1:
                s = cur
            elif cur != 1 and cur != s:
                raise RuntimeError(
                    f"The expanded size of the tensor ({s}) must match the existing size ({cur}) at "
                    f"non-singleton dimension {i}.  Target sizes: {size}.  Tensor sizes: {list(self.shape)}"
                )
            shape.append(s)
    return jnp.broadcast_to(self, tuple(shape))


# masked_scatter(Tensor self, Tensor mask, Tensor source) -> Tensor
@lower(aten.masked_scatter.default)
def masked_scatter(self, mask, source):
    shape = jnp.broadcast_shapes(self.shape, mask.shape)
    base = jnp.broadcast_to(self, shape).reshape(-1)
    m = jnp.broadcast_to(mask.astype(_BOOL), shape).reshape(-1)
    src = source.reshape(-1)
    count = jnp.sum(m, dtype=_I64)
    require(count <= src.shape[0], RuntimeError, "Number of elements of source < number of ones in mask")
    if src.shape[0] == 0 or base.shape[0] == 0:
        return base.reshape(shape)
    # the k-th True element takes source[k]; positions not taken read a clamped (unused) index
    k = jnp.cumsum(m, dtype=_I64) - 1
    picked = src.at[jnp.clip(k, 0, src.shape[0] - 1)].get(mode="promise_in_bounds")
    return jnp.where(m, cast(picked, self.dtype), base).reshape(shape)


# permute(Tensor(a) self, int[] dims) -> Tensor(a)
@lower(aten.permute.default)
def permute(self, dims):
    if len(dims) != self.ndim:
        raise RuntimeError(
            f"permute(): number of dims don't match in permute: input.dim() = {self.ndim} is not equal to "
            f"len(dims) = {len(dims)}"
        )
    if self.ndim == 0:
        return self
    return jnp.transpose(self, tuple(wrap_dim(d, self.ndim) for d in dims))


# select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)
@lower(aten.select.int)
def select(self, dim, index):
    d, i = _select_index(self, dim, int(index))
    return lax.index_in_dim(self, i, d, keepdims=False)


# select_scatter(Tensor self, Tensor src, int dim, SymInt index) -> Tensor
@lower(aten.select_scatter.default)
def select_scatter(self, src, dim, index):
    d, i = _select_index(self, dim, int(index))
    want = self.shape[:d] + self.shape[d + 1:]
    if tuple(src.shape) != tuple(want):
        raise RuntimeError(
            f"expected src to have a size equal to the slice of self. src size = {list(src.shape)}, "
            f"slice size = {list(want)}"
        )
    return lax.dynamic_update_index_in_dim(self, cast(src, self.dtype), i, d)


# slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)
@lower(aten.slice.Tensor)
def slice_tensor(self, dim, start, end, step):
    if self.ndim == 0:
        raise IndexError("slice() cannot be applied to a 0-dim tensor.")
    d = wrap_dim(dim, self.ndim)
    lo, hi = _slice_bounds(self.shape[d], start, end, int(step))
    return lax.slice_in_dim(self, lo, max(hi, lo), int(step), d)


# slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor
@lower(aten.slice_scatter.default)
def slice_scatter(self, src, dim, start, end, step):
    if self.ndim == 0:
        raise IndexError("slice() cannot be applied to a 0-dim tensor.")
    d = wrap_dim(dim, self.ndim)
    step = int(step)
    lo, hi = _slice_bounds(self.shape[d], start, end, step)
    n = (hi - lo + step - 1) // step
    want = self.shape[:d] + (n,) + self.shape[d + 1:]
    if tuple(src.shape) != tuple(want):
        raise RuntimeError(
            f"expected src to have a size equal to the slice of self. src size = {list(src.shape)}, "
            f"slice size = {list(want)}"
        )
    if n == 0:
        return self
    values = cast(src, self.dtype)
    if step == 1:
        return lax.dynamic_update_slice_in_dim(self, values, lo, d)
    key = (slice(None),) * d + (slice(lo, hi, step),)
    return self.at[key].set(values)


# split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]
@lower(aten.split.Tensor)
def split(self, split_size, dim):
    d = wrap_dim(dim, self.ndim)
    n = self.shape[d]
    split_size = int(split_size)
    if split_size < 0 or (split_size == 0 and n > 0):
        raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {n}")
    chunks = max((n + split_size - 1) // split_size, 1) if split_size else 1
    sizes = [split_size] * (chunks - 1) + [n - split_size * (chunks - 1)]
    return split_with_sizes(self, sizes, d)


# split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]
@lower(aten.split_with_sizes.default)
def split_with_sizes(self, split_sizes, dim):
    d = wrap_dim(dim, self.ndim)
    sizes = [int(s) for s in split_sizes]
    if sum(sizes) != self.shape[d] or any(s < 0 for s in sizes):
        raise RuntimeError(
            f"split_with_sizes expects split_sizes to sum exactly to {self.shape[d]} (input tensor's size at "
            f"dimension {dim}), but got split_sizes={sizes}"
        )
    out, pos = [], 0
    for s in sizes:
        out.append(lax.slice_in_dim(self, pos, pos + s, 1, d))
        pos += s
    return out


def _squeeze(self, dims):
    if self.ndim == 0:
        for d in dims:
            wrap_dim(d, 0)
        return self
    wrapped = {wrap_dim(d, self.ndim) for d in dims}
    keep = tuple(n for i, n in enumerate(self.shape) if not (i in wrapped and n == 1))
    return self.reshape(keep)


# squeeze(Tensor(a) self) -> Tensor(a)
@lower(aten.squeeze.default)
def squeeze(self):
    return _squeeze(self, range(self.ndim))


# squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)
@lower(aten.squeeze.dim)
def squeeze_dim(self, dim):
    return _squeeze(self, [dim])


# squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)
@lower(aten.squeeze.dims)
def squeeze_dims(self, dim):
    return _squeeze(self, list(dim))


# t(Tensor(a) self) -> Tensor(a)
@lower(aten.t.default)
def t(self):
    if self.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
    return self if self.ndim < 2 else self.T


# transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)
@lower(aten.transpose.int)
def transpose(self, dim0, dim1):
    if self.ndim == 0:
        wrap_dim(dim0, 0), wrap_dim(dim1, 0)
        return self
    return jnp.swapaxes(self, wrap_dim(dim0, self.ndim), wrap_dim(dim1, self.ndim))


# unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]
@lower(aten.unbind.int)
def unbind(self, dim):
    if self.ndim == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    d = wrap_dim(dim, self.ndim)
    return [lax.index_in_dim(self, i, d, keepdims=False) for i in range(self.shape[d])]


# unfold(Tensor(a) self, int dimension, int size, int step) -> Tensor(a)
@lower(aten.unfold.default)
def unfold(self, dimension, size, step):
    x = self.reshape(1) if self.ndim == 0 else self
    d = wrap_dim(dimension, self.ndim)
    n = x.shape[d]
    if size > n:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    count = (n - size) // step + 1
    windows = (jnp.arange(count, dtype=_I64) * step)[:, None] + jnp.arange(size, dtype=_I64)[None, :]
    y = x.at[(slice(None),) * d + (windows,)].get(mode="promise_in_bounds")  # (..., count, size, ...)
    y = jnp.moveaxis(y, d + 1, -1)
    return y.reshape((size,)) if self.ndim == 0 else y


# unsqueeze(Tensor(a) self, int dim) -> Tensor(a)
@lower(aten.unsqueeze.default)
def unsqueeze(self, dim):
    return jnp.expand_dims(self, wrap_dim(dim, self.ndim + 1))


# view(Tensor(a) self, SymInt[] size) -> Tensor(a)
@lower(aten.view.default)
def view(self, size):
    return jnp.reshape(self, tuple(int(s) for s in size))


# view.dtype(Tensor(a) self, ScalarType dtype) -> Tensor(a)
@lower(aten.view.dtype)
def view_dtype(self, dtype):
    return _bitcast(self, to_numpy_dtype(dtype) if isinstance(dtype, torch.dtype) else dtype)


# view_as_complex(Tensor(a) self) -> Tensor(a)
@lower(aten.view_as_complex.default)
def view_as_complex(self):
    if self.ndim == 0 or self.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    if np.dtype(self.dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise RuntimeError(f"view_as_complex is only supported for float and double tensors, but got {self.dtype}")
    return lax.complex(self[..., 0], self[..., 1])


# view_as_real(Tensor(a) self) -> Tensor(a)
@lower(aten.view_as_real.default)
def view_as_real(self):
    if np.dtype(self.dtype).kind != "c":
        raise RuntimeError("view_as_real is only supported for complex tensors")
    return jnp.stack([jnp.real(self), jnp.imag(self)], axis=-1)
