"""The `torch-neuronx` command. `torch-neuronx cache ls|stats|verify|clear|prune` looks after the
executable cache's folder (`--dir`, default TORCH_NEURONX_NEFF_CACHE_DIR or /tmp/neff_cache) through
`cache.store.DiskStore`, without the process's executable cache. Only `verify` starts jax (it loads
every executable); the other commands read entry files and stay fast.

`torch-neuronx estimate [--target trn2] [--lnc N] -- python script.py ...` runs a command with
TORCH_NEURONX_ESTIMATE=1: the script's process times each launch and prints, at exit, the estimated
time of its executables on the target (metrics.estimate_report()).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import pickle
import subprocess
import sys
import time

from . import cache
from .cache.store import DiskStore
from .runtime import config

KINDS = ("op", "run", "graph", "dynamic", "aot", "plan", "probe")


def main(argv: list[str] | None = None) -> int:
    """Run the command line `argv` (default: sys.argv[1:]); returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse's usage errors (status 2) and --help (0)
        return e.code if isinstance(e.code, int) else 0
    if args.group == "estimate":
        return cmd_estimate(args)
    store = DiskStore(args.dir or cache.directory())
    try:
        return args.command(store, args)
    except OSError as e:
        print(f"torch-neuronx: error: {e}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torch-neuronx", description="torch-neuronx tools")
    groups = parser.add_subparsers(dest="group", required=True, metavar="{cache,estimate}")
    estimate = groups.add_parser("estimate", help="run a command and print its executables' estimated time on a "
                                                  "Trainium core at exit")
    estimate.add_argument("--target", choices=("trn1", "trn2", "trn3"),
                          help="the target (default: TORCH_NEURONX_TARGET, else trn2 for the estimate only)")
    estimate.add_argument("--lnc", type=int, help="NEURON_LOGICAL_NC_CONFIG for the target")
    estimate.add_argument("argv", nargs=argparse.REMAINDER, help="-- the command, e.g. python script.py")
    dir_help = f"the cache folder (default: ${cache.DIR_ENV}, else {cache.DEFAULT_DIR})"
    cache_parser = groups.add_parser("cache", help="inspect and tidy the executable cache on disk")
    cache_parser.add_argument("--dir", default=None, help=dir_help)
    # --dir is also accepted after the subcommand; SUPPRESS keeps a leaf from overwriting it with None
    with_dir = argparse.ArgumentParser(add_help=False)
    with_dir.add_argument("--dir", default=argparse.SUPPRESS, help=dir_help)
    commands = cache_parser.add_subparsers(dest="subcommand", required=True)

    ls = commands.add_parser("ls", parents=[with_dir], help="one row per entry, most recently used first")
    ls.add_argument("--kind", choices=KINDS, help="only entries of this kind")
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ls.set_defaults(command=cmd_ls)

    stats = commands.add_parser("stats", parents=[with_dir], help="totals per kind and the cache's settings")
    stats.add_argument("--json", action="store_true", help="print JSON instead of a table")
    stats.set_defaults(command=cmd_stats)

    verify = commands.add_parser("verify", parents=[with_dir],
                                 help="check and load every entry; remove the bad ones (status 1 if any)")
    verify.add_argument("--dry-run", action="store_true", help="report bad entries without removing them")
    verify.set_defaults(command=cmd_verify)

    clear = commands.add_parser("clear", parents=[with_dir], help="remove every entry")
    clear.set_defaults(command=cmd_clear)

    prune = commands.add_parser("prune", parents=[with_dir],
                                help="remove least recently used entries down to a size")
    prune.add_argument("--max-size", required=True, metavar="SIZE", type=_size,
                       help="what may stay: bytes, or 500M, 20G")
    prune.set_defaults(command=cmd_prune)
    return parser


def cmd_estimate(args) -> int:
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        print("torch-neuronx estimate: give the command after --, e.g. torch-neuronx estimate -- python "
              "script.py", file=sys.stderr)
        return 2
    env = dict(os.environ, TORCH_NEURONX_ESTIMATE="1")
    if args.target:
        env["TORCH_NEURONX_TARGET"] = args.target
    if args.lnc:
        env["NEURON_LOGICAL_NC_CONFIG"] = str(args.lnc)
    try:
        return subprocess.call(argv, env=env)
    except OSError as e:
        print(f"torch-neuronx estimate: {argv[0]}: {e}", file=sys.stderr)
        return 127


