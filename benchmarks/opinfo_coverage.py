"""OpInfo coverage of the neuron device: every entry of PyTorch's op_db, on neuron vs the CPU.

    python benchmarks/opinfo_coverage.py                      # the full sweep (all entries, all dtypes)
    python benchmarks/opinfo_coverage.py --dtypes float32     # the target metric only (faster)
    python benchmarks/opinfo_coverage.py --ops conv,pool -v   # entries whose name contains a substring
    python benchmarks/opinfo_coverage.py --json out.json      # also write every result as JSON
    python benchmarks/opinfo_coverage.py --compiled --dtypes float32 --max-samples 3 --ops =add,=mul
                                            # through torch.compile (tests/test_compile_opinfo.py)
    python benchmarks/opinfo_coverage.py --fast-list out.json --max-seconds 1.0
                                            # the entries of a --json sweep that pass in every dtype
                                            # in at most 1 s each: tests/test_opinfo.py's measured list

For each entry, float32 and bfloat16 plus the integer and bool dtypes it supports on the CPU
(`op.supported_dtypes("cpu")`); the first --max-samples samples of each. Prints a coverage table per
dtype (entries, entries with samples, passed, both reject (every sample is one the CPU rejects and
neuron rejects it the same way), fell back to the CPU, failed, skipped, xfail), the issue's target
metric (the share of entries with float32 samples that pass with no CPU fallback), the failing
entries with their first error line (failures include timeouts, hung or crashed workers and sample
generators that raise, counted by kind), and the ATen ops that fell back ranked by how many
entries need them: the work list for lowering authors. The machinery (lists of skips, xfails,
random ops and tolerances, each with its reason) is tests/opinfo_support.py.

Entries run one after another in child processes of --chunk entries each (fresh interpreters, never
forks of one that has jax loaded): one process for all of op_db would run out of memory mappings
(see _run_isolated), and a crash or hang costs only the entry it happened in. --in-process runs
everything in this process (fine for a filtered run).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import queue
import subprocess
import sys
import threading
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP (see tests/conftest.py)
os.environ.setdefault("TORCH_NEURONX_CPU_FALLBACK", "warn")
os.environ.setdefault("TORCH_NEURONX_PLATFORM", "cpu")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import opinfo_support as S  # noqa: E402
from child_process import start_child  # noqa: E402

CHUNK = 100  # entries per child process (see _run_isolated)


COMPILED = [False]  # --compiled: the neuron side of each sample runs through torch.compile


def select_ops(substrings: str | None):
    """op_db, or the entries whose name contains one of the comma-separated substrings (`=name`: that
    exact name)."""
    ops = S.op_db()
    if substrings:
        subs = [s for s in substrings.split(",") if s and not s.startswith("=")]
        exact = {s[1:] for s in substrings.split(",") if s.startswith("=")}
        ops = [op for op in ops if S.entry_name(op) in exact or any(s in S.entry_name(op) for s in subs)]
    return ops


def _as_run(op):
    """The op as run_entry gets it: itself, or with --compiled its compiled form (as in
    tests/test_compile_opinfo.py: eager CPU reference, each neuron sample must run a compiled graph)."""
    if not COMPILED[0]:
        return op
    import torch
    from test_compile_opinfo import Compiled

    torch._dynamo.reset()
    return Compiled(op)


def parse_dtypes(text: str):
    if text in ("all", ""):
        return S.SWEEP_DTYPES
    return tuple(S.parse_dtype(t.strip()) for t in text.split(",") if t.strip())


def run_sweep(ops_filter=None, dtypes=S.SWEEP_DTYPES, max_samples=S.DEFAULT_MAX_SAMPLES,
              timeout_s=S.DEFAULT_TIMEOUT_S, verbose=False, stream=sys.stderr, isolate=True,
              chunk=CHUNK) -> list:
    """The sweep; returns the Results. isolate=True (the default) runs it in child processes of
    `chunk` entries each; isolate=False runs it in this process."""
    if isolate:
        return _run_isolated(ops_filter, dtypes, max_samples, timeout_s, verbose, stream, chunk)
    ops = select_ops(ops_filter)
    start = time.perf_counter()
    done = [0]

    def progress(r):
        done[0] += 1
        _progress(r, start, done[0], verbose, stream)

    # lazily: _as_run resets Dynamo as each entry starts (a list would reset once, before them all,
    # and every entry would share Compiled._run's recompile limit)
    return S.sweep((_as_run(op) for op in ops), dtypes, max_samples=max_samples, timeout_s=timeout_s,
                   progress=progress)


def _progress(r, start, done, verbose, stream):
    if verbose or r.status in ("fail", "xpass"):
        print(f"[{time.perf_counter() - start:7.1f}s] {r.seconds:5.1f}s {r.line()}", file=stream, flush=True)
    elif done % 100 == 0:
        print(f"[{time.perf_counter() - start:7.1f}s] {done} entry/dtype pairs done", file=stream, flush=True)


def _run_isolated(ops_filter, dtypes, max_samples, timeout_s, verbose, stream, chunk, recheck=True):
    """Child processes (fresh interpreters, not forks) run `chunk` entries each and stream one JSON
    line per result. Each executable the device compiles keeps memory mappings (about 30 per entry
    and dtype), and one process running all of op_db's ~3900 pairs would pass the kernel's
    vm.max_map_count (65530) and crash; chunks stay far below it. A child that dies or stops
    answering costs only the (entry, dtype) it was on: that is recorded and a new child resumes
    after it. With recheck, the failures are then run again in a fresh process: one that passes
    there still counts as failed, but its reason says that it failed only after other entries ran
    before it in the same process (a device state bug, not the entry's own lowering)."""
    ops = select_ops(ops_filter)
    jobs = [(i, S.entry_name(op), d) for i, op in enumerate(ops) for d in S.sweep_dtypes(op, dtypes)]
    start = time.perf_counter()
    counter = [0]
    results = _run_jobs(jobs, ops_filter, max_samples, timeout_s, verbose, stream, chunk, start, counter)
    if recheck:
        failed = [k for k, r in enumerate(results) if r.status == "fail" and "crashed" not in r.reason]
        if failed:
            print(f"[{time.perf_counter() - start:7.1f}s] rechecking {len(failed)} failures in a fresh process",
                  file=stream, flush=True)
            index = {S.entry_name(op): i for i, op in enumerate(ops)}
            with open(os.devnull, "w") as quiet:
                again = _run_jobs([(index[results[k].name], results[k].name, S.parse_dtype(results[k].dtype))
                                   for k in failed], ops_filter, max_samples, timeout_s, False,
                                  quiet, len(failed) + 1, start, [0])
            by_pair = {(r.name, r.dtype): r for r in again}
            for k in failed:
                r2 = by_pair.get((results[k].name, results[k].dtype))
                if r2 is not None and r2.status in ("pass", "fallback"):
                    results[k].reason = (f"order-dependent: {r2.status} when rerun in a fresh process; failed after "
                                         f"the entries before it: {results[k].reason}")[:400]
                    results[k].order_dependent = True
    return results


def _run_jobs(jobs, ops_filter, max_samples, timeout_s, verbose, stream, chunk, start, counter):
    """Run (entry index, name, dtype) jobs in child processes, at most `chunk` entries per child."""
    hang_s = 2 * timeout_s + 120  # SIGALRM cannot interrupt a hang inside C++: the parent's watchdog
    results, pos = [], 0
    while pos < len(jobs):
        # the next chunk: jobs of at most `chunk` distinct entries
        entries, end = set(), pos
        while end < len(jobs) and (jobs[end][0] in entries or len(entries) < chunk):
            entries.add(jobs[end][0])
            end += 1
        batch = jobs[pos:end]
        spec = json.dumps([[i, S.DTYPE_NAMES[d]] for i, _, d in batch])
        cmd = [os.path.abspath(__file__), "--worker", "--max-samples", str(max_samples), "--timeout", str(timeout_s)]
        if ops_filter:
            cmd += ["--ops", ops_filter]
        if COMPILED[0]:
            cmd += ["--compiled"]
        proc = start_child(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        proc.stdin.write(spec)
        proc.stdin.close()
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: ([lines.put(x) for x in proc.stdout], lines.put(None)), daemon=True).start()
        current, finished, hung = None, 0, False
        while True:
            try:
                line = lines.get(timeout=hang_s)
            except queue.Empty:
                hung = True
                proc.kill()
                break
            if line is None:
                break
            msg = json.loads(line)
            if "begin" in msg:
                current = msg["begin"]
                continue
            r = S.Result(**msg)
            results.append(r)
            current = None
            finished += 1
            counter[0] += 1
            _progress(r, start, counter[0], verbose, stream)
        rc = proc.wait()
        if rc == 0 and current is None and finished == len(batch):
            pos = end
            continue
        if current is not None:  # it died (or hung) on this job: record it, resume after it
            name, dtype = current
            if hung:  # a failure like any timeout (it counts in the table and its reason is listed)
                status, why = "fail", f"timeout: no answer in {hang_s:g} s (hung; the worker was killed)"
            else:
                status, why = "fail", f"crashed the process (exit status {rc})"
            results.append(S.Result(name, dtype, status, reason=why, has_samples=True))
            counter[0] += 1
            print(f"{name} [{dtype}] {why}", file=stream, flush=True)
            finished += 1
        elif finished == 0:
            raise RuntimeError(f"an opinfo worker exited with status {rc} before running anything")
        pos += finished
    return results


def _worker(args):
    """Run the jobs given on stdin ([[entry index, dtype name], ...]); one JSON line before and after each."""
    ops = select_ops(args.ops)
    jobs = json.load(sys.stdin)
    out = sys.stdout
    sys.stdout = sys.stderr  # ops that print must not corrupt the JSON stream
    for index, dtype_name in jobs:
        op = ops[index]
        out.write(json.dumps({"begin": [S.entry_name(op), dtype_name]}) + "\n")
        out.flush()
        r = S.run_entry(_as_run(op), S.parse_dtype(dtype_name), max_samples=args.max_samples, timeout_s=args.timeout)
        out.write(json.dumps(dataclasses.asdict(r)) + "\n")
        out.flush()


def fast_entries(json_path: str, max_seconds: float) -> list[str]:
    """Entries of a sweep's JSON that passed (no fallback) in every dtype they ran, in at most
    `max_seconds` each, in op_db order."""
    with open(json_path) as f:
        results = json.load(f)["results"]
    by_name: dict[str, list] = {}
    for r in results:
        by_name.setdefault(r["name"], []).append(r)
    return [name for name, rs in by_name.items()
            if all(r["status"] in ("pass", "rejected") and r["seconds"] <= max_seconds for r in rs)]


def format_fast_list(names: list[str], json_path: str, max_seconds: float) -> str:
    lines, line = [], "   "
    for n in names:
        item = f" {n!r},"
        if len(line) + len(item) > 110:
            lines.append(line)
            line = "   "
        line += item
    lines.append(line)
    return (f"# {len(names)} entries that passed in every dtype in <= {max_seconds:g} s each ({json_path})\n"
            "MEASURED_FAST_OPS = [\n" + "\n".join(lines) + "\n]")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", help="comma-separated substrings; run the entries whose name contains any "
                                 "(=name: exactly that entry)")
    p.add_argument("--compiled", action="store_true",
                   help="run each entry's neuron side through torch.compile(backend='neuron') "
                        "(as tests/test_compile_opinfo.py does)")
    p.add_argument("--dtypes", default="all",
                   help="comma-separated (float32,bfloat16,int64,int32,int16,int8,uint8,bool; or all); "
                        "each entry runs the ones it supports")
    p.add_argument("--max-samples", type=int, default=S.DEFAULT_MAX_SAMPLES, help="samples per entry and dtype")
    p.add_argument("--timeout", type=float, default=S.DEFAULT_TIMEOUT_S, help="seconds per entry and dtype")
    p.add_argument("--json", help="write every result (and the summary) to this path")
    p.add_argument("--in-process", action="store_true",
                   help="run in this process (default: child processes of --chunk entries; they survive crashes)")
    p.add_argument("--chunk", type=int, default=CHUNK, help="entries per child process")
    p.add_argument("--full-lists", action="store_true", help="list every failure and fallback op (default: 60)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every result as it comes")
    p.add_argument("--fast-list", metavar="JSON",
                   help="print the entries of a --json sweep that passed in every dtype it ran, each in at most "
                        "--max-seconds (a Python list, for tests/test_opinfo.py), and exit")
    p.add_argument("--max-seconds", type=float, default=1.0, help="for --fast-list: seconds per entry and dtype")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    COMPILED[0] = args.compiled
    if args.worker:
        _worker(args)
        return 0
    if args.fast_list:
        print(format_fast_list(fast_entries(args.fast_list, args.max_seconds), args.fast_list, args.max_seconds))
        return 0

    start = time.perf_counter()
    results = run_sweep(args.ops, parse_dtypes(args.dtypes), args.max_samples, args.timeout, args.verbose,
                        isolate=not args.in_process, chunk=args.chunk)
    elapsed = time.perf_counter() - start
    print(S.report(results, max_list=None if args.full_lists else 60))
    print(f"\n{len(results)} entry/dtype pairs in {elapsed:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": S.summarize(results), "seconds": elapsed,
                       "fallback_ranking": S.fallback_ranking(results),
                       "results": [dataclasses.asdict(r) for r in results]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
