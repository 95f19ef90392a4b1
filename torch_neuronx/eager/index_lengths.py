"""Index ops over many index lengths: past a few distinct lengths, a length rounds up to a bucket.

An eager op's executable is keyed by its inputs' shapes, so a loop whose only varying part is the
length of an index (`x.index_put_((idx,), v, accumulate=True)` with a new `len(idx)` each step,
`x[mask]` with a new count of True elements) compiled an executable per length (~80 ms each on 2
cores, where the CPU takes microseconds). Here a call pattern (the op, the indexed tensor's shape
and dtype, the index and value dtypes, the values' shape but for the index axis) that has met more
than `TORCH_NEURONX_INDEX_LENGTH_BUCKETS` (4) distinct lengths takes each length n up to
`bucket(n)`: powers of two from 16 to 1024, then sixteenths of an octave (at most 6.25% padding).
So a loop over 511 lengths compiles about a dozen executables, and a loop with one length (every
training step) never pads. The padded call's result is the unpadded call's, exactly:

- `index_put` (set): every index and the values' rows repeat their last entry: the last write is made
  again, and where indices repeat, the last still wins, as in the CPU's serial loop.
- `index_put` (accumulate): the indices repeat their last entry and the values add -0.0, the additive
  identity of every float (x + -0.0 is x, -0.0 included); values broadcast along the index axis are
  expanded first (each padded index would add them again).
- `index.Tensor`: the indices repeat their last entry and the result is the first n rows of the
  bucket's, a view (`narrow`: no launch). Only where the index axis is the result's first, so the
  view is contiguous as the CPU's result is; its storage holds the bucket's rows.
- `nonzero`: `nonzero_static` at the bucket's size, narrowed to the count likewise.
- `index_select` along dimension 0: as `index.Tensor`.
- `index_add`: the index repeats its last entry and the source adds a zero signed so that alpha times
  it is -0.0 (a non-finite alpha, or complex, runs exact: inf times zero is NaN).

An index or values tensor on the host is padded there; one on the device is read to the host, padded
and moved back (it waits for the tensor: a data-dependent loop waits anyway), never padded by a
program per length. Indices that are not all 1-D of one length, masks (`index_put` keeps a device mask
whole: its shape is the indexed tensor's), and values that do not broadcast are left to the exact path.
"""
from __future__ import annotations

import threading

import torch

from ..ops.argument_checks import indexed_shape
from .. import metrics
from ..runtime import config
from .buffers import to_host

_MASKS = (torch.bool, torch.uint8)
_PATTERNS_HELD = 4096  # call patterns remembered (cleared when full: a pattern then counts again)

# call pattern -> the distinct lengths it has met (a set), or True once it buckets
_seen: dict[tuple, object] = {}
_lock = threading.Lock()


