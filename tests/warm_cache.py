"""The warm pass: tests run twice, each pass in new processes, over one disk cache folder; the second
pass (a user's second run of a script) must load every executable the first compiled, compile none,
give the same device results bit for bit, and not crash.

    bash scripts/test.sh --warm                  # the op sweep: OpInfo and every lowering file, both modes
    bash scripts/test.sh --warm tests/test_x.py  # any other selection (pytest's arguments)
    python tests/warm_cache.py [--keep DIR] [pytest arguments]

As a pytest plugin (tests/conftest.py loads it) it is idle unless `--warm-pass` is given. Then each
test's device results, handed to `record` by the harnesses that compare them with the CPU
(opinfo_support.run_entry, lowering_harness, device_harness), are kept as digests of their bytes, and
the executables compiled and loaded while it ran are counted (`torch_neuronx.metrics.executables_by_kind`:
every program XLA compiled in the process, by whoever asked, less what a harness compiles for itself,
inside `harness_compiles`). `--warm-pass=cold` writes that per test under `--warm-record`; `--warm-pass=warm`
reads it back and fails a test that compiled anything (a warm process must load what the first compiled)
or whose device results differ from the cold pass's. A crash (a worker that died) is counted from
the reports. The summary's last lines say what each pass did; the driver (`main`) runs both passes and
exits non-zero on any failure, compile, mismatch or crash.
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import sys

import pytest

PASS_OPTION = "--warm-pass"
RECORD_OPTION = "--warm-record"
# the op sweep: PyTorch's OpInfo samples (eager, then compiled) and every lowering file (eager and
# compiled, the lowering_mode fixture)
SWEEP = ("tests/test_opinfo.py", "tests/test_compile_opinfo.py", "tests/test_lowerings_*.py")
# tests whose executable cache is not the pass's folder by design (none, or an empty one of their
# own): they compile in every process
_NO_DISK_FIXTURES = ("memory_only_cache", "fresh_cache")
# a test whose executables are not the same in every process by design (its fused runs follow how its
# threads interleave, its cache folder is its own): exempt from the compile count, with its reason
VARIES_MARK = "warm_varies"


class _Test:
    def __init__(self):
        self.outputs: list[str] = []
        self.harness = 0  # XLA compiles inside harness_compiles
        self.in_harness = 0  # how many harness_compiles blocks are open
        self.first_compile: str | None = None  # where the first compile outside a harness was asked for


_current: _Test | None = None  # the running test's record; None outside a warm-mode pass


def record(value) -> None:
    """A device result of the running test (tensors anywhere in lists, tuples and dicts; other values by
    their repr): its digest is compared between the passes. Nothing outside a warm-mode pass."""
    if _current is not None:
        _current.outputs.append(_digest(value))


@contextlib.contextmanager
def harness_compiles():
    """Compiles inside are a test harness's own (a lowering jitted alone), not the product's."""
    test = _current
    if test is None:
        yield
        return
    test.in_harness += 1
    try:
        yield
    finally:
        test.in_harness -= 1


@pytest.fixture
def jax_alone():
    """For a test of lowerings run through jax alone, off the device: what it compiles is the test's own."""
    with harness_compiles():
        yield


_watching = False


def _watch_compiles() -> None:
    """Count each test's compiles inside harness_compiles, and keep the stack of its first compile
    outside one: what a warm failure names."""
    global _watching
    if _watching:
        return
    _watching = True
    import traceback

    from torch_neuronx.runtime.lazy_jax import jax

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def listener(event, _seconds, **_kwargs):
        test = _current
        if test is None or event != "/jax/core/compile/backend_compile_duration":
            return
        if test.in_harness:
            test.harness += 1
        elif test.first_compile is None:
            frames = [f for f in traceback.extract_stack()[:-1] if f.filename.startswith(root)]
            test.first_compile = "".join(traceback.format_list(frames[-8:]))

    jax.monitoring.register_event_duration_secs_listener(listener)


def _digest(value) -> str:
    import torch

    h = hashlib.sha256()

    def add(v):
        if isinstance(v, torch.Tensor):
            t = v.detach()
            h.update(f"T{t.dtype}{tuple(t.shape)}{t.device.type}".encode())
            t = t.cpu().contiguous()
            if t.is_complex():
                t = torch.view_as_real(t)
            if t.numel():
                h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(v, (list, tuple)):
            h.update(f"L{len(v)}".encode())
            for x in v:
                add(x)
        elif isinstance(v, dict):
            h.update(f"D{len(v)}".encode())
            for k in sorted(v, key=repr):
                h.update(repr(k).encode())
                add(v[k])
        else:
            h.update(repr(v).encode())

    add(value)
    return h.hexdigest()[:16]


# ---- the plugin

def pytest_configure(config):
    config.addinivalue_line("markers", f"{VARIES_MARK}(reason): the test's executables differ between processes by "
                                       "design; a warm pass does not count its compiles (tests/warm_cache.py)")


