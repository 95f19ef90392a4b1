"""Ops without a lowering run on the CPU: counted, warned once, or an error when asked."""
import warnings

import pytest
import torch

import torch_neuronx
from helpers import run_python

# An operator nothing lowers and nothing decomposes: defined here, with a CPU kernel only (every ATen
# op the OpInfo database samples has a lowering or a decomposition by now)
_DEFINE = """
lib = torch.library.Library("neuron_fallback_test", "DEF")
lib.define("blend(Tensor x, Tensor q) -> Tensor")
lib.define("blend.out(Tensor x, Tensor q, *, Tensor(a!) out) -> Tensor(a!)")
lib.impl("blend", lambda x, q: x * 2 + q.exp(), "CPU")
lib.impl("blend.out", lambda x, q, *, out: out.copy_(x * 2 + q.exp()), "CPU")
"""
exec(_DEFINE)
UNLOWERED = "neuron_fallback_test.blend.default"


def _blend(x, q):
    return torch.ops.neuron_fallback_test.blend(x, q)


def _fresh_unlowered_op(name):
    """An operator this process has never warned about (the warning is once per op per process)."""
    lib = torch.library.Library("neuron_fallback_fresh", "FRAGMENT")
    lib.define(f"{name}(Tensor x) -> Tensor")
    lib.impl(name, lambda x: x * 3 - 1, "CPU")
    _libs.append(lib)
    return getattr(torch.ops.neuron_fallback_fresh, name)


_libs = []


@pytest.mark.cpu_fallback
def test_fallback_matches_cpu_and_is_counted_and_warned_once(track):
    x, q = torch.rand(5) + 1.5, torch.rand(5) + 0.5
    got = _blend(x.to("neuron"), q.to("neuron"))
    _blend(x.to("neuron"), q.to("neuron"))
    assert got.device.type == "neuron"
    torch.testing.assert_close(got.cpu(), _blend(x, q), rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {UNLOWERED: 2}
    assert UNLOWERED not in torch_neuronx.get_executed_ops()
    assert "neuron_fallback_test.blend" in track.report()
    op = _fresh_unlowered_op("thrice_minus_one")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = op(x.to("neuron"))
        op(x.to("neuron"))
        op(q.to("neuron"))
    msgs = [str(w.message) for w in caught if "not lowered" in str(w.message)]
    assert len(msgs) == 1 and "neuron_fallback_fresh.thrice_minus_one.default" in msgs[0], msgs
    assert torch_neuronx.get_fallback_ops()["neuron_fallback_fresh.thrice_minus_one.default"] == 3
    torch.testing.assert_close(a.cpu(), x * 3 - 1, rtol=0, atol=0)


@pytest.mark.cpu_fallback
def test_fallback_inplace_writes_back_into_the_view():
    base = torch.zeros(4, 4)
    dev = base.to("neuron")
    src = torch.rand(4) + 1.5
    blend = torch.ops.neuron_fallback_test.blend.out
    blend(src, torch.full((4,), 2.0), out=base[:, 1])
    blend(src.to("neuron"), torch.full((4,), 2.0, device="neuron"), out=dev[:, 1])
    torch.testing.assert_close(dev.cpu(), base, rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {"neuron_fallback_test.blend.out": 1}


@pytest.mark.cpu_fallback
def test_fallback_writes_back_every_tensor_of_a_written_list():
    # _fused_adagrad_ has no lowering: it writes lists of tensors (params, state sums) and returns
    # nothing; on the host every item must come back, as the CPU's own Adagrad(fused=True) updates them
    torch.manual_seed(0)
    cpu = torch.nn.Linear(4, 3)
    dev = torch.nn.Linear(4, 3).to("neuron")
    dev.load_state_dict(cpu.state_dict())
    opts = [torch.optim.Adagrad(m.parameters(), lr=0.1, fused=True) for m in (cpu, dev)]
    x = torch.randn(5, 4)
    for _ in range(3):
        for model, opt, inp in ((cpu, opts[0], x), (dev, opts[1], x.to("neuron"))):
            opt.zero_grad()
            model(inp).pow(2).sum().backward()
            opt.step()
    for a, b in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-5, atol=1e-6)
    assert torch_neuronx.get_fallback_ops() == {"aten._fused_adagrad_.default": 3}


def test_fallback_is_an_error_by_default_in_this_suite():
    """The suite's policy (conftest): a refused fallback raises and is counted as refused."""
    x = torch.rand(3, device="neuron")
    with pytest.raises(RuntimeError, match=r"neuron: neuron_fallback_test.blend.default has no neuron lowering"):
        _blend(x, x)
    assert torch_neuronx.metrics.get_refused_fallbacks() == {UNLOWERED: 1}
    assert torch_neuronx.get_fallback_ops() == {}
    torch_neuronx.clear_op_tracking()  # the refusal was the point of this test


def test_fallback_can_be_an_error():
    code = (
        "import torch\n"
        + _DEFINE
        + "x = torch.rand(3, device='neuron') + 1.5\n"
        "try:\n"
        "    torch.ops.neuron_fallback_test.blend(x, x)\n"
        "except RuntimeError as e:\n"
        "    print('ERR', e)\n"
    )
    r = run_python(code, TORCH_NEURONX_CPU_FALLBACK="error")
    assert r.returncode == 0, r.stderr
    assert "ERR" in r.stdout and "neuron_fallback_test.blend" in r.stdout and "TORCH_NEURONX_CPU_FALLBACK" in r.stdout


def test_lowered_ops_leave_the_decomposition_table():
    from torch._decomp import decomposition_table as pytorch_table

    from torch_neuronx.ops import LOWERINGS
    from torch_neuronx.ops.decompositions import decomposition_table

    aten = torch.ops.aten
    ours = decomposition_table()
    for op in (aten.gelu.default, aten._softmax.default, aten.native_layer_norm.default):
        assert op in pytorch_table and op in LOWERINGS
        assert op not in ours
    assert aten.addcmul_.default not in ours  # in-place twin of a lowered op
    # unlowered ops keep PyTorch's decomposition
    kept = [op for op in pytorch_table if isinstance(op, torch._ops.OpOverload) and op in ours]
    assert kept and all(ours[op] is pytorch_table[op] for op in kept)
    assert all(op not in LOWERINGS for op in ours)
