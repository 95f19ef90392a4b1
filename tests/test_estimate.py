"""Time estimates on a Trainium core (runtime/costs.py): each executable's cost analysis against the
analytic count of its work, the estimate's report and CLI (the analysis kept with the disk cache's entry:
tests/test_warm_cache.py's warm pass), the recompile counter, and a collective's estimate.

The reference for a product's FLOPs is its analytic count (2mkn for a matmul; QK^T and PV for
attention; 2 x output elements x kernel elements per output channel for a convolution), and for a whole
model torch's own FlopCounterMode run on the CPU on the same model and inputs (its matmuls) plus the
attention counted from the model's config."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import randn, run_python
from test_models import _to, flux2_inputs, flux2_transformer

from torch_neuronx import metrics
from torch_neuronx.runtime import costs, targets

D = "neuron"


def _work(fn) -> tuple[dict, float, float]:
    """(product FLOPs by dtype, all FLOPs, bytes) of what `fn` launched, once its work is done."""
    torch.neuron.synchronize()
    metrics.clear_op_tracking()
    kept = fn()  # held over the synchronize: a result nobody holds is never computed
    torch.neuron.synchronize()
    del kept
    rows = metrics.estimates()
    assert rows, "nothing was launched"
    products: dict = {}
    for r in rows:
        for dtype, flops in r["products"].items():
            products[dtype] = products.get(dtype, 0.0) + flops * r["launches"]
    return products, sum(r["flops"] * r["launches"] for r in rows), sum(r["bytes"] * r["launches"] for r in rows)


def _close(got: float, want: float, tol: float = 0.05) -> bool:
    return abs(got - want) <= tol * want


def _cases():
    a, b = randn(96, 160, seed=1), randn(160, 72, seed=2)
    x, y = randn(6, 40, 24, seed=3), randn(6, 24, 56, seed=4)
    q, k, v = randn(2, 4, 48, 32, seed=5), randn(2, 4, 40, 32, seed=6), randn(2, 4, 40, 16, seed=7)
    img, w = randn(2, 3, 20, 20, seed=8), randn(8, 3, 3, 3, seed=9)
    return {
        "matmul": ((a, b), lambda a, b: a @ b, "float32", 2 * 96 * 160 * 72),
        "bmm": ((x, y), torch.bmm, "float32", 2 * 6 * 40 * 24 * 56),
        "attention f32": ((q, k, v), F.scaled_dot_product_attention, "float32",
                          2 * 2 * 4 * 48 * 40 * 32 + 2 * 2 * 4 * 48 * 40 * 16),
        # on the CPU platform bf16 attention runs torch's kernel through a custom call, which XLA's own
        # analysis cannot see: counted from the call's shapes
        "attention bf16": ((q.bfloat16(), k.bfloat16(), v.bfloat16()), F.scaled_dot_product_attention, "bfloat16",
                           2 * 2 * 4 * 48 * 40 * 32 + 2 * 2 * 4 * 48 * 40 * 16),
        "conv2d": ((img, w), lambda i, w: F.conv2d(i, w, padding=1), "float32", 2 * 2 * 8 * 20 * 20 * 3 * 3 * 3),
    }


@pytest.mark.parametrize("case", list(_cases()))
def test_product_flops_match_the_analytic_count(case):
    inputs, fn, dtype, analytic = _cases()[case]
    on_device = [t.to(D) for t in inputs]
    products, total, _ = _work(lambda: fn(*on_device))
    assert set(products) == {dtype}, products
    assert _close(products[dtype], analytic), (products, analytic)
    assert total >= products[dtype]
    # the results are the CPU's too (what was estimated is what ran)
    torch.testing.assert_close(fn(*on_device).cpu().float(), fn(*inputs).float(), rtol=2e-2, atol=2e-2)


def test_elementwise_bytes_are_the_bytes_in_and_out():
    n = 1 << 18
    u, t = randn(n, seed=1).to(D), randn(n, seed=2).to(D)
    products, _total, nbytes = _work(lambda: u + t)
    assert products == {}
    assert _close(nbytes, 3 * 4 * n), nbytes
    torch.testing.assert_close((u + t).cpu(), u.cpu() + t.cpu())


def test_flux2_forward_flops_match_torchs_flop_counter():
    from torch.utils.flop_counter import FlopCounterMode

    model = flux2_transformer()
    inputs = flux2_inputs(torch.float32)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        want = model(**inputs)[0]
    # torch's counter counts the linear layers (mm); on the CPU it does not see the attention kernel,
    # counted here from the config: QK^T and PV over every token pair, per head, in every block
    config = model.config
    tokens = inputs["hidden_states"].shape[1] + inputs["encoder_hidden_states"].shape[1]
    blocks = config.num_layers + config.num_single_layers
    attention = blocks * 2 * (2 * config.num_attention_heads * tokens * tokens * config.attention_head_dim)
    assert set(counter.get_flop_counts()["Global"]) == {torch.ops.aten.mm}
    analytic = counter.get_total_flops() + attention
    device_model = model.to(D)
    device_inputs = _to(inputs, D)
    out = []
    with torch.no_grad():
        products, _total, _bytes = _work(lambda: out.append(device_model(**device_inputs)[0]))
    assert _close(sum(products.values()), analytic), (products, analytic)
    torch.testing.assert_close(out[0].cpu(), want, rtol=1e-4, atol=1e-4)


def test_estimate_is_a_roofline_of_the_target():
    trn2 = targets.target_named("trn2", 2)
    assert trn2.memory_bytes == 24 * 2**30
    assert math.isclose(trn2.peak_flops("bfloat16"), 667e12 / 4)
    assert math.isclose(trn2.hbm_bandwidth, 2.9e12 / 4)
    big = costs.Cost({"bfloat16": 2 * 4096**3}, 0.0, 0.0, 3 * 2 * 4096**2)
    est = costs.estimate(big, trn2)
    assert est.compute_bound
    assert math.isclose(est.seconds, 2 * 4096**3 / (667e12 / 4) + trn2.chip.launch_seconds)
    small = costs.Cost({}, 1e6, 0.0, 12e6)
    est = costs.estimate(small, trn2)
    assert not est.compute_bound
    assert math.isclose(est.seconds, 12e6 / (2.9e12 / 4) + trn2.chip.launch_seconds)
    # LNC=1 halves the core
    assert math.isclose(targets.target_named("trn2", 1).peak_flops("bfloat16"), 667e12 / 8)


def test_report_and_summary_name_the_top_executables():
    a = randn(128, 128, seed=1).to(D)
    bs = [randn(128, 128, seed=2 + i).to(D) for i in range(3)]  # three products (XLA merges equal ones)
    _work(lambda: [a @ b for b in bs])
    summary = metrics.estimate_summary()
    assert summary["target"] == "one Trn2 NeuronCore (LNC=2)"
    assert summary["launches"] >= 1 and summary["seconds"] > 0
    assert _close(summary["flops"], 3 * 2 * 128**3)
    report = metrics.estimate_report()
    assert "estimated on one Trn2 NeuronCore (LNC=2)" in report and "aten.mm.default" in report
    assert "estimated on" in metrics.report()


def _distinct_and_warnings(setup: str, loop: str, what: tuple, warning: str, **env) -> str:
    """In a child process: `setup`, then `loop` (indented code) with warnings recorded; prints the distinct
    (executables, input shapes) of `what` and how many warnings contained `warning`."""
    code = (
        "import copy, warnings, torch, torch_neuronx\n"
        "from torch_neuronx import metrics\n"
        "warnings.simplefilter('always')\n"
        f"{setup}"
        "with warnings.catch_warnings(record=True) as caught, torch.no_grad():\n"
        f"{loop}"
        f"print('DISTINCT', *metrics.distinct_executables()[{what!r}])\n"
        f"print('WARN', sum({warning!r} in str(w.message) for w in caught))\n"
    )
    r = run_python(code, **env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_recompiles_are_counted_per_op_and_warned_under_a_target():
    loop = ("    for n in range(1, 7):\n"
            "        x = torch.ones(n, 3, device='neuron')\n"
            "        assert float((x * 2).sum().cpu()) == 6 * n\n")
    args = ("", loop, ("op", "aten.mul.Tensor"), "aten.mul.Tensor has needed 4 distinct executables")
    out = _distinct_and_warnings(*args, TORCH_NEURONX_TARGET="trn2", TORCH_NEURONX_RECOMPILE_WARN="4")
    assert "DISTINCT 6 6" in out and "WARN 1" in out, out
    quiet = _distinct_and_warnings(*args, TORCH_NEURONX_RECOMPILE_WARN="4")  # no target: counted, not warned
    assert "DISTINCT 6 6" in quiet and "WARN 0" in quiet, quiet


def test_a_model_fed_drifting_shapes_counts_its_fused_runs():
    setup = ("torch.manual_seed(0)\n"
             "model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))\n"
             "device_model = copy.deepcopy(model).to('neuron')\n")
    loop = ("    for batch in (3, 5, 3, 7, 9, 5, 11):\n"
            "        x = torch.randn(batch, 8)\n"
            "        torch.testing.assert_close(device_model(x.to('neuron')).cpu(), model(x), rtol=1e-5, atol=1e-5)\n")
    out = _distinct_and_warnings(setup, loop, ("run", "fused runs"), "fused runs has needed 5 distinct executables",
                                 TORCH_NEURONX_TARGET="trn2", TORCH_NEURONX_RECOMPILE_WARN="5",
                                 TORCH_NEURONX_EAGER_FUSION="1")
    # five batch sizes: five runs compiled (the repeated ones hit memory), warned once at the fifth
    assert "DISTINCT 5 5" in out and "WARN 1" in out, out


def test_estimate_command_prints_the_report_at_exit(tmp_path):
    script = tmp_path / "script.py"
    script.write_text("import torch\na = torch.ones(32, 32, device='neuron')\nassert float((a @ a).sum().cpu()) == 32**3\n")
    r = run_python(args=["-m", "torch_neuronx.cli", "estimate", "--target", "trn1", "--", "python", str(script)],
                   PATH=f"{__import__('os').path.dirname(__import__('sys').executable)}:{__import__('os').environ['PATH']}",
                   TORCH_NEURONX_EAGER_FUSION="1")  # its ops as one fused run
    assert r.returncode == 0, r.stderr
    # the script's ops ran as one fused run: ones, mm, sum
    assert "estimated on one Trn1 NeuronCore (LNC=1)" in r.stderr, r.stderr
    assert "a fused run of 3 ops (aten.ones.default ... aten.sum.default)" in r.stderr, r.stderr
    assert "1 launches (0.00 GFLOP" in r.stderr and "measured here" in r.stderr, r.stderr


def test_collective_estimates_follow_the_ring():
    trn2 = targets.target_named("trn2", 2)
    bw = trn2.collective_bandwidth
    fixed = trn2.chip.collective_seconds
    assert math.isclose(costs.collective_estimate("all_reduce", 8e6, 4, trn2), 2 * 3 / 4 * 8e6 / bw + fixed)
    assert math.isclose(costs.collective_estimate("all_gather_into_tensor", 8e6, 4, trn2), 3 / 4 * 8e6 / bw + fixed)
    assert math.isclose(costs.collective_estimate("reduce_scatter_tensor", 2e6, 4, trn2), 3 * 2e6 / bw + fixed)
    assert math.isclose(costs.collective_estimate("all_reduce", 8e6, 1, trn2), fixed)


def test_target_figures_can_be_overridden():
    code = (
        "from torch_neuronx.runtime import targets\n"
        "t = targets.current()\n"
        "print(t.name, t.lnc, t.hbm_bandwidth, t.chip.launch_seconds)\n"
    )
    r = run_python(code, TORCH_NEURONX_TARGET="trn3", NEURON_LOGICAL_NC_CONFIG="1",
                   TORCH_NEURONX_TARGET_FIGURES="hbm_bandwidth=8e12,launch_seconds=2e-5")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["trn3", "1", str(8e12 / 8), "2e-05"], r.stdout
    bad = run_python(code, TORCH_NEURONX_TARGET="trn1", NEURON_LOGICAL_NC_CONFIG="2")
    assert bad.returncode != 0 and "NEURON_LOGICAL_NC_CONFIG=2: trn1 supports a logical core of 1" in bad.stderr
    unknown = run_python(code, TORCH_NEURONX_TARGET="trn2", TORCH_NEURONX_TARGET_FIGURES="warp_speed=9")
    assert unknown.returncode != 0 and "'warp_speed' is not a target figure" in unknown.stderr
