"""all_reduce on the neuron process group vs Gloo on CPU tensors, measured side by side in one run.

    python benchmarks/collectives.py [--iters N] [--sizes-mb 1,4,16,64]

Starts its own 2 ranks with torchrun, as users run them: torchrun's defaults (OMP_NUM_THREADS=1),
one NeuronCore per rank. Per size, the median of N timed all_reduce(SUM) calls of float32 tensors
after warmup: on neuron tensors in the neuron group, with the signature check on (the default) and
off (TORCH_NEURONX_DIST_CHECKS=0), and on CPU tensors in a Gloo group. The three are timed in turn
within each round, so load from elsewhere falls on all alike. A neuron time runs until the result
is on the device (torch.neuron.synchronize). Each rank times its own calls; the table shows the
slower rank's median. Target: neuron at most 1.3x Gloo at 64 MB.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

TARGET_MB, TARGET_RATIO = 64, 1.3


def _args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--sizes-mb", default="1,4,16,64")
    return parser.parse_args(argv)


def launch(argv) -> int:
    """Run this file under torchrun on 2 ranks; rank 0 prints the table."""
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)  # torchrun's default, as users get it
    env.pop("NEURON_RT_VISIBLE_CORES", None)  # one core per rank, by LOCAL_RANK
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
           f"--master_port={port}", os.path.abspath(__file__), *argv]
    return subprocess.run(cmd, env=env).returncode


def worker(args) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("neuron")
    rank = dist.get_rank()
    gloo = dist.new_group(backend="gloo")
    # a second neuron group without the signature check (the variable is read when a group starts)
    os.environ["TORCH_NEURONX_DIST_CHECKS"] = "0"
    unchecked = dist.new_group(backend="neuron")
    del os.environ["TORCH_NEURONX_DIST_CHECKS"]

    def timed(fn) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    rows = []
    for mb in (int(s) for s in args.sizes_mb.split(",")):
        cpu = torch.randn(mb * 2 ** 20 // 4) * 1e-20  # doubles every call: finite for 190 calls
        dev = cpu.to("neuron")

        def on_neuron(group):
            dist.all_reduce(dev, group=group)
            torch.neuron.synchronize()

        cases = {"gloo": lambda: dist.all_reduce(cpu, group=gloo),
                 "neuron": lambda: on_neuron(None), "unchecked": lambda: on_neuron(unchecked)}
        times = {k: [] for k in cases}
        dist.barrier(group=gloo)
        for i in range(args.warmup + args.iters):
            for name, fn in cases.items():
                t = timed(fn)
                if i >= args.warmup:
                    times[name].append(t)
        rows.append((mb, {k: statistics.median(v) for k, v in times.items()}))
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, rows, group=gloo)
    if rank == 0:
        _print_table(everyone, args)
    # ---- the FLUX transformer part goes here: this script ends after the all_reduce table ----
    dist.destroy_process_group()


def _print_table(per_rank, args) -> None:
    print(f"all_reduce(SUM) of float32, 2 ranks under torchrun's defaults (OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', 'unset')}), one NeuronCore each; median of {args.iters} after "
          f"{args.warmup} warmup, the slower rank's")
    print(f"{'size':>6} | {'gloo (cpu)':>11} | {'neuron':>10} | {'ratio':>6} | {'neuron, checks=0':>16} | {'ratio':>6}")
    print("-" * 72)
    verdict = None
    for i, (mb, _) in enumerate(per_rank[0]):
        t = {k: max(rows[i][1][k] for rows in per_rank) for k in ("gloo", "neuron", "unchecked")}
        ratio, ratio_unchecked = t["neuron"] / t["gloo"], t["unchecked"] / t["gloo"]
        print(f"{mb:>3} MB | {t['gloo'] * 1e3:>8.2f} ms | {t['neuron'] * 1e3:>7.2f} ms | {ratio:>5.2f}x | "
              f"{t['unchecked'] * 1e3:>13.2f} ms | {ratio_unchecked:>5.2f}x")
        if mb == TARGET_MB:
            verdict = ratio
    if verdict is not None:
        print(f"target at {TARGET_MB} MB: neuron/gloo <= {TARGET_RATIO}x: "
              f"{'PASS' if verdict <= TARGET_RATIO else 'MISS'} ({verdict:.2f}x)")


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:
        worker(_args())
    else:
        sys.exit(launch(sys.argv[1:]))
