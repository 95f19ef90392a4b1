"""torch.compile(backend="neuron") on a small FLUX.2 transformer, side by side in one run.

    python benchmarks/compile.py [--rounds N] [--blocks D S] [--tokens IMG TXT]

Prints two tables:
1. forward time (median over interleaved rounds, waiting for the result) of: compiled on neuron,
   eager on neuron, eager on the CPU, torch.compile's default backend (Inductor) on the CPU; each as a
   ratio to eager CPU. Target: compiled neuron below 1.0 in float32.
2. compile time of the whole graph (`model.compile(backend="neuron", fullgraph=True)`) vs regional
   compilation (`compile_repeated_blocks`): the first call's wall time, and the XLA compile seconds
   the metrics record. Target: regional at most a third of whole for a model with >= 8 blocks.
Eager neuron runs first, so the eager executables the regional model needs outside its blocks are
already in the in-memory cache in both compile measurements (as they are in any warm process).
"""
from __future__ import annotations

import argparse
import copy
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see eager_overhead.py
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from test_models import _to  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from flux_small import build, inputs  # noqa: E402


def timed(fn):
    start = time.perf_counter()
    out = fn()
    if out.device.type == "neuron":
        out.cpu()  # wait for the device
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--blocks", type=int, nargs=2, default=(4, 8), metavar=("DOUBLE", "SINGLE"))
    parser.add_argument("--tokens", type=int, nargs=2, default=(256, 32), metavar=("IMG", "TXT"))
    args = parser.parse_args()
    import torch_neuronx
    import torch_neuronx.compile

    model = build(*args.blocks)
    x_cpu = inputs(*args.tokens)
    x_dev = _to(x_cpu, "neuron")
    dev = copy.deepcopy(model).to("neuron")
    whole = copy.deepcopy(model).to("neuron")
    regional = copy.deepcopy(model).to("neuron")
    inductor = torch.compile(copy.deepcopy(model))

    torch.set_grad_enabled(False)
    runs = {
        "eager CPU": lambda: model(**x_cpu)[0],
        "torch.compile (Inductor) CPU": lambda: inductor(**x_cpu)[0],
        "eager neuron": lambda: dev(**x_dev)[0],
    }
    for name, fn in list(runs.items()):  # warm up: compiles, caches
        fn()

    compile_rows = []
    for label, model_dev, how in (("whole graph", whole, "compile"), ("compile_repeated_blocks", regional, "regional")):
        torch._dynamo.reset()
        torch_neuronx.compile.clear_cache()
        torch.neuron.reset_dynamo_metrics()
        if how == "compile":
            model_dev.compile(backend="neuron", fullgraph=True, dynamic=False)
        else:
            model_dev.compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)
        first = timed(lambda: model_dev(**x_dev)[0])
        m = torch.neuron.get_dynamo_metrics()
        compile_rows.append((label, first, m["compile_time_s"], m["graphs_compiled"], sum(g["nodes"] for g in m["graphs"])))
    runs["compiled neuron (whole graph)"] = lambda: whole(**x_dev)[0]
    runs["compiled neuron (regional)"] = lambda: regional(**x_dev)[0]

    times = {name: [] for name in runs}
    for _ in range(args.rounds):  # interleaved, so machine noise hits every variant alike
        for name, fn in runs.items():
            times[name].append(timed(fn))
    base = statistics.median(times["eager CPU"])
    d, s = args.blocks
    n, t = args.tokens
    params = sum(p.numel() for p in model.parameters())
    print(f"FLUX.2 transformer, {d} double + {s} single blocks, {params / 1e6:.1f} M parameters, "
          f"{n} image + {t} text tokens, float32, median of {args.rounds} interleaved rounds")
    print(f"{'variant':34} {'ms':>9} {'vs eager CPU':>13}")
    for name in ("compiled neuron (whole graph)", "compiled neuron (regional)", "eager neuron", "eager CPU",
                 "torch.compile (Inductor) CPU"):
        ms = statistics.median(times[name]) * 1e3
        print(f"{name:34} {ms:9.2f} {ms / 1e3 / base:13.2f}")
    print()
    print(f"{'compilation':26} {'first call s':>12} {'XLA compile s':>14} {'graphs':>7} {'nodes':>7}")
    for label, first, xla_s, graphs, nodes in compile_rows:
        print(f"{label:26} {first:12.2f} {xla_s:14.2f} {graphs:7d} {nodes:7d}")
    (_, whole_first, whole_xla, *_), (_, reg_first, reg_xla, *_) = compile_rows
    print(f"regional / whole: first call {reg_first / whole_first:.2f}, XLA compile {reg_xla / whole_xla:.2f} "
          f"(target <= 0.33)")


if __name__ == "__main__":
    main()
