"""TorchNeuron's dtype policy under a Trainium target (`TORCH_NEURONX_TARGET`), applied where every
lowering is called (`protocol.call_lowering`), so eager ops, fused runs and compiled graphs all get it
from here.

Inside executables TorchNeuron runs int64 as int32 and float64 as float32 (f64 constants in compiled
graphs become f32 too), and it has no complex dtypes. So under a target a lowering's 64-bit inputs are
narrowed (int64 -> int32, uint64 -> uint32, float64 -> float32) and it is traced with jax's 64-bit types
off, so whatever it makes inside (an index, a sum's accumulator, a Python float constant) is 32-bit as
well; the caller's boundary cast (`protocol.typed`) widens each result back to the dtype PyTorch's meta
kernel gives, so storages keep their PyTorch dtypes. Dtype conversions (`_to_copy`, `copy`) are exempt:
TorchNeuron moves them through the host, exactly. A complex value going into or coming out of a
lowering raises `TargetUnsupported`.

With no target set, a lowering is called as it is (exact 64-bit semantics). This runs when a program is
traced (once per signature), not per call.
"""
from __future__ import annotations

import contextlib
import threading
import warnings

import numpy as np
import torch

from ..runtime import targets
from ..runtime.lazy_jax import jax, lax

aten = torch.ops.aten

# the conversions TorchNeuron runs through the host: exact under a target
EXACT_OPS = frozenset({aten._to_copy.default, aten.copy.default})
# what each 64-bit dtype runs as inside a kernel
NARROWED = {np.dtype(np.int64): np.dtype(np.int32), np.dtype(np.uint64): np.dtype(np.uint32),
            np.dtype(np.float64): np.dtype(np.float32)}
# jax warns at every 64-bit dtype a lowering names while its 64-bit types are off: here that is the point
_NARROWING_WARNING = r"Explicitly requested dtype \w+ requested in .* is not available"


class TargetUnsupported(NotImplementedError):
    """A dtype the target does not have (complex); the message names the target, the op and the dtype.
    Not a TypeError, which Python's operators would turn into "unsupported operand type(s)"."""


class _ThreadState(threading.local):
    exact = False  # inside `exact()`: the policy is off for this thread's traces


_state = _ThreadState()


@contextlib.contextmanager
def exact():
    """Trace this thread's lowerings with the policy off (TORCH_NEURONX_TARGET_CHECK=compare's exact
    program of an op or a graph)."""
    before, _state.exact = _state.exact, True
    try:
        yield
    finally:
        _state.exact = before


def active() -> "targets.Target | None":
    """The target whose policy applies to a trace now: None without one, or inside `exact()`."""
    return None if _state.exact else targets.current()


def call(spec, call_args: list):
    """`spec`'s lowering on `call_args` (traced values and Python values, positionally), under the
    target's policy where one is set."""
    fn = spec.lowering.fn
    target = active()
    if target is None:
        return fn(*call_args)
    refuse_complex_values(target, spec.name, call_args)
    if spec.functional in EXACT_OPS:
        results = fn(*call_args)
    else:
        _quiet_narrowing_warnings()
        # 64-bit types off while the lowering traces: what it makes inside is 32-bit too
        with jax.enable_x64(False):
            results = fn(*[_narrowed(a) for a in call_args])
    refuse_complex_values(target, spec.name, results)
    return results


def _narrowed(value):
    """A traced 64-bit value as its 32-bit kind (lists of them too: Tensor[] arguments); anything else
    as it is. Called with jax's 64-bit types off."""
    if isinstance(value, (list, tuple)):
        items = [_narrowed(v) for v in value]
        if all(a is b for a, b in zip(items, value)):
            return value  # nothing traced in it: as it is (a size, FX's immutable lists)
        return tuple(items) if isinstance(value, tuple) else items
    dtype = getattr(value, "dtype", None)
    if not isinstance(value, jax.Array) or not isinstance(dtype, np.dtype) or dtype not in NARROWED:
        return value
    if jax.typeof(value).weak_type:
        # a traced Python number: jax's own canonicalization of an operand keeps it weakly typed
        # (lax.convert_element_type would make it a strong int32/float32 and change promotion)
        return value * 1
    return lax.convert_element_type(value, NARROWED[dtype])


def _quiet_narrowing_warnings() -> None:
    for f in warnings.filters:
        if f[0] == "ignore" and f[1] is not None and f[1].pattern == _NARROWING_WARNING:
            return
    warnings.filterwarnings("ignore", message=_NARROWING_WARNING, category=UserWarning)


def refuse_complex(target, what: str, dtype) -> None:
    """TargetUnsupported when `dtype` (a torch or numpy dtype) is complex: the target has none."""
    if target is not None and _is_complex(dtype):
        name = str(dtype).removeprefix("torch.")
        raise TargetUnsupported(f"neuron ({target.name}): {what}: {name} is not supported: TorchNeuron has no "
                                f"complex dtypes")


def refuse_complex_values(target, what: str, values) -> None:
    """`refuse_complex` for every array in `values` (nested lists and tuples) but traced Python numbers: a
    complex number given to an op is refused where the op's result is complex."""
    if isinstance(values, (list, tuple)):
        for v in values:
            refuse_complex_values(target, what, v)
    elif isinstance(values, jax.Array) and not jax.typeof(values).weak_type:
        refuse_complex(target, what, values.dtype)


def refuse_complex_tensor(what: str, *dtypes) -> None:
    """For the copy kernels, which move values to and from the device outside any lowering."""
    target = targets.current()
    for dtype in dtypes:
        refuse_complex(target, what, dtype)


def _is_complex(dtype) -> bool:
    if isinstance(dtype, torch.dtype):
        return dtype.is_complex
    return isinstance(dtype, np.dtype) and dtype.kind == "c"
