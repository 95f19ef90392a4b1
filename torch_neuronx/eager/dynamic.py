"""Ops whose result shape depends on the data (nonzero, masked_select, boolean-mask indexing,
repeat_interleave with tensor repeats, the unique family, bincount).

Each waits for the device once to learn its result's size (the count of True elements, of distinct
values, the largest value), then runs as ordinary static-shape device ops. The unique family's two
programs are executables like any other: keyed in namespace "dynamic" by their inputs' layouts and
static arguments, got through the one `ExecutableCache.acquire` (memory, the disk cache, else
compiled) and launched through `executables.launch`.
"""
from __future__ import annotations

import functools

import torch

from .. import metrics
from ..cache import Built, Key, executable_cache
from ..ops.protocol import wrap_contiguous
from ..runtime import devices, executables
from ..runtime.lazy_jax import jax
from . import executor, host_indices, index_lengths
from .buffers import device_flat, to_host
from ..ops.specs import spec_for

aten = torch.ops.aten
DYNAMIC = "dynamic"  # the cache namespace of the unique family's programs

_MASKS = (torch.bool, torch.uint8)


def nonzero(self):
    count = int(aten.ne.Scalar(self, 0).sum().item())  # the one host synchronization
    return index_lengths.nonzero(self, count, _nonzero_static)


def _nonzero_static(self, size):
    return aten.nonzero_static.default(self, size=size)


def masked_select(self, mask):
    self_b, mask_b = torch.broadcast_tensors(self, mask)
    flat = nonzero(mask_b.reshape(-1)).reshape(-1)
    return index(self_b.reshape(-1), [flat])


def repeat_interleave(repeats, *, output_size=None):
    """repeat_interleave.Tensor: its length is the sum of the repeats (one host read when the
    caller gives no output_size), then the static-shape lowering runs."""
    if output_size is None:  # (ATen checks the signs only then, as here: one host read for both)
        if repeats.dim() == 1 and repeats.numel() and not repeats.dtype.is_floating_point:
            total, low = (int(v) for v in to_host(torch.stack([repeats.sum(), repeats.min()]).to(torch.int64)))
            if low < 0:
                raise RuntimeError("aten.repeat_interleave.Tensor: repeats can not be negative")
            output_size = total
        else:
            output_size = int(repeats.sum().item())
    return executor.run(spec_for(aten.repeat_interleave.Tensor), (repeats,), {"output_size": output_size})


def index(self, indices):
    """index.Tensor: host index tensors taken as ATen takes them (`host_indices`); boolean masks become
    the integer indices of their True elements, as PyTorch does, then the static-shape lowering runs
    (at the bucket of the indices' length in a loop over many lengths: `index_lengths`)."""
    masks = host_indices.has_masks(indices)
    if masks:
        host_indices.check_masks(self, indices)
    else:
        got = index_lengths.index(self, indices, _index)
        if got is not None:
            return got
    if host_indices.elsewhere(self, indices):
        indices = host_indices.to_device(self, indices, mask_positions=True)
        masks = host_indices.has_masks(indices)
    if not masks:
        return _index(self, indices)
    expanded = []
    for i in indices:
        if i is not None and i.dtype in _MASKS:
            expanded.extend(nonzero(i).unbind(1))
        else:
            expanded.append(i)
    return aten.index.Tensor(self, expanded)


def _index(self, indices):
    """index.Tensor of mask-free indices, host ones moved to `self`'s device."""
    if host_indices.elsewhere(self, indices):
        indices = host_indices.to_device(self, indices, mask_positions=False)
    return executor.run(spec_for(aten.index.Tensor), (self, indices), {})


# ----------------------------------------------------------------------------------------------
# unique and its variants: data-dependent result sizes


