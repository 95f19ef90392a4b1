"""What the device did: per-op executions, compiles and compile time, cache hits and misses, and CPU
fallbacks. Counting is a dict increment on the dispatch path; `report()` formats a table."""
from __future__ import annotations

import collections

_executed: collections.Counter = collections.Counter()
_compiles: collections.Counter = collections.Counter()
_compile_s: collections.Counter = collections.Counter()
_misses: collections.Counter = collections.Counter()
_fallbacks: collections.Counter = collections.Counter()
_refused: collections.Counter = collections.Counter()  # fallbacks TORCH_NEURONX_CPU_FALLBACK=error refused
_decomposed: collections.Counter = collections.Counter()


def executed(op: str) -> None:
    _executed[op] += 1


def executed_counts() -> collections.Counter:
    """The counter `executed` adds to, for the eager executor's hot path to increment directly."""
    return _executed


def cache_miss(namespace: str, name: str) -> None:
    """A key the memory layer did not hold (`cache.ExecutableCache.acquire`): counted per eager op."""
    if namespace == "op":
        _misses[name] += 1


_built_kinds: collections.Counter = collections.Counter()  # never cleared: a process's totals
_loaded_kinds: collections.Counter = collections.Counter()


def built(namespace: str, name: str, seconds: float) -> None:
    """An executable compiled (`acquire`): per eager op, or a fused run (a graph's compile is counted
    with its details by `graph_compiled`); and per kind."""
    _built_kinds[namespace] += 1
    if namespace == "op":
        _compiles[name] += 1
        _compile_s[name] += seconds
    elif namespace == "run":
        _fusion["compiled"] += 1
        _fusion["compile_s"] += seconds


def loaded(namespace: str, name: str) -> None:
    """An executable loaded from the disk cache (`acquire`): a fused run's, or a graph's (no lowering, no XLA);
    and per kind."""
    _loaded_kinds[namespace] += 1
    if namespace == "run":
        _fusion["loaded"] += 1
    elif namespace == "graph":
        _graph_loads[name] += 1


def fell_back(op: str) -> None:
    _fallbacks[op] += 1


def fallback_refused(op: str) -> None:
    _refused[op] += 1


def decomposed(op: str) -> None:
    _decomposed[op] += 1


_host_reads: collections.Counter = collections.Counter()


def host_read(nbytes: int) -> None:
    """A neuron tensor's values were read to the host (`.item()`, `.cpu()`, `bool(t)`): the host waited."""
    _host_reads["reads"] += 1
    _host_reads["bytes"] += nbytes


def host_reads() -> dict[str, int]:
    """Reads of neuron tensors to the host since the last `clear_op_tracking()`: count and bytes."""
    return {"reads": _host_reads["reads"], "bytes": _host_reads["bytes"]}


def get_executed_ops() -> dict[str, int]:
    """Ops run on the device by a lowering, with their counts."""
    return dict(_executed)


def get_fallback_ops() -> dict[str, int]:
    """Ops that ran on the CPU because nothing lowers them, with their counts."""
    return dict(_fallbacks)


def get_refused_fallbacks() -> dict[str, int]:
    """Ops that would have run on the CPU but TORCH_NEURONX_CPU_FALLBACK=error raised instead (counted
    even when the caller caught the error)."""
    return dict(_refused)



def compile_stats() -> dict[str, tuple[int, float]]:
    """op -> (executables compiled, seconds spent compiling)."""
    return {op: (n, _compile_s[op]) for op, n in _compiles.items()}


def _hits(op: str) -> int:
    # every execution that did not compile found its executable in the cache
    return max(_executed[op] - _misses[op], 0)


def cache_stats() -> dict[str, int]:
    misses = sum(_misses.values())
    return {"hits": sum(_executed.values()) - misses, "misses": misses}


def clear_op_tracking() -> None:
    for c in (_executed, _compiles, _compile_s, _misses, _fallbacks, _refused, _decomposed, _disk, _host_reads,
              _fusion, _run_ends, _bucketed):
        c.clear()
    _load_times.clear()
    _run_lengths.clear()
    _distinct.clear()
    _shapes.clear()
    from .runtime import costs

    costs.clear()


