"""The eager executor: one ATen call on neuron tensors -> its traced program, queued into a fused run
(the default, `fusion`) or, with fusion off, one cached XLA executable and one launch.

A call's key is a `cache.Key` (see ARCHITECTURE.md): namespace "op"; as its value the op's name,
per argument its tensor layout (storage slot, dtype, sizes, strides, offset, storage size, lazy bits),
static value or scalar type, what each storage holds now and the default dtype; and the device index.
The program reads every input view out of its storage buffer, calls the op's lowering
(`protocol.call_lowering`), casts each result to the dtype PyTorch's meta kernel gives, and returns the
new storage buffers: fresh ones for new tensors and updated ones for storages the op writes (in-place
and out= ops, whose old buffers are donated). So reading a view and writing through one happen inside
the op's executable (`ops.protocol`), and its outputs become the call's results through the one
`protocol.finish`.

On a cache miss the op runs once on meta tensors of the same layout: that gives PyTorch's own
shape checks and error messages, its result dtypes and its output strides; then its program is
traced to a jaxpr. With eager fusion on (the default, `fusion`), a traced op is queued, not compiled:
its jaxpr is replayed inside its run's executable (an op with value checks ends its run), and what the
meta call gave is stored on disk (a `plan` record), so a new process traces the op without a meta
call. With fusion off, its executable is compiled from the jaxpr (and stored on disk); either way the
entry is got through the one `ExecutableCache.acquire`.
"""
from __future__ import annotations

import pickle
import threading

import torch

from .. import metrics
from ..cache import Built, Key, clear_memory, executable_cache
from ..ops import argument_checks, out_checks, protocol, target_policy
from ..ops.value_checks import CheckedCall
from ..ops.cpu_messages import named
from ..ops.dtypes import UnsupportedDtype
from ..ops.target_policy import TargetUnsupported
from ..ops.protocol import (NUMBER_TYPES, ArgKind, FreshOutput, Plan, Return, ReturnKind, StorageInputs,
                            StorageProgram, call_lowering, fresh_storage, typed)
from ..ops.specs import OpSpec, spec_for
from ..runtime import devices, executables, fidelity, profiling, rng, storage, streams
from ..runtime.numpy_dtypes import to_numpy_dtype
from ..runtime.lazy_jax import jax
from . import fusion, host_draws

_Tensor = torch.Tensor
_tensor_info = storage.tensor_info
_buffers_of = storage.buffers_of
_storage_key = storage.storage_key
_empty_strided = torch.empty_strided
_new_tuple = tuple.__new__
_default_dtype = torch.get_default_dtype
_pending_events = storage.pending_events
_has_queued = storage.has_queued
_fusion_on = fusion.enabled
_executed = metrics.executed_counts()
_profiler_on = profiling.active
_launch = executables.launch
_STATIC, _SCALAR, _GENERATOR, _TENSOR = ArgKind.STATIC, ArgKind.SCALAR, ArgKind.GENERATOR, ArgKind.TENSOR
_FRESH, _ARGUMENT = ReturnKind.FRESH, ReturnKind.ARGUMENT
OP = "op"  # the cache namespace of eager ops' executables
OP_EXACT = "op_exact"  # TORCH_NEURONX_TARGET_CHECK=compare: an op's program with the target's policy off


class DeviceMismatch(RuntimeError):
    pass


class Entry:
    """One signature: its executable and its `Plan` (how its outputs become the call's results: what
    the disk cache keeps beside the executable), and its traced jaxpr where it was traced in this
    process (what a fused run replays). `fn` is None until the op first runs on its own. `exact` is the
    op's exact executable where TORCH_NEURONX_TARGET_CHECK=compare runs one beside it, else None."""

    __slots__ = ("fn", "plan", "fresh", "write_slots", "checks", "fresh_returns", "returned_argument", "device", "key",
                 "name", "jaxpr", "out_avals", "exact")

    def __init__(self, fn, plan: Plan, device, key: Key, name: str, jaxpr=None):
        self.fn = fn
        self.plan = plan
        # the plan's parts the hot path reads
        self.fresh, self.write_slots, self.checks = plan.fresh, plan.write_slots, plan.checks
        self.fresh_returns = protocol.fresh_in_order(plan.returns, len(plan.fresh))  # results = the fresh tensors
        self.returned_argument = protocol.returned_argument(plan.returns)  # an in-place or out= op's
        self.device = device
        self.key = key
        self.name = name  # the op's name
        self.exact = None
        self.set_jaxpr(jaxpr)

    def set_jaxpr(self, jaxpr) -> None:
        self.jaxpr = jaxpr
        # each output buffer's jax aval: what a queued op's Pending buffers say
        self.out_avals = None if jaxpr is None else list(jaxpr.out_avals)



