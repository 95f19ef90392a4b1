"""Host-to-device copies overlapping compute on neuron, measured side by side in one run.

    python benchmarks/transfer_overlap.py [--mb 64] [--size 1024] [--chain 6] [--iters 7]

Compute is a chain of `--chain` float32 matmuls of `--size` squared, launched (the host returns at
once) and then waited for. A copy moves `--mb` MB of float32 from the host to the device: from
pageable memory with `.to("neuron")`, and from pinned memory with `.to("neuron", non_blocking=True)`.
On the CPU platform both are a host memcpy into a fresh device buffer, made by the calling thread
while the device's threads compute (a device-side copy instead measured 4x slower than the memcpy
and queued behind the compute: overlap 0.17). Each copy runs alone and right after the compute was launched; both are timed until
the device is done (torch.neuron.synchronize). Overlap is the share of the shorter of the two that
was hidden: (compute + copy - together) / min(compute, copy); 0 is none, 1 is perfect. Rounds take
the cases in turn, so load from elsewhere falls on all alike; the table shows medians.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch


def _args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=int, default=64)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--chain", type=int, default=6)
    p.add_argument("--iters", type=int, default=7)
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = _args(argv)
    n = args.mb * 2**20 // 4
    pageable = torch.randn(n)
    pinned = pageable.clone().pin_memory()
    x = torch.randn(args.size, args.size, device="neuron") / args.size**0.5

    def compute():
        y = x
        for _ in range(args.chain):
            y = y @ x
        return y

    cases = {
        "compute": lambda: compute(),
        "copy pageable": lambda: pageable.to("neuron"),
        "copy pinned non_blocking": lambda: pinned.to("neuron", non_blocking=True),
        "compute + copy pageable": lambda: (compute(), pageable.to("neuron")),
        "compute + copy pinned non_blocking": lambda: (compute(), pinned.to("neuron", non_blocking=True)),
    }
    times = {k: [] for k in cases}
    for _ in range(2):  # compiles and first touches
        for fn in cases.values():
            fn()
            torch.neuron.synchronize()
    for _ in range(args.iters):
        for name, fn in cases.items():
            torch.neuron.synchronize()
            t0 = time.perf_counter()
            out = fn()
            torch.neuron.synchronize()
            times[name].append(time.perf_counter() - t0)
            del out
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    check = pinned.to("neuron", non_blocking=True)
    torch.neuron.synchronize()
    assert torch.equal(check.cpu(), pageable), "the pinned copy differs from its source"

    print(f"{args.mb} MB host->device copy vs {args.chain} matmuls of {args.size}^2 (float32), "
          f"median of {args.iters}, ms")
    print(f"{'case':<38}{'ms':>10}")
    for k, v in med.items():
        print(f"{k:<38}{v:>10.2f}")
    print()
    print(f"{'copy':<26}{'compute':>9}{'copy':>9}{'together':>10}{'overlap':>9}")
    for kind, alone, both in (("pageable", "copy pageable", "compute + copy pageable"),
                              ("pinned non_blocking", "copy pinned non_blocking",
                               "compute + copy pinned non_blocking")):
        c, t, b = med["compute"], med[alone], med[both]
        overlap = (c + t - b) / min(c, t)
        print(f"{kind:<26}{c:>9.2f}{t:>9.2f}{b:>10.2f}{overlap:>9.2f}")


if __name__ == "__main__":
    main()
