"""End-to-end time of the tiny FLUX.2-klein pipeline: torch on the CPU vs neuron eager vs neuron
compiled, first and warm calls, cold and warm disk cache, in bfloat16 and float32, in one run.

    PYTHONPATH=. python benchmarks/pipeline.py [--height 128 --width 128 --steps 4]
        [--dtypes bfloat16,float32] [--repeats 5] [--no-inductor] [--quick]

The pipeline is examples/flux2_klein.py's (a Flux2KleinPipeline with the real architectures and
random weights), saved once per dtype with save_pretrained and loaded in every measurement with
`load_pipeline(folder, dtype)`; each call is examples/demo.py's:
`pipe(prompt=..., height=H, width=W, num_inference_steps=S, generator=torch.Generator().manual_seed(0),
output_type="np")`.

Every row is its own process (this script again with `--child`), so no process state or cache leaks
from one row to another. In each: the imports and `load_pipeline` (and `.to("neuron")`) come before
the timer; the first call is timed, then `--repeats` more calls (the warm column is their median).
`process` is the time from the child's start (before `import torch`) to the end of its first call:
what a user of a new process waits for the first image. Rows:

  cpu                torch eager on the CPU, torch's default threading: the baseline of every ratio
  cpu (PASSIVE)      the same with OMP_WAIT_POLICY=PASSIVE (what it costs torch's own CPU path)
  cpu Inductor       `pipe.transformer.compile()` on the CPU, default threading (first call compiles)
  cpu, again         the first row once more after the neuron rows: how far the load of a shared
                     machine moved the baseline meanwhile
  neuron eager       `pipe.to("neuron")`; cold: an empty TORCH_NEURONX_NEFF_CACHE_DIR (the first
                     call compiles each op); warm disk: a new process on the folder the cold one filled
  neuron compiled    the same plus `pipe.transformer.compile(backend="neuron", fullgraph=True,
                     dynamic=False)` (the first call is the warmup: it traces and compiles the graph;
                     the text encoder and the VAE run eagerly)

The neuron rows run under torch's default threading and again under OMP_WAIT_POLICY=PASSIVE (the
test suite's setting). `compiled` and `loaded` count the executables of the first call, eager (fused runs and ops run on their own) +
graphs, compiled and loaded from the disk cache (`metrics.executable_counts()`); `warm misses` are
executable cache misses during the warm calls (`metrics.cache_stats()`: should be 0). Every image is compared with the CPU row's (relative
Frobenius error; bfloat16 computes in bfloat16 on both sides, so it differs more).

Each process runs alone, one after another; on a shared machine the figures are noisy: compare the
ratios of one run (and the two CPU rows). `--quick`: 64x64, 2 steps, float32, 1 repeat, no Inductor row
(~3 min); the defaults take 8-11 min on 2 cores.
"""
from __future__ import annotations

import time

_START = time.perf_counter()  # a child's start, before torch loads

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

from child_process import child_env, run_child  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")
REL_TOL = {"float32": 1e-5, "bfloat16": 3e-2}  # examples/demo.py's
CACHE_VARS = ("TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_NEFF_DISABLE_CACHE", "JAX_COMPILATION_CACHE_DIR")

# ---------------------------------------------------------------- child


def _quiet():
    import diffusers
    import transformers

    diffusers.utils.logging.set_verbosity_error()
    diffusers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def child(args) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    sys.path.insert(0, EXAMPLES)
    from flux2_klein import load_pipeline, save_pipeline
    from page_args import PAGE_PROMPT

    _quiet()
    dtype = getattr(torch, args.dtype)
    if args.child == "save":
        save_pipeline(args.folder, dtype)
        return 0
    device = "neuron" if args.child.startswith("neuron") else "cpu"
    if device == "neuron":
        import torch_neuronx
        from torch_neuronx import metrics
    imported = time.perf_counter()
    pipe = load_pipeline(args.folder, dtype)
    if device == "neuron":
        pipe.to("neuron")
        torch_neuronx.clear_op_tracking()
        torch.neuron.reset_dynamo_metrics()
    if args.child == "neuron-compiled":
        pipe.transformer.compile(backend="neuron", fullgraph=True, dynamic=False)
    elif args.child == "cpu-inductor":
        pipe.transformer.compile()
    loaded = time.perf_counter()

    def call():
        return pipe(
            prompt=PAGE_PROMPT, height=args.height, width=args.width, num_inference_steps=args.steps,
            generator=torch.Generator().manual_seed(0), output_type="np",
        ).images

    start = time.perf_counter()
    image = call()
    end = time.perf_counter()
    out = {"import_s": imported - _START, "load_s": loaded - imported, "first_s": end - start, "process_s": end - _START,
           "threads": torch.get_num_threads()}
    if device == "neuron":
        counts = metrics.executable_counts()
        out.update({
            # eager executables: fused runs and ops that ran on their own
            "ops_compiled": counts["ops_compiled"] + counts["runs_compiled"], "graphs_compiled": counts["graphs_compiled"],
            "compile_s": counts["ops_compile_s"] + counts["runs_compile_s"] + counts["graphs_compile_s"],
            "op_loads": counts["ops_loaded"] + counts["runs_loaded"], "graph_loads": counts["graphs_loaded"],
            "disk_load_s": counts["load_s"], "fallbacks": torch_neuronx.get_fallback_ops(),
        })
        misses = metrics.cache_stats()["misses"]
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        image = call()
        times.append(time.perf_counter() - start)
    out["warm_s"] = statistics.median(times) if times else None
    out["best_s"] = min(times) if times else None
    out["warm_all_s"] = times
    if device == "neuron":
        out["warm_misses"] = metrics.cache_stats()["misses"] - misses
    import numpy as np

    np.save(args.image, image.astype(np.float64))
    with open(args.out, "w") as f:
        json.dump(out, f)
    return 0


