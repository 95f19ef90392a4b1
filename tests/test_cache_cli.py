"""`torch-neuronx cache ...` (torch_neuronx.cli) on a cache folder that real eager ops and a compiled
graph filled in a subprocess: what ls and stats show, verify finding and removing bad entries, prune
taking the least recently used out first, clear, JSON output, usage errors, and that only verify
starts jax."""
import json
import os
import pathlib
import pickle
import re
import shutil
import subprocess
import time

import pytest

from helpers import run_python
from torch_neuronx import cli
from torch_neuronx.cache.store import DiskStore, encode
from torch_neuronx.runtime import executables

REPO = pathlib.Path(__file__).resolve().parent.parent

FILL = """
import torch
x = torch.randn(8, 8).to("neuron")
y = (x + 1).sin()
f = torch.compile(lambda a: (a * 2).cos() + a, backend="neuron")
z = f(x)
print(y.cpu().sum().item(), z.cpu().sum().item())
"""


def _python(args: list[str], cache_dir=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.setdefault("TORCH_NEURONX_EAGER_FUSION", "0")  # eager ops' own entries (`run_fused` fills fused runs)
    if cache_dir is not None:
        env["TORCH_NEURONX_NEFF_CACHE_DIR"] = str(cache_dir)
    r = run_python(args=args, env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr
    return r


def _fill(cache_dir) -> None:
    _python(["-c", FILL], cache_dir)


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("filled")
    _fill(folder)
    return folder


@pytest.fixture
def cache_dir(filled, tmp_path):
    """A copy of the filled cache of this test's own (modification times kept)."""
    folder = tmp_path / "cache"
    shutil.copytree(filled, folder)
    return folder


def _entry_files(folder) -> list[pathlib.Path]:
    return sorted(pathlib.Path(folder).rglob("*.entry"))


def _run(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli.main(["cache", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def _ls_rows(out: str) -> list[list[str]]:
    """The table's rows (name, kind, size, unit, ...) without its header and total line."""
    lines = out.strip().splitlines()
    assert lines[0].split()[:2] == ["NAME", "KIND"]
    assert re.match(r"\d+ entr(y|ies), ", lines[-1]), lines[-1]
    return [line.split() for line in lines[1:-1]]


def _ls_json(capsys, folder, *args) -> dict:
    rc, out, _err = _run(capsys, "ls", "--json", "--dir", str(folder), *args)
    assert rc == 0
    return json.loads(out)


def _set_last_use(paths, now=None) -> None:
    """Last use in the order given: the first path the longest ago, one minute apart."""
    now = time.time() if now is None else now
    for i, path in enumerate(paths):
        t = now - 60 * (len(paths) - i)
        os.utime(path, (t, t))


def test_ls_lists_fused_runs(tmp_path, capsys):
    env_before = os.environ.get("TORCH_NEURONX_EAGER_FUSION")
    os.environ["TORCH_NEURONX_EAGER_FUSION"] = "1"  # eager fusion, the default: the ops as one run
    try:
        _fill(tmp_path)
    finally:
        if env_before is None:
            del os.environ["TORCH_NEURONX_EAGER_FUSION"]
        else:
            os.environ["TORCH_NEURONX_EAGER_FUSION"] = env_before
    listed = _ls_json(capsys, tmp_path, "--kind", "run")
    runs = listed["entries"] if isinstance(listed, dict) else listed
    assert runs and all(e["kind"] == "run" and e["name"].startswith("fused run of ") for e in runs), runs


def test_ls_lists_eager_ops_and_graphs(cache_dir, capsys):
    rc, out, _err = _run(capsys, "ls", "--dir", str(cache_dir))
    assert rc == 0
    listed = _ls_rows(out)
    rows = {row[0]: row for row in listed}
    assert rows["aten.add.Tensor"][1] == "op"
    assert rows["aten.sin.default"][1] == "op"
    graphs = sorted(row[1] for row in listed if row[0].startswith("graph_"))
    assert graphs == ["aot", "graph"], out  # the graph's executable and AOTAutograd's graph
    assert rows["probe"][1] == "probe"
    assert rows["aten.add.Tensor"][3] in ("B", "KB", "MB")
    n = len(_entry_files(cache_dir))
    assert len(listed) == n
    assert out.strip().splitlines()[-1].startswith(f"{n} entries, ")

    rc, out, _err = _run(capsys, "ls", "--kind", "op", "--dir", str(cache_dir))
    assert rc == 0
    assert sorted(row[0] for row in _ls_rows(out)) == ["aten.add.Tensor", "aten.sin.default"]


def test_ls_sorts_by_last_use_most_recent_first(cache_dir, capsys):
    paths = _entry_files(cache_dir)
    _set_last_use(paths)
    listed = _ls_json(capsys, cache_dir)["entries"]
    assert [e["path"] for e in listed] == [str(p) for p in reversed(paths)]
    rc, out, _err = _run(capsys, "ls", "--dir", str(cache_dir))
    assert rc == 0
    assert [row[0] for row in _ls_rows(out)] == [e["name"] for e in listed]
    assert _ls_rows(out)[-1][6:8] == [str(len(paths)), "min"]  # last used n minutes ago


def test_ls_json_describes_each_entry(cache_dir, capsys):
    listing = _ls_json(capsys, cache_dir)
    assert listing["directory"] == str(cache_dir)
    files = {str(p): p.stat().st_size for p in _entry_files(cache_dir)}
    assert {e["path"]: e["size"] for e in listing["entries"]} == files
    assert listing["total_bytes"] == sum(files.values())
    add = next(e for e in listing["entries"] if e["name"] == "aten.add.Tensor")
    assert add["kind"] == "op" and add["problem"] is None and add["hits"] == 0
    assert time.time() - 600 < add["created"] <= time.time()


def test_hits_grow_when_a_new_process_loads_the_entries(cache_dir, capsys):
    before = {e["name"]: e["hits"] for e in _ls_json(capsys, cache_dir)["entries"]}
    _fill(cache_dir)  # the same ops and graph again: every executable comes from disk
    after = {e["name"]: e["hits"] for e in _ls_json(capsys, cache_dir)["entries"]}
    assert after.keys() == before.keys()
    assert all(after[name] == before[name] + 1 for name in before), (before, after)
    rc, out, _err = _run(capsys, "ls", "--dir", str(cache_dir))
    assert {row[0]: row[-1] for row in _ls_rows(out)}["aten.add.Tensor"] == str(before["aten.add.Tensor"] + 1)


def test_stats_counts_match_the_entry_files(cache_dir, capsys, monkeypatch):
    files = _entry_files(cache_dir)
    rc, out, _err = _run(capsys, "stats", "--json", "--dir", str(cache_dir))
    assert rc == 0
    stats = json.loads(out)
    assert stats["entries"] == len(files)
    assert stats["bytes"] == sum(p.stat().st_size for p in files)
    assert {k: t["entries"] for k, t in stats["kinds"].items()} == {"op": 2, "graph": 1, "aot": 1, "probe": 1}
    assert stats["bad"] == {"entries": 0, "bytes": 0}
    assert stats["hits"] == 0 and stats["disk_cache_enabled"] is True
    assert stats["oldest"]["created"] <= stats["newest"]["created"]

    # the folder from the environment, and the settings as this environment sets them
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(cache_dir))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_MAX_SIZE", "500M")
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_MEMORY_ENTRIES", "many")
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_MEMORY_SIZE", "inf")
    monkeypatch.setenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", "1")
    rc, out, _err = _run(capsys, "stats")
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split() == ["folder", str(cache_dir)]
    table = {line.split()[0]: line.split()[1:] for line in lines}
    assert table["op"][0] == "2" and table["graph"][0] == "1" and table["total"][0] == str(len(files))
    assert table["disk"] == ["layer", "off", "(TORCH_NEURONX_NEFF_DISABLE_CACHE=1)"]  # the spelling set
    assert table["TORCH_NEURONX_NEFF_CACHE_MAX_SIZE"] == ["500.0", "MB"]
    assert table["TORCH_NEURONX_NEFF_CACHE_MEMORY_ENTRIES"][0] == "invalid:"
    assert "'many'" in out
    assert " ".join(table["TORCH_NEURONX_NEFF_CACHE_MEMORY_SIZE"]) == (
        "invalid: TORCH_NEURONX_NEFF_CACHE_MEMORY_SIZE='inf': expected a size in bytes such as 1073741824, 500M or 20G")
    monkeypatch.delenv("TORCH_NEURONX_NEFF_CACHE_MEMORY_SIZE")
    rc, out, _err = _run(capsys, "stats")
    table = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    assert table["NEURON_COMPILATION_CACHE_MAX_SIZE_MB"] == ["1.0", "GB", "(default)"]  # unset: TorchNeuron's name


def test_verify_removes_corrupt_truncated_and_unloadable_entries(cache_dir, capsys):
    rc, out, _err = _run(capsys, "verify", "--dir", str(cache_dir))
    n = len(_entry_files(cache_dir))
    assert rc == 0, out
    assert out.strip() == f"{n} entries checked in {cache_dir}: {n} good, 0 bad"

    by_name = {e["name"]: pathlib.Path(e["path"]) for e in _ls_json(capsys, cache_dir)["entries"]}
    corrupt, truncated, unloadable = by_name["aten.add.Tensor"], by_name["aten.sin.default"], by_name["probe"]
    data = bytearray(corrupt.read_bytes())
    data[-50:-40] = bytes(b ^ 0xFF for b in data[-50:-40])  # inside the body
    corrupt.write_bytes(data)
    truncated.write_bytes(truncated.read_bytes()[:1000])
    info = next(i for i, _p in DiskStore(cache_dir).entries() if i.path == unloadable)
    unloadable.write_bytes(encode(info.name, info.kind, info.key, b"not an executable"))  # checksum is good

    rc, out, _err = _run(capsys, "verify", "--dry-run", "--dir", str(cache_dir))
    assert rc == 1
    assert out.strip().splitlines()[-1].endswith(f"{n - 3} good, 3 bad (not removed: --dry-run)")
    assert all(p.exists() for p in (corrupt, truncated, unloadable))

    rc, out, _err = _run(capsys, "verify", "--dir", str(cache_dir))
    assert rc == 1
    reports = {line.split(": ", 2)[1]: line for line in out.splitlines() if line.startswith("bad: ")}
    assert "do not match their checksum (corrupt) - removed" in reports[str(corrupt)]
    assert "truncated or padded: 1000 bytes" in reports[str(truncated)]
    assert "probe (probe) in " + str(unloadable) in reports
    assert "it could not be loaded: " in reports["probe (probe) in " + str(unloadable)]
    assert out.strip().splitlines()[-1].endswith(f"{n - 3} good, 3 bad (3 removed)")
    assert not any(p.exists() for p in (corrupt, truncated, unloadable))
    assert len(_entry_files(cache_dir)) == n - 3

    rc, out, _err = _run(capsys, "verify", "--dir", str(cache_dir))
    assert rc == 0
    assert out.strip().endswith(f"{n - 3} good, 0 bad")


def test_verify_loads_the_executable_behind_a_graph_entrys_metadata(cache_dir, capsys):
    """A graph entry's body is (its metadata, the executable's bytes); verify loads the latter, whose
    format a stale package would not read."""
    store = DiskStore(cache_dir)
    info = next(i for i, _p in store.entries() if i.kind == "graph")
    meta, _blob = pickle.loads(store.read_body(info.path))
    stale_blob = pickle.dumps((99, b"", None, None))  # runtime.executables' layout, from a future format
    info.path.write_bytes(encode(info.name, info.kind, info.key, pickle.dumps((meta, stale_blob))))
    rc, out, _err = _run(capsys, "verify", "--dir", str(cache_dir))
    assert rc == 1
    [report] = [line for line in out.splitlines() if line.startswith("bad: ")]
    assert report == (f"bad: {info.name} (graph) in {info.path}: it could not be loaded: ValueError: "
                      f"serialized executable format 99, this package reads {executables.FORMAT} - removed")
    assert not info.path.exists()


def test_ls_and_stats_show_bad_entries(cache_dir, capsys):
    paths = _entry_files(cache_dir)
    paths[0].write_bytes(paths[0].read_bytes()[:10])
    rc, out, _err = _run(capsys, "ls", "--dir", str(cache_dir))
    assert rc == 0
    [bad] = [line for line in out.splitlines() if line.startswith("?")]
    assert f"bad ({paths[0].stem[:16]}): truncated: 10 bytes" in bad
    assert out.strip().splitlines()[-1].endswith(", 1 bad (`torch-neuronx cache verify` removes them)")
    rc, out, _err = _run(capsys, "stats", "--json", "--dir", str(cache_dir))
    stats = json.loads(out)
    assert stats["bad"] == {"entries": 1, "bytes": 10} and stats["entries"] == len(paths)


def test_prune_removes_the_least_recently_used_first(cache_dir, capsys):
    paths = _entry_files(cache_dir)
    paths = [paths[2], paths[0], paths[3], paths[1], paths[4]]  # an order of last use unlike the files' order
    _set_last_use(paths)
    sizes = [p.stat().st_size for p in paths]
    keep = sum(sizes[2:])  # what may stay: exactly the three most recently used
    rc, out, _err = _run(capsys, "prune", "--max-size", str(keep), "--dir", str(cache_dir))
    assert rc == 0
    assert out.strip().startswith("removed 2 entries (")
    assert [p.exists() for p in paths] == [False, False, True, True, True]
    assert sum(p.stat().st_size for p in _entry_files(cache_dir)) <= keep

    rc, out, _err = _run(capsys, "prune", "--max-size", f"{(sizes[4] + 1023) // 1024}K", "--dir", str(cache_dir))
    assert rc == 0
    assert out.strip().startswith("removed 2 entries (")
    assert _entry_files(cache_dir) == [paths[4]]


def test_clear_removes_every_entry(cache_dir, capsys):
    n = len(_entry_files(cache_dir))
    rc, out, _err = _run(capsys, "--dir", str(cache_dir), "clear")  # --dir before the subcommand works too
    assert rc == 0
    assert out.strip() == f"removed {n} entries from {cache_dir}"
    assert _entry_files(cache_dir) == []
    rc, out, _err = _run(capsys, "ls", "--dir", str(cache_dir))
    assert rc == 0 and out.strip() == f"no entries in {cache_dir}"
    rc, out, _err = _run(capsys, "stats", "--json", "--dir", str(cache_dir))
    assert json.loads(out)["entries"] == 0


def test_usage_errors_exit_2_with_a_message(cache_dir, capsys):
    rc, out, err = _run(capsys, "prune", "--max-size", "12XB", "--dir", str(cache_dir))
    assert rc == 2
    assert "'12XB'" in err and "expected a size" in err and "Traceback" not in err
    assert len(_entry_files(cache_dir)) == 5
    rc, out, err = _run(capsys, "prune", "--max-size", "inf", "--dir", str(cache_dir))
    assert rc == 2 and "--max-size='inf': expected a size" in err and "Traceback" not in err
    rc, _out, err = _run(capsys, "prune", "--dir", str(cache_dir))
    assert rc == 2 and "--max-size" in err
    rc, _out, err = _run(capsys, "frobnicate")
    assert rc == 2 and "invalid choice: 'frobnicate'" in err
    rc, _out, err = _run(capsys, "ls", "--kind", "kernel")
    assert rc == 2 and "invalid choice: 'kernel'" in err
    capsys.readouterr()
    assert cli.main([]) == 2
    assert "required" in capsys.readouterr().err


def test_python_m_runs_the_command(filled):
    r = _python(["-m", "torch_neuronx.cli", "cache", "stats", "--dir", str(filled)])
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["folder", str(filled)]
    totals = {line.split()[0]: line.split()[1] for line in lines[1:7]}
    assert totals == {"KIND": "ENTRIES", "op": "2", "graph": "1", "aot": "1", "probe": "1", "total": "5"}


def test_only_verify_starts_jax(cache_dir):
    code = f"""
import sys
from torch_neuronx.cli import main
for args in (["ls"], ["stats"], ["ls", "--json"], ["prune", "--max-size", "1G"]):
    assert main(["cache", *args, "--dir", {str(cache_dir)!r}]) == 0
print("jax after ls, stats, prune:", "jax" in sys.modules)
assert main(["cache", "verify", "--dir", {str(cache_dir)!r}]) == 0
print("jax after verify:", "jax" in sys.modules)
"""
    out = _python(["-c", code]).stdout
    assert "jax after ls, stats, prune: False" in out
    assert "jax after verify: True" in out