# ---- index lengths run at buckets (torch_neuronx.eager.index_lengths)

_bucketed: collections.Counter = collections.Counter()


def index_bucketed(op: str) -> None:
    """A call of `op` ran at the bucket of its index length instead of its own length."""
    _bucketed[op] += 1


def index_buckets() -> dict[str, int]:
    """Per op, the calls that ran at a bucket of their index length (since `clear_op_tracking()`)."""
    return dict(_bucketed)


# ---- eager fusion (torch_neuronx.eager.fusion)

_fusion: collections.Counter = collections.Counter()
_run_ends: collections.Counter = collections.Counter()
_run_lengths: list = []  # ops per fused run, the last 10,000


def fused_run(n_ops: int, reason: str) -> None:
    """A fused run of `n_ops` queued ops was launched; `reason` is what ended it."""
    _fusion["runs"] += 1
    _fusion["ops"] += n_ops
    _run_ends[reason] += 1
    if len(_run_lengths) >= 10_000:
        del _run_lengths[:5_000]
    _run_lengths.append(n_ops)


def fusion_stats() -> dict:
    """Eager fusion since the last `clear_op_tracking()`: fused runs launched, the ops in them (mean and
    max per run), run executables compiled (with their seconds) and loaded from disk, and what ended
    each run (a host read, a synchronize, an op that runs on its own, the length bound, ...)."""
    runs = _fusion["runs"]
    return {
        "runs": runs, "ops": _fusion["ops"], "ops_per_run": _fusion["ops"] / runs if runs else 0.0,
        "max_ops_per_run": max(_run_lengths, default=0), "compiled": _fusion["compiled"],
        "compile_s": _fusion["compile_s"], "loaded": _fusion["loaded"], "ended_by": dict(_run_ends),
    }


# ---- the executable cache's disk layer and memory bound (torch_neuronx.cache)

_disk: collections.Counter = collections.Counter()
_load_times: list = []  # seconds of each load from disk (the last 10,000)


def disk_hit(kind: str, seconds: float, nbytes: int) -> None:
    _disk[f"{kind}_disk_hits"] += 1
    _disk["disk_hits"] += 1
    _disk["disk_load_s"] += seconds
    _disk["disk_bytes_read"] += nbytes
    if len(_load_times) >= 10_000:
        del _load_times[:5_000]
    _load_times.append(seconds)


def disk_miss(kind: str) -> None:
    _disk[f"{kind}_disk_misses"] += 1
    _disk["disk_misses"] += 1


def disk_written(kind: str, nbytes: int) -> None:
    _disk["disk_writes"] += 1
    _disk["disk_bytes_written"] += nbytes


_unstorable_total = 0  # never cleared (executables_by_kind)


def cache_event(what: str, n: int = 1) -> None:
    """`memory_evictions`, `disk_evictions`, `bad_entries` (removed and compiled again), `unready_entries`
    (entries left on disk whose custom-call targets this process could not make ready: compiled again),
    `unstorable` (executables that cannot be serialized), `write_failures`."""
    global _unstorable_total
    _disk[what] += n
    if what == "unstorable":
        _unstorable_total += n


