"""Per-op cost of eager mode: neuron vs the CPU, measured side by side in one run.

    python benchmarks/eager_overhead.py [--iters N]

Prints the median time per call (µs) of small ops and an MLP forward on each device and the ratio
neuron/CPU. Device times include waiting for the result (the loop ends with a host read), so they
are launch-to-finish costs, not just dispatch.

torch's OpenMP threads spin while idle and can starve XLA's CPU threads on a small machine (and the
other way round); OMP_WAIT_POLICY=PASSIVE (which must be set before torch loads) stops that, but it
slows torch's own CPU path (about 2.5x here). So the table shows both: the CPU baseline runs in a child
process of its own under torch's default threading (no neuron work in it: XLA's threads would compete
with torch's), neuron in a second child under the default and a third under PASSIVE (which also
measures the CPU again, for reference only). Every ratio is against the CPU baseline, the way torch's
users run it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from child_process import child_env, last_json, run_child


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


def measure(devices, iters) -> dict:
    """{case: {device: µs}} in this process."""
    import torch

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
    syncs = {"cpu": lambda: None, "neuron": lambda: torch.neuron.synchronize()}
    out = {}
    with torch.no_grad():
        for name, make in cases.items():
            out[name] = {dev: _median_us(make(dev), syncs[dev], iters) for dev in devices}
    return out


def _child(policy: str | None, devices: str, iters: int) -> dict:
    r = run_child([os.path.abspath(__file__), "--child", devices, "--iters", str(iters)],
                  label=f"{devices} (OMP_WAIT_POLICY={policy or 'unset'})",
                  env=child_env({"OMP_WAIT_POLICY": policy or None}))
    return last_json(r.stdout)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child.split(","), args.iters)))
        return
    default = _child(None, "cpu", args.iters)
    for name, us in _child(None, "neuron", args.iters).items():
        default[name].update(us)
    passive = _child("PASSIVE", "cpu,neuron", args.iters)
    w = max(len(k) for k in default)
    print(f"{'op':<{w}}  {'cpu µs':>9}  {'neuron µs':>9}  {'neuron µs':>9}  {'neuron/cpu':>10}  {'neuron/cpu':>10}"
          f"  {'cpu µs':>9}")
    print(f"{'':<{w}}  {'(default)':>9}  {'(default)':>9}  {'(PASSIVE)':>9}  {'(default)':>10}  {'(PASSIVE)':>10}"
          f"  {'(PASSIVE)':>9}")
    print("-" * (w + 72))
    for name in default:
        c, nd = default[name]["cpu"], default[name]["neuron"]
        npas, cp = passive[name]["neuron"], passive[name]["cpu"]
        print(f"{name:<{w}}  {c:>9.1f}  {nd:>9.1f}  {npas:>9.1f}  {nd / c:>10.3g}  {npas / c:>10.3g}  {cp:>9.1f}")
    print(f"\n(median of 7 runs of {args.iters} calls; (default): torch's default threading, (PASSIVE): "
          f"OMP_WAIT_POLICY=PASSIVE in that child; both ratios are against the CPU under the default, the "
          f"last column is what PASSIVE costs torch's CPU path)")

if __name__ == "__main__":
    main()
