"""torch_neuronx.metrics: what ran, what compiled (and how long), cache hits and misses, fallbacks."""
import torch

import torch_neuronx
from torch_neuronx import metrics


def test_counts_compiles_hits_and_report(memory_only_cache):
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


def test_clear_op_tracking_and_top_level_api():
    torch.ones(2, device="neuron") + 1
    assert torch_neuronx.get_executed_ops()
    torch_neuronx.clear_op_tracking()
    assert torch_neuronx.get_executed_ops() == {} and torch_neuronx.get_fallback_ops() == {}
    assert metrics.cache_stats() == {"hits": 0, "misses": 0}