def clear_cache() -> None:
    """Forget this process's eager executables (the disk cache keeps its entries)."""
    fusion.flush("cache cleared")
    clear_memory(keep=lambda key: key.namespace not in (OP, OP_EXACT, fusion.RUN))


# ----------------------------------------------------------------------------------------------
# The call path


class _Draw:
    """A Generator argument (None: the device's default): drawn at each launch."""

    __slots__ = ("gen",)

    def __init__(self, gen):
        self.gen = gen


class _Call(StorageInputs):
    """One call's flattened inputs, built while its key is built: the storages its tensors view
    (it is their StorageInputs), the tensors, the traced scalars, the device."""

    __slots__ = ("tensors", "layouts", "scalars", "device")

    def __init__(self):
        StorageInputs.__init__(self)
        self.tensors = []  # neuron tensors, in argument order
        self.layouts = []  # their TensorLayouts
        self.scalars = []  # traced values: Python numbers, and _Draws for generators
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
    index = info[0]
    if call.device != index:
        if call.device is not None:
            _raise_mismatch(call, t.device, name)
        call.device = index
    sig = call.layout(info)
    call.tensors.append(t)
    call.layouts.append(sig)
    return sig


def _raise_mismatch(call, dev, name):
    first = f"neuron:{call.device}" if call.device is not None else "neuron"
    raise DeviceMismatch(
        f"Expected all tensors to be on the same device, but found at least two devices, "
        f"{first} and {dev}! (when checking argument {name})"
    )


def _arg_sig(call: _Call, value, kind, name):
    if isinstance(value, _Tensor):
        return _tensor_sig(call, value, name)
    if kind == _SCALAR or (kind == _TENSOR and type(value) in NUMBER_TYPES):
        if value is None:
            return None
        if type(value) in (list, tuple):  # a traced Scalar[] (`dynamic=`): each number traced
            call.scalars.extend(value)
            return ("S[]",) + tuple(map(type, value))
        call.scalars.append(value)
        return type(value)
    if kind == _GENERATOR:
        if value is not None and value.device.type != "neuron":  # as CUDA words it
            raise RuntimeError(f"Expected a 'neuron' device type for generator but found '{value.device.type}'")
        call.scalars.append(_Draw(value))
        return _GENERATOR
    if isinstance(value, (list, tuple)):
        if any(isinstance(v, _Tensor) for v in value):
            return ("T[]",) + tuple(_tensor_sig(call, v, name) if isinstance(v, _Tensor) else None for v in value)
        return tuple(value)
    if type(value) in NUMBER_TYPES:
        return (type(value), value)  # 3 and 3.0 are equal keys but give different results
    return value


def _default_device(spec: OpSpec, kwargs) -> int:
    """The device of a call without neuron tensors (a factory): its `device=`, checked, else the current one."""
    dev = kwargs.get("device")
    if dev is None:
        return torch.neuron.current_device()
    dev = torch.device(dev)
    if dev.index is None:
        return torch.neuron.current_device()
    devices.check_index(dev.index, spec.name)
    return dev.index


def _call_and_key(spec: OpSpec, args: tuple, kwargs: dict):
    """The call's flattened inputs, its storages' buffers, and its key."""
    call = _Call()
    kinds = spec.kinds
    names = spec.arg_names
    sig = [spec.name]
    for i, a in enumerate(args):
        if isinstance(a, _Tensor):
            sig.append(_tensor_sig(call, a, names[i]))
        else:
            sig.append(_arg_sig(call, a, kinds[i], names[i]))
    if kwargs:
        for k, v in kwargs.items():
            sig.append(k)
            sig.append(_arg_sig(call, v, spec.kind_by_name[k], k))
    gen = spec.generator
    if (gen is not None and gen[0] >= len(args) and gen[1] not in kwargs) or spec.rng_key:
        call.scalars.append(_Draw(None))
        sig.append(_GENERATOR)
    if call.device is None:
        call.device = _default_device(spec, kwargs)
    buffers, state = call.buffers_and_state()
    sig.append(state)
    # what a factory without dtype= makes, and what an integer tensor times a Python float gives
    sig.append(_default_dtype())
    return call, buffers, _new_tuple(Key, (OP, tuple(sig), call.device))


