"""TORCH_NEURONX_TARGET_CHECK=compare: where the target's dtype policy changed a result.

Under a target (`TORCH_NEURONX_TARGET`) with the check on, every eager op and every compiled graph also
runs its exact program (the policy off, `ops.target_policy.exact`) on the same inputs, and the caller
hands both programs' outputs here (`compare`). Where they differ the difference is recorded per
(op or graph, output) and warned about once per op or graph name (RuntimeWarning); what the user gets
is the target's result, as Trainium would give it. `fidelity_differences()` lists what was recorded.
"""
from __future__ import annotations

import threading
import warnings

import numpy as np

from . import config, targets
from .transfer import to_host

_lock = threading.Lock()
_differences: dict[tuple, dict] = {}  # (name, output) -> its record
_warned: set[str] = set()


def comparing() -> bool:
    """Whether the check is on (read when a program is built, not per call). ValueError when it is on
    with no target to compare against."""
    if config.settings.target_check != "compare":
        return False
    if targets.current() is None:
        raise ValueError("TORCH_NEURONX_TARGET_CHECK=compare compares a Trainium target's results with the exact "
                         "ones, but TORCH_NEURONX_TARGET is not set: set it to trn1, trn2 or trn3")
    return True


def compare(name: str, exact_outputs, target_outputs, label, stacklevel: int = 1) -> None:
    """Compare each pair of outputs (jax arrays) of `name` (an op, "graph <name>"); `label(i)` names output
    i (called only for one that differs); `stacklevel` is the warning's, counted from the caller."""
    for i, (exact, got) in enumerate(zip(exact_outputs, target_outputs)):
        found = _difference(to_host(exact), to_host(got))
        if found is not None:
            _record(name, label(i), found, stacklevel + 2)


def _difference(exact: np.ndarray, got: np.ndarray) -> dict | None:
    """How `got` differs from `exact` (same shape and dtype), or None where it does not (NaNs in the
    same places count as equal)."""
    if exact.dtype.kind not in "biuf":  # bfloat16 and float8 (ml_dtypes) are compared as float64
        exact, got = exact.astype(np.float64), got.astype(np.float64)
    floating = exact.dtype.kind == "f"
    differ = exact != got
    if floating:
        differ &= ~(np.isnan(exact) & np.isnan(got))
    count = int(np.count_nonzero(differ))
    if not count:
        return None
    where = np.flatnonzero(differ)
    first = int(where[0])
    e = exact.reshape(-1)[where].astype(np.float64)
    g = got.reshape(-1)[where].astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        delta = np.abs(g - e)
        delta = np.where(np.isnan(delta), np.inf, delta)  # NaN on one side only
        relative = np.where(e != 0, delta / np.abs(e), np.inf)
    return {"kind": "float" if floating else "integer", "count": count, "elements": int(exact.size),
            "max_abs": float(np.max(delta)), "max_rel": float(np.max(relative)),
            "example": {"index": first, "exact": exact.reshape(-1)[first].item(),
                        "target": got.reshape(-1)[first].item()}}


def _record(name: str, output: str, found: dict, stacklevel: int) -> None:
    target = targets.current()
    with _lock:
        record = _differences.get((name, output))
        if record is None:
            _differences[(name, output)] = record = {"name": name, "output": output, "kind": found["kind"],
                                                     "calls": 0, "count": 0, "max_abs": 0.0, "max_rel": 0.0,
                                                     "example": found["example"]}
        record["calls"] += 1
        record["count"] += found["count"]
        record["max_abs"] = max(record["max_abs"], found["max_abs"])
        record["max_rel"] = max(record["max_rel"], found["max_rel"])
        first = name not in _warned
        _warned.add(name)
    if first:
        example = found["example"]
        if found["kind"] == "integer":
            how = (f"{found['count']} of {found['elements']} elements differ, e.g. at {example['index']}: exact "
                   f"{example['exact']}, {target.name} {example['target']}")
        else:
            how = (f"{found['count']} of {found['elements']} elements differ, max abs difference "
                   f"{found['max_abs']:.6g}, max relative difference {found['max_rel']:.6g}")
        warnings.warn(f"neuron ({target.name}): {name}: {output}: the target's dtype policy changed the result: "
                      f"{how} (TORCH_NEURONX_TARGET_CHECK=compare; torch_neuronx.metrics."
                      f"fidelity_differences() lists every difference)", RuntimeWarning, stacklevel=stacklevel)


def fidelity_differences() -> list[dict]:
    """Every (op or graph, output) whose target result differed from the exact one since the last clear:
    name (the op, or "graph <name>"), output (which result: "result 0", "written argument self",
    "output 1", "mutated input 0"), kind ("integer" or "float"), calls (how many calls differed),
    count (elements that differed, over those calls), max_abs and max_rel (the largest absolute and
    relative difference; inf where the exact value is 0 or one side is NaN), example (the first
    differing element of the first such call: {index: its position in the output's flat storage,
    exact, target}). In the order first found."""
    with _lock:
        return [dict(r, example=dict(r["example"])) for r in _differences.values()]


def clear_fidelity_differences() -> None:
    """Forget what was recorded; each op or graph warns again at its next difference."""
    with _lock:
        _differences.clear()
        _warned.clear()
