"""What the time estimate costs: the cost analysis at compile time, and the count at each launch.

    PYTHONPATH=. python benchmarks/cost_analysis.py [--rounds N]

Part 1, compile time: every executable the package compiles (`runtime.executables.compile_lowered`)
gets a cost analysis (`runtime.costs.analyze`: XLA's analysis of the compiled program and the products
counted in its optimized text, which `runtime.executables.optimized_text` reads once for it and for the
record of the custom-call targets the executable calls; the analysis column includes that read). This runs real workloads with an empty executable cache (eager ops with
fusion off, a fused run, the tiny FLUX.2 transformer compiled whole) and times, per executable, XLA's
compile and the analysis apart. Target: the analysis adds at most 5% to compile time.

Part 2, a warm launch: an eager op launched on its own (fusion off, the executable in memory) with the
launch counted against its analysis, and with the count taken out (the executable's analysis removed),
interleaved rounds in one process. Target: nothing measurable.

One process of its own (no torch CPU side: nothing here compares against torch); run it alone.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = tempfile.mkdtemp(prefix="cost-analysis-")

    import torch

    import torch_neuronx  # noqa: F401
    from torch_neuronx.eager import fusion
    from torch_neuronx.runtime import costs, executables

    records = []  # (what, compile s, analysis s, GFLOP)
    compile_lowered = executables.compile_lowered
    analyze = costs.analyze

    optimized_text = executables.optimized_text

    def timed_text(compiled):  # the program's text, read for the analysis and the custom-call record
        start = time.perf_counter()
        text = optimized_text(compiled)
        records[-1][2] += time.perf_counter() - start
        return text

    def timed_analyze(compiled, hlo):
        start = time.perf_counter()
        cost = analyze(compiled, hlo)
        records[-1][2] += time.perf_counter() - start
        records[-1][3] = cost.flops / 1e9 if cost else 0.0
        return cost

    def timed_compile(lowered, small):
        records.append([current[0], 0.0, 0.0, 0.0])
        start = time.perf_counter()
        compiled = compile_lowered(lowered, small)
        records[-1][1] = time.perf_counter() - start - records[-1][2]
        return compiled

    executables.compile_lowered, costs.analyze = timed_compile, timed_analyze
    executables.optimized_text = timed_text
    current = ["eager ops (fusion off)"]
    with torch.no_grad():
        with fusion.disabled():
            for n in (64, 256, 1024):
                x = torch.randn(n, n, device="neuron")
                ((x @ x).softmax(-1) + x).sum().cpu()
        current[0] = "fused runs"
        for n in (64, 256, 1024):
            x = torch.randn(n, n, device="neuron")
            ((x @ x).softmax(-1) * 2 + x).relu().sum().cpu()
        current[0] = "FLUX.2 tiny, compiled whole"
        from test_models import _to, flux2_inputs, flux2_transformer

        model = flux2_transformer().to("neuron")
        compiled = torch.compile(model, backend="neuron", fullgraph=True, dynamic=False)
        compiled(**_to(flux2_inputs(torch.float32), "neuron"))[0].cpu()
    executables.compile_lowered, costs.analyze = compile_lowered, analyze
    executables.optimized_text = optimized_text

    print("part 1: compile time, per kind of executable (empty cache; load average "
          f"{os.getloadavg()[0]:.2f} at the end)")
    rows = [("executables", "count", "XLA compile s", "analysis s", "analysis / compile", "GFLOP analysed")]
    kinds = []
    for what, *_ in records:
        if what not in kinds:
            kinds.append(what)
    total_c = total_a = 0.0
    for what in kinds:
        rs = [r for r in records if r[0] == what]
        c, a = sum(r[1] for r in rs), sum(r[2] for r in rs)
        total_c, total_a = total_c + c, total_a + a
        rows.append((what, str(len(rs)), f"{c:.3f}", f"{a:.4f}", f"{a / c * 100:.2f}%", f"{sum(r[3] for r in rs):.3f}"))
    rows.append(("all", str(len(records)), f"{total_c:.3f}", f"{total_a:.4f}", f"{total_a / total_c * 100:.2f}%", ""))
    _table(rows)
    print(f"target: the analysis adds at most 5% to compile time: {'met' if total_a <= 0.05 * total_c else 'NOT met'}")

    # part 2: a warm launch, counted and not
    with fusion.disabled():
        x = torch.randn(64, 64, device="neuron")
        y = x + x  # its executable compiled and in memory
        torch.neuron.synchronize()
        from torch_neuronx.cache import executable_cache

        entries = [e for e, _n in executable_cache().memory.entries.values() if getattr(e, "name", "") == "aten.add.Tensor"]
        fn = entries[0].fn
        cost = fn._neuron_cost

        def loop(n=2000):
            start = time.perf_counter()
            for _ in range(n):
                x + x
            torch.neuron.synchronize()
            return (time.perf_counter() - start) / n * 1e6

        counted, uncounted = [], []
        for _ in range(args.rounds):
            fn._neuron_cost = cost
            counted.append(loop())
            fn._neuron_cost = None
            uncounted.append(loop())
        fn._neuron_cost = cost
    del y
    print()
    print(f"part 2: a warm launch of add 64x64 on its own (fusion off), median of {args.rounds} interleaved rounds "
          f"of 2000 (load average {os.getloadavg()[0]:.2f})")
    c, u = statistics.median(counted), statistics.median(uncounted)
    _table([("launch", "us per call"), ("counted (the default)", f"{c:.2f}"), ("not counted", f"{u:.2f}"),
            ("difference", f"{c - u:+.2f} ({(c - u) / u * 100:+.1f}%)")])
    spread = statistics.pstdev(uncounted)
    print(f"run-to-run spread of the uncounted rounds: {spread:.2f} us")


def _table(rows) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for j, r in enumerate(rows):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if j == 0:
            print("-" * (sum(widths) + 2 * (len(widths) - 1)))


if __name__ == "__main__":
    main()