def call_key(op, args: tuple, kwargs: dict) -> tuple:
    """The value key of calling `op` (an overload with a neuron kernel) on these arguments: what
    names its executable in any process, on any device."""
    return _call_and_key(spec_for(op), args, kwargs)[2].value


def run(spec: OpSpec, args: tuple, kwargs: dict):
    if devices.forked_after_start:  # a cached entry reaches the device without asking `devices`
        raise devices.bad_fork_error()
    if _pending_events() or storage.applying:
        storage.apply_events()
    if spec.every_call_check is not None:
        spec.every_call_check(args, kwargs)
    if spec.generator is not None:  # CPU tensors, a neuron generator's numbers (a 0-dim CPU `self`
        # would pass below as a scalar: DataLoader's seed, `torch.empty(()).random_(generator=g)`)
        gen = host_draws.neuron_generator(spec, args, kwargs)
        if gen is not None:
            return host_draws.run(spec, args, kwargs, gen)
    call, buffers, key = _call_and_key(spec, args, kwargs)
    entry = executable_cache().get(key)
    # a LoweringFailed raised before the launch leaves nothing done: the kernel that called this
    # recovers it (registration._kernel, TorchNeuron's CPU recovery)
    if entry is None:
        entry = _acquire(spec, args, kwargs, call, buffers, key)
        if entry is None:  # out= tensors were resized: describe the call again
            return run(spec, args, kwargs)
    if _fusion_on() and not _profiler_on():  # a profile times each op's own launch
        if entry.jaxpr is None:  # compiled before fusion was on, or loaded from disk
            if not _trace_into(spec, args, kwargs, call, buffers, entry, key):
                return run(spec, args, kwargs)
        _executed[spec.name] += 1
        return _enqueue(spec, args, kwargs, call, entry)
    if _has_queued():  # an op on its own: what is queued runs first
        storage.flush_queued(f"unfused op {spec.name}")
        buffers = _buffers_of(call.keys)
    if entry.fn is None:
        entry.fn = _own_executable(spec, entry, call, buffers)
    _executed[spec.name] += 1
    inputs = [b for b in buffers if b is not None]
    device = call.device
    _add_scalar_inputs(call, inputs)
    exact = entry.exact
    if exact is not None:  # compare: the exact program first, on the same inputs (it donates nothing)
        exact_outs = _launch(exact, inputs, f"{spec.name} (exact)", device, None)
    outs = _launch(entry.fn, inputs, spec.name, device, (profiling.RECORD_OP, spec.name) if _profiler_on() else None)
    if outs:
        streams.launched(device, outs[0])
    if exact is not None:
        _compare(spec, args, kwargs, call, entry, exact_outs, outs)
    values = protocol.finish(entry.plan, outs, call, lambda name: spec.arg_value(args, kwargs, name), entry.device,
                             spec.name, seen=())  # an op's results are never lazy views
    return values[0] if spec.single_return else tuple(values)


def _compare(spec, args, kwargs, call, entry, exact_outs, outs) -> None:
    """Where the target's policy changed the op's results: its fresh results and written storages."""
    n = len(entry.fresh) + len(entry.write_slots)

    def label(i):
        if i < len(entry.fresh):
            return f"result {i}"
        key = call.keys[entry.write_slots[i - len(entry.fresh)]]
        names = [name for name in spec.written if isinstance(t := spec.arg_value(args, kwargs, name), _Tensor)
                 and _storage_key(t) == key]
        return f"written argument {', '.join(names)}" if names else "written storage"

    fidelity.compare(spec.name, exact_outs[:n], outs[:n], label, stacklevel=4)  # the op's caller


def _add_scalar_inputs(call, inputs: list) -> None:
    """Append this launch's traced scalars: each generator drawn now, numbers as device arrays."""
    device = call.device
    for s in call.scalars:
        if type(s) is _Draw:
            inputs.append(rng.draw(s.gen, device))
        else:
            arr = _scalar_arrays.get((device, type(s), s))
            inputs.append(_scalar_array(s, device) if arr is None else arr)