def executable_cache_stats() -> dict:
    """The executable cache since the last `clear_op_tracking()`: loads from disk (hits, misses, load
    seconds and their median, bytes), writes, evictions from memory and from disk, bad entries."""
    stats = {k: _disk[k] for k in ("disk_hits", "disk_misses", "disk_writes", "disk_bytes_read",
                                   "disk_bytes_written", "memory_evictions", "disk_evictions",
                                   "bad_entries", "unready_entries", "unstorable", "write_failures")}
    for kind in ("op", "graph", "run"):
        stats[f"{kind}_disk_hits"] = _disk[f"{kind}_disk_hits"]
        stats[f"{kind}_disk_misses"] = _disk[f"{kind}_disk_misses"]
    stats["disk_load_s"] = _disk["disk_load_s"]
    times = sorted(_load_times)
    stats["disk_load_median_ms"] = times[len(times) // 2] * 1e3 if times else None
    return stats


# ---- compiled graphs (torch.compile(backend="neuron"))

_graphs: list[dict] = []  # one record per executable compiled for a graph
_graph_runs: collections.Counter = collections.Counter()


def graph_compiled(name: str, kind: str, nodes: int, seconds: float, lower_s: float, reason: str | None,
                   fallbacks) -> None:
    """`seconds` of compiling, of which `lower_s` turning the graph into StableHLO (the rest is XLA)."""
    _graphs.append(
        {"graph": name, "kind": kind, "nodes": nodes, "compile_s": seconds, "lower_s": lower_s,
         "xla_s": seconds - lower_s, "recompile_reason": reason, "fallback_ops": sorted(set(fallbacks))}
    )


_graph_reuses: collections.Counter = collections.Counter()


def graph_reused(name: str) -> None:
    """A graph found the executable of an identical graph compiled before (no compile)."""
    _graph_reuses[name] += 1


_graph_loads: collections.Counter = collections.Counter()


_aot_skips: collections.Counter = collections.Counter()


def aot_autograd_skipped(name: str) -> None:
    """A graph's AOTAutograd result came from the disk cache (compile/aot_records.py)."""
    _aot_skips[name] += 1


_splits: dict = {}  # graph -> {"kind", "segments", "collectives"}


def graph_split(name: str, kind: str, segments: int, collectives: int) -> None:
    """A graph with collectives was cut into `segments` executables, the collectives run between them."""
    _splits[name] = {"kind": kind, "segments": segments, "collectives": collectives}


def graph_executed(name: str) -> None:
    _graph_runs[name] += 1


def get_dynamo_metrics() -> dict:
    """What compiled mode did: executables compiled per graph (node count, compile seconds, why it
    was compiled again when it was), executions per graph, totals."""
    graphs = [dict(g) for g in _graphs]
    return {
        "graphs_compiled": len(graphs),
        "compile_time_s": sum(g["compile_s"] for g in graphs),
        "recompiles": [
            {"graph": g["graph"], "reason": g["recompile_reason"]} for g in graphs if g["recompile_reason"]
        ],
        "graphs": graphs,
        "executions": dict(_graph_runs),
        "reused": dict(_graph_reuses),
        "loaded_from_disk": dict(_graph_loads),
        "aot_autograd_skipped": dict(_aot_skips),
        "split_graphs": {name: dict(v) for name, v in _splits.items()},
    }


def executable_counts() -> dict:
    """What became an executable since the counters were last cleared: eager ops and graphs compiled
    (with their seconds; a graph's split into lowering and XLA) and loaded from the disk cache (with the
    load seconds). Op counts clear with `clear_op_tracking()`, graph compiles with `reset_dynamo_metrics()`."""
    compiles = compile_stats().values()
    return {
        "ops_compiled": sum(n for n, _ in compiles), "ops_compile_s": sum(s for _, s in compiles),
        "graphs_compiled": len(_graphs), "graphs_compile_s": sum(g["compile_s"] for g in _graphs),
        "graphs_lower_s": sum(g["lower_s"] for g in _graphs),
        "ops_loaded": _disk["op_disk_hits"], "graphs_loaded": _disk["graph_disk_hits"],
        "runs_compiled": _fusion["compiled"], "runs_compile_s": _fusion["compile_s"],
        "runs_loaded": _disk["run_disk_hits"], "load_s": _disk["disk_load_s"],
    }


def executables_by_kind() -> dict:
    """Since the process started (never cleared): executables compiled and loaded from the disk cache per
    kind (the cache namespace: "op", "run", "graph", "dynamic", ...), `xla_compiles`, every program
    XLA compiled in the process, whoever asked (a warm process that loads everything compiles none but
    the unstorable), and `unstorable`, the compiled executables that cannot be stored (they call back
    into Python on the host: compiled in every process)."""
    from .runtime import executables

    return {"compiled": dict(_built_kinds), "loaded": dict(_loaded_kinds), "xla_compiles": executables.xla_compiles(),
            "unstorable": _unstorable_total}


def native_kernel_stats() -> dict[str, dict]:
    """torch's CPU kernels called from inside executables in this process (runtime/native_kernels.py):
    per kernel (`matmul`, `addmatmul`, `attention`, `attention_backward`, `convolution`) its calls and the seconds spent in it,
    counted by the kernels themselves and never cleared."""
    from . import _C

    return {k: {"calls": n, "seconds": s} for k, (n, s) in _C._native_kernel_stats().items()}


def native_kernel_calls() -> dict[str, int]:
    """Calls of each kernel of `native_kernel_stats()`."""
    return {k: v["calls"] for k, v in native_kernel_stats().items()}


# ---- distinct executables, as a Trainium target compiles them (each is a neuronx-cc compile there)

_distinct: dict = {}  # (namespace, name) -> {value hashes}
_shapes: dict = {}  # (namespace, name) -> {input shapes}
_warned_recompiles: set = set()


def executable_wanted(namespace: str, name: str, value) -> int:
    """A key the memory layer did not hold (`cache.ExecutableCache.acquire`): counts the distinct
    executables of each op, each graph and the fused runs (all together: on Trainium each distinct run
    is a NEFF), and their distinct input shapes; warns once per name past TORCH_NEURONX_RECOMPILE_WARN
    under a target. Returns the name's distinct executables."""
    from .runtime import config, targets

    what = (namespace, "fused runs" if namespace == "run" else name)
    seen = _distinct.setdefault(what, set())
    seen.add(hash(value))
    shapes = _shapes.setdefault(what, set())
    shapes.add(hash(_input_shapes(value)))
    n = len(seen)
    if n >= config.settings.recompile_warn and what not in _warned_recompiles and targets.current() is not None:
        import warnings

        _warned_recompiles.add(what)
        warnings.warn(
            f"neuron ({targets.current().name}): {what[1]} has needed {n} distinct executables "
            f"({len(shapes)} distinct input shapes); on Trainium each is a neuronx-cc compile. Shapes that "
            f"drift (sequence lengths, batch sizes) recompile: pad them to a few sizes "
            f"(TORCH_NEURONX_RECOMPILE_WARN sets this threshold)", RuntimeWarning, stacklevel=3)
    return n


def _input_shapes(value) -> tuple:
    """The sizes of every tensor layout in a key's value (a layout has `sizes`)."""
    found = []
    stack = [value]
    while stack:
        part = stack.pop()
        sizes = getattr(part, "sizes", None)
        if sizes is not None and isinstance(part, tuple):
            found.append(tuple(sizes))
        elif isinstance(part, tuple):
            stack.extend(part)
    return tuple(found)


def distinct_executables() -> dict:
    """{(namespace, name): (distinct executables, distinct input shapes)} since the last
    `clear_op_tracking()`: namespace "op" (per eager op), "graph" (per compiled graph), "run" (every
    fused run together, as "fused runs")."""
    return {what: (len(keys), len(_shapes.get(what, ()))) for what, keys in _distinct.items()}


# ---- time estimates on the target (runtime/costs.py)


def estimates(top: int | None = None) -> list[dict]:
    """Per executable launched since the last `clear_op_tracking()`, largest estimated total first: its
    name, launches, FLOPs and bytes per launch, products' FLOPs by dtype, the estimated seconds per launch
    and in all on the target (`estimate_summary()["target"]`), the seconds measured here (with
    TORCH_NEURONX_ESTIMATE=1, else None) and whether it is compute- or memory-bound there."""
    from .runtime import costs

    target = costs.estimate_target()
    rows = []
    for cost in costs.launched_costs():
        est = costs.estimate(cost, target)
        rows.append({
            "name": cost.name, "launches": cost.launches, "flops": cost.flops, "bytes": cost.bytes,
            "products": dict(cost.products), "transcendentals": cost.transcendentals,
            "estimate_s": est.seconds, "estimate_total_s": est.seconds * cost.launches,
            "measured_s": cost.measured_s if cost.timed else None,
            "bound": "compute" if est.compute_bound else "memory",
        })
    rows.sort(key=lambda r: -r["estimate_total_s"])
    return rows if top is None else rows[:top]


def collective_estimates() -> list[dict]:
    """Per collective (kind, ranks, bytes on this rank) since the last `clear_op_tracking()`: launches and
    the estimated seconds on the target."""
    from .runtime import costs

    target = costs.estimate_target()
    return [{"kind": c.kind, "world": c.world, "bytes": c.bytes, "launches": c.launches,
             "estimate_total_s": costs.collective_estimate(c.kind, c.bytes, c.world, target) * c.launches,
             "measured_s": c.measured_s}
            for c in costs.collectives()]


def estimate_summary() -> dict:
    """The estimate's totals: seconds on the target (executables and collectives), the share of it in
    compute-bound executables and in collectives, FLOPs and bytes, the target it is for."""
    from .runtime import costs

    rows, colls = estimates(), collective_estimates()
    total = sum(r["estimate_total_s"] for r in rows)
    coll = sum(c["estimate_total_s"] for c in colls)
    compute = sum(r["estimate_total_s"] for r in rows if r["bound"] == "compute")
    measured = [r["measured_s"] for r in rows if r["measured_s"] is not None]
    return {
        "target": costs.estimate_target().describe(), "seconds": total + coll, "executables_s": total,
        "collectives_s": coll, "compute_bound_s": compute, "compute_bound_share": compute / total if total else 0.0,
        "collective_share": coll / (total + coll) if total + coll else 0.0,
        "flops": sum(r["flops"] * r["launches"] for r in rows),
        "bytes": sum(r["bytes"] * r["launches"] for r in rows),
        "launches": sum(r["launches"] for r in rows), "measured_s": sum(measured) if measured else None,
    }


def estimate_report(top: int = 10) -> str:
    """The top executables by estimated time on the target, and the totals."""
    summary = estimate_summary()
    rows = [("executable", "launches", "GFLOP", "MB", "est ms", "est total ms", "here ms", "bound")]
    for r in estimates(top):
        rows.append((r["name"][:80], str(r["launches"]), f"{r['flops'] / 1e9:.3f}", f"{r['bytes'] / 1e6:.2f}",
                     f"{r['estimate_s'] * 1e3:.3f}", f"{r['estimate_total_s'] * 1e3:.2f}",
                     "" if r["measured_s"] is None else f"{r['measured_s'] * 1e3:.1f}", r["bound"]))
    lines = [f"estimated on {summary['target']} (a roofline lower bound: docs/targets.md):"] + _table(rows)
    for c in collective_estimates():
        lines.append(f"collective {c['kind']} over {c['world']} ranks, {c['bytes'] / 1e6:.2f} MB: "
                     f"{c['launches']} launches, est {c['estimate_total_s'] * 1e3:.2f} ms")
    measured = "" if summary["measured_s"] is None else f"; measured here {summary['measured_s']:.3f} s"
    lines.append(
        f"total: {summary['seconds'] * 1e3:.2f} ms estimated over {summary['launches']} launches "
        f"({summary['flops'] / 1e9:.2f} GFLOP, {summary['bytes'] / 1e9:.3f} GB), "
        f"{summary['compute_bound_share'] * 100:.0f}% of it compute-bound, collectives "
        f"{summary['collective_share'] * 100:.0f}%{measured}")
    return "\n".join(lines)


def fidelity_differences() -> list[dict]:
    """Under TORCH_NEURONX_TARGET_CHECK=compare: per (op or graph, output) where the target's dtype policy
    changed a result, how many elements and by how much, with one example (`runtime/fidelity.py`)."""
    from .runtime import fidelity

    return fidelity.fidelity_differences()


def reset_dynamo_metrics() -> None:
    _graphs.clear()
    _graph_runs.clear()
    _graph_reuses.clear()
    _graph_loads.clear()
    _aot_skips.clear()
    _splits.clear()


def _table(rows) -> list[str]:
    """Rows of text cells as lines: the first column left-aligned, the others right-aligned, a rule under
    the header row."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    return lines


def report() -> str:
    """A readable table of everything counted since the last `clear_op_tracking()`."""
    ops = sorted(set(_executed) | set(_fallbacks) | set(_refused) | set(_decomposed) | set(_compiles))
    rows = [("op", "executed", "compiles", "compile ms", "cache hits", "fallbacks", "decomposed")]
    for op in ops:
        rows.append(
            (
                op,
                str(_executed[op]),
                str(_compiles[op]),
                f"{_compile_s[op] * 1e3:.1f}",
                str(_hits(op)),
                str(_fallbacks[op]),
                str(_decomposed[op]),
            )
        )
    lines = _table(rows)
    stats = cache_stats()
    lines.append("")
    lines.append(
        f"cache: {stats['hits']} hits, {stats['misses']} misses; "
        f"fallback ops: {len(_fallbacks)}{f' (refused: {len(_refused)})' if _refused else ''}; compiled: {sum(_compiles.values())} executables "
        f"in {sum(_compile_s.values()):.2f} s"
    )
    d = executable_cache_stats()
    if d["disk_hits"] or d["disk_misses"] or d["disk_writes"] or d["memory_evictions"] or d["bad_entries"]:
        median = f", median {d['disk_load_median_ms']:.2f} ms" if d["disk_load_median_ms"] is not None else ""
        lines.append(
            f"disk cache: {d['disk_hits']} loads ({d['op_disk_hits']} ops, {d['graph_disk_hits']} graphs) in "
            f"{d['disk_load_s'] * 1e3:.1f} ms{median}, {d['disk_misses']} misses, {d['disk_writes']} writes "
            f"({d['disk_bytes_written'] / 1e6:.1f} MB); evicted from memory: {d['memory_evictions']}, "
            f"from disk: {d['disk_evictions']}; bad entries removed: {d['bad_entries']}"
        )
    native = {k: v for k, v in native_kernel_stats().items() if v["calls"]}
    if native:
        lines.append("torch's CPU kernels in executables (since the process started): " + ", ".join(
            f"{k} {v['calls']} calls {v['seconds']:.2f} s" for k, v in native.items()))
    if _bucketed:
        lines.append("index lengths run at buckets: " + ", ".join(f"{op} {n} calls" for op, n in sorted(_bucketed.items())))
    if _fusion["runs"]:
        f = fusion_stats()
        ends = ", ".join(f"{why} {n}" for why, n in sorted(_run_ends.items(), key=lambda kv: -kv[1]))
        lines.append(
            f"eager fusion: {f['runs']} runs of {f['ops']} ops ({f['ops_per_run']:.1f} per run, at most "
            f"{f['max_ops_per_run']}); {f['compiled']} run executables compiled in {f['compile_s']:.2f} s, "
            f"{f['loaded']} loaded from disk; ended by: {ends}"
        )
    if _graphs:
        lines.append("")
        rows = [("compiled graph", "kind", "nodes", "compile ms", "of it XLA ms", "runs", "recompile reason")]
        for g in _graphs:
            rows.append((g["graph"], g["kind"], str(g["nodes"]), f"{g['compile_s'] * 1e3:.1f}", f"{g['xla_s'] * 1e3:.1f}",
                         str(_graph_runs[g["graph"]]), g["recompile_reason"] or ""))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        table = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        table.insert(1, "-" * max(len(t) for t in table))
        lines.extend(table)
    for name, split in _splits.items():
        n, c = split["segments"], split["collectives"]
        lines.append(f"split graph {name} ({split['kind']}): {n} segment{'s' * (n != 1)}, "
                     f"{c} collective{'s' * (c != 1)} run through the process group between them")
    from .runtime import costs

    changed = fidelity_differences()
    if changed:
        lines.append("")
        lines.append("where the target's 64-bit policy changed a result (TORCH_NEURONX_TARGET_CHECK=compare):")
        for d in changed:
            lines.append(f"  {d['name']} {d['output']}: {d['count']} elements in {d['calls']} calls, max |diff| "
                         f"{d['max_abs']:.3g} (relative {d['max_rel']:.3g}); e.g. at {d['example']['index']}: "
                         f"exact {d['example']['exact']}, target {d['example']['target']}")
    if costs.launched_costs() or costs.collectives():
        lines.append("")
        lines.append(estimate_report())
    return "\n".join(lines)
