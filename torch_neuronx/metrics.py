"""What the device did: per-op executions, compiles and compile time, cache hits and misses, and CPU
fallbacks. Counting is a dict increment on the dispatch path; `report()` formats a table."""
from __future__ import annotations

import collections

_executed: collections.Counter = collections.Counter()
_compiles: collections.Counter = collections.Counter()
_compile_s: collections.Counter = collections.Counter()
_misses: collections.Counter = collections.Counter()
_fallbacks: collections.Counter = collections.Counter()
_decomposed: collections.Counter = collections.Counter()


def executed(op: str) -> None:
    _executed[op] += 1


def cache_miss(op: str) -> None:
    _misses[op] += 1


def compiled(op: str, seconds: float) -> None:
    _compiles[op] += 1
    _compile_s[op] += seconds


def fell_back(op: str) -> None:
    _fallbacks[op] += 1


def decomposed(op: str) -> None:
    _decomposed[op] += 1


def get_executed_ops() -> dict[str, int]:
    """Ops run on the device by a lowering, with their counts."""
    return dict(_executed)


def get_fallback_ops() -> dict[str, int]:
    """Ops that ran on the CPU because nothing lowers them, with their counts."""
    return dict(_fallbacks)


def get_decomposed_ops() -> dict[str, int]:
    """Ops that ran as PyTorch's decomposition into other ops."""
    return dict(_decomposed)


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
    for c in (_executed, _compiles, _compile_s, _misses, _fallbacks, _decomposed):
        c.clear()


def report() -> str:
    """A readable table of everything counted since the last `clear_op_tracking()`."""
    ops = sorted(set(_executed) | set(_fallbacks) | set(_decomposed) | set(_compiles))
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
        f"fallback ops: {len(_fallbacks)}; compiled: {sum(_compiles.values())} executables "
        f"in {sum(_compile_s.values()):.2f} s"
    )
    return "\n".join(lines)