def _enqueue(spec, args, kwargs, call, entry):
    """Queue the call (`fusion`) and return its results, whose storages hold Pending buffers."""
    scalars = []
    if call.scalars:
        _add_scalar_inputs(call, scalars)
    if entry.fresh:
        fresh = protocol.fresh_tensors(entry.fresh, None, entry.device, spec.name)
        fusion.enqueue(spec, call, entry, scalars, list(map(_storage_key, fresh)))
    else:  # an in-place or out= op
        fresh = []
        fusion.enqueue(spec, call, entry, scalars, fresh)
    if entry.fresh_returns:
        return fresh[0] if spec.single_return else tuple(fresh)
    if entry.returned_argument is not None and spec.single_return:
        return spec.arg_value(args, kwargs, entry.returned_argument)
    values = protocol.results(entry.plan.returns, fresh, lambda name: spec.arg_value(args, kwargs, name))
    return values[0] if spec.single_return else tuple(values)


# Python numbers passed to an executable as device-resident, weakly typed 0-d arrays: jax converts a
# Python number on every call, which costs a third of a small op. Keyed by value (bounded).
_scalar_arrays: dict[tuple, object] = {}


def _scalar_array(value, device: int):
    if type(value) not in NUMBER_TYPES or value == 0 or not (-(2**62) < abs(value) < 2**62):
        return value  # 0.0 == -0.0 as a key, and huge ints: pass them as they are
    if len(_scalar_arrays) >= 4096:
        _scalar_arrays.clear()
    # put as it is: jax makes a Python number the same weakly typed array jnp.asarray makes, with no
    # program compiled for it (jnp.asarray compiles one: XLA's first compile of a process, 40 ms)
    arr = devices.put(value, device)
    _scalar_arrays[(device, type(value), value)] = arr
    return arr


# ----------------------------------------------------------------------------------------------
# Compiling a new signature: meta call, out= resizing, the output plan, the program, XLA


def _to_meta(value):
    if isinstance(value, _Tensor):
        if value.device.type != "neuron":
            return value  # a 0-dim CPU scalar tensor, which meta kernels accept as is
        key, nbytes, sizes, strides, offset = storage.tensor_layout(value)
        n = nbytes // value.element_size() if value.element_size() else 0
        base = torch.empty(max(n, 0), dtype=value.dtype, device="meta")
        return base.as_strided(sizes, strides, offset)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_meta(v) for v in value)
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


def _meta_call(spec, args, kwargs):
    """The op on meta tensors of the same layouts: PyTorch's own checks, result dtypes and strides."""
    _import_meta_dependencies()
    argument_checks.check(spec.op, args, kwargs)  # the CPU's checks meta lacks
    margs = [_to_meta(a) for a in args]
    mkwargs = {k: _to_meta(v) for k, v in kwargs.items()}
    if "device" in spec.arg_names and "device" not in mkwargs:
        i = spec.arg_names.index("device")
        if i >= len(margs):
            mkwargs["device"] = torch.device("meta")
    kernel_warned = False
    try:
        if spec.out_names:  # the meta kernel's resize warnings: `_resize_out_arguments` warns as the CPU does
            with out_checks.CpuResizeWarnings() as caught:
                out = out_checks.meta_call(spec.op, margs, mkwargs)
            # a C++ kernel's own resize warnings (the CPU's) reach the user after the call: none of ours then
            kernel_warned = caught.dropped == 0 and out_checks.meta_kernel_is_cpp(spec.op)
        else:
            out = spec.op(*margs, **mkwargs)
    except Exception as e:  # PyTorch's own check (shapes, dtypes): raise it naming the op
        raise named(e, spec.name) from None
    return margs, mkwargs, out, kernel_warned


def _resize_out_arguments(spec, args, kwargs, margs, mkwargs, kernel_warned=False) -> bool:
    """out= tensors of the wrong shape are resized as the CPU resizes them (with its warning where one had
    elements, unless the meta kernel gave the CPU's), to the strides of the op's own result; True if any was."""
    resized = False
    layouts = None
    for i in out_checks.resize_order(spec.op, len(spec.out_names)):
        name = spec.out_names[i]
        real = spec.arg_value(args, kwargs, name)
        meta = spec.arg_value(margs, mkwargs, name)
        if isinstance(real, _Tensor) and tuple(real.shape) != tuple(meta.shape):
            if not kernel_warned:
                out_checks.warn_resized(spec.op, args, kwargs, tuple(real.shape), tuple(meta.shape))
            restride = out_checks.restrides(spec.op, real.shape)
            real.resize_(meta.shape)
            if restride:  # the strides of the op's own result (a Python meta kernel resizes contiguous)
                layouts = out_checks.result_layouts(spec.op, args, kwargs) if layouts is None else layouts
                layout = layouts[i] if layouts and i < len(layouts) else None
                strides = layout[1] if layout is not None and layout[0] == tuple(meta.shape) else meta.stride()
                if real.stride() != tuple(strides):
                    real.as_strided_(meta.shape, strides)
            resized = True
    return resized


