"""Memory of an eager process that meets many distinct op signatures, with the executable cache's
memory bound and without it, side by side in one run.

    python benchmarks/many_shapes.py [--counts 1000 5000 20000] [--workload sin|chain|roll] [--check-every 997]

A loop `for n in range(N): x = torch.randn(n + 1, 8).to("neuron"); y = x.sin()` (`--workload sin`, the
default: every n is one new op signature, one executable) or `y = (x * 2 + 1).sin().sum()` (`chain`:
four new signatures, mul, add, sin, sum, so four executables per step), or `torch.roll(x, n)` on one
x of shape (64, 8) (`roll`: a new static argument each step, the data size fixed, so what grows with
the count is the cache's and jax's and never the allocator's high water of growing tensors). After
each count of `--counts` distinct n, the child reports its RSS (VmRSS of /proc/self/status), its
memory mappings (lines of /proc/self/maps), the executables held in memory
(`len(torch_neuronx.cache.executable_cache().memory)`), evictions from memory
(`executable_cache_stats()["memory_evictions"]`), the disk layer's writes and the wall time so far.

Configurations, each its own process with the disk layer on in a new temporary folder (removed after):
  bounded     the default memory bound (TORCH_NEURONX_NEFF_CACHE_MEMORY_ENTRIES / _MEMORY_SIZE unset:
              2048 executables, 1 GiB)
  unbounded   TORCH_NEURONX_NEFF_CACHE_MEMORY_ENTRIES=10**9, TORCH_NEURONX_NEFF_CACHE_MEMORY_SIZE=10**15 (bytes)
What to look for: bounded RSS and mappings level off once the bound is reached (evictions grow instead),
unbounded ones grow with the count.

Correctness: every `--check-every`-th n (and the first and last) keeps its input and result; at the end
the child runs those n again on neuron (early ones were evicted in the bounded configuration and come
back from disk) and asserts both results match torch on the CPU (relative 1e-5 of sum |sin|) and each
other exactly.

Each row also gives the growth per new signature over the last interval (RSS, mappings) and, if the
mappings still grow, the count at which the kernel's vm.max_map_count would be reached. A child that
fails (for instance out of mappings) is reported with the rows it printed and its last error lines.

Duration (2 cores, CPU platform): a new executable costs ~40 ms (compile, serialize, write), so the
default run takes ~15 min per configuration with `--workload sin` and ~1 h with `chain`; the unbounded
configuration holds ~4 mappings per executable, so it reaches the default vm.max_map_count of 65530
near 16,000 executables if nothing frees them. `--counts 100 300` takes about a minute. Only neuron is
timed; runs on a shared machine are noisy.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from child_process import child_env, start_child

CONFIGS = {
    "bounded": {},
    "unbounded": {"TORCH_NEURONX_NEFF_CACHE_MEMORY_ENTRIES": str(10**9),
                  "TORCH_NEURONX_NEFF_CACHE_MEMORY_SIZE": str(10**15)},
}
RTOL = 1e-5


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def mappings():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def max_map_count():
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except OSError:
        return None


WORKLOADS = {"sin": lambda x, n: x.sin(), "chain": lambda x, n: (x * 2 + 1).sin().sum(),
             "roll": lambda x, n: x.roll(n)}
workload = WORKLOADS["sin"]
fixed_shape = False  # roll: every step on a (64, 8) tensor


def step(x_cpu, n):
    return workload(x_cpu.to("neuron"), n)


def example(n, g):
    import torch

    return torch.randn(64, 8, generator=g) if fixed_shape else torch.randn(n + 1, 8, generator=g)


def child(args):
    import torch

    import torch_neuronx
    from torch_neuronx import cache, metrics

    counts = sorted(set(args.counts))
    g = torch.Generator().manual_seed(0)
    kept = {}
    step(example(0, g), 0).cpu()  # jax, the device and the disk layer started
    torch_neuronx.clear_op_tracking()
    report = lambda n, t: print(json.dumps({  # noqa: E731
        "count": n, "rss_mb": rss_mb(), "maps": mappings(), "in_memory": len(cache.executable_cache().memory),
        "evictions": metrics.executable_cache_stats()["memory_evictions"],
        "disk_writes": metrics.executable_cache_stats()["disk_writes"],
        "compiles": sum(c for c, _ in metrics.compile_stats().values()), "wall_s": t,
        "bound": [cache.executable_cache().memory.max_entries, cache.executable_cache().memory.max_bytes]}), flush=True)
    report(0, 0.0)
    start = time.perf_counter()
    last = counts[-1]
    for n in range(1, last + 1):  # shapes (2, 8) .. (last + 1, 8): (1, 8) ran above
        x_cpu = example(n, g)
        y = step(x_cpu, n)
        if n == 1 or n == last or n % args.check_every == 0:
            kept[n] = (x_cpu, y.cpu())
        elif n % 64 == 0:
            y.cpu()  # keep the queue of pending work short
        if n in counts:
            y.cpu()
            report(n, time.perf_counter() - start)

    torch_neuronx.clear_op_tracking()
    worst = 0.0
    for n, (x_cpu, got) in kept.items():
        want = workload(x_cpu, n)
        again = step(x_cpu, n).cpu()
        # relative to the sum of |terms| (a sum of sines can be near zero)
        scale = (x_cpu * 2 + 1).sin().abs().sum().item() if args.workload == "chain" else want.abs().sum().item()
        err = (got - want).abs().sum().item() / scale
        worst = max(worst, err)
        assert err <= RTOL, f"n={n}: neuron vs CPU, relative {err:.2e}"
        assert torch.equal(again, got), f"n={n}: run again differs from the first run"
    stats = metrics.executable_cache_stats()
    print(json.dumps({"checked": len(kept), "worst_rel_err": worst, "recheck_disk_hits": stats["disk_hits"],
                      "recheck_compiles": sum(c for c, _ in metrics.compile_stats().values()),
                      "bad_entries": stats["bad_entries"]}), flush=True)


def parent(args):
    rows, checks, failures = {}, {}, {}
    total = time.perf_counter()
    for name, extra in CONFIGS.items():
        folder = tempfile.mkdtemp(prefix=f"neff_many_shapes_{name}_")
        env = child_env({**extra, "TORCH_NEURONX_NEFF_CACHE_DIR": folder},
                        unset=("TORCH_NEURONX_NEFF_DISABLE_CACHE", "TORCH_NEURONX_NEFF_CACHE_MEMORY_ENTRIES",
                               "TORCH_NEURONX_NEFF_CACHE_MEMORY_SIZE", "TORCH_NEURONX_NEFF_CACHE_MAX_SIZE"))
        cmd = [os.path.abspath(__file__), "--child", "--counts", *map(str, args.counts),
               "--check-every", str(args.check_every), "--workload", args.workload]
        errors = tempfile.TemporaryFile("w+")
        try:
            p = start_child(cmd, env=env, stdout=subprocess.PIPE, stderr=errors)
            out = []
            for line in p.stdout:
                if line.startswith("{"):
                    d = json.loads(line)
                    out.append(d)
                    if "count" in d:
                        print(f"  {name:10} {d['count']:6d} signatures  {d['wall_s']:8.1f} s  RSS {d['rss_mb']:8.1f} MB  "
                              f"{d['maps']:6d} mappings", file=sys.stderr, flush=True)
            code = p.wait()
            disk_mb = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs) / 1e6
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        errors.seek(0)
        tail = [ln for ln in errors.read().splitlines() if ln.strip()][-6:]
        errors.close()
        rows[name] = [d for d in out if "count" in d]
        if code != 0 or not out or "checked" not in out[-1]:
            done = rows[name][-1]["count"] if rows[name] else 0
            failures[name] = (f"{name}: the process failed (exit {code}) after {done} signatures reported:\n    "
                              + "\n    ".join(tail))
            sys.stderr.write(failures[name] + "\n")
        else:
            checks[name] = dict(out[-1], disk_mb=disk_mb)
    total = time.perf_counter() - total

    what = {"sin": "x.sin() on x of shape (n + 1, 8)", "chain": "(x * 2 + 1).sin().sum() on x of shape (n + 1, 8)",
            "roll": "x.roll(n) on x of shape (64, 8)"}[args.workload]
    print(f"\neager process meeting distinct op signatures {what}, disk layer on; "
          f"at 0: after one step; vm.max_map_count {max_map_count()}")
    head = (f"{'config':10} {'signatures':>10} {'compiled':>9} {'RSS MB':>8} {'vs bounded':>10} {'mappings':>9} "
            f"{'vs bounded':>10} {'in memory':>9} {'evictions':>9} {'wall s':>8} {'ms/sig':>7}")
    print(head)
    print("-" * len(head))
    for name in CONFIGS:
        if rows[name]:
            entries, nbytes = rows[name][0]["bound"]
            print(f"  {name}: memory bound {entries} executables, {nbytes / 2**30:g} GiB")
    by_count = {d["count"]: d for d in rows["bounded"]}
    for name in CONFIGS:
        prev = None
        for d in rows[name]:
            b = by_count.get(d["count"], d)
            per = ((d["wall_s"] - prev["wall_s"]) / (d["count"] - prev["count"]) * 1e3) if prev else float("nan")
            print(f"{name:10} {d['count']:10d} {d['compiles']:9d} {d['rss_mb']:8.1f} {d['rss_mb'] / b['rss_mb']:10.2f} "
                  f"{d['maps']:9d} {d['maps'] / b['maps']:10.2f} {d['in_memory']:9d} {d['evictions']:9d} "
                  f"{d['wall_s']:8.1f} {per:7.1f}")
            prev = d
    print("(compiled: executables compiled so far; ms/sig: wall time per new signature since the previous row)")
    limit = max_map_count()
    for name in CONFIGS:
        r = rows[name]
        if len(r) >= 3:  # growth over the last interval, and where it leads
            a, b = r[-2], r[-1]
            maps_per = (b["maps"] - a["maps"]) / (b["count"] - a["count"])
            rss_per = (b["rss_mb"] - a["rss_mb"]) / (b["count"] - a["count"]) * 1e3
            at = b["count"] + (limit - b["maps"]) / maps_per if limit and maps_per > 0 else None
            reach = f"; at that rate vm.max_map_count ({limit}) is reached near {at:.0f} signatures" if at else ""
            print(f"{name}: from {a['count']} to {b['count']} signatures, {rss_per:.1f} KB RSS and {maps_per:.2f} "
                  f"mappings per new signature{reach}")
    for name, c in checks.items():
        print(f"{name}: {c['checked']} sampled results match the CPU (worst relative {c['worst_rel_err']:.1e}) and "
              f"their rerun ({c['recheck_disk_hits']} executables loaded from disk, {c['recheck_compiles']} compiled, "
              f"{c['bad_entries']} bad entries); disk folder {c['disk_mb']:.1f} MB")
    for text in failures.values():
        print("FAILED  " + text)
    print(f"(whole run {total:.0f} s; timings on a shared or small machine are noisy)")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1000, 5000, 20000])
    parser.add_argument("--check-every", type=int, default=997, help="keep every k-th result for the final check")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="sin",
                        help="sin: one op signature per step; chain: four; roll: one, on data of one size")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global workload, fixed_shape
    workload = WORKLOADS[args.workload]
    fixed_shape = args.workload == "roll"
    if min(args.counts) < 1:
        parser.error("--counts must be positive")
    if args.child:
        child(args)
        return 0
    else:
        return parent(args)


if __name__ == "__main__":
    sys.exit(main())
