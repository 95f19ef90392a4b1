"""Ops whose compiled graphs (torch.compile(backend="neuron", fullgraph=True)) ran parts on the host,
or failed, where eager mode did not: ops PyTorch gives a CompositeExplicitAutograd kernel (eager runs
it over our lowerings, AOTAutograd keeps the op whole), views of a functional graph (_conj), and a
PyTorch decomposition that fails on AOTAutograd's fake tensors (take). Each compiled result is
compared with eager mode on the CPU, and each graph must have run on the device with no host op.
The new lowerings are also checked on their own against the CPU kernel (tests/lowering_harness.py)."""
import pytest
import torch

import torch_neuronx
import torch_neuronx.neuron_dynamo_backend as ndb
from helpers import randn
from lowering_harness import check_lowering, run_lowering
from torch_neuronx.compile import backend as neuron_backend
from torch_neuronx.compile import clear_cache
from tolerances import tol


@pytest.fixture(autouse=True)
def _counted_compiles(memory_only_cache):
    """compiled_vs_cpu checks the graph it compiles (its fallbacks): none may come from disk."""


def _graph_runs() -> int:
    return sum(torch.neuron.get_dynamo_metrics()["executions"].values())


def _on_neuron(v):
    return v.to("neuron") if isinstance(v, torch.Tensor) else v


def compiled_vs_cpu(fn, *args, rtol=None, atol=None, **kwargs):
    """fn compiled for neuron (one whole graph) on copies of args vs fn in eager mode on the CPU."""
    torch._dynamo.reset()
    clear_cache()  # a graph identical to an earlier test's would reuse it, and record no compile
    torch.neuron.reset_dynamo_metrics()
    want = fn(*args, **kwargs)
    got = torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False)(
        *[_on_neuron(a) for a in args], **{k: _on_neuron(v) for k, v in kwargs.items()})
    metrics = torch.neuron.get_dynamo_metrics()
    assert _graph_runs() >= 1 and metrics["graphs"], "no compiled graph ran"
    for i in range(len(metrics["graphs"])):
        assert metrics["graphs"][i]["fallback_ops"] == [], metrics["graphs"][i]
    assert got.device.type == "neuron"
    # a lazy conjugate / negative view on the CPU is one on neuron too (view_as_real refuses both)
    assert (got.is_conj(), got.is_neg()) == (want.is_conj(), want.is_neg())
    torch.testing.assert_close(got.cpu(), want, rtol=rtol, atol=atol)
    return got


# ---- cholesky_solve (CompositeExplicitAutograd: it reached compiled graphs whole and ran on the host)


def _factor(n, batch=(), seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*batch, n, n, generator=g)
    return torch.linalg.cholesky(a @ a.mT + n * torch.eye(n))


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve(upper):
    g = torch.Generator().manual_seed(1)
    L = _factor(4)
    factor = L.mT.contiguous() if upper else L
    b = torch.randn(4, 3, generator=g)
    compiled_vs_cpu(lambda b, f: torch.cholesky_solve(b, f, upper=upper), b, factor)


def test_cholesky_solve_broadcasts_batches():
    g = torch.Generator().manual_seed(2)
    b = torch.randn(2, 1, 5, 2, generator=g)
    compiled_vs_cpu(lambda b, f: torch.cholesky_solve(b * 2, f), b, _factor(5, (3,)))


# ---- _conj / _conj_physical (the conjugations in the fft graphs of real inputs)


@pytest.mark.parametrize("fn", [torch.fft.ifft, torch.fft.hfft, torch.fft.hfftn, torch.fft.ihfft, torch.fft.ihfftn],
                         ids=lambda f: f.__name__)
def test_fft_conjugations(fn):
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(3))
    compiled_vs_cpu(fn, x)


def test_conj_of_a_complex_intermediate():
    # _conj is a view (the conjugate bit) in eager; in the graph it is the conjugated values
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(4))
    compiled_vs_cpu(lambda x: torch.view_as_real(torch.fft.fft(x).conj() * 2), x)
    compiled_vs_cpu(lambda x: torch.view_as_real(torch._conj_physical(torch.fft.rfft(x)) + 1), x)