class _OutputPlan:
    """What the lowering's outputs become. A functional lowering returns one value per schema
    return (None/ints where the op returns those; their values come from meta; a list for a
    Tensor[] return), then the new values of the arguments the op writes.

    A plan follows from what the op's meta call gives (`from_meta`): each fresh result's (sizes,
    strides, dtype), a Return per schema return, each written argument's (dtype, shape). Under
    fusion those are kept on disk (kind "plan", `_trace`), so a new process meeting the signature
    skips the meta call (`learned`)."""

    def __init__(self, spec, args, kwargs, call, fresh, returns, written_types):
        self.fresh = fresh  # (sizes, strides, dtype) per fresh output
        self.returns = returns  # a Return per schema return
        self.take = []  # per program output before the writes: (lowering output, list item or None)
        n_own = 0  # the lowering's outputs: one per return that is not an argument
        for kind, what in returns:
            if kind == _ARGUMENT:
                continue
            if kind == _FRESH:
                if type(what) is list:  # a Tensor[] return
                    self.take.extend((n_own, j) for j in range(len(what)))
                else:
                    self.take.append((n_own, None))
            n_own += 1
        # the layout of each written argument that is a tensor (Tensor? may be None)
        self.written = []
        tensor_index = {id(t): i for i, t in enumerate(call.tensors)}
        for k, name in enumerate(spec.written):
            real = spec.arg_value(args, kwargs, name)
            if isinstance(real, _Tensor):
                self.written.append(call.layouts[tensor_index[id(real)]])
                self.take.append((n_own + k, None))
            elif isinstance(real, (list, tuple)):  # a Tensor(a!)[]: the lowering's list, item by item
                for j, t in enumerate(real):
                    self.written.append(call.layouts[tensor_index[id(t)]])
                    self.take.append((n_own + k, j))
        self.write_slots = []
        for lay in self.written:
            if lay.slot not in self.write_slots:
                self.write_slots.append(lay.slot)
        self.written_types = written_types
        # the dtype and shape PyTorch gives each program output: fresh tensors, then written arguments
        self.out_types = [(f.dtype, f.sizes) for f in fresh] + list(written_types)

    @classmethod
    def from_meta(cls, spec, args, kwargs, call, margs, mkwargs, mout):
        mouts = list(mout) if isinstance(mout, (tuple, list)) and not spec.single_return else [mout]
        fresh, returns = [], []
        for ret, m in zip(spec.returns, mouts):
            if ret is not None:
                returns.append(Return(ReturnKind.ARGUMENT, ret))
            elif isinstance(m, _Tensor):
                returns.append(Return(ReturnKind.FRESH, len(fresh)))
                fresh.append(FreshOutput(tuple(m.shape), tuple(m.stride()), m.dtype))
            elif isinstance(m, list) and all(isinstance(x, _Tensor) for x in m):
                returns.append(Return(ReturnKind.FRESH, list(range(len(fresh), len(fresh) + len(m)))))
                fresh.extend(FreshOutput(tuple(x.shape), tuple(x.stride()), x.dtype) for x in m)
            elif m is None or isinstance(m, (int, float, bool)):
                returns.append(Return(ReturnKind.CONSTANT, m))
            else:
                raise NotImplementedError(f"neuron: {spec.name} returns {type(m).__name__}; it needs its own kernel")
        written_types = []
        for name in spec.written:
            meta = spec.arg_value(margs, mkwargs, name)
            if isinstance(meta, _Tensor) and isinstance(spec.arg_value(args, kwargs, name), _Tensor):
                _check_no_overlap(spec, meta, name)
                written_types.append((meta.dtype, tuple(meta.shape)))
            elif isinstance(meta, (list, tuple)):  # a Tensor(a!)[] (in-place foreach, fused optimizers)
                for m in meta:
                    _check_no_overlap(spec, m, name)
                    written_types.append((m.dtype, tuple(m.shape)))
        return cls(spec, args, kwargs, call, fresh, returns, written_types)

    def learned(self) -> tuple:
        """What the meta call gave, as `__init__` takes it (what a plan record keeps)."""
        return (self.fresh, self.returns, self.written_types)