def bucket(n: int) -> int:
    """The length a bucketed call of index length `n` (>= 1) runs at."""
    if n <= 16:
        return 16
    top = 1 << (n - 1).bit_length()  # the power of two at or above n
    if top <= 1024:
        return top
    step = top >> 5  # n lies in (top / 2, top]: sixteenths of that octave
    return -(-n // step) * step


def bucketed(pattern: tuple, n: int) -> bool:
    """Record that `pattern` met index length `n`; whether its calls are bucketed now (counted)."""
    if _seen.get(pattern) is not True:
        few = config.settings.index_length_buckets
        if not few:
            return False
        with _lock:
            seen = _seen.get(pattern)
            if seen is None:
                if len(_seen) >= _PATTERNS_HELD:
                    _seen.clear()
                seen = _seen[pattern] = set()
            if seen is not True:
                seen.add(n)
                if len(seen) <= few:
                    return False
                _seen[pattern] = True
    metrics.index_bucketed(pattern[0])
    return True


def clear() -> None:
    """Forget every pattern's lengths (each pattern then counts its lengths again)."""
    with _lock:
        _seen.clear()


def _additive_identity(dtype):
    if dtype.is_floating_point or dtype.is_complex:
        return complex(-0.0, -0.0) if dtype.is_complex else -0.0
    return False if dtype == torch.bool else 0


def pad(t: torch.Tensor, axis: int, size: int, fill=None) -> torch.Tensor:
    """`t` with dimension `axis` taken to `size` by repeating its last slice (or `fill`), where `t` is:
    a new contiguous tensor even at the bucket's own length, so a bucket's calls share one key (and,
    fused, one run: the tensor's producer is never in the bucketed op's run)."""
    n = t.shape[axis]
    host = t if t.device.type == "cpu" else to_host(t)
    if n == size:
        return host.contiguous() if t.device.type == "cpu" else host.to(t.device)
    if fill is None:
        extra = host.narrow(axis, n - 1, 1).expand(*host.shape[:axis], size - n, *host.shape[axis + 1:])
    else:
        extra = torch.full((*host.shape[:axis], size - n, *host.shape[axis + 1:]), fill, dtype=host.dtype)
    padded = torch.cat([host, extra], axis)
    return padded if t.device.type == "cpu" else padded.to(t.device)


def _layout(self, indices):
    """(n, axis) of advanced indices that are integer tensors, all 1-D of one length n >= 1: the index
    axis of the indexed result; None for any other indices."""
    places = [d for d, i in enumerate(indices) if i is not None]
    if not places or len(indices) > self.dim():
        return None
    n = indices[places[0]].shape[0] if indices[places[0]].dim() == 1 else 0
    for d in places:
        i = indices[d]
        if i.dtype in _MASKS or i.dtype.is_floating_point or i.dim() != 1 or i.shape[0] != n:
            return None
    if n == 0:
        return None
    return n, (places[0] if places[-1] - places[0] == len(places) - 1 else 0)


def _index_pattern(name, self, indices, extra=()) -> tuple:
    return (name, self.device.index, tuple(self.shape), self.dtype,
            tuple(None if i is None else (i.dtype, i.device.type) for i in indices)) + extra


def index_put_args(name: str, self, indices, values, accumulate):
    """`(indices, values)` for an `index_put` family call, padded to the bucket of their length when
    the call's pattern is bucketed; None when the call runs as it is."""
    if not isinstance(values, torch.Tensor) or values.device != self.device:
        return None
    layout = _layout(self, indices)
    if layout is None:
        return None
    n, axis = layout
    shape = indexed_shape(self, indices)
    if values.dim() > len(shape):
        return None
    lead = len(shape) - values.dim()
    rows = values.shape[axis - lead] if axis >= lead else 1
    if rows not in (n, 1) or any(v not in (1, s) for v, s in zip(values.shape, shape[lead:])):
        return None  # values that do not broadcast: the exact path raises the CPU's error
    vshape = tuple(-1 if d + lead == axis else s for d, s in enumerate(values.shape))
    if not bucketed(_index_pattern(name, self, indices, (values.dtype, vshape, bool(accumulate))), n):
        return None
    size = bucket(n)
    padded = [None if i is None else pad(i, 0, size) for i in indices]
    if accumulate:
        if rows != n or axis < lead:
            values, lead = values.expand(shape), 0
        values = pad(values, axis - lead, size, _additive_identity(values.dtype))
    elif rows == n and axis >= lead:
        values = pad(values, axis - lead, size)
    return padded, values


def index(self, indices, run):
    """`self[indices]` by `run(self, indices)`, at the bucket of the indices' length when the call's
    pattern is bucketed (the result narrowed back to the length); None when the call runs as it is."""
    layout = _layout(self, indices)
    if layout is None or layout[1] != 0:
        return None
    n = layout[0]
    if not bucketed(_index_pattern("aten.index.Tensor", self, indices), n):
        return None
    size = bucket(n)
    return run(self, [None if i is None else pad(i, 0, size) for i in indices]).narrow(0, 0, n)


def nonzero(self, count: int, run):
    """`nonzero` of `self`, whose count of nonzero elements is `count`, by `run(self, size)`
    (`nonzero_static`), at the bucket of the count when the pattern is bucketed (narrowed back)."""
    if count == 0 or not bucketed(("aten.nonzero.default", self.device.index, tuple(self.shape), self.dtype), count):
        return run(self, count)
    return run(self, bucket(count)).narrow(0, 0, count)


def _along_pattern(name, self, dim, index, extra=()) -> tuple:
    return (name, self.device.index, tuple(self.shape), self.dtype, dim, index.dtype) + extra


def _along_length(self, dim, index):
    """n for an index of n >= 1 positions along `dim` of a tensor with dimensions on `self`'s device;
    None for any other."""
    if self.dim() == 0 or not isinstance(index, torch.Tensor) or index.dim() != 1 or index.shape[0] == 0 \
            or index.device != self.device or index.dtype not in (torch.int64, torch.int32):
        return None
    return index.shape[0]


def index_select_kernel(kernel):
    """`index_select`'s kernel, at buckets of the index's length along dimension 0 (narrowed back)."""

    def run(self, dim, index):
        n = _along_length(self, dim, index)
        if n is None or dim % self.dim() != 0 or \
                not bucketed(_along_pattern("aten.index_select.default", self, 0, index), n):
            return kernel(self, dim, index)
        return kernel(self, dim, pad(index, 0, bucket(n))).narrow(0, 0, n)

    run.__name__ = kernel.__name__
    return run


def index_add_kernel(kernel, name: str):
    """An `index_add` kernel (self, dim, index, source, *, alpha), at buckets of the index's length."""

    def run(self, dim, index, source, *, alpha=1):
        n = _along_length(self, dim, index)
        if n is None or not isinstance(source, torch.Tensor) or source.device != self.device \
                or source.dim() != self.dim() or source.shape[dim] != n or self.dtype.is_complex \
                or isinstance(alpha, complex) or not -float("inf") < alpha < float("inf"):
            return kernel(self, dim, index, source, alpha=alpha)
        d = dim % self.dim()
        if not bucketed(_along_pattern(name, self, d, index, (source.dtype, type(alpha))), n):
            return kernel(self, dim, index, source, alpha=alpha)
        size = bucket(n)
        zero = _additive_identity(source.dtype)
        if source.dtype.is_floating_point and alpha < 0:  # (-alpha) * +0.0 is -0.0
            zero = 0.0
        return kernel(self, dim, pad(index, 0, size), pad(source, d, size, zero), alpha=alpha)

    run.__name__ = kernel.__name__
    return run
