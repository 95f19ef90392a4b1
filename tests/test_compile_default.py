"""torch.compile with no backend: a graph on neuron compiles with the `neuron` backend, a CPU graph with
Inductor; and dynamic=True is refused by the neuron backend every time, also when Dynamo kept no symbol."""
import copy

import pytest
import torch

import torch_neuronx
import torch_neuronx.compile
from torch_neuronx.compile import default


@pytest.fixture(autouse=True)
def fresh_dynamo(memory_only_cache):
    torch._dynamo.reset()
    torch_neuronx.compile.clear_cache()
    torch.neuron.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()


def compiled():
    return torch.neuron.get_dynamo_metrics()["graphs_compiled"]


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


class RowTimesWeight(torch.nn.Module):
    """x (1, 4) @ w (4, 4): with dynamic=True Dynamo specializes both sizes (1, and 4 by w), no symbol."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        return x @ self.w


def test_the_default_backend_is_neuron_or_inductor():
    assert torch.compiler.get_default_backend() is default.neuron_or_inductor


def test_a_neuron_model_compiles_with_the_neuron_backend():
    m = mlp()
    x = torch.randn(3, 8)
    expected = m(x)
    c = torch.compile(copy.deepcopy(m).to("neuron"), fullgraph=True)
    out = c(x.to("neuron"))
    assert out.device.type == "neuron"
    assert compiled() == 1
    torch.testing.assert_close(out.cpu(), expected)


def test_a_cpu_model_still_compiles_with_inductor():
    m = mlp()
    x = torch.randn(3, 8)
    expected = m(x)
    c = torch.compile(copy.deepcopy(m), fullgraph=True)
    torch.testing.assert_close(c(x), expected)
    assert compiled() == 0  # no neuron graph


def test_the_graph_is_chosen_by_its_tensors_devices():
    gm = torch.fx.symbolic_trace(mlp())
    assert not default.is_neuron_graph(gm, [torch.randn(3, 8)])
    assert default.is_neuron_graph(gm, [torch.randn(3, 8, device="neuron")])
    assert default.is_neuron_graph(gm.to("neuron"), [torch.randn(3, 8)])  # held parameters count too


def test_a_default_the_user_chose_is_kept():
    try:
        torch.compiler.set_default_backend("eager")
        default.install()
        assert torch.compiler.get_default_backend() == "eager"
    finally:
        torch.compiler.set_default_backend(default.neuron_or_inductor)


@pytest.mark.parametrize("backend", ["neuron", None], ids=["neuron", "default"])
def test_dynamic_true_is_refused_every_time_when_no_symbol_is_kept(backend):
    m = RowTimesWeight().to("neuron")
    x = torch.randn(1, 4, device="neuron")
    kwargs = {} if backend is None else {"backend": backend}
    messages = []
    for _ in range(2):
        c = torch.compile(m, dynamic=True, **kwargs)
        with pytest.raises(Exception, match=r"static shapes only.*dynamic=True.*dynamic=False") as info:
            c(x)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert compiled() == 0


def test_dynamic_false_compiles_the_same_module():
    m = RowTimesWeight()
    x = torch.randn(1, 4)
    expected = m(x)
    c = torch.compile(copy.deepcopy(m).to("neuron"), backend="neuron", dynamic=False)
    torch.testing.assert_close(c(x.to("neuron")).cpu(), expected)
    assert compiled() == 1