def _size(text: str) -> int:
    try:
        return cache.parse_size(text, "--max-size")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# ---- ls


def cmd_ls(store: DiskStore, args) -> int:
    now = time.time()
    rows = sorted(store.entries(), key=lambda row: -row[0].last_used)
    if args.kind:  # a bad entry's kind is unknown: a kind filter leaves it out
        rows = [(info, problem) for info, problem in rows if problem is None and info.kind == args.kind]
    if args.json:
        print(json.dumps({"directory": str(store.top), "entries": [_entry_json(i, p) for i, p in rows],
                          "total_bytes": sum(i.size for i, _p in rows)}, indent=2))
        return 0
    if not rows:
        print(f"no {args.kind + ' ' if args.kind else ''}entries in {store.top}")
        return 0
    table = [("NAME", "KIND", "SIZE", "AGE", "LAST USED", "HITS", "")]
    for info, problem in rows:
        if problem is None:
            table.append((info.name, info.kind, human_size(info.size), human_age(now - info.created),
                          human_age(now - info.last_used) + " ago", str(info.hits), ""))
        else:
            table.append(("?", "?", human_size(info.size), "?", human_age(now - info.last_used) + " ago", "?",
                          f"bad ({info.path.stem[:16]}): {problem}"))
    _print_table(table)
    bad = sum(problem is not None for _i, problem in rows)
    print(f"{count(len(rows))}, {human_size(sum(i.size for i, _p in rows))}"
          + (f", {bad} bad (`torch-neuronx cache verify` removes them)" if bad else ""))
    return 0


def _entry_json(info, problem) -> dict:
    return {"name": info.name, "kind": info.kind, "size": info.size, "created": info.created,
            "last_used": info.last_used, "hits": info.hits, "path": str(info.path), "problem": problem}


# ---- stats


def cmd_stats(store: DiskStore, args) -> int:
    per_kind = collections.defaultdict(lambda: {"entries": 0, "bytes": 0, "hits": 0})
    bad = {"entries": 0, "bytes": 0}
    oldest = newest = None
    for info, problem in store.entries():
        if problem is not None:
            bad["entries"] += 1
            bad["bytes"] += info.size
            continue
        totals = per_kind[info.kind]
        totals["entries"] += 1
        totals["bytes"] += info.size
        totals["hits"] += info.hits
        if oldest is None or info.created < oldest.created:
            oldest = info
        if newest is None or info.created > newest.created:
            newest = info
    kinds = {k: per_kind[k] for k in sorted(per_kind, key=_kind_order)}
    stats = {
        "directory": str(store.top),
        "entries": sum(t["entries"] for t in kinds.values()) + bad["entries"],
        "bytes": sum(t["bytes"] for t in kinds.values()) + bad["bytes"],
        "hits": sum(t["hits"] for t in kinds.values()),
        "kinds": kinds,
        "bad": bad,
        "oldest": oldest and {"name": oldest.name, "kind": oldest.kind, "created": oldest.created},
        "newest": newest and {"name": newest.name, "kind": newest.kind, "created": newest.created},
        "disk_cache_enabled": _disk_enabled(),
        "settings": settings(),
    }
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    now = time.time()
    print(f"folder       {store.top}" + ("" if store.root.is_dir() else " (no entries folder yet)"))
    table = [("KIND", "ENTRIES", "SIZE", "HITS")]
    table += [(k, str(t["entries"]), human_size(t["bytes"]), str(t["hits"])) for k, t in kinds.items()]
    if bad["entries"]:
        table.append(("bad", str(bad["entries"]), human_size(bad["bytes"]), "-"))
    table.append(("total", str(stats["entries"]), human_size(stats["bytes"]), str(stats["hits"])))
    _print_table(table)
    for label, info in (("oldest", oldest), ("newest", newest)):
        if info is not None:
            print(f"{label}       {info.name} ({info.kind}), created {human_age(now - info.created)} ago")
    print(f"bad entries  {bad['entries']}" + (" (`torch-neuronx cache verify` removes them)" if bad["entries"] else ""))
    disabled = config.describe(cache.DISABLE_ENV)
    print("disk layer   " + (f"invalid: {disabled['problem']}" if disabled["problem"]
                             else "on" if stats["disk_cache_enabled"]
                             else "off ({}={})".format(*config.setter(cache.DISABLE_ENV))))
    _print_table([(var, _describe(var, setting)) for var, setting in stats["settings"].items()])
    return 0


