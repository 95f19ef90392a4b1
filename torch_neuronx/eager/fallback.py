"""What runs an op with no neuron kernel: PyTorch's decomposition if it has one, else the CPU.

The CPU fallback copies the inputs to the host, runs the op there and copies results (and written
arguments) back; it is counted (`metrics`), warned about once per op, or refused: with
TORCH_NEURONX_CPU_FALLBACK=error, `check_cpu_fallback` raises instead (compiled graphs ask it too).

TorchNeuron's recovery (`recover`): an op that has a lowering but whose lowering or compile failed for
these inputs runs on the CPU too, warned once per op, unless
TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1 (or TORCH_NEURONX_CPU_FALLBACK=error) says to raise.
"""
from __future__ import annotations

import threading
import warnings

import torch

from .. import metrics
from ..ops import argument_checks, out_checks
from ..ops.cpu_messages import named
from ..ops.decompositions import decomposition_table
from ..runtime import config, rng
from ..runtime.numpy_dtypes import UnsupportedDtype
from .buffers import to_host

_state = threading.local()
_warned: set[str] = set()
FALLBACK_ENV = "TORCH_NEURONX_CPU_FALLBACK"


def fallback(op, *args, **kwargs):
    """The boxed PrivateUse1 fallback: every op without a neuron kernel arrives here."""
    active = getattr(_state, "decomposing", None)
    if active is None:
        active = _state.decomposing = set()
    # the CPU's checks the decomposition lacks, and the CPU fallback's copies hide (they share no
    # storage: masked_select(out=) of its own input would not overlap there)
    argument_checks.check(op, args, kwargs)
    decomp = decomposition_table().get(op)
    if decomp is not None and op not in active:
        metrics.decomposed(str(op))
        active.add(op)
        try:
            out = _decompose(op, decomp, args, kwargs)
        except Exception as e:  # the decomposition's check: the CPU's spellings, the op named
            raise named(e, str(op)) from None
        finally:
            active.discard(op)
        if out is not NotImplemented:
            return out
    return cpu_fallback(op, args, kwargs)


def _decompose(op, decomp, args, kwargs):
    """The decomposition's result. One of an out= overload gets its out tensors resized first, as the
    CPU resizes them (`out_checks.resize_outs`); resize warnings of its own (PyTorch's Python ones) give
    way to the CPU's."""
    given = [kwargs.get(a.name) for a in op._schema.arguments if a.is_out]
    outs = [t for v in given for t in (v if isinstance(v, (list, tuple)) else [v]) if isinstance(t, torch.Tensor)]
    if not outs:
        return decomp(*args, **kwargs)
    out_checks.resize_outs(op, args, kwargs)
    if out_checks.casts_into_any_out(op):  # PyTorch's decomposition refuses some casts the CPU makes
        return _functional_into(op, args, kwargs)
    shapes = [tuple(t.shape) for t in outs]
    with out_checks.CpuResizeWarnings():
        result = decomp(*args, **kwargs)
    for t, shape in zip(outs, shapes):  # resized by the decomposition itself
        if tuple(t.shape) != shape:
            out_checks.warn_resized(op, args, kwargs, shape, tuple(t.shape))
    return result


def _functional_into(op, args, kwargs):
    """An out= overload as its functional overload, the result copied into the out tensors (a copy casts to
    any dtype). An op with a `dtype` argument left None computes in its out tensor's dtype, as the CPU's."""
    names = [a.name for a in op._schema.arguments if a.is_out]
    outs = [kwargs[name] for name in names]
    given = {k: v for k, v in kwargs.items() if k not in names}
    functional = out_checks.functional_overload(op)
    if len(outs) == 1 and "dtype" in [a.name for a in functional._schema.arguments] and given.get("dtype") is None:
        given["dtype"] = outs[0].dtype
    result = functional(*args, **given)
    for out, r in zip(outs, result if isinstance(result, (tuple, list)) else [result]):
        out.copy_(r)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _neuron_device(args, kwargs):
    for v in list(args) + list(kwargs.values()):
        if isinstance(v, torch.Tensor) and v.device.type == "neuron":
            return v.device
        if isinstance(v, (list, tuple)):
            for x in v:
                if isinstance(x, torch.Tensor) and x.device.type == "neuron":
                    return x.device
    dev = kwargs.get("device")
    if dev is not None:
        dev = torch.device(dev)
        return dev if dev.index is not None else torch.device("neuron", torch.neuron.current_device())
    return torch.device("neuron", torch.neuron.current_device())


def check_cpu_fallback(name: str, graph: str | None = None, node: str | None = None, error=RuntimeError,
                   stacklevel: int = 3) -> None:
    """Before op `name` runs on the CPU (in eager mode, or from inside compiled `graph` at `node`):
    raise `error` under TORCH_NEURONX_CPU_FALLBACK=error, else warn once per op (not when `silent`)."""
    mode = config.settings.cpu_fallback
    if mode == "error":
        metrics.fallback_refused(name)
        where = f"graph {graph}: op {name} (node '{node}')" if graph else f"neuron: {name}"
        raise error(f"{where} has no neuron lowering and {FALLBACK_ENV}=error forbids running it on the CPU")
    if mode != "silent" and name not in _warned:
        _warned.add(name)
        runs = f"the compiled graph {graph} runs it" if graph else "it runs"
        warnings.warn(
            f"neuron: {name} is not lowered; {runs} on the CPU (copying its inputs to the host and back). "
            f"torch_neuronx.get_fallback_ops() lists such ops; set {FALLBACK_ENV}=error to make this an error.",
            stacklevel=stacklevel + 1,
        )


