"""all_reduce on the neuron process group vs Gloo on CPU tensors, measured side by side in one run.

    python benchmarks/collectives.py [--iters N] [--sizes-mb 1,4,16,64]

Starts its own 2 ranks with torchrun, as users run them: torchrun's defaults (OMP_NUM_THREADS=1),
one NeuronCore per rank. Per size, the median of N timed all_reduce(SUM) calls of float32 tensors
after warmup: on neuron tensors in the neuron group, with the signature check on (the default) and
off (TORCH_NEURONX_DIST_CHECKS=0), and on CPU tensors in a Gloo group. The three are timed in turn
within each round, so load from elsewhere falls on all alike. A neuron time runs until the result
is on the device (torch.neuron.synchronize). Each rank times its own calls; the table shows the
slower rank's median. Target: neuron at most 1.2x Gloo at every size, checks on (issue 43).

Then the small FLUX.2 transformer's forward (benchmarks/flux_small.py): on one rank alone (the other
waits), and tensor-parallel over both ranks (diffusers' TensorParallelConfig on a neuron mesh: one
all-reduce per rowwise layer), eager and compiled (backend="neuron", fullgraph), with the largest
difference between the two outputs.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time

from child_process import child_env, run_child

TARGET_RATIO = 1.2  # every size, with the signature check on (the default)


def _args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--sizes-mb", default="1,4,16,64")
    parser.add_argument("--blocks", type=int, nargs=2, default=(2, 4), metavar=("DOUBLE", "SINGLE"),
                        help="the FLUX.2 transformer's double- and single-stream blocks")
    parser.add_argument("--tokens", type=int, nargs=2, default=(256, 32), metavar=("IMAGE", "TEXT"))
    args = parser.parse_args(argv)
    args.double, args.single = args.blocks
    args.image_tokens, args.text_tokens = args.tokens
    return args


def launch(argv) -> int:
    """Run this file under torchrun on 2 ranks; rank 0 prints the table."""
    # OMP_NUM_THREADS: torchrun's default, as users get it; NEURON_RT_VISIBLE_CORES: one core per rank, by LOCAL_RANK
    env = child_env(unset=("OMP_NUM_THREADS", "NEURON_RT_VISIBLE_CORES"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = ["-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1", f"--master_port={port}",
           os.path.abspath(__file__), *argv]
    return run_child(cmd, label="torchrun", env=env, capture=False, check=False).returncode


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
    _transformer(args, gloo)
    dist.destroy_process_group()


def _median_ms(fn, warmup: int, iters: int) -> float:
    import torch

    def once():
        start = time.perf_counter()
        with torch.no_grad():
            fn().cpu()  # waits for the device
        return time.perf_counter() - start

    for _ in range(warmup):
        once()
    return statistics.median(once() for _ in range(iters)) * 1e3


def _transformer(args, gloo) -> None:
    """The small FLUX.2 transformer forward: on one rank alone (the other waits), then tensor-parallel
    over both (diffusers' TensorParallelConfig on a neuron mesh), eager and compiled."""
    import copy

    import torch
    import torch.distributed as dist
    from diffusers import TensorParallelConfig
    from torch.distributed.device_mesh import init_device_mesh

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from flux_small import build, inputs

    rank = dist.get_rank()
    model = build(args.double, args.single)
    x = inputs(args.image_tokens, args.text_tokens)
    on_device = {k: v.to("neuron") if isinstance(v, torch.Tensor) else v for k, v in x.items()}
    reps = dict(warmup=2, iters=args.iters)
    single = {}
    if rank == 0:  # one rank, the machine to itself
        with torch.no_grad():
            single["cpu_ms"] = _median_ms(lambda: model(**x)[0], **reps)
        one = copy.deepcopy(model).to("neuron")
        single["eager"] = _median_ms(lambda: one(**on_device)[0], **reps)
        with torch.no_grad():
            single["out"] = one(**on_device)[0].cpu()
        one.compile(backend="neuron", fullgraph=True, dynamic=False)
        single["compiled"] = _median_ms(lambda: one(**on_device)[0], **reps)
    dist.barrier(group=gloo)
    tp = copy.deepcopy(model)
    tp.enable_parallelism(config=TensorParallelConfig(mesh=init_device_mesh("neuron", (dist.get_world_size(),))))
    tp.to("neuron")
    two = {"eager": _median_ms(lambda: tp(**on_device)[0], **reps)}
    with torch.no_grad():
        out = tp(**on_device)[0].cpu()
    tp.compile(backend="neuron", fullgraph=True, dynamic=False)
    two["compiled"] = _median_ms(lambda: tp(**on_device)[0], **reps)
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, two, group=gloo)
    if rank == 0:
        diff = float((out - single["out"]).abs().max())
        print()
        print(f"FLUX.2 transformer forward ({args.double} double + {args.single} single blocks, {args.image_tokens} "
              f"image + {args.text_tokens} text tokens, float32), median of {args.iters}, the slower rank's; "
              f"torch CPU eager alone: {single['cpu_ms']:.1f} ms (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')})")
        print(f"{'mode':>9} | {'1 rank':>9} | {'2 ranks (TP)':>12} | {'2 / 1':>6}")
        print("-" * 46)
        for mode in ("eager", "compiled"):
            t2 = max(r[mode] for r in everyone)
            print(f"{mode:>9} | {single[mode]:>6.1f} ms | {t2:>9.1f} ms | {t2 / single[mode]:>5.2f}x")
        print(f"max |TP output - one rank's output|: {diff:.2e}")


def _print_table(per_rank, args) -> None:
    print(f"all_reduce(SUM) of float32, 2 ranks under torchrun's defaults (OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', 'unset')}), one NeuronCore each; median of {args.iters} after "
          f"{args.warmup} warmup, the slower rank's")
    print(f"{'size':>6} | {'gloo (cpu)':>11} | {'neuron':>10} | {'ratio':>6} | {'neuron, checks=0':>16} | {'ratio':>6}")
    print("-" * 72)
    worst = None
    for i, (mb, _) in enumerate(per_rank[0]):
        t = {k: max(rows[i][1][k] for rows in per_rank) for k in ("gloo", "neuron", "unchecked")}
        ratio, ratio_unchecked = t["neuron"] / t["gloo"], t["unchecked"] / t["gloo"]
        print(f"{mb:>3} MB | {t['gloo'] * 1e3:>8.2f} ms | {t['neuron'] * 1e3:>7.2f} ms | {ratio:>5.2f}x | "
              f"{t['unchecked'] * 1e3:>13.2f} ms | {ratio_unchecked:>5.2f}x")
        worst = ratio if worst is None else max(worst, ratio)
    if worst is not None:
        print(f"target at every size: neuron/gloo <= {TARGET_RATIO}x: "
              f"{'PASS' if worst <= TARGET_RATIO else 'MISS'} (worst {worst:.2f}x)")


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:
        worker(_args())
    else:
        sys.exit(launch(sys.argv[1:]))