class _OpProgram:
    """The jax function of one signature: storages and traced scalars in, buffers out. Tracing it
    records the value checks its lowering made (`checks`)."""

    def __init__(self, spec, args, kwargs, call, buffers, plan):
        self.spec = spec
        self.args, self.kwargs = args, kwargs
        self.call = call
        self.plan = plan
        self.present = [b is not None for b in buffers]
        self.is_draw = [type(s) is _Draw for s in call.scalars]
        self.checks = []

    def __call__(self, *inputs):
        spec, call, plan = self.spec, self.call, self.plan
        n_present = sum(self.present)
        bufs = iter(inputs[:n_present])
        storages = StorageProgram(call.nbytes, [next(bufs) if p else None for p in self.present])
        # the call's traced numbers in order; its generator draw (at most one) becomes the PRNG key
        numbers, key = [], None
        for value, is_draw in zip(inputs[n_present:], self.is_draw):
            if is_draw:
                key = rng.prng_key(value)
            else:
                numbers.append(value)
        values = iter([storages.read(lay) for lay in call.layouts])
        args, kwargs = self._traced_arguments(values, iter(numbers))
        kwargs = self._dtype_from_out(args, kwargs, key)
        with CheckedCall() as checked:
            results = call_lowering(spec, args, kwargs, key)
        self.checks = [(error, f"{spec.name}: {message}") for error, message in checked.described()]
        results = self._typed(results)
        out = [fresh_storage(r, f.sizes, f.strides) for f, r in zip(plan.fresh, results)]
        for lay, r in zip(plan.written, results[len(plan.fresh):]):
            storages.write(lay, r)
        out += storages.written(plan.write_slots)
        if checked.checks:  # one bool per check: True where it failed
            out.append(checked.failure_flags())
        return tuple(out)

    def _dtype_from_out(self, args, kwargs, key):
        """An out= overload with a `dtype` argument left None computes in its out tensor's dtype where
        that differs from the dtype the op computes (sum, mean, prod, cumsum...: the CPU's meta function
        takes the out tensor's dtype, `infer_dtype_from_optional`): its lowering is given it."""
        spec = self.spec
        if not spec.out_names or "dtype" not in spec.kind_by_name:
            return kwargs
        if spec.arg_value(self.args, self.kwargs, "dtype") is not None:
            return kwargs
        out = spec.arg_value(self.args, self.kwargs, spec.out_names[0])
        if len(spec.out_names) != 1 or not isinstance(out, _Tensor):
            return kwargs
        with CheckedCall():  # a probe of the dtype the op computes (dead code in the program)
            probe = call_lowering(spec, args, kwargs, key)
        probe = probe[0] if isinstance(probe, (tuple, list)) else probe
        if probe is None or probe.dtype == to_numpy_dtype(out.dtype):
            return kwargs
        return {**kwargs, "dtype": out.dtype}

    def _traced_arguments(self, values, numbers):
        """The call's arguments with each neuron tensor replaced by its traced value and each traced
        number (a Python number, a 0-dim CPU tensor) by its traced input."""
        spec = self.spec

        def rebuild(v, kind):
            if isinstance(v, _Tensor):
                return next(numbers) if v.device.type != "neuron" else next(values)
            if kind == _SCALAR or (kind == _TENSOR and type(v) in NUMBER_TYPES):
                if type(v) in (list, tuple):  # a traced Scalar[]
                    return [next(numbers) for _ in v]
                return None if v is None else next(numbers)
            if isinstance(v, (list, tuple)) and any(isinstance(x, _Tensor) for x in v):
                return [rebuild(x, _STATIC) if isinstance(x, _Tensor) else x for x in v]
            return v  # a Generator's place is filled by call_lowering

        args = [rebuild(a, spec.kinds[i]) for i, a in enumerate(self.args)]
        kwargs = {name: rebuild(v, spec.kind_by_name[name]) for name, v in self.kwargs.items()}
        return args, kwargs

    def _typed(self, results):
        """The program outputs the plan takes, each in the dtype meta gives."""
        wanted = max((i for i, _j in self.plan.take), default=-1)
        if len(results) <= wanted:
            raise RuntimeError(f"lowering of {self.spec.functional} returned {len(results)} values, {wanted + 1} expected")
        taken = [results[i] if j is None else results[i][j] for i, j in self.plan.take]
        return [typed(r, d, shape) for r, (d, shape) in zip(taken, self.plan.out_types)]


