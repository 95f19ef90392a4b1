"""Index loops over many index lengths: what a new length costs, neuron with length buckets
(eager/index_lengths.py) and without them (TORCH_NEURONX_INDEX_LENGTH_BUCKETS=0), against the CPU.

    PYTHONPATH=. python benchmarks/index_lengths.py [--lengths 511] [--workloads put get get+sum mask]

Workloads, each a loop over `--lengths` distinct lengths n = 1..N (in a shuffled order, the same on every
side), on a (4096, 64) float32 tensor:
  put    x.index_put_((idx,), v, accumulate=True), idx (n,) and v (n, 64) built on the host, v moved
         to the device (library code's pattern: index lists and updates made on the host)
  get    y = x[idx] with a host idx of length n, read back
  get+sum  y = x[idx], then y.sum(0) read back: the op after the index still has an n-row input, and
         compiles per length on every neuron side (what buckets do not cover)
  mask   x[mask] with a device mask whose True count is n, read back
Every step waits for its result (a `.cpu()` read), so the figure is a step's whole cost.

Columns, per workload and side (each side a process of its own, an empty executable cache; torch
under its default threading):
  total s       the loop's wall time
  ms / length   total / N
  last half     ms per length over the second half of the loop (what a long loop pays per new length)
  executables   executables compiled in the loop (neuron sides)
  vs CPU        total / the CPU's total
Correctness: each side returns a digest of its results (the final x for put, the sum of every step's
read for get and mask); the neuron sides must equal the CPU's within float32 summation tolerance.

Run it alone: two processes timing at once on a small machine ruin both figures.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from child_process import run_json_child

HERE = os.path.abspath(__file__)


def child(spec: dict) -> dict:
    import torch

    dev = spec["device"]
    n_max = spec["lengths"]
    g = torch.Generator().manual_seed(0)
    order = (torch.randperm(n_max, generator=g) + 1).tolist()
    rows = 4096
    x = torch.randn(rows, 64, generator=g).to(dev)
    sync = (lambda: None) if dev == "cpu" else torch.neuron.synchronize
    compiled = None
    if dev != "cpu":
        from torch_neuronx import metrics

        def compiled():
            return sum(metrics.executables_by_kind()["compiled"].values())
    before = compiled() if compiled else 0
    steps, digest = [], 0.0
    t0 = time.perf_counter()
    for n in order:
        t = time.perf_counter()
        if spec["workload"] == "put":
            idx = torch.randint(0, rows, (n,), generator=g)
            v = torch.randn(n, 64, generator=g)
            x.index_put_((idx,), v.to(dev), accumulate=True)
            x[0, 0].item()
        elif spec["workload"] == "get":
            idx = torch.randint(0, rows, (n,), generator=g)
            digest += float(x[idx].cpu().double().sum())
        elif spec["workload"] == "get+sum":
            idx = torch.randint(0, rows, (n,), generator=g)
            digest += float(x[idx].sum(0).cpu().double().sum())
        else:
            scores = torch.rand(rows, generator=g)
            mask = torch.zeros(rows, dtype=torch.bool)
            mask[scores.argsort()[:n]] = True
            digest += float(x[mask.to(dev)].cpu().double().sum())
        steps.append(time.perf_counter() - t)
    sync()
    total = time.perf_counter() - t0
    if spec["workload"] == "put":
        digest = float(x.cpu().double().sum())
    half = steps[len(steps) // 2:]
    return {"total": total, "per": total / n_max * 1e3, "last_half": sum(half) / len(half) * 1e3,
            "compiled": (compiled() - before) if compiled else None, "digest": digest}


WORKLOADS = ("put", "get", "get+sum", "mask")
SIDES = [("CPU (torch)", "cpu", {}, False), ("neuron, buckets", "neuron", {}, True),
         ("neuron, exact lengths", "neuron", {"TORCH_NEURONX_INDEX_LENGTH_BUCKETS": "0"}, True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, default=511)
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    load = os.getloadavg()[0]
    rows = []
    for workload in args.workloads:
        got = {}
        for label, device, settings, autoload in SIDES:
            print(f"... {workload}: {label}", file=sys.stderr, flush=True)
            got[label] = run_json_child(HERE, {"device": device, "lengths": args.lengths, "workload": workload},
                                        label=f"{workload} {label}", settings=settings, autoload=autoload,
                                        timeout=3600)
        cpu = got["CPU (torch)"]
        for label, *_ in SIDES:
            r = got[label]
            same = abs(r["digest"] - cpu["digest"]) <= 1e-4 * max(1.0, abs(cpu["digest"]))
            rows.append((workload, label, r, r["total"] / cpu["total"], same))
    print(f"\n{args.lengths} distinct index lengths per loop, in a shuffled order; (4096, 64) float32; "
          f"{os.cpu_count()} CPUs; load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end\n")
    print("| workload | side | total s | ms / length | last half ms / length | executables | vs CPU | same as CPU |")
    print("|---|---|---|---|---|---|---|---|")
    for workload, label, r, ratio, same in rows:
        compiled = "" if r["compiled"] is None else r["compiled"]
        print(f"| {workload} | {label} | {r['total']:.2f} | {r['per']:.2f} | {r['last_half']:.2f} | {compiled} | "
              f"{ratio:.1f}x | {'yes' if same else 'NO'} |")
    if not all(same for *_, same in rows):
        raise SystemExit("a neuron side's results differ from the CPU's")


if __name__ == "__main__":
    main()
