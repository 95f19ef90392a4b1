"""What a host read of a small neuron tensor costs: `.cpu()` and `.item()` after an add of 64x64 float32,
against the CPU's own `.clone()` / `.item()` and against raw jax (`jax.jit` + `np.asarray`/`np.array`).

    python benchmarks/host_reads.py [--iters N] [--repeats R]

Two kinds of rows:
- "read": the op has finished (the device was synchronized, outside the timer); only the read is timed.
  This is the host read's own cost (target: at most 30 µs for `.cpu()` and `.item()`).
- "add + read": the add and the read together, in a loop, as user code runs them (the read waits for
  the add).
Each row is the median over `--repeats` runs of the median of `--iters` timed calls, in µs; the ratio
column is neuron / CPU for the torch rows and neuron / jax for the jax rows. torch runs under its
default threading (OMP_WAIT_POLICY is left as the environment has it).
"""
from __future__ import annotations

import argparse
import statistics
import time


def _median_read_us(setup, read, iters) -> float:
    """Median µs of `read(x)` with `x = setup()` made (and finished) outside the timer."""
    times = []
    for i in range(iters + 10):
        x = setup()
        start = time.perf_counter()
        read(x)
        took = time.perf_counter() - start
        if i >= 10:
            times.append(took)
    return statistics.median(times) * 1e6


def _median_loop_us(fn, iters) -> float:
    times = []
    for i in range(iters + 10):
        start = time.perf_counter()
        fn()
        took = time.perf_counter() - start
        if i >= 10:
            times.append(took)
    return statistics.median(times) * 1e6


def measure(iters: int) -> dict:
    import jax
    import numpy as np
    import torch

    import torch_neuronx  # noqa: F401

    torch.manual_seed(0)
    host = torch.randn(64, 64)
    dev = host.to("neuron")
    sync = torch.neuron.synchronize

    def n_add():
        out = dev + dev
        sync()
        return out

    def n_sum():
        out = (dev + dev).sum()
        sync()
        return out

    def c_add():
        return host + host

    def c_sum():
        return (host + host).sum()

    f_add = jax.jit(lambda x: x + x)
    f_sum = jax.jit(lambda x: (x + x).sum())
    x = jax.device_put(host.numpy())

    def j_add():
        return f_add(x).block_until_ready()

    def j_sum():
        return f_sum(x).block_until_ready()

    n_add(), n_sum(), j_add(), j_sum()
    r = {}
    r["read .cpu() 64x64"] = (_median_read_us(n_add, lambda t: t.cpu(), iters),
                              _median_read_us(c_add, lambda t: t.clone(), iters), "cpu .clone()")
    r["read .item() of a 0-d sum"] = (_median_read_us(n_sum, lambda t: t.item(), iters),
                                      _median_read_us(c_sum, lambda t: t.item(), iters), "cpu .item()")
    r["read .item() of an element [1, 2]"] = (_median_read_us(n_add, lambda t: t[1, 2].item(), iters),
                                              _median_read_us(c_add, lambda t: t[1, 2].item(), iters), "cpu .item()")
    r["read .cpu() of a view [8:40, ::2]"] = (_median_read_us(n_add, lambda t: t[8:40, ::2].cpu(), iters),
                                              _median_read_us(c_add, lambda t: t[8:40, ::2].clone(), iters), "cpu .clone()")
    r["jax: read np.array (one copy)"] = (_median_read_us(n_add, lambda t: t.cpu(), iters),
                                          _median_read_us(j_add, lambda a: np.array(a), iters), "jax np.array")
    r["jax: read np.asarray (no copy)"] = (_median_read_us(n_add, lambda t: t.cpu(), iters),
                                           _median_read_us(j_add, lambda a: np.asarray(a), iters), "jax np.asarray")
    r["add + .cpu()"] = (_median_loop_us(lambda: (dev + dev).cpu(), iters),
                         _median_loop_us(lambda: (host + host).clone(), iters), "cpu add + .clone()")
    r["add + sum + .item()"] = (_median_loop_us(lambda: (dev + dev).sum().item(), iters),
                                _median_loop_us(lambda: (host + host).sum().item(), iters), "cpu add + sum + .item()")
    r["jax: add + np.asarray"] = (_median_loop_us(lambda: (dev + dev).cpu(), iters),
                                  _median_loop_us(lambda: np.asarray(f_add(x)), iters), "jax jit + np.asarray")
    return r


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs = [measure(args.iters) for _ in range(args.repeats)]
    print(f"host reads, median µs (median of {args.repeats} runs of {args.iters} calls each)")
    print(f"{'case':<36}{'neuron':>9}{'baseline':>10}  {'baseline is':<26}{'ratio':>7}")
    for case in runs[0]:
        n = statistics.median(r[case][0] for r in runs)
        b = statistics.median(r[case][1] for r in runs)
        print(f"{case:<36}{n:9.1f}{b:10.1f}  {runs[0][case][2]:<26}{n / b:7.1f}x")


if __name__ == "__main__":
    main()