# ---------------------------------------------------------------- parent


def run_side(kind, dtype, folder, args, policy=None, cache_dir=None, tmp=None) -> dict:
    env = child_env({"HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": policy or None,
                     **({"TORCH_NEURONX_NEFF_CACHE_DIR": cache_dir} if cache_dir else {})}, unset=CACHE_VARS)
    out, image = os.path.join(tmp, "out.json"), os.path.join(tmp, "image.npy")
    for p in (out, image):
        if os.path.exists(p):
            os.remove(p)
    cmd = [os.path.abspath(__file__), "--child", kind, "--dtype", dtype, "--folder", folder,
           "--height", str(args.height), "--width", str(args.width), "--steps", str(args.steps),
           "--repeats", str(args.repeats), "--out", out, "--image", image]
    started = time.perf_counter()
    p = run_child(cmd, label=f"{kind} {dtype} (OMP_WAIT_POLICY={policy or 'unset'})", env=env, timeout=args.timeout)
    if kind == "save":
        return {}
    with open(out) as f:
        result = json.load(f)
    import numpy as np

    result["image"] = np.load(image)
    result["wall_s"] = time.perf_counter() - started
    result["warnings"] = [ln.strip() for ln in p.stderr.splitlines() if "torch_neuronx:" in ln]
    return result


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for name in ("torch", "jax", "jaxlib", "diffusers", "transformers"):
        try:
            parts.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            pass
    return ", ".join(parts)


