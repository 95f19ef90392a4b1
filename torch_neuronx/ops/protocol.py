"""The calling protocol eager ops and compiled graphs share: how a call's arguments reach a
lowering, how tensors are read from and written into their storages inside the executable, how
results become tensors, and how a call's cache key is spelled as bytes.

- Each schema argument has an `ArgKind`: a Python value that is part of the key (STATIC), a number
  traced as a weakly typed 0-d value (SCALAR), a generator draw traced as a PRNG key (GENERATOR), or
  a tensor (TENSOR).
- A tensor input is a `TensorLayout`: which of the call's storages it views (a slot: tensors of one
  storage share it), its dtype, sizes, strides, offset, the storage's size and its lazy bits. The
  executable takes each storage's flat buffer and reads every view out of it (`StorageProgram`);
  a write (in-place op, out=, a graph's input mutation) lands in the storage's new flat buffer,
  which the executable returns and the caller stores (the old one is donated).
- A fresh result is a new storage laid out as PyTorch's meta kernel or fake value says
  (`fresh_storage`), wrapped into a tensor after the launch (`fresh_tensors`, through `finish`).
- Keys are plain values (op or graph digest, layouts, static arguments, scalar types, platform):
  `key_digest` spells one as bytes the same way in every process.
"""
from __future__ import annotations

import enum
import hashlib
from typing import NamedTuple

import numpy as np
import torch

from ..runtime import storage
from ..runtime.numpy_dtypes import to_numpy_dtype
from ..runtime.lazy_jax import jnp
from . import layout, target_policy
from ._registry import normalize
from .value_checks import first_failure
from .dtypes import cast

NUMBER_TYPES = (int, float, bool, complex)


class ArgKind(enum.IntEnum):
    STATIC = 0  # passed as its Python value, part of the cache key
    SCALAR = 1  # a number, traced (weakly typed) so its value does not recompile
    GENERATOR = 2  # a Generator: a (seed, offset) draw, traced as a PRNG key
    TENSOR = 3  # a tensor (or a Python number given for a Tensor argument: traced like a SCALAR)


def arg_kind(arg, lowering) -> ArgKind:
    """How schema argument `arg` reaches `lowering` (None: an op without one)."""
    t = str(arg.type)
    if t.startswith("Optional[Generator]") or t == "Generator":
        return ArgKind.GENERATOR
    if t in ("Tensor", "Optional[Tensor]"):
        return ArgKind.TENSOR
    if lowering is not None and arg.name in lowering.static:
        return ArgKind.STATIC
    if t in ("number", "Optional[number]"):
        return ArgKind.SCALAR
    if lowering is not None and arg.name in lowering.dynamic and t in ("float", "Optional[float]", "List[number]"):
        return ArgKind.SCALAR  # a Scalar[] so named is a list of traced numbers (foreach ops' ScalarList)
    return ArgKind.STATIC


def call_lowering(spec, args: list, kwargs: dict, key=None) -> tuple:
    """Run `spec`'s lowering on traced values, for every mode (an eager op's program, a compiled
    graph's node): `args`/`kwargs` are the overload's arguments with each tensor replaced by its jax
    value and each traced number by its traced value. out= arguments are dropped (the lowering is the
    functional overload's), a Generator argument, given or left out, becomes the PRNG `key`, as does
    the extra key argument of a random lowering whose schema has no Generator, and a Python number
    given for a traced argument is made a weakly typed 0-d value (as eager traces it). Under a Trainium
    target the lowering runs under TorchNeuron's dtype policy (`target_policy`: 64-bit values as 32-bit,
    no complex); `typed` then widens each output back to PyTorch's dtype. Returns the lowering's outputs
    as a tuple (a Tensor[] return is one output, a list)."""
    if spec.out_names and spec.functional is not spec.op:
        drop = spec.out_names
        args = [a for i, a in enumerate(args) if spec.arg_names[i] not in drop]
        kwargs = {k: v for k, v in kwargs.items() if k not in drop}
    if spec.generator is not None:
        index, name = spec.generator
        if index < len(args):
            args = list(args)
            args[index] = key
        else:
            kwargs = dict(kwargs, **{name: key})
    call_args = normalize(spec.functional, args, kwargs)
    for i in spec.traced_numbers:
        if i < len(call_args) and type(call_args[i]) in NUMBER_TYPES:
            call_args[i] = jnp.asarray(call_args[i])
        elif i < len(call_args) and isinstance(call_args[i], (list, tuple)):  # a traced Scalar[]
            call_args[i] = [jnp.asarray(v) if type(v) in NUMBER_TYPES else v for v in call_args[i]]
    if spec.rng_key:
        call_args.append(key)
    results = target_policy.call(spec, call_args)  # TorchNeuron's 64-bit policy under a target
    if not isinstance(results, (tuple, list)) or spec.list_return:
        return (results,)
    return tuple(results)