def _acquire(spec: OpSpec, args, kwargs, call: _Call, buffers, key: Key):
    """The entry of a signature this process does not hold (`ExecutableCache.acquire`). Under fusion:
    traced (its output plan from the disk cache where another process learned it, else from a meta
    call; then its jaxpr), no XLA, nothing on disk but the plan. Otherwise from the disk cache (no
    meta call, no trace, no XLA: what was learned compiling it came with it), else traced, compiled and
    stored there. None: out= tensors were resized (describe the call again)."""
    device = torch.device("neuron", call.device)
    if _fusion_on() and not _profiler_on():
        def trace_only():
            with profiling.range(f"neuron::compile_op {spec.name}"):
                traced = _trace(spec, args, kwargs, call, buffers, key)
            return None if traced is None else Built(Entry(None, traced[0], device, key, spec.name, traced[1]))

        return executable_cache().acquire(key, spec.name, trace_only)

    def build():
        with profiling.range(f"neuron::compile_op {spec.name}"):
            traced = _trace(spec, args, kwargs, call, buffers)
            if traced is None:
                return None
            entry = Entry(None, traced[0], device, key, spec.name, traced[1])
            entry.fn = _compile_entry(spec, entry, call, buffers)  # it runs on its own: its executable now
        return Built(entry, entry.fn, entry.plan)

    def from_disk(found):
        return Entry(found.executable, found.meta, device, key, spec.name)

    entry = executable_cache().acquire(key, spec.name, build, from_disk)
    if entry is not None and fidelity.comparing():  # (fusion is off while it compares)
        entry.exact = _exact_executable(spec, args, kwargs, call, buffers, entry)
    return entry


def _own_executable(spec: OpSpec, entry: Entry, call: _Call, buffers):
    """The executable of an entry traced under fusion that now runs on its own (fusion turned off, an
    op under a profiler): from the disk cache where a process stored it, else compiled and stored
    there with its plan, as `_acquire` gets an op's executable."""
    def build():
        with profiling.range(f"neuron::compile_op {spec.name}"):
            fn = _compile_entry(spec, entry, call, buffers)
        return Built(fn, fn, entry.plan)

    return executable_cache().fetch(entry.key, spec.name, build, lambda found: found.executable)[0]


_SAME = "same"  # an exact program identical to the target's: nothing to compare


def _exact_executable(spec: OpSpec, args, kwargs, call: _Call, buffers, entry: Entry):
    """TORCH_NEURONX_TARGET_CHECK=compare: the op's program traced with the target's policy off, compiled
    without donation (it runs first, on the inputs the target's program then takes); None where it is the
    target's own program (no 64-bit value, no Python number in it: the policy changes nothing)."""
    key = entry.key.on(OP_EXACT)

    def build():
        with profiling.range(f"neuron::compile_op {spec.name}"):
            with target_policy.exact():
                traced = _trace(spec, args, kwargs, call, buffers)
            if traced is None:  # never: out= tensors were resized for the target's entry already
                raise RuntimeError(f"{spec.name}: the exact program's meta call resized out= tensors")
            # the target's program (traced again where its entry came from disk)
            jaxpr = entry.jaxpr if entry.jaxpr is not None else _trace(spec, args, kwargs, call, buffers)[1]
            if str(traced[1]) == str(jaxpr):
                return Built(_SAME)  # nothing stored: traced again by a new process
            exact = Entry(None, traced[0], entry.device, key, spec.name, traced[1])
            fn = _compile_entry(spec, exact, call, buffers, donate=False)
        return Built(fn, fn, ())

    fn = executable_cache().acquire(key, spec.name, build, lambda found: found.executable)
    return None if fn is _SAME else fn


PLAN = "plan"  # the disk cache's namespace of an eager op's output plan (what its meta call gave)