def _rel(got, want) -> float:
    import numpy as np

    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def parent(args) -> int:
    import platform

    dtypes = args.dtypes.split(",")
    policies = [None, "PASSIVE"]
    print("command: " + " ".join([os.path.basename(sys.executable)] + sys.argv), flush=True)
    print(f"machine: {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable), {platform.machine()}, "
          f"Python {platform.python_version()}; {_versions()}", flush=True)
    print("load average at the start: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
    print(f"OMP_WAIT_POLICY of this shell: {os.environ.get('OMP_WAIT_POLICY') or 'unset'} (each row sets its own)",
          flush=True)
    started = time.perf_counter()
    tables, problems = {}, []
    root = tempfile.mkdtemp(prefix="pipeline_bench_")
    try:
        for dtype in dtypes:
            folder = os.path.join(root, f"pipe_{dtype}")
            run_side("save", dtype, folder, args, tmp=root)
            rows = []

            def add(label, policy, **kw):
                r = run_side(policy=policy, tmp=root, dtype=dtype, folder=folder, args=args, **kw)
                r["label"], r["policy"] = label, policy or "default"
                rows.append(r)
                warm = f"{r['warm_s']:.2f}" if r["warm_s"] is not None else "-"
                print(f"  [{dtype}] {label:28s} {r['policy']:8s} first {r['first_s']:7.2f} s, warm {warm} s "
                      f"({r['wall_s']:.0f} s in all)", file=sys.stderr, flush=True)
                return r

            add("cpu", None, kind="cpu")
            add("cpu", "PASSIVE", kind="cpu")
            if args.inductor:
                add("cpu Inductor", None, kind="cpu-inductor")
            for policy in policies:
                for mode in ("eager", "compiled"):
                    cache = tempfile.mkdtemp(prefix="neff_", dir=root)
                    add(f"neuron {mode}, cold disk", policy, kind=f"neuron-{mode}", cache_dir=cache)
                    add(f"neuron {mode}, warm disk", policy, kind=f"neuron-{mode}", cache_dir=cache)
                    shutil.rmtree(cache, ignore_errors=True)
            add("cpu, again at the end", None, kind="cpu")  # how much the machine's load moved the baseline
            tables[dtype] = rows
    finally:
        shutil.rmtree(root, ignore_errors=True)
    total = time.perf_counter() - started

    size = f"{args.height}x{args.width}, {args.steps} steps"
    print(f"\nFLUX.2-klein (tiny, random weights) end to end, {size}; warm = median of {args.repeats} call(s) "
          "after the first; every row its own process, one after another")
    print("x cpu: the row's time over the CPU row's (torch eager, default threading) of the same column; "
          "process: from the process's start (before import torch) to the first image; best: the fastest warm call "
          "(the least disturbed on a shared machine)")
    for dtype, rows in tables.items():
        base = rows[0]
        want = base["image"]
        head = (f"{'row':28s} {'OMP':>7s} {'first s':>8s} {'x cpu':>6s} {'warm s':>7s} {'x cpu':>6s} {'best s':>7s} {'x cpu':>6s} "
                f"{'process s':>9s} {'x cpu':>6s} {'compiled':>8s} {'in s':>6s} {'loaded':>6s} {'in s':>5s} "
                f"{'warm misses':>11s} {'rel err':>8s}")
        print(f"\n{dtype}")
        print(head)
        print("-" * len(head))
        for r in rows:
            err = _rel(r["image"], want)
            warm = r["warm_s"]
            cells = (f"{r['label']:28s} {r['policy']:>7s} {r['first_s']:8.2f} {r['first_s'] / base['first_s']:6.2f} "
                     f"{warm if warm is not None else float('nan'):7.2f} "
                     f"{warm / base['warm_s'] if warm and base['warm_s'] else float('nan'):6.2f} "
                     f"{r['best_s'] if warm is not None else float('nan'):7.2f} "
                     f"{r['best_s'] / base['best_s'] if warm and base['best_s'] else float('nan'):6.2f} "
                     f"{r['process_s']:9.2f} {r['process_s'] / base['process_s']:6.2f}")
            if "ops_compiled" in r:
                compiled = f"{r['ops_compiled']}+{r['graphs_compiled']}"
                loaded = f"{r['op_loads']}+{r['graph_loads']}"
                cells += (f" {compiled:>8s} {r['compile_s']:6.2f} {loaded:>6s} {r['disk_load_s']:5.2f} "
                          f"{r['warm_misses']:11d}")
                if r["fallbacks"]:
                    problems.append(f"{dtype} {r['label']} ({r['policy']}): CPU fallbacks {r['fallbacks']}")
                if r["warm_misses"]:
                    problems.append(f"{dtype} {r['label']} ({r['policy']}): {r['warm_misses']} compiles in warm calls")
                if "warm disk" in r["label"] and r["op_loads"] + r["graph_loads"] == 0:
                    problems.append(f"{dtype} {r['label']} ({r['policy']}): loaded nothing from disk")
                for w in r["warnings"]:
                    problems.append(f"{dtype} {r['label']} ({r['policy']}) warned: {w[:200]}")
            else:
                cells += f" {'':>8s} {'':>6s} {'':>6s} {'':>5s} {'':>11s}"
            print(cells + f" {err:8.1e}")
            if r is not base and "Inductor" not in r["label"] and err > REL_TOL[dtype]:
                problems.append(f"{dtype} {r['label']} ({r['policy']}): image differs from the CPU's by {err:.1e} "
                                f"relative > {REL_TOL[dtype]:g}")
        threads = {r["threads"] for r in rows}
        print(f"(torch threads {', '.join(map(str, sorted(threads)))}; compiled / loaded: executables of the first "
              "call, eager ops + graphs, and their seconds; rel err: the image vs the CPU row's)")
    print(f"\nwhole run {total:.0f} s; load average at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    if problems:
        print("PROBLEMS:\n  " + "\n  ".join(problems))
        return 1
    print("all images match the CPU's; no fallbacks, no compiles in warm calls")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--height", type=int, default=128)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--repeats", type=int, default=5, help="warm calls after the first (their median is shown)")
    ap.add_argument("--no-inductor", dest="inductor", action="store_false", help="no `cpu Inductor` row")
    ap.add_argument("--quick", action="store_true", help="64x64, 2 steps, float32, 1 repeat, no Inductor")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds allowed to one child")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--image", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    if args.quick:
        args.height, args.width, args.steps, args.dtypes, args.repeats, args.inductor = 64, 64, 2, "float32", 1, False
    for d in args.dtypes.split(","):
        if d not in REL_TOL:
            ap.error(f"--dtypes: {d} is not one of {', '.join(REL_TOL)}")
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
