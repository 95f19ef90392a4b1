"""Per-op cost of eager mode: neuron vs the CPU, measured side by side in one run.

    python benchmarks/eager_overhead.py [--iters N]

Prints the median time per call (µs) of small ops and an MLP forward on each device and the ratio
neuron/CPU. Device times include waiting for the result (the loop ends with a host read), so they
are launch-to-finish costs, not just dispatch.
"""
from __future__ import annotations

import argparse
import os

# torch's OpenMP threads spin while idle and starve XLA's CPU threads on a small machine (and the
# other way round): a 64x64 CPU matmul goes from 10 µs to 5 ms right after a device op. Passive
# waiting must be chosen before torch loads OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import statistics
import time

import torch


def _median_us(fn, sync, iters, repeats=7):
    for _ in range(10):
        fn()
    sync()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        runs.append((time.perf_counter() - start) / iters * 1e6)
    return statistics.median(runs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=300)
    args = parser.parse_args()
    torch.manual_seed(0)

    mlp = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 10)
    )
    cases = {
        "add 64x64": lambda d: (lambda a: (lambda: a + a))(torch.randn(64, 64, device=d)),
        "mul scalar 64x64": lambda d: (lambda a: (lambda: a * 0.5))(torch.randn(64, 64, device=d)),
        "mm 64x64": lambda d: (lambda a: (lambda: a @ a))(torch.randn(64, 64, device=d)),
        "softmax 64x64": lambda d: (lambda a: (lambda: a.softmax(-1)))(torch.randn(64, 64, device=d)),
        "add_ in place on a view": lambda d: (lambda a: (lambda: a[:, :32].add_(1.0)))(torch.randn(64, 64, device=d)),
        "MLP forward (3 linear + 2 gelu, batch 32)": lambda d: (
            lambda m, x: (lambda: m(x))
        )(mlp.to(d), torch.randn(32, 64, device=d)),
    }
    syncs = {"cpu": lambda: None, "neuron": torch.neuron.synchronize}
    rows = []
    with torch.no_grad():
        for name, make in cases.items():
            t = {}
            for dev in ("cpu", "neuron"):
                fn = make(dev)
                t[dev] = _median_us(fn, syncs[dev], args.iters)
            rows.append((name, t["neuron"], t["cpu"], t["neuron"] / t["cpu"]))
    w = max(len(r[0]) for r in rows)
    print(f"{'op':<{w}}  {'neuron µs':>10}  {'cpu µs':>9}  {'neuron/cpu':>10}")
    print("-" * (w + 36))
    for name, n, c, r in rows:
        print(f"{name:<{w}}  {n:>10.1f}  {c:>9.1f}  {r:>10.2f}")
    print(f"\n(median of 7 runs of {args.iters} calls; platform {torch.neuron.platform()}, "
          f"{torch.get_num_threads()} CPU threads for torch)")


if __name__ == "__main__":
    main()
