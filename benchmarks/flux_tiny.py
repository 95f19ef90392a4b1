"""The tiny FLUX.2 transformer, torch's CPU against neuron, every row of issue 14's table in one run.

    PYTHONPATH=. python benchmarks/flux_tiny.py [--quick] [--fusion both|on|off] [--rounds N]

The model is `Flux2Transformer2DModel(patch_size=1, in_channels=16, num_layers=2, num_single_layers=4,
attention_head_dim=32, num_attention_heads=4, joint_attention_dim=64, timestep_guidance_channels=64,
axes_dims_rope=(8, 8, 8, 8))`, random weights, float32, 256 image and 32 text tokens.

Rows (each measurement in a child process, one after another, never two at once):
  forward steady      median ms of one forward (waiting for the result) over interleaved rounds:
                      torch CPU eager, Inductor CPU, neuron eager, neuron compiled
                      (torch.compile(backend="neuron", fullgraph=True, dynamic=False)); each as a ratio
                      to torch eager and to Inductor
  first call          the first forward in the process: Inductor (its compile, with an empty Inductor
                      cache), neuron eager (every op's executable compiled), neuron compiled (after the
                      eager rows ran, so the eager executables around the graph are in memory)
  fresh process       a new interpreter with an empty TORCH_NEURONX_NEFF_CACHE_DIR: seconds from launch
                      to the first forward's result, and the part of it that is the call itself
  add 64x64 dispatch  µs per `a + a` (no wait per call; the loop ends with a wait)
  add 64x64 + .cpu()  µs per `(a + a).cpu()`
  new shape           ms for the first call of add, mm and sin on a shape never seen in the process
                      (median over several such shapes; each compiles an executable)
  outputs             max |neuron - cpu| / max |cpu| of the forward output
The steady rows also show the best round (a busy neighbour moves the median more than the best).

The torch side always runs under torch's default threading, in a child of its own (no neuron work in
it); the neuron children measure torch eager again right after each neuron forward, shown for reference
beside torch alone right after an idle pause as long as a neuron forward: an idle gap alone costs torch's
CPU path several percent (its OpenMP threads go to sleep and must be woken), so that, not torch run back
to back, is what says whether neuron's threads slow torch down. The neuron side runs twice, in children with the default threading and
with OMP_WAIT_POLICY=PASSIVE (which keeps torch's idle OpenMP threads from spinning against XLA's on a
small machine, but slows torch's own CPU path about 2.5x here), and every ratio is taken against the
torch numbers measured under the default. The neuron eager rows run once per `--fusion` setting
(TORCH_NEURONX_EAGER_FUSION=1 / 0). Every child starts with an empty executable cache folder (a fresh
temporary one) and, unless --quick, an empty Inductor cache, so the numbers do not depend on what
earlier runs left on disk.

The figures are medians, but on a shared machine a busy neighbour still moves them, torch's default
OpenMP threads most of all (they spin at barriers; another process on the cores stalls them): read the
torch rows with the machine's load in mind.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from child_process import run_json_child

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
IMG, TXT = 256, 32
POLICIES = {"default": None, "PASSIVE": "PASSIVE"}
PAUSE_S = 0.02  # about a neuron eager forward of the tiny model
PAUSED = "torch eager after a pause"


def build_tiny():
    sys.path.insert(0, HERE)
    from flux_small import build_tiny as build

    return build()


def inputs_tiny(n=IMG, t=TXT):
    sys.path.insert(0, HERE)
    from flux_small import inputs_tiny as inputs

    return inputs(n, t)


# ---------------------------------------------------------------------------------------------- child


def _to(d, device):
    import torch

    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in d.items()}


def _rel(out, ref):
    out, ref = out.detach().cpu().double(), ref.detach().double()
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def _sync(dev):
    import torch

    if dev == "neuron":
        torch.neuron.synchronize()


def _dispatch_us(dev, iters, repeats=7):
    """µs per `a + a` (the loop ends with a wait) and per `(a + a).cpu()`."""
    import torch

    a = torch.randn(64, 64, device=dev)
    out = {}
    for name, fn, per_loop_sync in (("add", lambda: a + a, True), ("add_cpu", lambda: (a + a).cpu(), False)):
        for _ in range(20):
            fn()
        _sync(dev)
        runs = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(iters):
                fn()
            if per_loop_sync:
                _sync(dev)
            runs.append((time.perf_counter() - start) / iters * 1e6)
        out[name] = statistics.median(runs)
    return out


def _new_shape_ms(dev, count):
    """Median ms of the first call of add, mm, sin, each on `count` shapes never seen in the process."""
    import torch

    out = {}
    cases = {
        "add": lambda k: (lambda a: (lambda: a + a))(torch.randn(3 + k, 997, device=dev)),
        "mm": lambda k: (lambda a, b: (lambda: a @ b))(torch.randn(5 + k, 991, device=dev), torch.randn(991, 7, device=dev)),
        "sin": lambda k: (lambda a: (lambda: a.sin()))(torch.randn(11 + k, 983, device=dev)),
    }
    for name, make in cases.items():
        times = []
        for k in range(count):
            fn = make(k)
            _sync(dev)
            start = time.perf_counter()
            fn()
            _sync(dev)
            times.append((time.perf_counter() - start) * 1e3)
        out[name] = statistics.median(times)
    return out


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    if out.device.type == "neuron":
        out.cpu()  # wait for the device
    return time.perf_counter() - start, out


def child(spec):
    """One measurement process; `spec` says which rows. Prints one JSON line."""
    launched = spec.get("launched")
    import torch

    res = {"policy": os.environ.get("OMP_WAIT_POLICY") or "default",
           "fusion": os.environ.get("TORCH_NEURONX_EAGER_FUSION", "unset")}
    torch.set_grad_enabled(False)
    if spec["role"] == "fresh":
        import torch_neuronx  # noqa: F401

        imported = time.time()
        model = build_tiny()
        x = inputs_tiny()
        import copy

        dev = copy.deepcopy(model).to("neuron")
        if spec["compiled"]:
            dev = torch.compile(dev, backend="neuron", fullgraph=True, dynamic=False)
        ready = time.time()
        call_s, out = _timed(lambda: dev(**_to(x, "neuron"))[0])
        ref = model(**x)[0]
        res.update(total_s=time.time() - launched, import_s=imported - launched, call_s=call_s,
                   setup_s=ready - imported, rel=_rel(out, ref))
        return res

    rounds, iters = spec["rounds"], spec["iters"]
    model = build_tiny()
    x = inputs_tiny()
    runs, first = {}, {}
    ref = model(**x)[0]
    if spec["torch"]:
        runs["torch eager"] = lambda: model(**x)[0]
    if spec["neuron"]:  # before Inductor: its compile workers would still be busy during these first calls
        import copy

        import torch_neuronx  # noqa: F401

        x_dev = _to(x, "neuron")
        dev_model = copy.deepcopy(model).to("neuron")
        first["neuron eager"], out = _timed(lambda: dev_model(**x_dev)[0])
        res["rel_eager"] = _rel(out, ref)
        runs["neuron eager"] = lambda: dev_model(**x_dev)[0]
        if spec["compiled"]:
            compiled = torch.compile(copy.deepcopy(model).to("neuron"), backend="neuron", fullgraph=True, dynamic=False)
            first["neuron compiled"], out = _timed(lambda: compiled(**x_dev)[0])
            res["rel_compiled"] = _rel(out, ref)
            runs["neuron compiled"] = lambda: compiled(**x_dev)[0]
    if spec["inductor"]:
        import copy

        inductor = torch.compile(copy.deepcopy(model))
        first["Inductor"], out = _timed(lambda: inductor(**x)[0])
        res["rel_inductor"] = _rel(out, ref)
        runs["Inductor"] = lambda: inductor(**x)[0]
    pauses = {}
    if spec["torch"] and not spec["neuron"]:
        # torch's own cost of an idle gap (its OpenMP threads go to sleep and must be woken): the fair
        # reference for torch measured right after a neuron forward, which is such a gap for torch
        runs[PAUSED] = runs["torch eager"]
        pauses[PAUSED] = PAUSE_S
    for fn in runs.values():  # one warm call each
        _timed(fn)
    times = {name: [] for name in runs}
    for _ in range(rounds):  # interleaved, so the machine's noise hits every variant alike
        for name, fn in runs.items():
            if name in pauses:
                time.sleep(pauses[name])
            times[name].append(_timed(fn)[0])
    res["steady_ms"] = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    res["best_ms"] = {name: min(t) * 1e3 for name, t in times.items()}
    res["first_s"] = first
    res["dispatch_us"] = {d: _dispatch_us(d, iters) for d in spec["devices"]}
    res["new_shape_ms"] = {d: _new_shape_ms(d, spec["shapes"]) for d in spec["devices"]}
    return res


# --------------------------------------------------------------------------------------------- parent


def run_child(spec, policy=None, fusion=None, timeout=900, empty_inductor_cache=True, autoload=True):
    return run_json_child(__file__, dict(spec, launched=time.time()), timeout=timeout, autoload=autoload,
                          label=f"{spec['role']} (OMP_WAIT_POLICY={policy or 'unset'}, fusion={fusion})",
                          empty_inductor_cache=empty_inductor_cache,
                          settings={"OMP_WAIT_POLICY": policy, "TORCH_NEURONX_EAGER_FUSION": fusion})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="under 3 minutes: fewer rounds and shapes, Inductor's cache as found (a repeated run "
                         "finds it warm), the fresh-process rows under the default threading and the first "
                         "--fusion setting only")
    ap.add_argument("--fusion", choices=("both", "on", "off"), default="both",
                    help="TORCH_NEURONX_EAGER_FUSION for the neuron eager rows: 1, 0 or each in turn")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds of the steady forward")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    rounds = args.rounds or (5 if args.quick else 20)
    iters = 100 if args.quick else 300
    shapes = 3 if args.quick else 7
    fusions = {"both": ["1", "0"], "on": ["1"], "off": ["0"]}[args.fusion]
    started = time.perf_counter()
    base = dict(rounds=rounds, iters=iters, shapes=shapes)

    # torch's side alone in a process, under its default threading (the baseline of every ratio)
    print("... torch rows: torch's default threading, no neuron in the process", file=sys.stderr, flush=True)
    torch_side = run_child(dict(base, role="steady", neuron=False, compiled=False, torch=True, inductor=True,
                                devices=["cpu"]), empty_inductor_cache=not args.quick, autoload=False)
    results = {}  # (policy, fusion) -> child result
    for policy in POLICIES:
        for i, fusion in enumerate(fusions):
            # torch eager runs in the first child of each setting too, beside neuron: for reference
            spec = dict(base, role="steady", neuron=True, compiled=i == 0, torch=i == 0, inductor=False,
                        devices=["neuron"])
            print(f"... steady rows: OMP_WAIT_POLICY={policy}, TORCH_NEURONX_EAGER_FUSION={fusion}", file=sys.stderr,
                  flush=True)
            results[(policy, fusion)] = run_child(spec, POLICIES[policy], fusion)
    fresh = {}
    for policy in (["default"] if args.quick else POLICIES):
        for i, fusion in enumerate(fusions[:1] if args.quick else fusions):
            for compiled in ((False, True) if i == 0 else (False,)):
                print(f"... fresh process: OMP_WAIT_POLICY={policy}, fusion={fusion}, compiled={compiled}",
                      file=sys.stderr, flush=True)
                fresh[(policy, fusion, compiled)] = run_child(dict(role="fresh", compiled=compiled), POLICIES[policy],
                                                              fusion)
    report(torch_side, results, fresh, fusions, rounds, iters, shapes, time.perf_counter() - started, args.quick)


def report(torch_side, results, fresh, fusions, rounds, iters, shapes, elapsed, quick=False):
    import platform

    eager_ms = torch_side["steady_ms"]["torch eager"]
    inductor_ms = torch_side["steady_ms"]["Inductor"]

    def label(policy, fusion, what):
        tags = [f"{policy} threads"]
        if what == "eager" and len(fusions) > 1:
            tags.append(f"fusion {'on' if fusion == '1' else 'off'}")
        return f"neuron {what} ({', '.join(tags)})"

    print(f"tiny FLUX.2 transformer (2 double + 4 single blocks, head dim 32 x 4 heads), float32, {IMG} image + "
          f"{TXT} text tokens; {platform.machine()}, {os.cpu_count()} CPUs")
    print(f"torch rows: torch's default threading, in a process of their own; neuron rows: threading as labelled "
          f"(PASSIVE = OMP_WAIT_POLICY=PASSIVE in that child); "
          f"fusion = TORCH_NEURONX_EAGER_FUSION={'/'.join(fusions)}")
    print()
    print(f"forward, steady (median of {rounds} interleaved rounds)")
    print(f"  {'':44} {'median ms':>9} {'/ torch eager':>14} {'/ Inductor':>11} {'best ms':>9}")
    rows = [("torch CPU eager", eager_ms, torch_side["best_ms"]["torch eager"]),
            ("Inductor CPU", inductor_ms, torch_side["best_ms"]["Inductor"])]
    for policy in POLICIES:
        for i, fusion in enumerate(fusions):
            r, b = results[(policy, fusion)]["steady_ms"], results[(policy, fusion)]["best_ms"]
            rows.append((label(policy, fusion, "eager"), r["neuron eager"], b["neuron eager"]))
            if "neuron compiled" in r:
                rows.append((label(policy, None, "compiled"), r["neuron compiled"], b["neuron compiled"]))
    for name, ms, best in rows:
        print(f"  {name:44} {ms:9.2f} {ms / eager_ms:14.3g} {ms / inductor_ms:11.3g} {best:9.2f}")
    paused = torch_side["steady_ms"][PAUSED]
    print(f"  for reference, torch CPU eager in the neuron children, right after a neuron forward (beside "
          f"neuron's threads), and alone right after a {PAUSE_S * 1e3:.0f} ms idle pause (torch's own threads "
          f"cooling down); the last column is the neuron children's over the paused one:")
    print(f"  {'  alone, after a pause':44} {paused:9.2f} {paused / eager_ms:14.3g} {paused / inductor_ms:11.3g} "
          f"{torch_side['best_ms'][PAUSED]:9.2f}")
    for policy in POLICIES:
        ms = results[(policy, fusions[0])]["steady_ms"]["torch eager"]
        best = results[(policy, fusions[0])]["best_ms"]["torch eager"]
        print(f"  {f'  {policy} threads':44} {ms:9.2f} {ms / eager_ms:14.3g} {ms / inductor_ms:11.3g} {best:9.2f}"
              f"   {ms / paused - 1:+.1%} over the paused")
    print()
    print("first call in the process (s)")
    how = "Inductor cache as found" if quick else "empty Inductor cache"
    print(f"  {f'Inductor CPU ({how})':44} {torch_side['first_s']['Inductor']:9.2f}")
    for policy in POLICIES:
        for i, fusion in enumerate(fusions):
            f = results[(policy, fusion)]["first_s"]
            print(f"  {label(policy, fusion, 'eager'):44} {f['neuron eager']:9.2f}")
            if "neuron compiled" in f:
                print(f"  {label(policy, None, 'compiled'):44} {f['neuron compiled']:9.2f}")
    print()
    print("first call in a fresh process, empty TORCH_NEURONX_NEFF_CACHE_DIR (s)")
    print(f"  {'':44} {'launch->out':>11} {'import':>8} {'build':>7} {'call':>7}")
    for (policy, fusion, compiled), f in fresh.items():
        name = label(policy, fusion, "compiled" if compiled else "eager")
        print(f"  {name:44} {f['total_s']:11.2f} {f['import_s']:8.2f} {f['setup_s']:7.2f} {f['call_s']:7.2f}")
    print()
    print(f"add 64x64 (µs per call; median of 7 loops of {iters})")
    print(f"  {'':44} {'dispatch':>9} {'+ .cpu()':>9} {'dispatch/torch':>15} {'.cpu()/torch':>13}")
    cpu = torch_side["dispatch_us"]["cpu"]
    print(f"  {'torch CPU':44} {cpu['add']:9.1f} {cpu['add_cpu']:9.1f} {1:15.2f} {1:13.2f}")
    for policy in POLICIES:
        for fusion in fusions:
            d = results[(policy, fusion)]["dispatch_us"]["neuron"]
            print(f"  {label(policy, fusion, 'eager'):44} {d['add']:9.1f} {d['add_cpu']:9.1f} "
                  f"{d['add'] / cpu['add']:15.2f} {d['add_cpu'] / cpu['add_cpu']:13.2f}")
    print()
    print(f"first call of an op on a new shape (ms, median over {shapes} shapes never seen in the process)")
    print(f"  {'':44} {'add':>8} {'mm':>8} {'sin':>8}")
    c = torch_side["new_shape_ms"]["cpu"]
    print(f"  {'torch CPU':44} {c['add']:8.2f} {c['mm']:8.2f} {c['sin']:8.2f}")
    for policy in POLICIES:
        for fusion in fusions:
            n = results[(policy, fusion)]["new_shape_ms"]["neuron"]
            print(f"  {label(policy, fusion, 'eager'):44} {n['add']:8.2f} {n['mm']:8.2f} {n['sin']:8.2f}")
    print()
    print("outputs against torch CPU eager (max |out - cpu| / max |cpu|)")
    print(f"  {'Inductor CPU':52} {torch_side['rel_inductor']:9.2e}")
    for policy in POLICIES:
        for i, fusion in enumerate(fusions):
            r = results[(policy, fusion)]
            print(f"  {label(policy, fusion, 'eager'):52} {r['rel_eager']:9.2e}")
            if "rel_compiled" in r:
                print(f"  {label(policy, None, 'compiled'):52} {r['rel_compiled']:9.2e}")
    for (policy, fusion, compiled), f in fresh.items():
        name = label(policy, fusion, "compiled" if compiled else "eager") + ", fresh"
        print(f"  {name:52} {f['rel']:9.2e}")
    print(f"\n({elapsed:.0f} s in all)")


if __name__ == "__main__":
    main()
