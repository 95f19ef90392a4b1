"""Run a function on CPU tensors and on their neuron copies; compare, and prove it ran on the device."""
from __future__ import annotations

import pytest
import torch

import torch_neuronx
import warm_cache
from lowering_harness import tolerance


def _to(x, device):
    if isinstance(x, torch.Tensor):
        return x.detach().to(device).requires_grad_(x.requires_grad)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    return x


def _flat(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _flat(v)]
    return []


def check_device(fn, *args, atol=None, rtol=None, family=None, must_run=None, allow_fallback=(), **kwargs):
    """fn(*args) on the CPU vs fn on neuron copies of the tensors in args: same dtype, shape, values
    (within atol/rtol if given, else the tests/tolerances.py entry `family` at each output's dtype,
    else torch's defaults).

    must_run: ATen op names (e.g. "aten.convolution.default") that must have executed on the device.
    No CPU fallback may happen, except for the op names in allow_fallback."""
    want = fn(*args, **kwargs)
    torch_neuronx.clear_op_tracking()
    got = fn(*_to(args, "neuron"), **_to(kwargs, "neuron"))
    fell = {op: n for op, n in torch_neuronx.get_fallback_ops().items() if op not in allow_fallback}
    assert not fell, f"fell back to the CPU: {fell}"
    for op in must_run or ():
        assert op in torch_neuronx.get_executed_ops(), f"{op} did not run on the device: {torch_neuronx.get_executed_ops()}"
    warm_cache.record(got)
    wants, gots = _flat(want), _flat(got)
    assert len(wants) == len(gots)
    for w, g in zip(wants, gots):
        assert g.device.type == "neuron", g.device
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        torch.testing.assert_close(g.cpu(), w, equal_nan=True, **tolerance(w, atol, rtol, family))
    return got


def check_device_float(name, fn, args, family=None, dtype=torch.float32, no_low_precision=()):
    """check_device of fn on args converted to dtype, the op `name` run on the device (tests/tolerances.py's
    entry `family`; bfloat16: torch's defaults). An op in no_low_precision has no bfloat16 CPU kernel: in
    bfloat16 the device refuses it as the CPU does (NotImplementedError)."""
    args = tuple(a.to(dtype) for a in args)
    if dtype == torch.bfloat16 and name in no_low_precision:
        with pytest.raises(NotImplementedError):
            fn(*args)
        with pytest.raises(NotImplementedError):
            fn(*(a.to("neuron") for a in args))
        return
    check_device(fn, *args, must_run=[name], family=family)