def _kind_order(kind: str) -> tuple:
    """The known kinds in KINDS' order, then any other (an entry of a newer package) by name."""
    return (KINDS.index(kind) if kind in KINDS else len(KINDS), kind)


def _disk_enabled() -> bool | None:
    """Whether the environment gives the process a disk layer (None: its setting does not parse)."""
    try:
        return cache.disk_enabled()
    except ValueError:
        return None


CACHE_BOUNDS = (cache.MAX_SIZE_ENV, cache.MEMORY_ENTRIES_ENV, cache.MEMORY_SIZE_ENV)


def settings() -> dict:
    """The cache's bounds as this environment sets them (rows of runtime/config.py's table), per
    variable: its text (None when unset), its value (bytes, or executables for the memory's count;
    None: no bound) or the problem with it."""
    return {(config.setter(var) or (var,))[0]: config.describe(var) for var in CACHE_BOUNDS}  # by the name set


def _describe(var: str, setting: dict) -> str:
    if setting["problem"]:
        return f"invalid: {setting['problem']}"
    value = setting["value"]
    shown = ("no bound" if value is None else f"{value} executables" if config.ROWS[var].type.name == "count"
             else human_size(value))
    return shown + (" (default)" if setting["text"] is None else "")


# ---- verify, clear, prune


def cmd_verify(store: DiskStore, args) -> int:
    from .runtime.custom_calls import Unready

    good = bad = removed = unchecked = 0
    for info, problem in store.entries():
        if problem is None:
            try:
                problem = _load_problem(store, info)
            except Unready as e:  # not bad: a process that registers the target loads it
                unchecked += 1
                print(f"not checked: {info.name} ({info.kind}) in {info.path}: {e} - kept")
                continue
        if problem is None:
            good += 1
            continue
        bad += 1
        what = f"{info.name} ({info.kind}) in {info.path}" if info.name != "?" else str(info.path)
        gone = not args.dry_run and store.remove(info.path)
        removed += gone
        print(f"bad: {what}: {problem}" + (" - removed" if gone else ""))
    summary = f"{count(good + bad)} checked in {store.top}: {good} good, {bad} bad"
    if unchecked:
        summary += f"; {unchecked} not checked (custom-call targets not registered here)"
    if bad:
        summary += " (not removed: --dry-run)" if args.dry_run else f" ({removed} removed)"
    print(summary)
    return 1 if bad else 0


def _load_problem(store: DiskStore, info) -> str | None:
    """Why the entry's executable does not load on neuron:0 here, or None when it does."""
    from .runtime import executables  # starts jax on first load
    from .runtime.custom_calls import Unready

    try:
        body = store.read_body(info.path)
        if info.kind == "aot":  # a stored AOTAutograd graph (compile/aot_records.py), not an executable
            from torch._subclasses.fake_tensor import FakeTensorMode
            from torch.fx._graph_pickler import GraphPickler

            GraphPickler.loads(body, FakeTensorMode())
        elif info.kind == "plan":  # an eager op's output plan (eager/executor.py), not an executable
            pickle.loads(body)
        else:  # (the layer's metadata, the serialized executable)
            executables.load(pickle.loads(body)[1], 0)
    except FileNotFoundError:
        return None  # removed meanwhile: nothing left to check
    except Unready:
        raise
    except Exception as e:  # whatever the bytes make unpickling, jax or XLA raise
        return f"it could not be loaded: {type(e).__name__}: {e}"
    return None


def cmd_clear(store: DiskStore, args) -> int:
    print(f"removed {count(store.clear())} from {store.top}")
    return 0


def cmd_prune(store: DiskStore, args) -> int:
    removed, freed, left = store.prune(args.max_size)
    print(f"removed {count(removed)} ({human_size(freed)}); {human_size(left)} left in {store.top}")
    return 0


# ---- formatting


def count(n: int) -> str:
    return f"{n} entry" if n == 1 else f"{n} entries"


def human_size(nbytes: int) -> str:
    if nbytes < 1024:
        return f"{nbytes} B"
    for unit in ("KB", "MB", "GB"):
        nbytes /= 1024
        if nbytes < 1024 or unit == "GB":
            return f"{nbytes:.1f} {unit}"


def human_age(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    for limit, unit, per in ((60, "s", 1), (3600, "min", 60), (86400, "h", 3600)):
        if seconds < limit:
            return f"{int(seconds // per)} {unit}"
    return f"{int(seconds // 86400)} d"


def _print_table(rows: list[tuple]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


if __name__ == "__main__":
    sys.exit(main())