def typed(value, dtype: torch.dtype, shape):
    """A lowering's output as the dtype PyTorch's meta kernel (or fake value) gives it; None (an
    output the lowering skipped because nobody asked for it, a masked-off gradient) is zeros."""
    np_dtype = to_numpy_dtype(dtype)
    if value is None:
        return jnp.zeros(tuple(shape), np_dtype)
    return cast(value, np_dtype)


class TensorLayout(NamedTuple):
    slot: int  # which of the call's storages (tensors viewing one storage share a slot)
    dtype: torch.dtype
    sizes: tuple
    strides: tuple
    offset: int | None  # None: passed at run time (a compiled graph's inputs)
    nbytes: int  # the storage's size
    lazy: int  # storage.LAZY_CONJ | storage.LAZY_NEG


_new_tuple = tuple.__new__
_held = storage.held


class StorageInputs:
    """The storages a call's tensors view, numbered in order of first appearance (host side)."""

    __slots__ = ("slots", "keys", "nbytes")

    def __init__(self):
        self.slots = {}  # storage key -> slot
        self.keys = []  # slot -> storage key (0: a storage that holds nothing)
        self.nbytes = []  # slot -> the storage's size in bytes

    def layout(self, info) -> TensorLayout:
        """The layout of a tensor given its `storage.tensor_info` (its storage numbered here). Every
        tensor of every eager call comes through here: one argument, no NamedTuple __new__."""
        _device, key, nbytes, sizes, strides, offset, dtype, lazy = info
        slot = self.slots.get(key) if key else None
        if slot is None:
            slot = len(self.keys)
            if key:
                self.slots[key] = slot
            self.keys.append(key)
            self.nbytes.append(nbytes)
        return _new_tuple(TensorLayout, (slot, dtype, sizes, strides, offset, nbytes, lazy))

    def of_tensor(self, t: torch.Tensor) -> TensorLayout:
        return self.layout(storage.tensor_info(t))

    def buffers_and_state(self) -> tuple:
        """Each slot's buffer now (None: nothing written yet, reads as zeros), and what each holds as a
        key part: its buffer's length and dtype, or None. (Every eager call's: one plain loop, which
        costs half what two comprehensions do.)"""
        if _held:  # a storage the host writes in place (a collective): wait for it
            storage.settle(self.keys)
        get = storage.buffer  # key 0 (an empty storage) is never in the table
        buffers, state = [], []
        for k in self.keys:
            b = get(k)
            buffers.append(b)
            if b is None:
                state.append(None)
            else:
                a = b.aval
                state.append((a.shape[0], a.dtype))
        return buffers, tuple(state)

    @staticmethod
    def donated(buffers, write_slots) -> tuple:
        """The executable's input positions (its present buffers, in slot order) of the storages it
        writes: their old buffers are donated."""
        position, at = {}, 0
        for slot, b in enumerate(buffers):
            if b is not None:
                position[slot] = at
                at += 1
        return tuple(sorted({position[s] for s in write_slots if s in position}))

    def store(self, slots, new_buffers) -> None:
        """After the launch: the written storages' new buffers."""
        keys = self.keys
        storage.set_buffers([keys[slot] for slot in slots], new_buffers)