def pytest_addoption(parser):
    parser.addoption(PASS_OPTION, choices=("cold", "warm"), default=None,
                     help="run as the cold or the warm pass of tests/warm_cache.py (over one cache folder)")
    parser.addoption(RECORD_OPTION, default=None, help="the folder the two passes keep their records in")


def _pass(config):
    return config.getoption(PASS_OPTION)


def _folder(config, which: str) -> str:
    top = config.getoption(RECORD_OPTION)
    if not top:
        raise SystemExit(f"{PASS_OPTION} needs {RECORD_OPTION}=FOLDER")
    path = os.path.join(top, which)
    os.makedirs(path, exist_ok=True)
    return path


def _worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def _read(folder: str) -> dict:
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.jsonl"))):
        with open(path) as f:
            for line in f:
                if line.strip():
                    rec = json.loads(line)
                    out[rec["test"]] = rec
    return out


_cold_records: dict | None = None


def _counts():
    import torch_neuronx

    return torch_neuronx.metrics.executables_by_kind()


def _delta(after: dict, before: dict) -> dict:
    return {k: n - before.get(k, 0) for k, n in after.items() if n - before.get(k, 0)}


_before: dict = {}


def _isolate() -> None:
    import gc

    import torch

    gc.collect()
    # what survived it lives on (modules, OpInfo's entries, the caches): never scanned again, so each
    # test's collection scans only what the test before it made (a full one took 0.36 s in an OpInfo
    # process, and doubled the sweep)
    gc.freeze()
    torch.neuron.synchronize()


@pytest.hookimpl(tryfirst=True)  # before the fixtures are set up: they may compile too
def pytest_runtest_setup(item):
    global _current
    if _pass(item.config) is None:
        return
    # each test on its own: what earlier tests queued runs now, and their cyclic garbage is freed now. A
    # fused run's key names the storages alive at its flush, so ops left queued by earlier tests, and
    # their tensors freed by the collector at another moment in the other pass, would make other runs
    _isolate()
    _current = _Test()
    _watch_compiles()
    _before[item.nodeid] = _counts()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    which = _pass(item.config)
    if which is None:
        return (yield)
    failed = True
    try:
        result = yield
        failed = False
        return result
    finally:
        _finish(item, which, failed)


