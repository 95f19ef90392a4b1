"""TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION and torch.compile's `fallback_execution` option: a graph that
fails to compile raises NEFFCompilationError naming it (the default, 1), or, with 0 or the option True,
warns once and runs Dynamo's graph eagerly on neuron; the option wins over the setting both ways.

A real failure, in-process: a view op's lowering made to raise. Eager views are native strided
tensors and never call the table's view lowerings, which serve compiled graphs only, so the graph
fails in its lowering (at its first call, where GraphProgram compiles) while the eager run it falls
back to computes the CPU's answer."""
import dataclasses
import datetime
import warnings

import pytest
import torch

import torch_neuronx
import torch_neuronx.compile
from torch_neuronx.compile import NEFFCompilationError, backend
from torch_neuronx.ops import LOWERINGS, specs
from torch_neuronx.runtime import config

ENV = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"
aten = torch.ops.aten


@pytest.fixture(autouse=True)
def fresh(memory_only_cache, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    torch._dynamo.reset()
    torch_neuronx.compile.clear_cache()
    torch.neuron.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()


def broken(op):
    """`op`'s lowering raises while the test runs (its spec dropped so every caller sees it)."""
    lowering = LOWERINGS[op]

    def raises(*args, **kwargs):
        raise RuntimeError(f"{op} is broken by the test")

    LOWERINGS[op] = dataclasses.replace(lowering, fn=raises)
    specs.forget(op)
    return lowering


@pytest.fixture
def broken_permute():
    lowering = broken(aten.permute.default)
    yield
    LOWERINGS[aten.permute.default] = lowering
    specs.forget(aten.permute.default)


def f(x):
    return (x.permute(1, 0) * 2).sin() + 1


def compiled():
    return torch.neuron.get_dynamo_metrics()["graphs_compiled"]


def fallback_warnings(caught):
    return [str(w.message) for w in caught if "runs eagerly on neuron instead" in str(w.message)]


def calls_match_the_cpu(g, fn=f, shape=(3, 4)):
    """Two calls of `g`, each against `fn` on the CPU; the fallback warnings they raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for seed in (0, 1):
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
            torch.testing.assert_close(g(x.to("neuron")).cpu(), fn(x), rtol=1e-5, atol=1e-6)
    return fallback_warnings(caught)


def test_the_setting_defaults_to_raising():
    assert config.settings.disable_fallback_execution is True


def test_by_default_a_failed_compile_raises_naming_the_graph_and_op(broken_permute):
    g = torch.compile(f, backend="neuron")
    with pytest.raises(NEFFCompilationError, match=r"graph graph_\d+_inference: op aten.permute.default \(node "
                                                   r"'permute'\) could not be lowered: RuntimeError: .*broken"):
        g(torch.randn(3, 4).to("neuron"))


def test_with_0_it_warns_once_and_runs_the_graph_eagerly(broken_permute, monkeypatch):
    monkeypatch.setenv(ENV, "0")
    g = torch.compile(f, backend="neuron")
    (message,) = calls_match_the_cpu(g)
    assert message.startswith("torch.compile(backend='neuron'): graph graph_")
    assert f"({ENV}=0): NEFFCompilationError: graph graph_" in message and "aten.permute.default" in message
    assert compiled() == 0


@pytest.mark.parametrize("env,option", [("1", True), ("0", False)])
def test_the_option_wins_over_the_setting(broken_permute, monkeypatch, env, option):
    monkeypatch.setenv(ENV, env)
    g = torch.compile(f, backend="neuron", options={"fallback_execution": option})
    if option:
        (message,) = calls_match_the_cpu(g)
        assert "(options={'fallback_execution': True})" in message
    else:
        with pytest.raises(NEFFCompilationError, match=r"op aten.permute.default .*could not be lowered"):
            g(torch.randn(3, 4).to("neuron"))


def test_the_default_backend_takes_the_option_and_keeps_it_from_inductor(broken_permute):
    g = torch.compile(f, options={"fallback_execution": True})  # no backend: neuron_or_inductor
    assert len(calls_match_the_cpu(g)) == 1
    cpu = torch.compile(lambda x: x.sin() * 2, options={"fallback_execution": True})  # Inductor: no such key
    x = torch.randn(5)
    torch.testing.assert_close(cpu(x), x.sin() * 2)


def test_a_compiled_graph_is_unaffected_and_options_are_checked(monkeypatch):
    monkeypatch.setenv(ENV, "0")
    g = torch.compile(f, backend="neuron")
    assert calls_match_the_cpu(g) == []
    assert compiled() == 1  # compiled once, run twice, no fallback
    with pytest.raises(Exception, match=r"options\['fallback_execution'\] is True or False, not 'yes'"):
        torch.compile(f, backend="neuron", options={"fallback_execution": "yes"})(torch.randn(3, 4).to("neuron"))
    torch._dynamo.reset()
    with pytest.warns(UserWarning, match=r"options \['other'\] are ignored"):
        torch.compile(f, backend="neuron", options={"fallback_execution": False, "other": 1})(
            torch.randn(3, 4).to("neuron"))


def test_an_aot_autograd_failure_falls_back_too(monkeypatch):
    """A failure at the backend call itself (AOTAutograd's trace), not at the graph's first call."""
    table = backend._aot_decompositions()

    def sin_fails(x):
        raise RuntimeError("sin's decomposition is broken by the test")

    monkeypatch.setattr(backend, "_aot_decompositions", lambda: {**table, aten.sin.default: sin_fails})
    with pytest.raises(Exception, match=r"graph graph_\d+: op .*sin.*AOTAutograd could not trace it"):
        torch.compile(f, backend="neuron")(torch.randn(3, 4).to("neuron"))
    torch._dynamo.reset()
    monkeypatch.setenv(ENV, "0")
    (message,) = calls_match_the_cpu(torch.compile(f, backend="neuron"))
    assert "AOTAutograd could not trace it" in message


def test_training_falls_back_in_the_forward_and_in_the_backward(monkeypatch):
    """A forward that fails runs Dynamo's graph eagerly (autograd records it); a backward that fails
    (compiled at the first backward, after the compiled forward ran) runs AOTAutograd's backward graph
    eagerly. Gradients match the CPU's either way."""
    monkeypatch.setenv(ENV, "0")

    def loss(x, w):
        return (x.permute(1, 0) * w).sin().sum()

    def check(kind, op):
        torch._dynamo.reset()
        lowering = broken(op)
        try:
            g = torch.compile(loss, backend="neuron")
            x, w = torch.randn(3, 4), torch.randn(4, 3, requires_grad=True)
            wn = w.detach().to("neuron").requires_grad_()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for _ in range(2):
                    wn.grad = None
                    out = g(x.to("neuron"), wn)
                    out.backward()
        finally:
            LOWERINGS[op] = lowering
            specs.forget(op)
        want = loss(x, w)
        want.backward()
        torch.testing.assert_close(out.detach().cpu(), want.detach(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(wn.grad.cpu(), w.grad, rtol=1e-5, atol=1e-6)
        (message,) = fallback_warnings(caught)
        assert f"_{kind}: op {op}" in message

    check("forward", aten.permute.default)  # permute is in the forward (and its backward)
    check("backward", aten.expand.default)  # sum's gradient: an expand, in the backward only


def test_the_cpu_argument_checks_and_dynamic_true_never_fall_back(monkeypatch):
    monkeypatch.setenv(ENV, "0")
    a, b = torch.ones(2, 2, dtype=torch.long), torch.ones(2, 2)
    with pytest.raises(RuntimeError) as cpu_error:
        torch.mm(a, b)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError) as compiled_error:
            torch.compile(torch.mm, backend="neuron")(a.to("neuron"), b.to("neuron"))
    assert str(compiled_error.value) == f"aten.mm.default: {cpu_error.value}" and fallback_warnings(caught) == []
    with pytest.raises(Exception, match=r"static shapes only.*dynamic=True.*dynamic=False"):
        torch.compile(f, backend="neuron", dynamic=True)(torch.randn(3, 4).to("neuron"))


@pytest.fixture(scope="module")
def one_rank():
    import torch.distributed as dist

    dist.init_process_group("neuron", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60))
    yield dist.group.WORLD.group_name
    dist.destroy_process_group()


def test_a_split_graph_falls_back_only_before_its_first_step_ran(one_rank, broken_permute, monkeypatch):
    """A graph cut at a collective: a failure in its first segment falls back (nothing ran); one in a
    later segment raises, since the collective before it ran already and would run twice."""
    import torch.distributed._functional_collectives as fc

    monkeypatch.setenv(ENV, "0")

    def first(x):
        return fc.all_reduce(x.permute(1, 0).sin(), "sum", one_rank) * 2

    def later(x):
        return fc.all_reduce(x.sin(), "sum", one_rank).permute(1, 0) * 2

    assert len(calls_match_the_cpu(torch.compile(first, backend="neuron"), lambda x: x.permute(1, 0).sin() * 2)) == 1
    assert torch.neuron.get_dynamo_metrics()["split_graphs"]
    torch._dynamo.reset()
    with pytest.raises(NEFFCompilationError, match=r"op aten.permute.default .*could not be lowered.*no fallback "
                                                   r"execution: earlier steps of this call"):
        torch.compile(later, backend="neuron")(torch.randn(3, 4).to("neuron"))