@functools.cache
def _unique_programs():
    """The two device programs of every unique op (made on first use: no jax at import), pure functions
    `_launch` compiles per layout.

    `find(flat, shape, sort, rows)`: x (flat, shaped `shape`) is (N,) or, for the dim variants, (N, M) rows. Sorts it (stably;
    floats as PyTorch's sort orders them: -0.0 == 0.0, NaNs last) unless consecutive, marks the
    elements (rows) that differ from their predecessor (NaN differs from everything, as in
    PyTorch's `!=`), and counts the groups. `gather(x, perm, new, k)`: with the group count k known
    on the host, the first element (row) of each group in sorted order (its first occurrence),
    each input element's group index, and each group's size; the first as a flat array."""
    import numpy as np

    from ..runtime.lazy_jax import jnp, lax

    def keys_of(x):
        return x.astype(np.uint8) if x.dtype == np.bool_ else x

    def row_order(x, iota):
        """A stable lexicographic order of the rows of x (N, M): one sort keyed on all M columns
        when M is small, else M two-key sorts in a scan (each refining the rows' ranks so far
        by the next column), so the program does not grow with M."""
        n, m = x.shape
        if m <= 8:
            cols = tuple(keys_of(x[:, j]) for j in range(m))
            return lax.sort(cols + (iota,), num_keys=m, is_stable=True)[-1]

        def refine(rank, col):
            r, c, idx = lax.sort((rank, keys_of(col), iota), num_keys=2, is_stable=True)
            step = jnp.concatenate([jnp.zeros((1,), np.int64),
                                    ((r[1:] != r[:-1]) | (c[1:] != c[:-1])).astype(np.int64)])
            return jnp.zeros((n,), np.int64).at[idx].set(jnp.cumsum(step), mode="promise_in_bounds"), None

        rank, _ = lax.scan(refine, jnp.zeros((n,), np.int64), x.T)
        return lax.sort((rank, iota), num_keys=1, is_stable=True)[1]

    def find(flat, shape: tuple, sort: bool, rows: bool):
        x = flat.reshape(shape)
        n = x.shape[0]
        iota = lax.iota(np.int64, n)
        if sort:
            if rows:
                perm = row_order(x, iota)
            else:
                perm = lax.sort((keys_of(x), iota), num_keys=1, is_stable=True)[1]
            vals = x.at[perm].get(mode="promise_in_bounds")
        else:
            perm, vals = iota, x
        differ = vals[1:] != vals[:-1]
        if rows:
            differ = jnp.any(differ, axis=1)
        new = jnp.concatenate([jnp.ones((1,), bool), differ])
        return vals, perm, new, jnp.sum(new, dtype=np.int64)

    def gather(vals, perm, new, k: int):
        n = vals.shape[0]
        group = jnp.cumsum(new.astype(np.int64)) - 1
        starts = jnp.nonzero(new, size=k, fill_value=n)[0].astype(np.int64)
        out = vals.at[starts].get(mode="promise_in_bounds")
        inverse = jnp.zeros((n,), np.int64).at[perm].set(group, mode="promise_in_bounds")
        counts = jnp.diff(jnp.concatenate([starts, jnp.full((1,), n, np.int64)]))
        return out.reshape(-1), inverse, counts  # flat: a storage's buffer (rows of the dim variants too)

    return find, gather


def _launch(name: str, fn, arrays: tuple, static: dict, device: int):
    """`fn(*arrays, **static)` on neuron:device, by the executable of these arrays' layouts and static
    arguments (from memory, the disk cache, or compiled now)."""
    value = (name,) + tuple((a.dtype.name, tuple(a.shape)) for a in arrays) + tuple(sorted(static.items()))

    def build():
        with devices.on_device(device):
            lowered = jax.jit(functools.partial(fn, **static)).lower(*arrays)
            compiled = executables.compile_lowered(lowered, small=True)
        return Built(compiled, compiled, ())

    compiled = executable_cache().acquire(Key(DYNAMIC, value, device), name, build, lambda found: found.executable)
    return executables.launch(compiled, arrays, name, device)


