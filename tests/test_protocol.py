"""The calling protocol both modes share: compiled graphs read views and write mutations inside
their executable (no eager op), keys are values (the same bytes in every process), and one overload
has one executable per signature whoever calls it."""
from __future__ import annotations

import textwrap

import numpy as np
import torch

import torch_neuronx
from helpers import run_python
from torch_neuronx import metrics
from torch_neuronx.compile import graph
from torch_neuronx.eager import buffers, executor
from torch_neuronx.ops.protocol import key_bytes, key_digest

aten = torch.ops.aten


def _views():
    a = torch.randn(6, 8)
    b = torch.randn(5, 4)
    return a, b


def _step(x, y):
    x.mul_(2)  # an input mutation through a strided view
    y.add_(x[:4, :4].t())
    return x * y.sum(), y[1:] + 1


def test_a_compiled_call_with_view_inputs_and_mutations_runs_no_eager_op():
    a, b = _views()
    na, nb = a.to("neuron"), b.to("neuron")
    step = torch.compile(_step, backend="neuron", fullgraph=True, dynamic=False)
    # views with strides and offsets: a transposed column block, rows of another storage
    x, y = na[1:5, 2:8].t(), nb[1:5]
    step(x, y)  # compiles
    cx, cy = a[1:5, 2:8].t(), b[1:5]
    _step(cx, cy)
    torch_neuronx.clear_op_tracking()
    torch.neuron.reset_dynamo_metrics()
    x2, y2 = na[1:5, 2:8].t(), nb[1:5]
    out = step(x2, y2)
    assert metrics.get_executed_ops() == {}, metrics.get_executed_ops()
    record = torch.neuron.get_dynamo_metrics()
    assert sum(record["executions"].values()) == 1 and record["graphs_compiled"] == 0
    expected = _step(cx, cy)
    for got, want in zip(out, expected):
        torch.testing.assert_close(got.cpu(), want)
    # the mutations landed in the inputs' storages, through their views
    torch.testing.assert_close(na.cpu(), a)
    torch.testing.assert_close(nb.cpu(), b)


def test_a_view_offset_does_not_recompile_a_graph():
    steps = torch.randn(10)
    f = torch.compile(lambda t, x: x * t + 1, backend="neuron", fullgraph=True, dynamic=False)
    nsteps, x = steps.to("neuron"), torch.randn(3).to("neuron")
    torch.neuron.reset_dynamo_metrics()
    outs = [f(nsteps[i], x) for i in range(4)]
    record = torch.neuron.get_dynamo_metrics()
    # one executable: compiled here, or loaded from a warm cache
    assert record["graphs_compiled"] + sum(record["loaded_from_disk"].values()) == 1, record
    assert sum(record["executions"].values()) == 4
    for i, o in enumerate(outs):
        torch.testing.assert_close(o.cpu(), x.cpu() * steps[i] + 1)


def test_a_users_clone_and_the_internal_one_share_one_executable(memory_only_cache, no_fusion):
    executor.clear_cache()
    torch_neuronx.clear_op_tracking()
    base = torch.randn(7, 9)
    n = base.to("neuron")
    view = n[1:6, 2:7].t()
    mine = view.clone(memory_format=torch.contiguous_format)  # the user's clone
    # a view's values as one device array (what fallbacks and data-dependent ops read): the internal clone
    inner = buffers.device_flat(n[1:6, 2:7].t())
    torch.testing.assert_close(mine.cpu(), base[1:6, 2:7].t())
    torch.testing.assert_close(torch.from_numpy(np.asarray(inner)).reshape(5, 5), base[1:6, 2:7].t())
    assert metrics.get_executed_ops()["aten.clone.default"] == 2
    assert metrics.compile_stats()["aten.clone.default"][0] == 1


_KEYS = textwrap.dedent("""
    import torch
    from torch_neuronx.eager import executor
    from torch_neuronx.compile import graph
    from torch_neuronx.ops.protocol import key_digest
    aten = torch.ops.aten
    torch.manual_seed(0)
    base = torch.randn(4, 6, device="neuron")
    other = torch.randn(6, device="neuron", dtype=torch.bfloat16)
    calls = [
        (aten.add.Tensor, (base[1:3].t(), 2.5), {"alpha": 2}),
        (aten.add_.Tensor, (base, other.float()), {}),
        (aten.clone.default, (base.t(),), {"memory_format": torch.contiguous_format}),
        (aten.uniform_.default, (base, 0.0, 1.0), {}),
        (aten.sum.dim_IntList, (other, [0]), {"keepdim": True, "dtype": torch.float32}),
    ]
    for op, args, kwargs in calls:
        print(key_digest(executor.call_key(op, args, kwargs)))
    f = torch.compile(lambda x, y: (x * 2).add_(y.sum()), backend="neuron", fullgraph=True, dynamic=False)
    f(base[:, 1:5], base[0])
    for key in graph.compiled_keys():
        print(key_digest(key))
""")


def _digests(device: str) -> list[str]:
    out = run_python(_KEYS, PYTHONHASHSEED="random")
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()


def test_call_keys_are_the_same_bytes_in_two_fresh_processes():
    first, second = _digests("neuron"), _digests("neuron")
    assert len(first) == 6  # five eager calls and one graph
    assert len(set(first)) == 6, "different calls have different keys"
    assert first == second


def test_a_key_is_made_of_values():
    n = torch.randn(3, 4, device="neuron")
    key = executor.call_key(aten.mul.Tensor, (n[:, 1:], 3), {})
    spelled = key_bytes(key).decode()
    assert "aten.mul.Tensor" in spelled and "torch:torch.float32" in spelled
    assert " at 0x" not in spelled  # no object identity (an object's default repr)
    # the device index is not part of the value key: the same call on neuron:1 names the same executable
    n1 = n.to("neuron:1")
    assert key_digest(executor.call_key(aten.mul.Tensor, (n1[:, 1:], 3), {})) == key_digest(key)
    # a different view of the same storage is a different executable
    assert key_digest(executor.call_key(aten.mul.Tensor, (n[:, :3], 3), {})) != key_digest(key)


def test_a_key_refuses_an_object_without_a_stable_spelling():
    import pytest

    with pytest.raises(TypeError, match="no stable spelling"):
        key_bytes(("aten.add.Tensor", object()))
