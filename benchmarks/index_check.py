"""What raising on out-of-range indices costs: index ops with the in-executable range check (which
makes the op wait for the device) vs the same ops with checks disabled, vs the CPU. One run, two
interpreters per threading setting (the checks are baked into executables when they compile).

    python benchmarks/index_check.py

The CPU column runs under torch's default threading, in a child of its own (no neuron work in it:
XLA's threads would compete with torch's). The neuron columns run under the default and
again under OMP_WAIT_POLICY=PASSIVE (each in its own child process: the setting must come before torch
loads); PASSIVE keeps torch's idle OpenMP threads from spinning against XLA's but slows torch's CPU
path, so the CPU baseline is never taken under it.
"""
from __future__ import annotations

from child_process import child_env, last_json, run_child

CHILD = r"""
import os, json, statistics, time
import torch, torch_neuronx
torch.manual_seed(0)
def med(fn, sync, n=300):
    for _ in range(10): fn()
    sync(); runs = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n): fn()
        sync(); runs.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(runs)
out = {}
for dev in os.environ["INDEX_CHECK_DEVICES"].split(","):
    w = torch.randn(1000, 64, device=dev); ids = torch.randint(0, 1000, (4, 32), device=dev)
    x = torch.randn(64, 64, device=dev); idx = torch.randint(0, 64, (64, 8), device=dev)
    sync = torch.neuron.synchronize if dev == "neuron" else (lambda: None)
    out[dev] = {
        "embedding 1000x64, 128 ids": med(lambda: torch.nn.functional.embedding(ids, w), sync),
        "gather 64x64 -> 64x8": med(lambda: torch.gather(x, 1, idx), sync),
        "index_select 1000x64, 128 rows": med(lambda: w.index_select(0, ids.flatten()), sync),
    }
print(json.dumps(out))
"""


def run(checks: bool, policy: str | None, devices: str = "neuron") -> dict:
    env = child_env({"INDEX_CHECK_DEVICES": devices, "TORCH_NEURONX_VALUE_CHECKS": "1" if checks else "0",
                     "OMP_WAIT_POLICY": policy or None})
    r = run_child(["-c", CHILD], label=f"{devices} (checks {checks}, OMP_WAIT_POLICY={policy or 'unset'})", env=env)
    return last_json(r.stdout)


def main():
    runs = {policy: (run(True, policy), run(False, policy)) for policy in (None, "PASSIVE")}
    cpu = run(True, None, "cpu")["cpu"]  # torch's default threading, no neuron work in that process
    names = list(cpu)
    w = max(map(len, names))
    print(f"{'op':<{w}}  {'threads':>8}  {'checked µs':>10}  {'unchecked µs':>12}  {'cpu µs':>8}  "
          f"{'checked/unchecked':>17}  {'checked/cpu':>11}")
    print("-" * (w + 80))
    for n in names:
        for policy, (checked, unchecked) in runs.items():
            c, u = checked["neuron"][n], unchecked["neuron"][n]
            print(f"{n:<{w}}  {policy or 'default':>8}  {c:>10.1f}  {u:>12.1f}  {cpu[n]:>8.1f}  {c / u:>17.2f}  "
                  f"{c / cpu[n]:>11.2f}")
    print("\n(checked: the device's default, raising as the CPU does; unchecked: XLA's silent clamping;"
          "\n threads: the neuron side's OpenMP wait policy; the cpu column is always torch's default threading)")

if __name__ == "__main__":
    main()
