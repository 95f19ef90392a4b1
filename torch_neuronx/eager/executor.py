"""The eager executor: one ATen call on neuron tensors -> one cached XLA executable -> one launch.

A call's signature (op, every tensor's dtype/shape/strides/offset/storage, the static arguments, the
Python types of the traced scalars) keys an in-memory cache of jitted programs. A program reads every
input view out of its storage buffer, runs the op's lowering, casts each result to the dtype
PyTorch's meta kernel gives, and returns the new storage buffers: fresh ones for new tensors and
updated ones for storages the op writes (in-place and out= ops, whose old buffers are donated).
So reading a view and writing through one happen inside the op's executable.

On a cache miss the op runs once on meta tensors of the same layout: that gives PyTorch's own
shape checks and error messages, its result dtypes and its output strides.
"""
from __future__ import annotations

import threading
import time

import numpy as _np
import torch

from .. import _C, metrics
from ..runtime.lazy_jax import jax, jnp
from ..ops import normalize
from ..ops._registry import CheckedCall
from ..ops.dtypes import UnsupportedDtype, cast, to_numpy_dtype
from ..runtime import storage
from ..runtime.devices import jax_device
from . import layout

_Tensor = torch.Tensor
_BUFFERS = storage.BUFFERS
_layout_of = _C._tensor_layout
_tensor_info = _C._tensor_info
_storage_key = _C._storage_key
_pending_frees = _C._pending_events
_sync = storage.sync
_executed = metrics._executed

# Argument kinds, from the schema
_STATIC, _SCALAR, _GENERATOR, _TENSOR = 0, 1, 2, 3
_NUMBER_TYPES = (int, float, bool, complex)


class DeviceMismatch(RuntimeError):
    pass


def _schema_kind(arg, lowering) -> int:
    t = str(arg.type)
    if t.startswith("Optional[Generator]") or t == "Generator":
        return _GENERATOR
    if t in ("Tensor", "Optional[Tensor]"):
        return _TENSOR  # may also receive a Python number (a wrapped scalar): traced like a Scalar
    if lowering is not None and arg.name in lowering.static:
        return _STATIC
    if t in ("number", "Optional[number]"):
        return _SCALAR
    if lowering is not None and arg.name in lowering.dynamic and t in ("float", "Optional[float]"):
        return _SCALAR
    return _STATIC


class OpSpec:
    """How one registered ATen overload maps onto a lowering."""

    def __init__(self, op, functional, lowering):
        self.op = op
        self.name = str(op)
        self.functional = functional  # the overload the lowering implements
        self.lowering = lowering
        schema = op._schema
        self.arg_names = [a.name for a in schema.arguments]
        self.kinds = [_schema_kind(a, lowering) for a in schema.arguments]
        self.kind_by_name = dict(zip(self.arg_names, self.kinds))
        self.written = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        # out= arguments are not arguments of the functional overload
        self.out_names = [a.name for a in schema.arguments if a.is_out]
        returns = []
        by_alias = {}
        for a in schema.arguments:
            if a.alias_info is not None and a.alias_info.is_write:
                by_alias[frozenset(a.alias_info.before_set)] = a.name
        for r in schema.returns:
            alias = r.alias_info and by_alias.get(frozenset(r.alias_info.before_set))
            returns.append(alias)  # name of the argument returned, or None for a fresh tensor
        self.returns = returns
        self.single_return = len(schema.returns) == 1
        # a Generator argument left out still needs a key drawn from the default generator
        gens = [i for i, k in enumerate(self.kinds) if k == _GENERATOR]
        self.generator = (gens[0], self.arg_names[gens[0]]) if gens else None
        self.extra_key = lowering is not None and lowering.rng


class Entry:
    __slots__ = ("fn", "fresh", "returns", "write_slots", "device", "compile_s", "checks")

    def __init__(self, fn, fresh, returns, write_slots, device):
        self.fn = fn
        self.fresh = fresh  # (sizes, strides, dtype) of each fresh output, in return order
        # per schema return: ("arg", name) | ("tensor", i into fresh) | ("const", None or int)
        self.returns = returns
        self.checks = []  # (exception type, message) of each value check the program computes
        self.write_slots = write_slots  # storage keys' slot numbers updated, in output order
        self.device = device
        self.compile_s = 0.0


