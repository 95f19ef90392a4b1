"""torch_neuronx.metrics: what ran, what compiled (and how long), cache hits and misses, fallbacks."""
import torch

import torch_neuronx
from torch_neuronx import metrics


def test_counts_compiles_hits_and_report(memory_only_cache, no_fusion):
    x = torch.randn(5, 13, 3).to("neuron")  # a shape no other test uses: the first call compiles
    metrics.clear_op_tracking()
    for _ in range(4):
        y = torch.tanh(x)
    assert metrics.get_executed_ops()["aten.tanh.default"] == 4
    n, seconds = metrics.compile_stats()["aten.tanh.default"]
    assert n == 1 and seconds > 0
    assert metrics.cache_stats() == {"hits": 3, "misses": 1}
    report = metrics.report()
    header = report.splitlines()[0].split()
    assert header == ["op", "executed", "compiles", "compile", "ms", "cache", "hits", "fallbacks", "decomposed"]
    row = next(line for line in report.splitlines() if line.startswith("aten.tanh.default"))
    assert row.split()[1:3] == ["4", "1"] and row.split()[4] == "3"
    assert "cache: 3 hits, 1 misses; fallback ops: 0" in report
    torch.testing.assert_close(y.cpu(), torch.tanh(x.cpu()))
    counts = metrics.executable_counts()
    assert counts["ops_compiled"] == 1 and counts["ops_compile_s"] == seconds
    assert counts["ops_loaded"] == 0 and counts["load_s"] == 0  # no disk layer here


def test_executable_counts_count_a_graph_compiled_then_reused(memory_only_cache):
    torch.neuron.reset_dynamo_metrics()
    torch._dynamo.reset()
    try:
        f = torch.compile(lambda a: torch.sin(a) * 3 + 1, backend="neuron", fullgraph=True, dynamic=False)
        a = torch.randn(7, 11, 2)
        got = f(a.to("neuron"))
        first = metrics.executable_counts()
        assert first["graphs_compiled"] == 1 and first["graphs_compile_s"] >= first["graphs_lower_s"] > 0
        f(a.to("neuron"))
        assert metrics.executable_counts()["graphs_compiled"] == 1  # the same shapes: no compile
        torch.testing.assert_close(got.cpu(), torch.sin(a) * 3 + 1)
    finally:
        torch._dynamo.reset()
        torch.neuron.reset_dynamo_metrics()


def test_clear_op_tracking_and_top_level_api():
    torch.ones(2, device="neuron") + 1
    assert torch_neuronx.get_executed_ops()
    torch_neuronx.clear_op_tracking()
    assert torch_neuronx.get_executed_ops() == {} and torch_neuronx.get_fallback_ops() == {}
    assert metrics.cache_stats() == {"hits": 0, "misses": 0}