@pytest.mark.parametrize("case", ["conj", "conj_of_input", "conj_imag", "neg_view", "resolved"])
def test_conjugate_and_negative_views(case):
    fn = {
        "conj": lambda c: (c * 2).conj(),
        "conj_of_input": lambda c: c.conj(),
        "conj_imag": lambda c: (c * 2).conj().imag,  # a negative view (_neg_view in the graph)
        "neg_view": lambda c: torch._neg_view(c + 1) * 3,
        "resolved": lambda c: (c * 2).conj().resolve_conj() + 1,
    }[case]
    c = torch.complex(randn(3, 2, seed=5), randn(3, 2, seed=6))
    compiled_vs_cpu(fn, c)


def test_conj_lowering_refuses_real_input():
    # PyTorch (CPU, meta, fake) asserts a complex tensor; the lowering gives no meaning to a real one
    from torch_neuronx.runtime.lazy_jax import jnp
    from torch_neuronx.ops import LOWERINGS

    with pytest.raises(RuntimeError, match="_conj: expected a complex tensor"):
        LOWERINGS[torch.ops.aten._conj.default].fn(jnp.ones((2,), jnp.float32))
    assert LOWERINGS[torch.ops.aten._conj_physical.default].fn(jnp.ones((2,), jnp.float32)).dtype == jnp.float32


# ---- linalg.pinv (CompositeExplicitAutogradNonFunctional; its host call also lost its tensor kwargs)


@pytest.mark.parametrize("kwargs", [{}, {"rtol": None}, {"rtol": 1.0}, {"rtol": 0.3}, {"atol": 0.5},
                                    {"atol": 0.2, "rtol": 0.1}], ids=str)
def test_pinv(kwargs):
    compiled_vs_cpu(lambda x: torch.linalg.pinv(x, **kwargs), randn(5, 3, seed=5))


def test_pinv_tensor_tolerances_and_batches():
    a = randn(2, 4, 4, seed=5)
    rtol = torch.tensor([0.0, 0.5])
    compiled_vs_cpu(lambda x, r: torch.linalg.pinv(x, rtol=r), a, rtol)
    compiled_vs_cpu(lambda x, t: torch.linalg.pinv(x, atol=t), a, torch.tensor(1.0))


@pytest.mark.parametrize("kwargs", [{}, {"rtol": 0.3}, {"atol": 2.0}], ids=str)
def test_pinv_hermitian(kwargs):
    a = randn(4, 4, seed=5)
    sym = a + a.mT  # indefinite: eigenvalues of both signs
    compiled_vs_cpu(lambda x: torch.linalg.pinv(x, hermitian=True, **kwargs), sym)


def test_pinv_empty():
    compiled_vs_cpu(lambda x: torch.linalg.pinv(x + 1), torch.zeros(3, 0, 2))


# ---- take (PyTorch's decomposition reads a 0-d index with .item(): it failed on fake tensors)


@pytest.mark.parametrize("shape,index", [
    ((3, 3), [6, 3, 3]), ((3, 3), [-7, -4, -4]), ((), 0), ((), [0]), ((1,), 0), ((2, 3), [[0, -1], [5, 2]]),
    ((3, 3), torch.zeros(0, 2, dtype=torch.long)),
], ids=str)
def test_take(shape, index):
    x = randn(*shape, seed=5) if shape else torch.tensor(1.5)
    index = index if isinstance(index, torch.Tensor) else torch.tensor(index)
    compiled_vs_cpu(lambda x, i: torch.take(x * 2, i), x, index)


def test_take_out_of_range_raises_naming_the_op():
    f = torch.compile(lambda x, i: torch.take(x, i), backend="neuron", fullgraph=True)
    x = torch.randn(3, 3, device="neuron")
    assert f(x, torch.tensor([8, -9], device="neuron")).shape == (2,)
    with pytest.raises(ndb.NEFFExecutionError, match=r"op aten\.take\.default .*IndexError: out of range"):
        f(x, torch.tensor([9, 0], device="neuron"))


