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


def cache_miss(op: str) -> None:
    _misses[op] += 1


def compiled(op: str, seconds: float) -> None:
    _compiles[op] += 1
    _compile_s[op] += seconds


def fell_back(op: str) -> None:
    _fallbacks[op] += 1


def fallback_refused(op: str) -> None:
    _refused[op] += 1


def decomposed(op: str) -> None:
    _decomposed[op] += 1


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
    for c in (_executed, _compiles, _compile_s, _misses, _fallbacks, _refused, _decomposed):
        c.clear()


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
    }


def reset_dynamo_metrics() -> None:
    _graphs.clear()
    _graph_runs.clear()
    _graph_reuses.clear()


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
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    stats = cache_stats()
    lines.append("")
    lines.append(
        f"cache: {stats['hits']} hits, {stats['misses']} misses; "
        f"fallback ops: {len(_fallbacks)}{f' (refused: {len(_refused)})' if _refused else ''}; compiled: {sum(_compiles.values())} executables "
        f"in {sum(_compile_s.values()):.2f} s"
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
    return "\n".join(lines)
