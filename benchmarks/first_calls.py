"""First calls in a fresh process with an empty executable cache: where the time goes.

    python benchmarks/first_calls.py [--repeats N] [--only compiled eager ops] [--model tiny|real]

Every measurement is its own child process (this script again with `--child WHAT`) with a new empty
TORCH_NEURONX_NEFF_CACHE_DIR; imports, building the model and `.to("neuron")` come before the timer,
which stops after the output is read back (`.cpu()`). torch runs under its default threading.

`--model real` measures the compiled and eager rows on FLUX.2-klein-4B's transformer at its real width
instead (1 double + 2 single blocks, bfloat16, 512x512: benchmarks/flux_real.py's default model).

- compiled: the first call of `torch.compile(model, backend="neuron")` on the tiny FLUX.2, split into
  Dynamo (everything outside the backend and the graph's first run), AOTAutograd (the backend less
  what it spends in our GraphProgram and checks), our lowering (jax tracing of the ATen graph to
  StableHLO), XLA's compile, the disk-cache write (serialize + pickle + write), and the rest
  (the CPU checks' fake run, the AOT shortcut's key and record, the graph's first launch), and the
  first run (the executable running, what the `.cpu()` after the call waits for).
- eager: the tiny FLUX.2's first eager call, and the first call of add, mm and sin on new shapes
  (median over shapes, after one warm-up shape per op), split into the meta call + output plan, the
  trace and lowering, XLA's compile and the cache write.

The timers wrap functions of this package (monkeypatched in the child); they add a few µs a call.
Runs on a shared 2-core machine are noisy: use --repeats and read medians.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from child_process import child_env, last_json, run_child

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# ------------------------------------------------------------------------------------------ child

class _Timers:
    def __init__(self):
        self.s: dict[str, float] = {}
        self.n: dict[str, int] = {}
        self._stack: list = []

    def wrap(self, owner, attr, label, exclusive=False):
        """Time `owner.attr` under `label`; `exclusive`: its time less what nested timers took."""
        fn = getattr(owner, attr)
        timers = self

        def timed(*args, **kwargs):
            start = time.perf_counter()
            timers._stack.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                inner = timers._stack.pop()
                took = time.perf_counter() - start
                timers.s[label] = timers.s.get(label, 0.0) + (took - inner if exclusive else took)
                timers.n[label] = timers.n.get(label, 0) + 1
                if timers._stack:
                    timers._stack[-1] += took

        setattr(owner, attr, timed)


def _flux():
    """The model (on neuron) and its inputs (on neuron) that MODEL names."""
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if os.environ.get("FIRST_CALLS_MODEL", "tiny") == "real":
        import flux_real

        model = flux_real.build(1, 2, torch.bfloat16, "neuron")
        return model, flux_real.inputs(512, 128, torch.bfloat16, "neuron")
    from flux_small import build_tiny, inputs_tiny

    model, inputs = build_tiny().to("neuron"), inputs_tiny()
    return model, {k: v.to("neuron") if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _instrument_compile(timers: _Timers):
    import jax

    from torch_neuronx.cache import ExecutableCache
    from torch_neuronx.compile import aot_records, backend, graph, graph_argument_checks

    timers.wrap(backend, "_aot", "backend")  # neuron_backend itself is registered by reference
    timers.wrap(graph_argument_checks, "first_error", "cpu checks")
    timers.wrap(aot_records, "key_of", "aot shortcut key")
    timers.wrap(aot_records, "remember", "aot shortcut record")
    if hasattr(aot_records, "finish_records"):  # the record's thread: what the first call still waits for
        timers.wrap(aot_records, "finish_records", "aot record wait")
    timers.wrap(graph.GraphProgram, "__init__", "graph setup")
    timers.wrap(graph.GraphProgram, "__call__", "graph call")
    timers.wrap(graph.GraphProgram, "_compile", "lowering+xla")
    timers.wrap(ExecutableCache, "save", "cache write")
    timers.wrap(ExecutableCache, "load", "cache load")
    timers.wrap(ExecutableCache, "_loads_work", "cache probe")
    timers.wrap(jax.stages.Lowered, "compile", "xla")


def _instrument_eager(timers: _Timers):
    import jax

    from torch_neuronx.cache import ExecutableCache
    from torch_neuronx.eager import executor, fusion

    timers.wrap(executor, "_load_or_compile", "first calls")
    timers.wrap(executor, "_meta_call", "meta")
    timers.wrap(executor, "_trace", "trace")  # the meta call and the op's jaxpr
    timers.wrap(executor, "_compile_entry", "lowering+xla")  # an op's own executable (fusion off)
    timers.wrap(fusion, "_compile", "lowering+xla")  # a fused run's executable
    timers.wrap(jax.stages.Lowered, "compile", "xla")
    timers.wrap(ExecutableCache, "save", "cache write")
    timers.wrap(ExecutableCache, "load", "cache load")
    timers.wrap(ExecutableCache, "_loads_work", "cache probe")


def child_compiled() -> dict:
    import torch
    import torch_neuronx  # noqa: F401

    timers = _Timers()
    _instrument_compile(timers)
    model, x = _flux()
    torch.neuron.synchronize()
    fn = torch.compile(model, backend="neuron")
    with torch.no_grad():
        start, cpu, thread = time.perf_counter(), time.process_time(), time.thread_time()
        out = fn(**x)[0]
        called = time.perf_counter()
        out.cpu()  # the launch is asynchronous: this waits for the graph's first run
        total = time.perf_counter() - start
        run = total - (called - start)
        cpu, thread = time.process_time() - cpu, time.thread_time() - thread
        start = time.perf_counter()
        fn(**x)[0].cpu()
        second = time.perf_counter() - start
    s = timers.s
    xla = s.get("xla", 0.0)
    lowering = s.get("lowering+xla", 0.0) - xla
    write = s.get("cache write", 0.0)
    checks = (s.get("cpu checks", 0.0) + s.get("aot shortcut key", 0.0) + s.get("aot shortcut record", 0.0)
              + s.get("graph setup", 0.0))
    backend_s = s.get("backend", 0.0)
    graph_call = s.get("graph call", 0.0)
    # the graph's first call runs inside the backend's AOTAutograd run only when AOTAutograd calls it
    aot = backend_s - checks
    split = {
        "total": total,
        "cpu": cpu,  # every thread's CPU time during the call (less noisy than wall time on a busy host)
        "main thread cpu": thread,
        "dynamo": total - run - backend_s - graph_call,
        "first run": run,
        "aot_autograd": aot,
        "lowering": lowering,
        "xla": xla,
        "cache write": write,
        "other ours": checks + graph_call - lowering - xla - write,
        "second call": second,
        "raw": {k: round(v, 4) for k, v in s.items()},
    }
    return split


def child_eager() -> dict:
    import torch
    import torch_neuronx  # noqa: F401

    timers = _Timers()
    _instrument_eager(timers)
    out = {}
    model, x = _flux()
    torch.neuron.synchronize()
    timers.s.clear()
    timers.n.clear()
    with torch.no_grad():
        start, cpu, thread = time.perf_counter(), time.process_time(), time.thread_time()
        model(**x)[0].cpu()
        out["flux total"] = time.perf_counter() - start
        out["flux cpu"], out["flux main thread cpu"] = time.process_time() - cpu, time.thread_time() - thread
        start = time.perf_counter()
        model(**x)[0].cpu()
        out["flux second"] = time.perf_counter() - start
    s = dict(timers.s)
    out["flux compiles"] = timers.n.get("first calls", 0)
    out["flux first calls"] = s.get("first calls", 0.0)
    out["flux meta"] = s.get("meta", 0.0)
    out["flux xla"] = s.get("xla", 0.0)
    out["flux lowering"] = s.get("lowering+xla", 0.0) - s.get("xla", 0.0) + s.get("trace", 0.0) - s.get("meta", 0.0)
    out["flux cache write"] = s.get("cache write", 0.0)
    out["flux cache probe"] = s.get("cache probe", 0.0)
    return out


def child_ops() -> dict:
    import torch
    import torch_neuronx  # noqa: F401

    timers = _Timers()
    _instrument_eager(timers)
    ops = {"add": lambda a, b: a + b, "mm": lambda a, b: a @ b, "sin": lambda a, b: a.sin()}
    shapes = [(8 + 8 * i, 8 + 8 * i) for i in range(12)]
    out = {}
    x = torch.randn(4, 4, device="neuron")
    (x + x).cpu()  # the runtime, the cache and its probe start here, not in the timed calls
    for name, op in ops.items():
        a, b = (torch.randn(6, 6, device="neuron") for _ in range(2))
        op(a, b).cpu()  # the op's first shape (its spec, its lowering's imports)
        runs, cpus, parts = [], [], {"meta": [], "lowering": [], "xla": [], "cache write": [], "rest": []}
        for shape in shapes:
            a, b = (torch.randn(*shape, device="neuron") for _ in range(2))
            torch.neuron.synchronize()
            timers.s.clear()
            start, cpu = time.perf_counter(), time.process_time()
            op(a, b).cpu()
            took = time.perf_counter() - start
            cpus.append(time.process_time() - cpu)  # all threads: XLA compiles in its own
            s = dict(timers.s)
            runs.append(took)
            lx = s.get("lowering+xla", 0.0) + s.get("trace", 0.0) - s.get("meta", 0.0)
            parts["meta"].append(s.get("meta", 0.0))
            parts["xla"].append(s.get("xla", 0.0))
            parts["lowering"].append(lx - s.get("xla", 0.0))
            parts["cache write"].append(s.get("cache write", 0.0))
            parts["rest"].append(took - s.get("meta", 0.0) - lx - s.get("cache write", 0.0))
        out[name] = {"first": statistics.median(runs), "first cpu": statistics.median(cpus), **{k: statistics.median(v) for k, v in parts.items()}}
    return out


CHILDREN = {"compiled": child_compiled, "eager": child_eager, "ops": child_ops}


# ------------------------------------------------------------------------------------------ parent

def run_side(what: str, model: str = "tiny") -> dict:
    folder = tempfile.mkdtemp(prefix="first_calls_")
    env = child_env({"TORCH_NEURONX_NEFF_CACHE_DIR": folder, "FIRST_CALLS_MODEL": model}, root_on_path=True)
    try:
        proc = run_child([os.path.abspath(__file__), "--child", what], label=what, env=env, timeout=900)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return last_json(proc.stdout)


def _ms(v: float) -> str:
    return f"{v * 1e3:9.1f}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--child")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=list(CHILDREN))
    parser.add_argument("--model", choices=("tiny", "real"), default="tiny",
                        help="the model of the compiled and eager rows: the tiny FLUX.2, or FLUX.2-klein-4B's "
                             "transformer at real width (1 + 2 blocks, bf16, 512x512)")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child]()))
        return
    results = {what: [] for what in args.only}
    for _ in range(args.repeats):  # interleaved, so a busy moment hits every workload alike
        for what in args.only:
            results[what].append(run_side(what, args.model))

    def med(what, key, sub=None):
        vals = [r[key] if sub is None else r[key][sub] for r in results[what]]
        return statistics.median(vals)

    print(f"first calls, fresh processes, empty cache folder; medians of {args.repeats} (ms)")
    name = "tiny FLUX.2" if args.model == "tiny" else "FLUX.2-klein-4B transformer, 1 + 2 blocks, bf16, 512x512"
    if "compiled" in results:
        total = med("compiled", "total")
        print(f"\n{name}, torch.compile(backend='neuron'), first call: {total * 1e3:.0f} ms "
              f"(target 1500: {total / 1.5:.2f}x of it); second call {med('compiled', 'second call') * 1e3:.1f} ms")
        print(f"(CPU time of the call: {med('compiled', 'cpu') * 1e3:.0f} ms in all threads, "
              f"{med('compiled', 'main thread cpu') * 1e3:.0f} ms in the calling thread)")
        print(f"{'part':<16}{'ms':>9}{'share':>8}")
        for part in ("dynamo", "aot_autograd", "lowering", "xla", "cache write", "other ours", "first run"):
            v = med("compiled", part)
            print(f"{part:<16}{_ms(v)}{v / total:8.0%}")
    if "eager" in results:
        total = med("eager", "flux total")
        print(f"\n{name} eager, first call: {total * 1e3:.0f} ms (target 1500: {total / 1.5:.2f}x of it); "
              f"second call {med('eager', 'flux second') * 1e3:.1f} ms; "
              f"{med('eager', 'flux compiles'):.0f} op signatures compiled")
        print(f"(CPU time of the call: {med('eager', 'flux cpu') * 1e3:.0f} ms in all threads, "
              f"{med('eager', 'flux main thread cpu') * 1e3:.0f} ms in the calling thread)")
        print(f"{'part':<16}{'ms':>9}{'share':>8}")
        for part in ("flux first calls", "flux meta", "flux lowering", "flux xla", "flux cache write", "flux cache probe"):
            v = med("eager", part)
            print(f"{part.removeprefix('flux '):<16}{_ms(v)}{v / total:8.0%}")
        rest = statistics.median(
            r["flux total"] - sum(r[p] for p in ("flux meta", "flux lowering", "flux xla", "flux cache write",
                                                 "flux cache probe")) for r in results["eager"])
        print(f"{'the rest':<16}{_ms(rest)}{rest / total:8.0%}   (queueing the ops, running them)")
    if "ops" in results:
        print("\neager first call of an op on a new shape (median over 12 shapes, then over runs; target 10 ms)")
        cols = ("first", "first cpu", "meta", "lowering", "xla", "cache write", "rest")
        print(f"{'op':<6}" + "".join(f"{c:>13}" for c in cols) + f"{'vs target':>11}")
        for op in ("add", "mm", "sin"):
            vals = [med("ops", op, c) for c in cols]
            print(f"{op:<6}" + "".join(f"{v * 1e3:13.2f}" for v in vals) + f"{vals[0] / 0.010:10.2f}x")


if __name__ == "__main__":
    main()