def _trace(spec: OpSpec, args, kwargs, call: _Call, buffers, key=None):
    """(the call's `Plan`, its closed jaxpr), or None when out= tensors were resized. With the call's `key` (under fusion, where the plan is all a new process needs
    before the run's executable loads), the plan comes from the disk cache where a process stored
    it, and one learned here from the meta call is stored there: so a warm process skips PyTorch's
    meta kernels, whose Python ones import torch._dynamo on their first call (a second or more)."""
    plan = _stored_plan(spec, args, kwargs, call, key) if key is not None else None
    learned = plan is None
    if learned:
        margs, mkwargs, mout, kernel_warned = _meta_call(spec, args, kwargs)
        if spec.out_names and _resize_out_arguments(spec, args, kwargs, margs, mkwargs, kernel_warned):
            return None
        plan = _OutputPlan.from_meta(spec, args, kwargs, call, margs, mkwargs, mout)
    program = _OpProgram(spec, args, kwargs, call, buffers, plan)
    try:
        with devices.on_device(call.device):
            jaxpr = jax.make_jaxpr(program)(*_input_avals(call, buffers))
    except TargetUnsupported:  # complex under a target: its message names the op, the dtype, the target
        raise
    except UnsupportedDtype as e:
        raise _lowering_error(spec, call, e) from None
    except Exception as e:  # a lowering failure: say which op and which inputs
        raise _lowering_error(spec, call, e) from e
    if learned and key is not None:
        body = pickle.dumps(plan.learned(), protocol=pickle.HIGHEST_PROTOCOL)
        executable_cache().save_record(key.on(PLAN), spec.name, body)
    return Plan(plan.fresh, plan.returns, plan.write_slots, program.checks), jaxpr


def _stored_plan(spec: OpSpec, args, kwargs, call: _Call, key):
    """The output plan of `key` that a process stored, or None. Its key holds everything the meta
    call reads (each tensor's dtype and layout, static arguments, scalar types, the default dtype)
    and the package's sources, and a stored plan is one whose meta call passed, whose argument checks passed (those
    that read a Python number's value run on every call) and whose out= tensors needed no resize."""
    body = executable_cache().load_record(key.on(PLAN), spec.name)
    if body is None:
        return None
    try:
        fresh, returns, written_types = pickle.loads(body)
    except Exception:  # a record this code cannot read: learn the plan again (and store it over)
        return None
    return _OutputPlan(spec, args, kwargs, call, fresh, returns, written_types)


def _trace_into(spec: OpSpec, args, kwargs, call: _Call, buffers, entry: Entry, key) -> bool:
    """Give an entry compiled without one (loaded from disk, or before fusion was on) its jaxpr;
    False when out= tensors were resized."""
    traced = _trace(spec, args, kwargs, call, buffers, key)
    if traced is None:
        return False
    entry.set_jaxpr(traced[1])
    return True


def _input_avals(call: _Call, buffers) -> list:
    """What the program's inputs look like to a trace: each present buffer, then the scalars."""
    avals = [jax.ShapeDtypeStruct(b.shape, b.dtype) for b in buffers if b is not None]
    avals += [rng.PROBE_WORDS if type(s) is _Draw else s for s in call.scalars]
    return avals


def _compile_entry(spec: OpSpec, entry: Entry, call: _Call, buffers, donate: bool = True):
    """XLA's executable of the entry's jaxpr, compiled now so errors name the op; the storages it
    writes are donated (unless `donate` is False: an exact program compare runs first)."""
    from jax.extend.core import jaxpr_as_fun

    donate = StorageInputs.donated(buffers, entry.write_slots) if donate else ()
    try:
        with devices.on_device(call.device):
            lowered = jax.jit(jaxpr_as_fun(entry.jaxpr), donate_argnums=donate).lower(*_input_avals(call, buffers))
            return executables.compile_lowered(lowered, small=True)
    except TargetUnsupported:
        raise
    except UnsupportedDtype as e:
        raise _lowering_error(spec, call, e) from None
    except Exception as e:
        raise _lowering_error(spec, call, e) from e


class LoweringFailed(NotImplementedError):
    """An op's lowering or its XLA compile failed for these inputs (not PyTorch's own argument check)."""


class DtypeNotLowered(LoweringFailed, UnsupportedDtype):
    """An op's input or result has a dtype the device does not carry."""


def _lowering_error(spec: OpSpec, call: _Call, e: Exception) -> Exception:
    if isinstance(e, UnsupportedDtype):
        return DtypeNotLowered(f"neuron: {spec.name}: {e}")
    shapes = ", ".join(_describe_tensor(t) for t in call.tensors)
    return LoweringFailed(
        f"neuron: {spec.name} could not be lowered for inputs ({shapes}): {type(e).__name__}: {e}")


def _describe_tensor(t):
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"


def _check_no_overlap(spec, t, name):
    for n, s in zip(t.shape, t.stride()):
        if n > 1 and s == 0:
            raise RuntimeError(
                f"{spec.name}: unsupported operation: more than one element of the written-to tensor "
                f"'{name}' refers to a single memory location. Please clone() the tensor before "
                f"performing the operation."
            )