class StorageProgram:
    """Inside the traced program: the call's storages as flat values, views read from them and
    written into them. `buffers[slot]` is the slot's traced buffer, or None for a storage that holds
    nothing yet (zeros)."""

    def __init__(self, nbytes, buffers):
        self.nbytes = nbytes
        self.buffers = buffers
        self.flats = {}  # (slot, numpy dtype) -> the storage as that dtype
        self.updated = {}  # slot -> its new flat value

    def flat(self, slot: int, np_dtype):
        """The storage as a flat array of `np_dtype` (bit-cast if it was written as another dtype)."""
        current = self.updated.get(slot)
        if current is not None:
            if current.dtype == np_dtype:
                return current
            return layout.to_storage_dtype(current, np_dtype, self.nbytes[slot] // np_dtype.itemsize)
        fk = (slot, np_dtype)
        if fk not in self.flats:
            self.flats[fk] = layout.to_storage_dtype(self.buffers[slot], np_dtype, self.nbytes[slot] // np_dtype.itemsize)
        return self.flats[fk]

    def read(self, lay: TensorLayout, offset=None):
        """The tensor's values, as PyTorch sees them (lazy bits applied), of shape `sizes`. A layout
        whose offset is None is read at `offset`, a traced value (one executable for every offset)."""
        flat = self.flat(lay.slot, to_numpy_dtype(lay.dtype))
        if lay.offset is None:
            span = layout.storage_elems(lay.sizes, lay.strides)
            view = layout.read(layout.window(flat, offset, span), lay.sizes, lay.strides, 0)
        else:
            view = layout.read(flat, lay.sizes, lay.strides, lay.offset)
        return layout.apply_lazy(view, lay.lazy)

    def write(self, lay: TensorLayout, value, offset=None) -> None:
        """Write `value` (broadcast to the view's shape) through the view (at `offset`, as `read`)."""
        value = layout.apply_lazy(value, lay.lazy)  # a conjugate/negative view stores the inverse
        base = self.flat(lay.slot, to_numpy_dtype(lay.dtype))
        if lay.offset is None:
            span = layout.storage_elems(lay.sizes, lay.strides)
            if span:
                window = layout.write(layout.window(base, offset, span), value, lay.sizes, lay.strides, 0)
                base = layout.put_window(base, window, offset)
            self.updated[lay.slot] = base
        else:
            self.updated[lay.slot] = layout.write(base, value, lay.sizes, lay.strides, lay.offset)

    def written(self, slots) -> list:
        return [self.updated[s] for s in slots]


def fresh_storage(value, sizes, strides):
    """A new storage's flat buffer holding `value` laid out as (sizes, strides), offset 0."""
    sizes, strides = tuple(sizes), tuple(strides)
    return layout.fresh(value.reshape(sizes), sizes, strides, layout.storage_elems(sizes, strides))


_empty_strided = torch.empty_strided
_set_buffer = storage.set_buffer
_storage_key = storage.storage_key


def wrap_contiguous(buf, sizes, dtype, device) -> torch.Tensor:
    """A new row-major neuron tensor of shape `sizes` holding the values of flat jax array `buf` (a
    reshape here would be a jax op of its own: a compile per shape)."""
    assert buf.ndim == 1, f"wrap_contiguous takes a flat buffer, not one of shape {buf.shape}"
    t = torch.empty(tuple(sizes), dtype=dtype, device=device)
    storage.set_buffer(storage.storage_key(t), buf)
    return t


class FreshOutput(NamedTuple):
    """A new tensor a call returns: its layout and dtype as PyTorch's meta kernel (or fake value)
    gives it, and how it is seen (a lazy negative or conjugate view; a compiled graph may return a
    CPU tensor)."""

    sizes: tuple
    strides: tuple
    dtype: torch.dtype
    is_neg: bool = False
    is_conj: bool = False
    on_cpu: bool = False


class ReturnKind(enum.IntEnum):
    FRESH = 0  # a new tensor: the i-th fresh output of the executable
    ARGUMENT = 1  # an input, returned as it is (in-place and out= ops; a graph returning an input)
    CONSTANT = 2  # a value known when the call was traced (None, an int)


_FRESH, _ARGUMENT = ReturnKind.FRESH, ReturnKind.ARGUMENT  # module constants: `results` runs per call


class Return(NamedTuple):
    kind: ReturnKind
    what: object  # FRESH: the fresh output's index; ARGUMENT: which input; CONSTANT: the value


class Plan(NamedTuple):
    """What a launch's outputs become, for an eager op, a fused run and a compiled graph alike. The
    executable returns the fresh results' buffers, then the written storages' new buffers, then any
    outputs of the caller's own (a graph's linalg error codes), then, where the program has value
    checks, one failure flag per check."""

    fresh: list  # a FreshOutput per fresh result
    returns: list  # a Return per return of the call
    write_slots: list  # the storages written, in output order
    checks: list  # (error type, message) per value check; the message names what failed


def raise_failed_check(flags, checks) -> None:
    """Raise the first value check whose flag is set (this waits for the device)."""
    failed = first_failure(flags, checks)
    if failed is not None:
        error, message = failed
        raise error(message)


def finish(plan: Plan, outs, storages: StorageInputs, argument, device, what: str, own_outputs=None,
           seen=None) -> list:
    """After a launch of `what` (an op's name, "graph <name>"): store the written storages' new
    buffers, hand the caller's own outputs to `own_outputs` (it may raise), raise the first failed
    value check, then wrap the fresh results; returns one value per return (`argument(r)`: the call's
    argument a return names; `seen`: the plan's `lazily_seen`, where the caller keeps it). A result past
    the core's capacity is a torch.OutOfMemoryError naming `what`."""
    n_fresh, n_writes = len(plan.fresh), len(plan.write_slots)
    if n_writes:
        storages.store(plan.write_slots, outs[n_fresh:n_fresh + n_writes])
    if own_outputs is not None:
        own_outputs(outs[n_fresh + n_writes:len(outs) - (1 if plan.checks else 0)])
    if plan.checks:
        raise_failed_check(outs[-1], plan.checks)
    seen = lazily_seen(plan.fresh) if seen is None else seen
    return results(plan.returns, fresh_tensors(plan.fresh, outs, device, what, seen), argument)


def lazily_seen(fresh: list) -> tuple:
    """The fresh results PyTorch returns as a lazy negative or conjugate view, or on the CPU (a
    compiled graph's): (index, is_neg, is_conj, on_cpu) each. Known once per plan; an eager op's is ()."""
    return tuple((i, f.is_neg, f.is_conj, f.on_cpu) for i, f in enumerate(fresh) if f.is_neg or f.is_conj or f.on_cpu)


def fresh_tensors(fresh: list, bufs, device, what: str, seen: tuple = ()) -> list:
    """A new tensor per FreshOutput, holding its buffer (`bufs` None: their buffers come later, a
    queued op's), seen as `lazily_seen(fresh)` says."""
    tensors = []
    try:
        for f in fresh:  # a plain loop: every eager op's, and a comprehension costs more for one or two
            tensors.append(_empty_strided(f[0], f[1], dtype=f[2], device=device))
    except torch.OutOfMemoryError as e:  # a result past the core's capacity (the allocator's check)
        raise torch.OutOfMemoryError(f"{what}: {e}") from None
    if bufs is not None:
        for t, buf in zip(tensors, bufs):
            _set_buffer(_storage_key(t), buf)
    for i, is_neg, is_conj, on_cpu in seen:
        t = tensors[i]
        if is_neg:
            t = torch._neg_view(t)
        if is_conj:
            t = torch._conj(t)
        tensors[i] = t.cpu() if on_cpu else t
    return tensors


def fresh_in_order(returns, n_fresh: int) -> bool:
    """Whether the returns are exactly the fresh results, in order (then `results` is the fresh list
    itself: what most ops return, known once per plan)."""
    return len(returns) == n_fresh and all(
        kind == ReturnKind.FRESH and type(what) is int and what == i for i, (kind, what) in enumerate(returns))


def returned_argument(returns):
    """The argument's name where the one return is an argument (an in-place or out= op), else None
    (known once per plan, like `fresh_in_order`)."""
    if len(returns) == 1 and returns[0][0] == _ARGUMENT:
        return returns[0][1]
    return None


def results(returns, fresh: list, argument) -> list:
    """One value per return: a fresh result tensor (a list for a Tensor[] return), an argument, a constant."""
    values = []
    for kind, what in returns:
        if kind == _FRESH:
            values.append([fresh[i] for i in what] if type(what) is list else fresh[what])
        elif kind == _ARGUMENT:
            values.append(argument(what))
        else:
            values.append(what)
    return values


# ---- keys as bytes


class KernelName(str):
    """The name of an op whose lowering is a user's custom kernel (`ops/custom.py`): the op's name
    wherever it is shown or counted, spelled in keys with the digest of the kernel's code, so an edited
    kernel never finds an executable of the old one on disk."""

    __slots__ = ("digest",)

    def __new__(cls, name: str, digest: str):
        self = super().__new__(cls, name)
        self.digest = digest
        return self

    def __reduce__(self):
        return (KernelName, (str(self), self.digest))


def _encode(value, out: list) -> None:
    t = type(value)
    if value is None or t in (bool, int, float, complex, str):
        out.append(f"{t.__name__}:{value!r}")
    elif t is KernelName:
        out.append(f"kernel:{str(value)!r}@{value.digest}")
    elif t in (tuple, list) or (isinstance(value, tuple) and hasattr(t, "_fields")):  # NamedTuples too
        out.append(f"{t.__name__}[{len(value)}](")
        for v in value:
            _encode(v, out)
        out.append(")")
    elif t is type:
        out.append(f"type:{value.__name__}")
    elif isinstance(value, torch.device) and value.type == "neuron":
        out.append("torch:neuron")  # every neuron:i runs the same executable
    elif isinstance(value, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        out.append(f"torch:{value}")
    elif isinstance(value, np.dtype):
        out.append(f"np:{value.name}")
    elif isinstance(value, enum.Enum):
        out.append(f"{t.__name__}.{value.name}")
    else:
        raise TypeError(f"a cache key holds a {t.__name__} ({value!r}), which has no stable spelling")
    out.append(";")


def key_bytes(key) -> bytes:
    """`key` spelled as bytes: the same in every process, for the same values."""
    out: list = []
    _encode(key, out)
    return "".join(out).encode()


def key_digest(key) -> str:
    return hashlib.sha256(key_bytes(key)).hexdigest()
