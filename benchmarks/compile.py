"""torch.compile(backend="neuron") on FLUX.2 transformers vs torch on the CPU, side by side.

    python benchmarks/compile.py [--model tiny|small|both] [--rounds N] [--settings default,passive]
                                 [--blocks D S] [--tokens IMG TXT] [--no-compile-times] [--profile]

Models (benchmarks/flux_small.py): `tiny` is the FLUX.2 of tests/test_models.py (2 double + 4 single
blocks, head size 32); `small` the ~15 M-parameter one (`--blocks`, default 4 double + 8 single, head
size 64). Default: both.

Each model runs in a child process per threading setting (`--settings`):
- `default`: the environment as it is. torch's CPU baselines (eager, Inductor) are taken from this
  one only: torch under its default OpenMP threading.
- `passive`: OMP_WAIT_POLICY=PASSIVE, so torch's OpenMP workers sleep instead of spinning after each
  parallel region (they otherwise hold the cores XLA's threads want when the two alternate in one
  process, which this interleaved measurement does). Only the neuron side is read from it; the
  setting slows torch's own CPU path about 2.5x, so its torch rows are printed for information.

Table 1, per model and setting: forward time (median over interleaved rounds, waiting for the result)
of compiled on neuron (whole graph, and `compile_repeated_blocks`), the XLA executable of the whole
graph called directly with its input buffers (what the torch call path costs on top: Dynamo's guards,
the inputs' layouts, wrapping the outputs), eager on neuron, eager CPU and Inductor CPU; ratios to
Inductor and to eager CPU of the default setting; the same for the fastest round (`min`: on a shared,
busy machine the medians of torch's OpenMP threads suffer most). Every output is checked against eager CPU
(max |diff| / max |cpu| <= 1e-5 in float32). Target: compiled neuron <= 0.9 x Inductor.

`--profile` adds, for the first setting, the whole graph's executable timed per XLA thunk (compiled
again with XLA's trace annotations, run under jax.profiler): the share of dots, reductions,
exponentials and layout copies, and the dozen costliest thunk kinds by output shape.

Table 2 (default setting, unless `--no-compile-times`): compile time of the whole graph vs regional
compilation: the first call's wall time and the XLA compile seconds the metrics record. Target:
regional at most a third of whole for a model with >= 8 blocks. Eager neuron runs first, so the eager
executables the regional model needs outside its blocks are already in the in-memory cache in both.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time

from child_process import child_env, run_child

TOLERANCE = 1e-5
SETTINGS = {"default": {}, "passive": {"OMP_WAIT_POLICY": "PASSIVE"}}
ROWS = ("compiled neuron (whole graph)", "compiled neuron (regional)", "XLA executable alone",
        "eager neuron", "eager CPU", "torch.compile (Inductor) CPU")
TORCH_ROWS = ("eager CPU", "torch.compile (Inductor) CPU")


def timed(fn):
    start = time.perf_counter()
    out = fn()
    if hasattr(out, "block_until_ready"):
        out.block_until_ready()
    elif out.device.type == "neuron":
        out.cpu()  # wait for the device
    return time.perf_counter() - start


def rel_err(out, ref) -> float:
    import torch

    out = torch.as_tensor(out).cpu().float()
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def thunk_profile(neuron_graph, program, call_inputs, arrays, rounds=20) -> dict:
    """The whole graph's executable compiled again with XLA's per-thunk trace annotations, run under
    jax.profiler: microseconds per call by what each thunk (a fusion, a library call) computes: its
    dot, reduce, or the root of a loop fusion (a `bitcast` or `copy` root is a layout change: the
    transposes around attention's products), and the shape it writes."""
    import collections
    import glob
    import re
    import tempfile

    import jax
    from jax._src.lib import _profile_data

    lowered = jax.jit(neuron_graph._Tracer(program, call_inputs).run).lower(*arrays)
    fn = lowered.compile(compiler_options={"xla_cpu_enable_xprof_traceme": True})
    text = fn.as_text()
    what = {}
    for m in re.finditer(r"%(\S+) = (\S+) fusion\([^\n]*calls=(%fused_computation\.\d+)", text):
        name, shape, called = m.groups()
        body = re.search(re.escape(called) + r" \(.*?\n\}", text, re.S).group(0)
        ops = set(re.findall(r"= \S+ ([\w-]+)\(", body))
        root = re.search(r"ROOT %\S+ = \S+ ([\w-]+)\(", body).group(1)
        what[name] = ("dot" if "dot" in ops else "reduce" if "reduce" in ops else root, shape.split("{")[0])
    for _ in range(5):
        jax.block_until_ready(fn(*arrays))
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
            for _ in range(rounds):
                jax.block_until_ready(fn(*arrays))
        data = _profile_data.ProfileData.from_file(glob.glob(d + "/**/*.xplane.pb", recursive=True)[0])
    by_kind, by_shape, count = collections.Counter(), collections.Counter(), collections.Counter()
    for plane in data.planes:
        for line in plane.lines:
            for ev in line.events:
                if ev.name in what:
                    kind, shape = what[ev.name]
                    by_kind[kind] += ev.duration_ns / rounds / 1e3
                    by_shape[f"{kind} {shape}"] += ev.duration_ns / rounds / 1e3
                    count[f"{kind} {shape}"] += 1 / rounds
    return dict(thunks=sum(count.values()), kinds=by_kind.most_common(),
                top=[(k, us, round(count[k])) for k, us in by_shape.most_common(12)])


def child(opts) -> dict:
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    from test_models import _to

    sys.path.insert(0, os.path.dirname(__file__))
    import flux_small
    import torch_neuronx
    import torch_neuronx.compile
    from torch_neuronx.compile import graph as neuron_graph

    n, t = opts["tokens"]
    if opts["model"] == "tiny":
        model = flux_small.build_tiny()
        x_cpu = flux_small.inputs(n, t, flux_small.TINY["in_channels"], flux_small.TINY["joint_attention_dim"])
    else:
        model = flux_small.build(*opts["blocks"])
        x_cpu = flux_small.inputs(n, t)
    x_dev = _to(x_cpu, "neuron")
    dev = copy.deepcopy(model).to("neuron")
    whole = copy.deepcopy(model).to("neuron")
    regional = copy.deepcopy(model).to("neuron")
    inductor = torch.compile(copy.deepcopy(model))

    # the whole graph's executable and input buffers, caught at its first call's finish, so one row
    # times the XLA executable alone (no Dynamo guards, no input layouts, no output wrapping)
    caught = {}
    finish = neuron_graph._Executable.finish

    def catching(self, program, args, inputs, outs, device):
        caught.setdefault(program.name, (self.fn, inputs.arrays(), program, inputs))
        return finish(self, program, args, inputs, outs, device)

    torch.set_grad_enabled(False)
    runs = {
        "eager CPU": lambda: model(**x_cpu)[0],
        "torch.compile (Inductor) CPU": lambda: inductor(**x_cpu)[0],
        "eager neuron": lambda: dev(**x_dev)[0],
    }
    for fn in list(runs.values()):  # warm up: compiles, caches
        fn()

    compile_rows = []
    for label, model_dev, how in (("whole graph", whole, "compile"), ("compile_repeated_blocks", regional, "regional")):
        torch._dynamo.reset()
        torch_neuronx.compile.clear_cache()
        torch.neuron.reset_dynamo_metrics()
        if how == "compile":
            model_dev.compile(backend="neuron", fullgraph=True, dynamic=False)
            neuron_graph._Executable.finish = catching
        else:
            model_dev.compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)
        try:
            first = timed(lambda: model_dev(**x_dev)[0])
        finally:
            neuron_graph._Executable.finish = finish
        m = torch.neuron.get_dynamo_metrics()
        compile_rows.append((label, first, m["compile_time_s"], m["graphs_compiled"], sum(g["nodes"] for g in m["graphs"])))
    runs["compiled neuron (whole graph)"] = lambda: whole(**x_dev)[0]
    runs["compiled neuron (regional)"] = lambda: regional(**x_dev)[0]
    if len(caught) == 1:
        (exe_fn, arrays, program, call_inputs), = caught.values()
        runs["XLA executable alone"] = lambda: exe_fn(*arrays)[0]

    ref = model(**x_cpu)[0]
    # (the executable alone returns a flat buffer: the whole graph's row checks its values)
    errors = {name: rel_err(fn(), ref) for name, fn in runs.items() if name not in ("eager CPU", "XLA executable alone")}

    times = {name: [] for name in runs}
    for _ in range(opts["rounds"]):  # interleaved, so machine noise hits every variant alike
        for name, fn in runs.items():
            times[name].append(timed(fn))
    profile = None
    if opts.get("profile") and len(caught) == 1 and not program.random:
        profile = thunk_profile(neuron_graph, program, call_inputs, arrays)
    return dict(
        profile=profile,
        params=sum(p.numel() for p in model.parameters()),
        ms={name: statistics.median(v) * 1e3 for name, v in times.items()},
        min_ms={name: min(v) * 1e3 for name, v in times.items()},
        errors=errors, compile_rows=compile_rows, threads=torch.get_num_threads(),
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=("tiny", "small", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--settings", default="default,passive", help="comma-separated: default, passive")
    parser.add_argument("--blocks", type=int, nargs=2, default=(4, 8), metavar=("DOUBLE", "SINGLE"),
                        help="the small model's double and single blocks")
    parser.add_argument("--tokens", type=int, nargs=2, default=(256, 32), metavar=("IMG", "TXT"))
    parser.add_argument("--no-compile-times", action="store_true")
    parser.add_argument("--profile", action="store_true",
                        help="also time the whole graph's executable per XLA thunk (first setting only)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(json.loads(args.child))), flush=True)
        return

    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    for s in settings:
        if s not in SETTINGS:
            parser.error(f"unknown setting {s!r} (expected {', '.join(SETTINGS)})")
    failed = False
    for model in ("tiny", "small") if args.model == "both" else (args.model,):
        results = {}
        for setting in settings:
            env = child_env(SETTINGS[setting], unset=("OMP_WAIT_POLICY",))
            opts = dict(model=model, rounds=args.rounds, blocks=args.blocks, tokens=args.tokens,
                        profile=args.profile and setting == settings[0])
            proc = run_child([__file__, "--child", json.dumps(opts)], label=f"{model} / {setting}", env=env,
                             capture="stdout", check=False)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode or not lines:
                print(f"{model} / {setting}: the child process failed (exit {proc.returncode})")
                failed = True
                continue
            results[setting] = json.loads(lines[-1][len("RESULT "):])
        if not results:
            continue
        torch_base = results.get("default") or next(iter(results.values()))
        base_name = "default" if "default" in results else next(iter(results))
        ind = torch_base["ms"]["torch.compile (Inductor) CPU"]
        eager = torch_base["ms"]["eager CPU"]
        any_r = next(iter(results.values()))
        d, s = (2, 4) if model == "tiny" else args.blocks
        n, t = args.tokens
        print(f"FLUX.2 {model}: {d} double + {s} single blocks, {any_r['params'] / 1e6:.1f} M parameters, "
              f"{n} image + {t} text tokens, float32, median of {args.rounds} interleaved rounds, "
              f"torch threads {any_r['threads']}; ratios to the '{base_name}' setting's torch CPU rows")
        ind_min = torch_base["min_ms"]["torch.compile (Inductor) CPU"]
        print(f"{'variant':31} {'setting':8} {'ms':>8} {'/ Inductor':>10} {'/ eager CPU':>11} {'min ms':>8} "
              f"{'min / Ind.':>10} {'max rel err':>11}")
        for setting, r in results.items():
            for name in ROWS:
                if name not in r["ms"]:
                    continue
                ms = r["ms"][name]
                err = r["errors"].get(name)
                note = ""
                if name in TORCH_ROWS and setting != base_name:
                    note = "  (not a baseline: torch under this setting)"
                ok = "" if err is None else (f"{err:11.1e}" + ("" if err <= TOLERANCE else " FAIL"))
                if err is not None and err > TOLERANCE and name != "torch.compile (Inductor) CPU":
                    failed = True
                lo = r["min_ms"][name]
                print(f"{name:31} {setting:8} {ms:8.2f} {ms / ind:10.2f} {ms / eager:11.2f} {lo:8.2f} "
                      f"{lo / ind_min:10.2f} {ok:>11}{note}")
        for setting, r in results.items():
            prof = r.get("profile")
            if prof:
                total = sum(us for _, us in prof["kinds"])
                print(f"where the executable's time goes ({setting}): {prof['thunks']:.0f} thunks a call, "
                      f"{total:.0f} us in them: " + ", ".join(f"{k} {us / total:.0%}" for k, us in prof["kinds"][:6]))
                for k, us, n_ in prof["top"]:
                    print(f"  {us:8.0f} us  x{n_:<3d} {k}")
        best = min(r["ms"]["compiled neuron (whole graph)"] for r in results.values())
        print(f"compiled neuron (whole graph), best setting / Inductor: {best / ind:.2f} (target <= 0.90)")
        print()
        if not args.no_compile_times and "default" in results:
            rows = results["default"]["compile_rows"]
            print(f"{'compilation':26} {'first call s':>12} {'XLA compile s':>14} {'graphs':>7} {'nodes':>7}")
            for label, first, xla_s, graphs, nodes in rows:
                print(f"{label:26} {first:12.2f} {xla_s:14.2f} {graphs:7d} {nodes:7d}")
            (_, whole_first, whole_xla, *_), (_, reg_first, reg_xla, *_) = rows
            xla = f"{reg_xla / whole_xla:.2f}" if whole_xla else "n/a (the whole graph came from the disk cache)"
            print(f"regional / whole: first call {reg_first / whole_first:.2f}, XLA compile {xla} (target <= 0.33)")
            print()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