_CACHE: dict[tuple, Entry] = {}


def cache_size() -> int:
    return len(_CACHE)


def clear_cache() -> None:
    _CACHE.clear()


# ----------------------------------------------------------------------------------------------
# The call path


class _Call:
    """One call's flattened inputs, built while the cache key is built."""

    __slots__ = ("tensors", "layouts", "slots", "slot_keys", "scalars", "device")

    def __init__(self):
        self.tensors = []  # neuron tensors, in argument order
        self.layouts = []  # (slot, dtype, sizes, strides, offset, storage nbytes, lazy bits) per tensor
        self.slots = {}  # storage key -> slot number
        self.slot_keys = []  # slot -> (key, nbytes)
        self.scalars = []  # traced values: Python numbers, and _GenSlots for generators
        self.device = None


def _tensor_sig(call: _Call, t: _Tensor, name):
    info = _tensor_info(t)
    if info is None:  # not a neuron tensor
        dev = t.device
        if dev.type == "cpu" and t.dim() == 0:
            # PyTorch lets 0-dim CPU tensors mix with any device, as scalars (Python numbers wrapped
            # as tensors arrive this way): traced as weakly typed numbers, as PyTorch promotes them.
            call.scalars.append(t.item())
            return ("cpu0", t.dtype)
        _raise_mismatch(call, dev, name)
    index, key, nbytes, sizes, strides, offset, dtype, lazy = info
    if call.device != index:
        if call.device is not None:
            _raise_mismatch(call, t.device, name)
        call.device = index
    slot = call.slots.get(key) if key else None
    if slot is None:
        slot = len(call.slot_keys)
        if key:
            call.slots[key] = slot
        call.slot_keys.append((key, nbytes))
    sig = (slot, dtype, sizes, strides, offset, nbytes, lazy)
    call.tensors.append(t)
    call.layouts.append(sig)
    return sig


def _raise_mismatch(call, dev, name):
    first = f"neuron:{call.device}" if call.device is not None else "neuron"
    raise DeviceMismatch(
        f"Expected all tensors to be on the same device, but found at least two devices, "
        f"{first} and {dev}! (when checking argument {name})"
    )


def _arg_sig(call: _Call, value, kind: int, name):
    if isinstance(value, _Tensor):
        return _tensor_sig(call, value, name)
    if kind == _SCALAR or (kind == _TENSOR and type(value) in _NUMBER_TYPES):
        if value is None:
            return None
        call.scalars.append(value)
        return type(value)
    if kind == _GENERATOR:
        call.scalars.append(_GenSlot(value))  # drawn once the device is known
        return _GENERATOR
    if isinstance(value, (list, tuple)):
        if value and isinstance(value[0], _Tensor) or any(isinstance(v, _Tensor) for v in value):
            return ("T[]",) + tuple(
                _tensor_sig(call, v, name) if isinstance(v, _Tensor) else None for v in value
            )
        return tuple(value)
    if type(value) in _NUMBER_TYPES:
        return (type(value), value)  # 3 and 3.0 are equal keys but give different results
    return value


def _default_device(op_spec, args, kwargs):
    dev = kwargs.get("device")
    if dev is None:
        return torch.neuron.current_device()
    dev = torch.device(dev)
    return dev.index if dev.index is not None else torch.neuron.current_device()


