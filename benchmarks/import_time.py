"""How fast a small script starts: medians of fresh interpreters.

    python benchmarks/import_time.py [--runs N]

Table 1, `import torch`, with and without the autoload of torch_neuronx (target: the autoload adds
at most 0.3 s). Table 2, a fresh process's first eager op with a warm disk cache: the seconds from
`import torch` returning to the result of `(torch.ones(4, 4, device="neuron") + 1).cpu()` (target:
at most 1.0 s), after one untimed run filled a temporary cache folder (TORCH_NEURONX_NEFF_CACHE_DIR)
that every measured run shares. Below it, the same work in separate timed steps (jax's import, the
device start, each op, the host read; ml_dtypes, which jax imports, apart), so the next
person sees where the time goes, and which step imported torch._dynamo, if any did.

Children run with Python's bytecode cache on, as an installed package has it (pip writes the .pyc
files at install): PYTHONDONTWRITEBYTECODE is dropped from their environment, and an untimed run of
each kind comes first. Runs of the two kinds interleave, so drift on a noisy machine hits both;
the load average is printed beside the tables.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile

from child_process import child_env, run_child

IMPORT = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"

FIRST_OP = r"""
import json, sys, time
t = time.perf_counter()
import torch
start = time.perf_counter()
x = (torch.ones(4, 4, device="neuron") + 1).cpu()
end = time.perf_counter()
assert x.eq(2).all()
print(json.dumps({"import torch": start - t, "first op": end - start}))
"""

STEPS = r"""
import json, sys, time
t = time.perf_counter()
import torch
import torch_neuronx
from torch_neuronx.runtime import lazy_jax
times, dynamo, last = {"import torch": time.perf_counter() - t}, None, time.perf_counter()

def step(name):
    global last, dynamo
    now = time.perf_counter()
    times[name] = now - last
    if dynamo is None and "torch._dynamo" in sys.modules:
        dynamo = name
    last = now

step("(before the first op)")
import ml_dtypes
step("ml_dtypes import (jax imports it)")
lazy_jax.load()
step("jax import (the rest)")
torch.neuron.init()
step("device start")
a = torch.ones(4, 4, device="neuron")
step("torch.ones (first op)")
b = a + 1
step("+ 1")
c = b.cpu()
step(".cpu() (runs the queued ops)")
assert c.eq(2).all()
cache = torch_neuronx.metrics.executable_cache_stats()
print(json.dumps({"times": times, "dynamo": dynamo, "disk_load_s": cache["disk_load_s"]}))
"""


def _child_env(**extra) -> dict:
    return child_env(extra, unset=("PYTHONDONTWRITEBYTECODE",))


def _run(code: str, env: dict) -> str:
    """The last line `code` prints in a child process of its own."""
    return run_child(["-c", code], label="of import_time.py", env=env).stdout.strip().splitlines()[-1]


def _load() -> str:
    try:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load average unknown"


def import_table(runs: int) -> None:
    envs = {on: _child_env(TORCH_DEVICE_BACKEND_AUTOLOAD="1" if on else "0") for on in (False, True)}
    for on in (False, True):  # untimed: writes the bytecode caches
        _run(IMPORT, envs[on])
    times = {False: [], True: []}
    before = _load()
    for _ in range(runs):
        for on in (False, True):
            times[on].append(float(_run(IMPORT, envs[on])))
    a, b = statistics.median(times[True]), statistics.median(times[False])
    print(f"import torch, median of {runs} fresh interpreters ({before}; after: {_load()})")
    print(f"  {'without torch_neuronx':<36}{b:>8.3f} s")
    print(f"  {'with torch_neuronx autoload':<36}{a:>8.3f} s")
    print(f"  {'added by the autoload':<36}{a - b:>8.3f} s   (target: at most 0.300)")


def first_op_table(runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="neff_cache_") as folder:
        env = _child_env(TORCH_NEURONX_NEFF_CACHE_DIR=folder)
        _run(FIRST_OP, env)  # untimed: fills the cache folder (and the bytecode caches)
        _run(STEPS, env)
        whole, steps, dynamo, disk = [], [], set(), []
        before = _load()
        for _ in range(runs):
            whole.append(json.loads(_run(FIRST_OP, env)))
            got = json.loads(_run(STEPS, env))
            steps.append(got["times"])
            dynamo.add(got["dynamo"])
            disk.append(got["disk_load_s"])
    print(f"\nfirst eager op with a warm disk cache, median of {runs} fresh interpreters ({before}; after: {_load()})")
    print(f"  {'import torch':<36}{statistics.median(w['import torch'] for w in whole):>8.3f} s")
    first = statistics.median(w["first op"] for w in whole)
    print(f"  {'then (ones + 1).cpu()':<36}{first:>8.3f} s   (target: at most 1.000)")
    print("  the same in steps:")
    for name in steps[0]:
        if name != "import torch":
            print(f"    {name:<34}{statistics.median(s[name] for s in steps):>8.3f} s")
    print(f"    {'of which disk cache loads':<34}{statistics.median(disk):>8.3f} s")
    names = sorted(d or "none" for d in dynamo)
    print(f"  torch._dynamo imported by: {', '.join(names)}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5, help="fresh interpreters per measurement (default 5)")
    parser.add_argument("--only", choices=("import", "first-op"), help="one table only")
    args = parser.parse_args()
    if args.only != "first-op":
        import_table(args.runs)
    if args.only != "import":
        first_op_table(args.runs)


if __name__ == "__main__":
    main()