def _finish(item, which: str, failed: bool) -> None:
    global _current, _cold_records
    test, _current = _current, None
    before = _before.pop(item.nodeid, None)
    if test is None or before is None:
        return
    after = _counts()
    compiled = _delta(after["compiled"], before["compiled"])
    loaded = _delta(after["loaded"], before["loaded"])
    unstorable = after["unstorable"] - before["unstorable"]  # compiled in every process by design
    xla = after["xla_compiles"] - before["xla_compiles"] - test.harness - unstorable
    exempt = (any(f in getattr(item, "fixturenames", ()) for f in _NO_DISK_FIXTURES)
              or item.get_closest_marker(VARIES_MARK) is not None)
    rec = {"test": item.nodeid, "outputs": test.outputs, "compiled": compiled, "loaded": loaded, "xla": xla,
           "unstorable": unstorable, "exempt": exempt, "failed": failed}
    problem = None
    if which == "warm" and not failed:
        if _cold_records is None:
            _cold_records = _read(_folder(item.config, "cold"))
        cold = _cold_records.get(item.nodeid)
        if cold is None:
            problem = "no record of it in the cold pass"
        elif xla and not exempt:
            problem = (f"the warm pass compiled {xla} program(s) (by kind: {compiled or 'outside the cache'}); "
                       f"it loaded {loaded or 'nothing'} from the disk cache; the first compile was asked for "
                       f"at:\n{test.first_compile}")
        elif cold["outputs"] != test.outputs:
            n = len(test.outputs)
            diff = [i for i, (a, b) in enumerate(zip(cold["outputs"], test.outputs)) if a != b]
            problem = (f"device results differ from the cold pass: {len(cold['outputs'])} results then, {n} now"
                       if len(cold["outputs"]) != n else f"device results {diff} of {n} differ from the cold pass")
        rec["problem"] = problem
    with open(os.path.join(_folder(item.config, which), f"{_worker()}.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")
    if problem is not None:
        raise AssertionError(f"warm cache: {problem}")


_crashes: list = []


def pytest_runtest_logreport(report):
    if report.failed and "crashed while running" in str(getattr(report, "longrepr", "")):
        _crashes.append(report.nodeid)


def summary(top: str) -> dict:
    """What the two passes under `top` did, from their records."""
    cold, warm = _read(os.path.join(top, "cold")), _read(os.path.join(top, "warm"))

    def total(records, part):
        out: dict = {}
        for rec in records.values():
            for k, n in rec[part].items():
                out[k] = out.get(k, 0) + n
        return out

    warm_checked = [r for r in warm.values() if not r["failed"]]
    return {
        "cold_tests": len(cold), "warm_tests": len(warm),
        "cold_compiled": total(cold, "compiled"), "cold_xla": sum(r["xla"] for r in cold.values()),
        "warm_loaded": total(warm, "loaded"), "warm_compiled": total(warm, "compiled"),
        "warm_xla": sum(r["xla"] for r in warm.values() if not r["exempt"]),
        "warm_unstorable": sum(r.get("unstorable", 0) for r in warm.values()),
        "exempt": sorted(r["test"] for r in warm.values() if r["exempt"]),
        "outputs": sum(len(r["outputs"]) for r in warm_checked),
        "mismatches": sorted(r["test"] for r in warm_checked if r.get("problem", "") and "differ" in r["problem"]),
        "compiling": sorted(r["test"] for r in warm_checked if r.get("problem", "") and "compiled" in r["problem"]),
        "missing_cold": sorted(r["test"] for r in warm_checked if r.get("problem", "") and "no record" in r["problem"]),
        "not_run_warm": sorted(set(cold) - set(warm)),
    }


def format_summary(s: dict, crashes: int) -> list[str]:
    kinds = lambda d: ", ".join(f"{k} {n}" for k, n in sorted(d.items())) or "none"  # noqa: E731
    return [
        f"warm cache: cold pass {s['cold_tests']} tests, {s['cold_xla']} programs compiled "
        f"(cached kinds: {kinds(s['cold_compiled'])})",
        f"warm cache: warm pass {s['warm_tests']} tests, executables loaded from disk: {kinds(s['warm_loaded'])}; "
        f"compiled: {s['warm_xla']} ({kinds(s['warm_compiled'])}; unstorable, compiled in every process by "
        f"design: {s['warm_unstorable']}); device results compared: {s['outputs']}; "
        f"mismatches: {len(s['mismatches'])}; crashes: {crashes}",
    ] + [f"  compiled in the warm pass: {t}" for t in s["compiling"]] + [
        f"  differs from the cold pass: {t}" for t in s["mismatches"]] + [
        f"  not run in the warm pass: {t}" for t in s["not_run_warm"][:10]] + (
        [f"  ... and {len(s['not_run_warm']) - 10} more not run in the warm pass"] if len(s["not_run_warm"]) > 10 else [])


def pytest_terminal_summary(terminalreporter, config):
    which = _pass(config)
    if which is None or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    top = config.getoption(RECORD_OPTION)
    s = summary(top)
    for line in (format_summary(s, len(_crashes)) if which == "warm" else format_summary(s, len(_crashes))[:1]):
        terminalreporter.write_line(line)
    with open(os.path.join(top, f"{which}-crashes.json"), "w") as f:
        json.dump(_crashes, f)


# ---- the driver

def main(argv: list[str]) -> int:
    import random
    import shutil
    import subprocess
    import tempfile

    keep = None
    if argv[:1] == ["--keep"]:
        keep, argv = argv[1], argv[2:]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    top = keep or tempfile.mkdtemp(prefix="warm_cache_")
    os.makedirs(top, exist_ok=True)
    args = list(argv)
    if not any(os.path.exists(os.path.join(root, a.split("::")[0])) for a in args if not a.startswith("-")):
        args += sorted({p for pattern in SWEEP for p in glob.glob(os.path.join(root, pattern))})
    if not any(a.startswith(("-n", "--numprocesses")) or a == "no:xdist" for a in args):
        args = ["-n", "2", "--dist", "loadfile"] + args  # as scripts/test.sh runs the suite
    # one hash seed for both passes (random unless set): OpInfo's sample generators iterate over sets
    # of strings, so another seed is another order of samples, drawn with other values
    seed = os.environ.get("PYTHONHASHSEED") or str(random.randrange(1, 2**32))
    env = {**os.environ, "TORCH_NEURONX_NEFF_CACHE_DIR": os.path.join(top, "cache"), "PYTHONHASHSEED": seed}
    codes = {}
    for which in ("cold", "warm"):
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   f"{PASS_OPTION}={which}", f"{RECORD_OPTION}={top}", *args]
        print(f"warm cache: the {which} pass: {' '.join(command[1:])}", flush=True)
        codes[which] = subprocess.run(command, cwd=root, env=env).returncode
    s = summary(top)
    crashes = 0
    for which in ("cold", "warm"):
        path = os.path.join(top, f"{which}-crashes.json")
        crashes += len(json.load(open(path))) if os.path.exists(path) else 0
        crashes += codes[which] < 0 or codes[which] >= 128  # the pytest process itself died
    print("\n".join(format_summary(s, crashes)))
    print(f"warm cache: exit status cold {codes['cold']}, warm {codes['warm']}; PYTHONHASHSEED={seed}; "
          f"records in {top}")
    ok = (codes["cold"] == codes["warm"] == 0 and s["warm_xla"] == 0 and not s["mismatches"] and not crashes
          and not s["missing_cold"] and not s["not_run_warm"] and s["warm_tests"] > 0)
    if ok and keep is None:
        shutil.rmtree(top, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