def run(spec: OpSpec, args: tuple, kwargs: dict):
    if _pending_frees() or storage.applying:
        _sync()
    call = _Call()
    kinds = spec.kinds
    sig = [spec]
    for i, a in enumerate(args):
        if isinstance(a, _Tensor):
            sig.append(_tensor_sig(call, a, spec.arg_names[i]))
        else:
            sig.append(_arg_sig(call, a, kinds[i], spec.arg_names[i]))
    if kwargs:
        for k, v in kwargs.items():
            sig.append(k)
            sig.append(_arg_sig(call, v, spec.kind_by_name[k], k))
    gen = spec.generator
    if (gen is not None and gen[0] >= len(args) and gen[1] not in kwargs) or spec.extra_key:
        call.scalars.append(_GenSlot(None))
        sig.append(_GENERATOR)
    if call.device is None:
        call.device = _default_device(spec, args, kwargs)
    # what each storage holds now: the buffer's length and dtype, or nothing yet
    buffers = []
    for key, _nbytes in call.slot_keys:
        buf = _BUFFERS.get(key) if key else None
        buffers.append(buf)
        sig.append(None if buf is None else (buf.shape[0], buf.dtype))
    sig.append(call.device)
    key = tuple(sig)
    entry = _CACHE.get(key)
    if entry is None:
        metrics.cache_miss(spec.name)
        entry = _compile(spec, args, kwargs, call, buffers, key)
        if entry is None:  # out= tensors were resized: describe the call again
            return run(spec, args, kwargs)
    _executed[spec.name] += 1
    inputs = [b for b in buffers if b is not None]
    for s in call.scalars:
        if type(s) is _GenSlot:
            inputs.append(s.draw(call.device))
        else:
            arr = _scalar_arrays.get((call.device, type(s), s))
            inputs.append(_scalar_array(s, call.device) if arr is None else arr)
    try:
        outs = entry.fn(*inputs)
    except Exception as e:  # the launch failed (out of memory): say which op, as PyTorch does
        raise _launch_error(spec.name, e) from e
    if entry.checks:
        return _finish_checked(spec, args, kwargs, call, entry, outs)
    return _finish(spec, args, kwargs, call, entry, outs)


# Python numbers passed to an executable as device-resident, weakly typed 0-d arrays: jax converts a
# Python number on every call, which costs a third of a small op. Keyed by value (bounded).
_scalar_arrays: dict[tuple, object] = {}


def _scalar_array(value, device: int):
    if type(value) not in _NUMBER_TYPES or value == 0 or not (-(2**62) < abs(value) < 2**62):
        return value  # 0.0 == -0.0 as a key, and huge ints: pass them as they are
    if len(_scalar_arrays) >= 4096:
        _scalar_arrays.clear()
    arr = jax.device_put(jnp.asarray(value), jax_device(device))
    _scalar_arrays[(device, type(value), value)] = arr
    return arr


def _launch_error(op_name: str, e: Exception) -> Exception:
    text = f"{type(e).__name__}: {e}"
    if "RESOURCE_EXHAUSTED" in text:  # CUDA's type: a RuntimeError, as the CPU's allocator raises
        return torch.OutOfMemoryError(f"{op_name}: neuron out of memory: {text}")
    return RuntimeError(f"{op_name}: the executable failed: {text}")


def _finish_checked(spec, args, kwargs, call, entry, outs):
    """Ops whose inputs must be checked by value (indices): this waits for the device."""
    failed = _np.asarray(outs[-1])
    result = _finish(spec, args, kwargs, call, entry, outs[:-1])
    for bad, (error, message) in zip(failed, entry.checks):
        if bad:
            raise error(f"{spec.name}: {message}")
    return result


class _GenSlot:
    """A Generator argument: traced as (seed, offset), drawn from the generator at each call."""

    __slots__ = ("gen",)

    def __init__(self, gen):
        self.gen = gen

    def draw(self, device):
        gen = self.gen if self.gen is not None else torch.neuron.default_generators[device]
        offset = gen.get_offset()
        gen.set_offset(offset + 1)
        seed = gen.initial_seed() & 0xFFFFFFFFFFFFFFFF
        return _np.array([seed >> 32, seed & 0xFFFFFFFF, offset >> 32, offset & 0xFFFFFFFF], _np.uint32)


def prng_key(words):
    """The PRNG key of a generator draw (`_GenSlot.draw`'s words), inside a traced program."""
    key = jax.random.wrap_key_data(words[:2], impl="threefry2x32")
    return jax.random.fold_in(jax.random.fold_in(key, words[2]), words[3])