def test_a_failed_aot_trace_names_the_op(monkeypatch):
    # PyTorch's take decomposition put back into AOTAutograd's table: its failure on a fake 0-d index
    # must say which op, not just "backend='neuron' raised"
    from torch._decomp import decomposition_table

    table = neuron_backend._aot_decompositions()
    take = torch.ops.aten.take.default
    monkeypatch.setattr(neuron_backend, "_aot_decompositions", lambda: {**table, take: decomposition_table[take]})
    torch._dynamo.reset()
    f = torch.compile(lambda x, i: torch.take(x * 2, i), backend="neuron", fullgraph=True)
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as info:
        f(torch.randn(3, device="neuron"), torch.tensor(1, device="neuron"))
    inner = info.value.inner_exception
    assert isinstance(inner, ndb.NEFFCompilationError)
    assert str(inner).startswith("graph ") and "op torch.take (node 'take')" in str(inner)
    assert "in PyTorch's decomposition of aten.take.default" in str(inner)
    torch._dynamo.reset()


# ---- the new lowerings on their own, vs the CPU kernel (dtypes included)

aten = torch.ops.aten


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_lowering(dtype, upper):
    L = _factor(4, (2,)).to(dtype)
    check_lowering(aten.cholesky_solve.default, randn(3, 1, 4, 2, seed=5).to(dtype), L.mT if upper else L, upper)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("hermitian", [False, True])
@pytest.mark.parametrize("tols", [(None, None), (None, torch.tensor(0.4)), (torch.tensor(0.5), None),
                                  (torch.tensor([0.3], dtype=torch.float32), torch.tensor([0.2], dtype=torch.float32)),
                                  (None, torch.tensor(0))], ids=str)
def test_pinv_lowering(dtype, hermitian, tols):
    a = randn(2, 4, 4, seed=5).to(dtype)
    a = a + a.mT if hermitian else a
    atol, rtol = tols
    # (not check_lowering: pinv's own atol/rtol arguments would shadow its tolerances)
    want = aten.linalg_pinv.atol_rtol_tensor(a, atol=atol, rtol=rtol, hermitian=hermitian)
    got = run_lowering(aten.linalg_pinv.atol_rtol_tensor, a, atol=atol, rtol=rtol, hermitian=hermitian)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, **tol("pinv", dtype, want))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.complex64])
def test_take_lowering(dtype):
    x = (randn(3, 4, seed=5) * 4).to(dtype)
    check_lowering(aten.take.default, x, torch.tensor([[0, -1, 5], [11, -12, 3]]))
    check_lowering(aten.take.default, x, torch.tensor(-3))


def test_conj_lowerings():
    c = torch.complex(randn(3, 2, seed=5), randn(3, 2, seed=6))
    check_lowering(aten._conj_physical.default, c)
    check_lowering(aten._conj_physical.default, randn(3, seed=5))
    got = run_lowering(aten._conj.default, c)
    assert not got.is_conj() and torch.equal(got, c.conj().resolve_conj())
    x = randn(4, seed=5)
    assert torch.equal(run_lowering(aten._neg_view.default, x), -x)
    with pytest.raises(RuntimeError, match="neg_cpu"):
        run_lowering(aten._neg_view.default, torch.tensor([True]))


# ---- the host call of an unlowered op: tensors in kwargs and in Tensor[] arguments reach the host


# defined by hand: custom_op refuses kwarg-only tensors, and a kwarg-only tensor is the case in point
_lib = torch.library.Library("neuron_test_ops", "DEF")
_lib.define("weighted_total(Tensor[] xs, *, Tensor weight) -> Tensor")
_lib.impl("weighted_total", lambda xs, *, weight: sum(x * weight for x in xs), "CPU")
torch.library.register_fake("neuron_test_ops::weighted_total", lambda xs, *, weight: torch.empty_like(xs[0]),
                            lib=_lib)
weighted_total = torch.ops.neuron_test_ops.weighted_total


@pytest.mark.cpu_fallback
def test_host_call_passes_tensor_lists_and_kwargs():
    import warnings

    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    a, b, w = torch.arange(4.0), torch.ones(4), torch.full((4,), 3.0)
    want = weighted_total([a, b * 2], weight=w) + 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(lambda a, b, w: weighted_total([a, b * 2], weight=w) + 1, backend="neuron",
                            fullgraph=True)(a.to("neuron"), b.to("neuron"), w.to("neuron"))
    assert got.cpu().tolist() == want.tolist()
    (g,) = torch.neuron.get_dynamo_metrics()["graphs"]
    assert g["fallback_ops"] == ["neuron_test_ops.weighted_total.default"]
    assert torch_neuronx.get_fallback_ops() == {"neuron_test_ops.weighted_total.default": 1}