RECOVERY_ENV = "TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS"
_recovered: set[str] = set()


def recover(op, args, kwargs, error: Exception):
    """Op `op` has a lowering, and it (or XLA's compile of it) failed for these inputs with `error`:
    run it on the CPU (TorchNeuron's default, warned once per op), or raise `error` when
    TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1 or TORCH_NEURONX_CPU_FALLBACK=error. A dtype the
    device does not carry is raised too: the CPU's result could not come back."""
    if (config.settings.fallback_only_for_unimplemented_ops or config.settings.cpu_fallback == "error"
            or isinstance(error, UnsupportedDtype)):
        raise error
    name = str(op)
    if config.settings.cpu_fallback != "silent" and name not in _recovered:
        _recovered.add(name)
        warnings.warn(f"{error}. It runs on the CPU instead; set {RECOVERY_ENV}=1 to raise instead.",
                      stacklevel=4)
    metrics.fell_back(name)
    return _on_cpu(op, args, kwargs)


def cpu_fallback(op, args, kwargs):
    name = str(op)
    check_cpu_fallback(name)
    metrics.fell_back(name)
    return _on_cpu(op, args, kwargs)


def _write_back(orig: torch.Tensor, new: torch.Tensor) -> None:
    """What the host op wrote into its CPU copy, into the neuron tensor it copied."""
    if orig.device.type == "neuron":
        if tuple(orig.shape) != tuple(new.shape):
            orig.resize_(new.shape)
        orig.copy_(new)


def _cpu_generator_of(gen: torch.Generator) -> torch.Generator:
    """A CPU generator seeded by one draw of the neuron generator `gen`: the host op's numbers
    follow the neuron seed (the same seed and offset give the same numbers) and advance it, as an op
    on the device would, instead of coming from the CPU's unrelated default generator."""
    hi_seed, lo_seed, hi_off, lo_off = (int(w) for w in rng.draw(gen, gen.device.index or 0))
    mixed = (((hi_seed << 32) | lo_seed) * 0x9E3779B97F4A7C15 + ((hi_off << 32) | lo_off)) & 0xFFFFFFFFFFFFFFFF
    return torch.Generator().manual_seed(mixed)


def _on_cpu(op, args, kwargs):
    """Run `op` on CPU copies of its neuron tensors; written arguments and results come back."""
    device = _neuron_device(args, kwargs)

    def to_cpu(v):
        if isinstance(v, torch.Tensor) and v.device.type == "neuron":
            # a CPU tensor of its own (to_host's may wrap numpy memory, which cannot be resized
            # when the op resizes an out= argument)
            return to_host(v).clone()
        if isinstance(v, (list, tuple)):
            return type(v)(to_cpu(x) for x in v)
        if isinstance(v, torch.device) and v.type == "neuron":
            return torch.device("cpu")
        if isinstance(v, str) and v.startswith("neuron"):
            return "cpu"
        if isinstance(v, torch.Generator) and v.device.type == "neuron":
            return _cpu_generator_of(v)
        return v

    cpu_args = [to_cpu(a) for a in args]
    cpu_kwargs = {k: to_cpu(v) for k, v in kwargs.items()}
    out = op(*cpu_args, **cpu_kwargs)
    schema = op._schema
    by_alias = {}
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            orig = args[i] if i < len(args) else kwargs.get(a.name)
            new = cpu_args[i] if i < len(args) else cpu_kwargs.get(a.name)
            if isinstance(orig, torch.Tensor):
                _write_back(orig, new)
            elif isinstance(orig, (list, tuple)):  # a Tensor(a!)[] (in-place foreach, fused optimizers)
                for o, n in zip(orig, new):
                    if isinstance(o, torch.Tensor):
                        _write_back(o, n)
            by_alias[frozenset(a.alias_info.before_set)] = orig

    def to_device(v):
        if isinstance(v, torch.Tensor):
            return v.to(device)
        if isinstance(v, (list, tuple)):
            return type(v)(to_device(x) for x in v)
        return v

    rets = schema.returns
    if not rets:  # `-> ()`: the dispatcher wants None
        return None
    if len(rets) == 1:
        r = rets[0]
        if r.alias_info is not None and frozenset(r.alias_info.before_set) in by_alias:
            return by_alias[frozenset(r.alias_info.before_set)]
        return to_device(out)
    results = []
    for r, v in zip(rets, out):
        if r.alias_info is not None and frozenset(r.alias_info.before_set) in by_alias:
            results.append(by_alias[frozenset(r.alias_info.before_set)])
        else:
            results.append(to_device(v))
    return tuple(results)