def _finish(spec, args, kwargs, call, entry, outs):
    fresh_bufs = outs[: len(entry.fresh)]
    updates = outs[len(entry.fresh):]
    for slot, buf in zip(entry.write_slots, updates):
        k = call.slot_keys[slot][0]
        if k:  # 0: an empty storage, which holds nothing
            _BUFFERS[k] = buf
    results = []
    for kind, what in entry.returns:
        if kind == "tensor":
            sizes, strides, dtype = entry.fresh[what]
            t = torch.empty_strided(sizes, strides, dtype=dtype, device=entry.device)
            k = _storage_key(t)
            if k:
                _BUFFERS[k] = fresh_bufs[what]
            results.append(t)
        elif kind == "arg":
            results.append(_arg_value(spec, args, kwargs, what))
        else:
            results.append(what)
    if spec.single_return:
        return results[0]
    return tuple(results)


def _arg_value(spec, args, kwargs, name):
    i = spec.arg_names.index(name)
    return args[i] if i < len(args) else kwargs.get(name)


# ----------------------------------------------------------------------------------------------
# Compiling a new signature


def _to_meta(value, device_index):
    if isinstance(value, _Tensor):
        if value.device.type != "neuron":
            return value  # a 0-dim CPU scalar tensor, which meta kernels accept as is
        key, nbytes, sizes, strides, offset = _layout_of(value)
        n = nbytes // value.element_size() if value.element_size() else 0
        base = torch.empty(max(n, 0), dtype=value.dtype, device="meta")
        return base.as_strided(sizes, strides, offset)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_meta(v, device_index) for v in value)
    if isinstance(value, torch.device) and value.type == "neuron":
        return torch.device("meta")
    if isinstance(value, str) and value.startswith("neuron"):
        return torch.device("meta")
    if isinstance(value, torch.Generator):
        return None
    return value


_import_lock = threading.Lock()
_imported = False


def _import_meta_dependencies() -> None:
    """PyTorch's Python meta kernels import torch._dynamo on their first call. Left to them, that
    import races with a torch.compile running in another thread (which enters the same import cycle
    through torch._inductor): a deadlock, or an ImportError from a half-initialized module, that can
    break the process for good. Import it once, under a lock, in torch.compile's own order, so a
    concurrent torch.compile waits on the same first module instead of closing a cycle."""
    global _imported
    if _imported:
        return
    with _import_lock:
        if not _imported:
            import torch._inductor.compiler_bisector  # noqa: F401  (torch.compile's first import)
            import torch._dynamo  # noqa: F401

            _imported = True


def _meta_call(spec, args, kwargs, device_index):
    _import_meta_dependencies()
    margs = [_to_meta(a, device_index) for a in args]
    mkwargs = {k: _to_meta(v, device_index) for k, v in kwargs.items()}
    if "device" in spec.arg_names and "device" not in mkwargs:
        i = spec.arg_names.index("device")
        if i >= len(margs):
            mkwargs["device"] = torch.device("meta")
    out = spec.op(*margs, **mkwargs)
    return margs, mkwargs, out


def _describe(t):
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"