def _unique_core(x, sort: bool, rows: bool):
    """(output, inverse, counts) as jax arrays for x (N,) or (N, ...) rows (N > 0). One host
    synchronization: the number of groups."""
    find, gather = _unique_programs()
    shape = (x.shape[0], x.numel() // x.shape[0]) if rows else (x.numel(),)
    device = x.device.index
    vals, perm, new, count = _launch("unique.find", find, (device_flat(x),),
                                     {"shape": shape, "sort": sort, "rows": rows}, device)
    k = int(count)  # the one host synchronization
    return _launch("unique.gather", gather, (vals, perm, new), {"k": k}, device)


def _empty_long(shape, device):
    return torch.empty(shape, dtype=torch.long, device=device)


def _unique_flat(name, self, sort, return_inverse, return_counts):
    metrics.executed(name)
    dev = self.device
    if self.numel() == 0:
        return (torch.empty((0,), dtype=self.dtype, device=dev),
                _empty_long(self.shape if return_inverse else (0,), dev), _empty_long((0,), dev))
    out, inverse, counts = _unique_core(self.reshape(-1), sort, False)
    k = out.shape[0]
    return (wrap_contiguous(out, (k,), self.dtype, dev),
            wrap_contiguous(inverse, self.shape, torch.long, dev) if return_inverse else _empty_long((0,), dev),
            wrap_contiguous(counts, (k,), torch.long, dev) if return_counts else _empty_long((0,), dev))


def _unique_rows(name, self, dim, sort):
    """unique_dim / unique_dim_consecutive: the slices along `dim` as rows; every output returned."""
    metrics.executed(name)
    if self.dim() == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    dim = dim % self.dim()
    dev = self.device
    if self.size(dim) == 0:
        if sum(1 for n in self.shape if n == 0) != 1:
            raise RuntimeError("Number of zero sized dimensions is more than one, so unique cannot be applied ")
        return torch.empty(self.shape, dtype=self.dtype, device=dev), _empty_long((0,), dev), _empty_long((0,), dev)
    if self.numel() == 0:
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
    moved = self.movedim(dim, 0)
    out, inverse, counts = _unique_core(moved, sort, True)
    k = counts.shape[0]  # (out is flat: k rows)
    shape = (k,) + tuple(moved.shape[1:])
    output = wrap_contiguous(out, shape, self.dtype, dev).movedim(0, dim)
    return output, wrap_contiguous(inverse, (self.size(dim),), torch.long, dev), wrap_contiguous(counts, (k,), torch.long, dev)


def unique(self, sorted=True, return_inverse=False):
    out, inverse, _ = _unique_flat("aten._unique.default", self, True, return_inverse, False)
    return out, inverse


def unique2(self, sorted=True, return_inverse=False, return_counts=False):
    """torch.unique (dim=None). Always sorted, as PyTorch's CPU kernel (`sorted=False` too).
    Sorts on the device, waits once for the number of distinct values, then gathers."""
    return _unique_flat("aten._unique2.default", self, True, return_inverse, return_counts)


def bincount(self, weights=None, minlength=0):
    """torch.bincount: the output's length is max(self) + 1 (at least minlength), a data-dependent
    shape: one host synchronization (min and max together), then an accumulating index_put."""
    if self.dim() != 1 or self.dtype.is_floating_point or self.dtype.is_complex or self.dtype == torch.bool:
        if self.dtype.is_floating_point:
            raise NotImplementedError(f'"bincount_cpu" not implemented for \'{str(self.dtype).removeprefix("torch.")}\'')
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is not None and (weights.dim() != 1 or weights.size(0) != self.size(0)):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    n = minlength
    if self.numel():
        low, high = (int(v) for v in to_host(torch.stack([self.min(), self.max()]).to(torch.int64)).tolist())
        if low < 0:
            raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
        n = max(n, high + 1)
    if weights is None:
        dtype, values = torch.int64, torch.ones((), dtype=torch.int64, device=self.device).expand(self.shape)
    else:
        dtype = torch.float32 if weights.dtype == torch.float32 else torch.float64
        values = weights.to(dtype)
    out = torch.zeros(n, dtype=dtype, device=self.device)
    return out.index_put_((self.to(torch.int64),), values, accumulate=True)


def unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    """torch.unique_consecutive: groups of equal neighbours; one host synchronization (their count)."""
    if dim is None or (self.dim() == 1 and dim in (0, -1)):
        return _unique_flat("aten.unique_consecutive.default", self, False, return_inverse, return_counts)
    return _unique_rows("aten.unique_consecutive.default", self, dim, False)


def unique_dim(self, dim, sorted=True, return_inverse=False, return_counts=False):
    """torch.unique(dim=...): the distinct slices along `dim`, sorted lexicographically; one host
    synchronization. (Slices holding NaN never compare equal, as on the CPU; where the CPU's order
    of NaN-holding slices is unspecified, they sort as lax.sort orders NaN: last.)"""
    return _unique_rows("aten.unique_dim.default", self, dim, True)


def unique_dim_consecutive(self, dim, return_inverse=False, return_counts=False):
    return _unique_rows("aten.unique_dim_consecutive.default", self, dim, False)