def _compile(spec: OpSpec, args, kwargs, call: _Call, buffers, key):
    device_index = call.device
    try:
        margs, mkwargs, mout = _meta_call(spec, args, kwargs, device_index)
    except Exception as e:  # PyTorch's own check (shapes, dtypes): raise it naming the op
        raise _named(e, spec.name) from None

    # out= tensors of the wrong shape are resized, as PyTorch does, then the call is described anew
    if spec.out_names:
        resized = False
        for name in spec.out_names:
            real = _arg_value(spec, args, kwargs, name)
            meta = _arg_value(spec, margs, mkwargs, name)
            if isinstance(real, _Tensor) and tuple(real.shape) != tuple(meta.shape):
                real.resize_(meta.shape)
                resized = True
        if resized:
            return None

    mouts = list(mout) if isinstance(mout, (tuple, list)) and not spec.single_return else [mout]
    # Which lowering outputs become what: a functional lowering returns one value per schema
    # return (None/ints where the op returns those; their values come from meta), then the new
    # values of the arguments the op writes.
    fresh, returns, take = [], [], []
    n_own = 0
    for ret, m in zip(spec.returns, mouts):
        if ret is not None:
            returns.append(("arg", ret))
            continue
        if isinstance(m, _Tensor):
            returns.append(("tensor", len(fresh)))
            fresh.append((tuple(m.shape), tuple(m.stride()), m.dtype))
            take.append(n_own)
        elif m is None or isinstance(m, (int, float, bool)):
            returns.append(("const", m))
        else:
            raise NotImplementedError(f"neuron: {spec.name} returns {type(m).__name__}; it needs its own kernel")
        n_own += 1
    written = []  # (meta tensor, name) of each written argument that is a tensor (Tensor? may be None)
    for k, name in enumerate(spec.written):
        w = _arg_value(spec, margs, mkwargs, name)
        if isinstance(w, _Tensor):
            written.append((w, name))
            take.append(n_own + k)
    for w, name in written:
        _check_no_overlap(spec, w, name)
    # what each lowering output becomes: fresh tensors first, then written arguments
    lowering_out_dtypes = [f[2] for f in fresh] + [w.dtype for w, _ in written]

    n_present = sum(1 for b in buffers if b is not None)
    slot_input = []
    pos = 0
    for b in buffers:
        slot_input.append(pos if b is not None else None)
        pos += b is not None
    slot_lengths = [nbytes for _k, nbytes in call.slot_keys]
    layouts = list(call.layouts)
    tensor_index = {id(t): i for i, t in enumerate(call.tensors)}
    write_targets = []
    for name in spec.written:
        t = _arg_value(spec, args, kwargs, name)
        if isinstance(t, _Tensor):
            write_targets.append(tensor_index[id(t)])
    write_slots = []
    for ti in write_targets:
        s = layouts[ti][0]
        if s not in write_slots:
            write_slots.append(s)
    func_op = spec.functional
    lowering = spec.lowering
    out_names = set(spec.out_names) if spec.functional is not spec.op else set()
    arg_names = spec.arg_names
    kinds = spec.kinds
    scalar_is_gen = [type(s) is _GenSlot for s in call.scalars]
    gen = spec.generator
    add_generator = gen is not None and gen[0] >= len(args) and gen[1] not in kwargs

    def program(*inputs):
        bufs = inputs[:n_present]
        scalars = list(inputs[n_present:])
        # generators arrive as (seed, offset) pairs; each becomes one PRNG key
        flat_scalars, k = [], 0
        for is_gen in scalar_is_gen:
            if is_gen:
                words = scalars[k]  # seed hi, seed lo, offset hi, offset lo
                flat_scalars.append(prng_key(words))
                k += 1
            else:
                flat_scalars.append(scalars[k])
                k += 1
        flats = {}

        def flat(slot, dtype):
            fk = (slot, dtype)
            if fk not in flats:
                np_dtype = to_numpy_dtype(dtype)
                length = slot_lengths[slot] // np_dtype.itemsize
                src = bufs[slot_input[slot]] if slot_input[slot] is not None else None
                flats[fk] = layout.to_storage_dtype(src, np_dtype, length)
            return flats[fk]

        values = [_apply_lazy(layout.read(flat(l[0], l[1]), l[2], l[3], l[4]), l[6]) for l in layouts]
        vals = iter(values)
        scal = iter(flat_scalars)

        def rebuild(v, kind):
            if isinstance(v, _Tensor):
                if v.device.type != "neuron":
                    return next(scal)
                return next(vals)
            if kind == _SCALAR or (kind == _TENSOR and type(v) in _NUMBER_TYPES):
                return None if v is None else next(scal)
            if kind == _GENERATOR:
                return next(scal)
            if isinstance(v, (list, tuple)) and any(isinstance(x, _Tensor) for x in v):
                return [rebuild(x, _STATIC) if isinstance(x, _Tensor) else x for x in v]
            return v

        pargs = [rebuild(a, kinds[i]) for i, a in enumerate(args)]
        pkwargs = {}
        for kname, v in kwargs.items():
            r = rebuild(v, spec.kind_by_name[kname])
            if kname not in out_names:
                pkwargs[kname] = r
        pargs = [a for i, a in enumerate(pargs) if arg_names[i] not in out_names]
        if add_generator:
            pkwargs[spec.generator[1]] = next(scal)
        call_args = normalize(func_op, pargs, pkwargs)
        if spec.extra_key:
            call_args.append(next(scal))
        with CheckedCall() as checked:
            results = lowering.fn(*call_args)
        entry.checks = [(error, message) for _ok, error, message in checked.checks]
        if not isinstance(results, (tuple, list)):
            results = (results,)
        if len(results) <= max(take, default=-1):
            raise RuntimeError(f"lowering of {func_op} returned {len(results)} values, {max(take) + 1} expected")
        results = [results[i] for i in take]
        shapes = [f[0] for f in fresh] + [tuple(w.shape) for w, _ in written]
        # a lowering may skip an output nobody asked for (a gradient masked off): zeros, as meta says
        results = [
            jnp.zeros(shape, to_numpy_dtype(d)) if r is None else cast(r, to_numpy_dtype(d))
            for r, d, shape in zip(results, lowering_out_dtypes, shapes)
        ]
        out_bufs = []
        for (sizes, strides, dtype), r in zip(fresh, results):
            length = _storage_elems(sizes, strides)
            out_bufs.append(layout.fresh(r.reshape(sizes), sizes, strides, length))
        updated = {}
        for ti, r in zip(write_targets, results[len(fresh):]):
            slot, dtype, sizes, strides, offset, _nb, lazy = layouts[ti]
            r = _apply_lazy(r, lazy)  # a write through a conjugate/negative view stores the inverse
            base = updated.get(slot)
            if base is None or base.dtype != to_numpy_dtype(dtype):
                base = flat(slot, dtype) if base is None else layout.to_storage_dtype(
                    base, to_numpy_dtype(dtype), slot_lengths[slot] // to_numpy_dtype(dtype).itemsize
                )
            updated[slot] = layout.write(base, r, sizes, strides, offset)
        outputs = tuple(out_bufs) + tuple(updated[s] for s in write_slots)
        if checked.checks:  # one bool per check: True where it failed
            outputs += (jnp.stack([~jnp.asarray(ok) for ok, _e, _m in checked.checks]),)
        return outputs

    donate = tuple(slot_input[s] for s in write_slots if slot_input[s] is not None)
    entry = Entry(None, fresh, returns, write_slots, torch.device("neuron", device_index))
    # compile now, on this call's inputs, so compile errors name the op
    inputs = [b for b in buffers if b is not None]
    probe_scalars = []
    for s in call.scalars:
        if type(s) is _GenSlot:
            probe_scalars.append(_np.zeros(4, _np.uint32))
        else:
            probe_scalars.append(s)
    start = time.perf_counter()
    try:
        with jax.default_device(jax_device(device_index)):
            fn = jax.jit(program, donate_argnums=donate).lower(*inputs, *probe_scalars).compile()
    except UnsupportedDtype as e:
        raise TypeError(f"neuron: {spec.name}: {e}") from None
    except Exception as e:  # a lowering or XLA failure: say which op and which inputs
        shapes = ", ".join(_describe(t) for t in call.tensors)
        raise NotImplementedError(
            f"neuron: {spec.name} could not be lowered for inputs ({shapes}): {type(e).__name__}: {e}"
        ) from e
    entry.fn = fn
    entry.compile_s = time.perf_counter() - start
    metrics.compiled(spec.name, entry.compile_s)
    _CACHE[key] = entry
    return entry


def _apply_lazy(x, flags: int):
    """A tensor's lazy conjugate (1) and negative (2) bits, made real: its values as PyTorch sees them."""
    if flags & 1:
        x = jnp.conj(x)
    if flags & 2:
        x = -x
    return x


def _named(e: Exception, op_name: str) -> Exception:
    message = f"{op_name}: {e}"
    try:
        return type(e)(message)
    except Exception:
        return RuntimeError(message)


def _storage_elems(sizes, strides) -> int:
    if any(n == 0 for n in sizes):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(sizes, strides))


def _check_no_overlap(spec, t, name):
    for n, s in zip(t.shape, t.stride()):
        if n > 1 and s == 0:
            raise RuntimeError(
                f"{spec.name}: unsupported operation: more than one element of the written-to tensor "
                f"'{name}' refers to a single memory location. Please clone() the tensor before "
                f"performing the operation."
            )
