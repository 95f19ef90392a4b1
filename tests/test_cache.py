"""The executable cache (torch_neuronx.cache): keys, the disk layer's safety, both bounds, sharing
between processes and devices, torch.compiler's cache artifacts. Results are always checked against
the CPU: a cache that returns a wrong result fails here, whatever it counts."""
from __future__ import annotations

import json
import os
import pathlib
import pickle
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import torch_neuronx
from helpers import randn, run_python
from torch_neuronx import cache, metrics
from torch_neuronx.cache import keys, store
from torch_neuronx.compile import graph
from torch_neuronx.eager import executor

aten = torch.ops.aten
# eager ops' own entries (kind "op"): each op its own launch here and in the children;
# tests/test_fusion.py covers fused runs on disk (kind "run")
pytestmark = pytest.mark.usefixtures("no_fusion")
NO_FUSION = {"TORCH_NEURONX_EAGER_FUSION": "0"}


def entries(folder) -> list[pathlib.Path]:
    return sorted(pathlib.Path(folder).rglob("*.entry"))


def op_entries(folder, name=None) -> list[pathlib.Path]:
    out = []
    for path in entries(folder):
        info, _body = store.decode(path.read_bytes(), path.stem)
        if info.kind == "op" and (name is None or info.name == name):
            out.append(path)
    return out


def run_with_cache(code: str, folder, **env) -> subprocess.CompletedProcess:
    """`code` (dedented) in a child interpreter whose executable cache is `folder` (random hash seeds,
    each op its own launch), env's variables set on top."""
    return run_python(textwrap.dedent(code), timeout=600,
                      **{cache.DIR_ENV: str(folder), "PYTHONHASHSEED": "random", **NO_FUSION, **env})


# ---- keys


def _env(**changes):
    """keys.environment with one input changed."""
    versions = dict((v[0], v[1:]) for v in keys.package_versions())
    for name in ("torch_neuronx", "torch", "jax", "jaxlib"):
        if name in changes:
            versions[name] = changes.pop(name)
    return keys.environment(changes.pop("platform", "cpu"), changes.pop("device_kind", "cpu"),
                            tuple((k,) + tuple(v) for k, v in versions.items()))


def test_the_key_changes_with_each_of_its_inputs_and_nothing_else(monkeypatch):
    a = torch.ones(4, 5, device="neuron")
    value_key = executor.call_key(aten.add.Tensor, (a, a), {})
    base = keys.entry_key(_env(), "op", value_key)
    assert keys.entry_key(_env(), "op", value_key) == base
    mine = keys.package_versions()[0]
    changed = {
        "this package's version": _env(torch_neuronx=("0.0.1", mine[2])),
        "this package's sources": _env(torch_neuronx=(mine[1], "0" * 64)),
        "torch's version": _env(torch=("2.12.0",)),
        "jax's version": _env(jax=("0.9.0",)),
        "jaxlib's version": _env(jaxlib=("0.9.0",)),
        "the platform": _env(platform="cuda"),
        "the device kind": _env(device_kind="NVIDIA H200"),
    }
    for what, env in changed.items():
        assert keys.entry_key(env, "op", value_key) != base, what
    # what the executables are built for: the platform's version, the CPU's instruction-set extensions
    from torch_neuronx.runtime import executables

    built_for = dict(executables.built_for())
    assert "avx2" in built_for["cpu_features"] or built_for["machine"] != "x86_64", built_for
    for what, value in (("platform_version", "cuda 12080"), ("cpu_features", ("avx", "sse2"))):
        monkeypatch.setattr(executables, "built_for", lambda: tuple({**built_for, what: value}.items()))
        assert keys.entry_key(_env(), "op", value_key) != base, what
    monkeypatch.undo()
    assert keys.entry_key(_env(), "graph", value_key) != base
    # the value key: dtype, shape, strides (a transposed view), a static argument
    b = torch.ones(4, 5, dtype=torch.float64, device="neuron")
    for other in (executor.call_key(aten.add.Tensor, (b, b), {}),
                  executor.call_key(aten.add.Tensor, (torch.ones(4, 6, device="neuron"),) * 2, {}),
                  executor.call_key(aten.add.Tensor, (a.t(), a.t()), {}),
                  executor.call_key(aten.add.Tensor, (a, a), {"alpha": 2})):
        assert keys.entry_key(_env(), "op", other) != base
    # XLA flags that change the executable change the key; the device count does not
    flags = os.environ.get("XLA_FLAGS", "")
    monkeypatch.setenv("XLA_FLAGS", flags + " --xla_cpu_enable_fast_math=true")
    assert keys.entry_key(_env(), "op", value_key) != base
    others = [f for f in flags.split() if "xla_force_host_platform_device_count" not in f]
    monkeypatch.setenv("XLA_FLAGS", " ".join(others + ["--xla_force_host_platform_device_count=7"]))
    assert keys.entry_key(_env(), "op", value_key) == base
    monkeypatch.undo()
    # a jax setting that changes programs
    import jax

    before = jax.config.jax_default_matmul_precision
    jax.config.update("jax_default_matmul_precision", "highest")
    try:
        assert keys.entry_key(_env(), "op", value_key) != base
    finally:
        jax.config.update("jax_default_matmul_precision", before)
    assert keys.entry_key(_env(), "op", value_key) == base


def test_every_device_shares_one_key():
    a0, a1 = torch.ones(3, device="neuron:0"), torch.ones(3, device="neuron:1")
    k0 = executor.call_key(aten.add.Tensor, (a0, a0), {})
    k1 = executor.call_key(aten.add.Tensor, (a1, a1), {})
    assert keys.entry_key(_env(), "op", k0) == keys.entry_key(_env(), "op", k1)
    # a factory's device argument too
    f0 = executor.call_key(aten.ones.default, ([2],), {"device": torch.device("neuron:0")})
    f1 = executor.call_key(aten.ones.default, ([2],), {"device": torch.device("neuron:1")})
    assert keys.entry_key(_env(), "op", f0) == keys.entry_key(_env(), "op", f1)


# ---- loading instead of compiling


def test_a_new_process_elsewhere_loads_eager_ops_and_graphs_from_a_copied_folder(tmp_path):
    """One process fills a folder; another, with another hash seed, runs the same code on a copy of
    the folder somewhere else: every key it computes is one the first stored (it compiles nothing),
    and no entry holds a path."""
    code = """
        import json, torch
        from torch_neuronx import metrics
        x = torch.arange(24.).reshape(4, 6).to('neuron')
        eager = (x.sin() * 2 + x.t().sum()).cpu()
        f = torch.compile(lambda a: torch.nn.functional.gelu(a @ a.t()).softmax(-1), backend='neuron',
                          fullgraph=True, dynamic=False)
        compiled = f(x).cpu()
        d = torch.neuron.get_dynamo_metrics()
        print(json.dumps({"eager": eager.tolist(), "compiled": compiled.tolist(),
                          "op_compiles": sum(n for n, _s in metrics.compile_stats().values()),
                          "graphs_compiled": d["graphs_compiled"], "graphs_loaded": sum(d["loaded_from_disk"].values()),
                          "aot_skipped": sum(d["aot_autograd_skipped"].values()),
                          **metrics.executable_cache_stats()}))
    """
    import shutil

    original = tmp_path / "original_place"
    cold_run = run_with_cache(code, original)
    assert cold_run.returncode == 0, cold_run.stderr
    cold = json.loads(cold_run.stdout.splitlines()[-1])
    for path in entries(original):
        assert str(tmp_path).encode() not in path.read_bytes()
    copy = tmp_path / "elsewhere" / "copied"
    shutil.copytree(original, copy)
    warm_run = run_with_cache(code, copy)
    assert warm_run.returncode == 0, warm_run.stderr
    warm = json.loads(warm_run.stdout.splitlines()[-1])
    x = torch.arange(24.).reshape(4, 6)
    torch.testing.assert_close(torch.tensor(cold["eager"]), x.sin() * 2 + x.t().sum())
    torch.testing.assert_close(torch.tensor(cold["compiled"]), torch.nn.functional.gelu(x @ x.t()).softmax(-1))
    assert warm["eager"] == cold["eager"] and warm["compiled"] == cold["compiled"]
    assert cold["op_compiles"] >= 4 and cold["graphs_compiled"] == 1 and cold["disk_hits"] == 0
    # the warm process compiled nothing: every op and the graph came from disk, and AOTAutograd's
    # graph too (it did not run)
    assert cold["aot_skipped"] == 0 and warm["aot_skipped"] == 1
    assert warm["op_compiles"] == 0 and warm["graphs_compiled"] == 0 and warm["graphs_loaded"] == 1
    assert warm["op_disk_hits"] == cold["disk_writes"] - 2 and warm["graph_disk_hits"] == 1
    assert warm["disk_misses"] == 0 and warm["bad_entries"] == 0 and warm["disk_writes"] == 0
    assert sorted(p.name for p in entries(copy)) == sorted(p.name for p in entries(original))


def test_neuron_0_and_neuron_1_share_one_entry(fresh_cache):
    x = randn(5, 7, seed=0)
    y0 = (x.to("neuron:0") * 3).cpu()
    n = len(op_entries(fresh_cache, "aten.mul.Tensor"))
    executor.clear_cache()
    y1 = x.to("neuron:1") * 3
    assert y1.device == torch.device("neuron:1")
    torch.testing.assert_close(y1.cpu(), x * 3)
    torch.testing.assert_close(y0, x * 3)
    assert len(op_entries(fresh_cache, "aten.mul.Tensor")) == n == 1
    assert metrics.executable_cache_stats()["op_disk_hits"] >= 1


# ---- a bad entry is removed and compiled again


def _damage(path: pathlib.Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncated":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif how == "flipped":
        for i in range(len(data) - 40, len(data) - 8):
            data[i] ^= 0xFF
        path.write_bytes(bytes(data))
    elif how == "wrong header":
        path.write_bytes(b"NOTANENTRY" + bytes(data[10:]))
    elif how == "another key":  # a whole valid entry, stored under the wrong name
        info, body = store.decode(bytes(data), path.stem)
        path.write_bytes(store.encode(info.name, info.kind, info.key + b"x", body))
    elif how == "unloadable":  # a valid entry whose executable XLA cannot load
        info, body = store.decode(bytes(data), path.stem)
        meta, _blob = pickle.loads(body)
        junk = pickle.dumps((1, b"\x00not an executable", None, None))
        path.write_bytes(store.encode(info.name, info.kind, info.key, pickle.dumps((meta, junk))))
    else:
        raise ValueError(how)


@pytest.mark.parametrize("how", ["truncated", "flipped", "wrong header", "another key", "unloadable"])
def test_a_bad_entry_is_removed_and_compiled_again(fresh_cache, how):
    x = randn(6, 3, seed=0)
    torch.testing.assert_close((x.to("neuron") * 5).cpu(), x * 5)
    (path,) = op_entries(fresh_cache, "aten.mul.Tensor")
    _damage(path, how)
    executor.clear_cache()
    metrics.clear_op_tracking()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = (x.to("neuron") * 5).cpu()
    torch.testing.assert_close(got, x * 5)
    said = [str(w.message) for w in caught if "was removed and is compiled again" in str(w.message)]
    assert len(said) == 1 and "aten.mul.Tensor" in said[0], [str(w.message) for w in caught]
    stats = metrics.executable_cache_stats()
    assert stats["bad_entries"] == 1 and metrics.compile_stats()["aten.mul.Tensor"][0] == 1
    # compiled again and stored whole: the next process (here: after memory is cleared) loads it
    store.decode(path.read_bytes(), path.stem)
    executor.clear_cache()
    torch.testing.assert_close((x.to("neuron") * 5).cpu(), x * 5)
    assert metrics.executable_cache_stats()["op_disk_hits"] >= 1


def test_loading_that_does_not_work_on_this_host_turns_the_disk_layer_off(fresh_cache, monkeypatch):
    from torch_neuronx.runtime import executables

    def rejected(data, index):
        raise RuntimeError("INVALID_ARGUMENT: the executable was compiled for other CPU features")

    monkeypatch.setattr(executables, "load", rejected)
    x = randn(4, 4, seed=0)
    with pytest.warns(RuntimeWarning, match="do not load from the disk cache on this host"):
        got = (x.to("neuron") - 2).cpu()
    torch.testing.assert_close(got, x - 2)
    assert cache.executable_cache().disk is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning only
        torch.testing.assert_close((x.to("neuron") - 3).cpu(), x - 3)


# ---- many processes, unwritable folders, the switch


_RACE = """
    import json, sys, torch
    from torch_neuronx import metrics
    x = torch.arange(48.).reshape(6, 8) / 10
    n = x.to('neuron')
    outs = [(n * 2 + 1).sin(), n @ n.t()]
    f = torch.compile(lambda a: (a.exp() @ a.t()).tanh(), backend='neuron', fullgraph=True, dynamic=False)
    outs.append(f(n))
    print(json.dumps([o.cpu().tolist() for o in outs]))
"""


def test_four_processes_compile_into_one_folder_at_once(tmp_path):
    # four writers of the same entries at once (eight took twice as long on 2 cores, most of it importing
    # torch, and raced no differently: every entry is written by all of them either way)
    folder = tmp_path / "shared"
    env = {**os.environ, cache.DIR_ENV: str(folder), **NO_FUSION}
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(_RACE)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(4)]
    results = [p.communicate(timeout=900) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        assert "RuntimeWarning" not in err, err  # no bad entry was ever read
    x = torch.arange(48.).reshape(6, 8) / 10
    want = [(x * 2 + 1).sin(), x @ x.t(), (x.exp() @ x.t()).tanh()]
    for out, _err in results:
        for got, w in zip(json.loads(out.splitlines()[-1]), want):
            torch.testing.assert_close(torch.tensor(got), w)
    found = entries(folder)
    assert found
    for path in found:  # every entry whole and valid; no temporary file left behind
        store.decode(path.read_bytes(), path.stem)
    assert not list(folder.rglob("*.tmp"))
    kinds = {store.decode(p.read_bytes(), p.stem)[0].kind for p in found}
    assert kinds == {"op", "graph", "aot", "probe"}


@pytest.mark.warm_varies("its cache folder is its own, unwritable: it compiles in every process")
def test_an_unwritable_folder_warns_once_and_the_run_goes_on(monkeypatch):
    monkeypatch.setenv(cache.DIR_ENV, "/sys/neff_cache_cannot_be_made")
    cache.reset()
    try:
        x = randn(3, 9, seed=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.testing.assert_close((x.to("neuron") * 7).cpu(), x * 7)
            torch.testing.assert_close((x.to("neuron") + 7).cpu(), x + 7)
        said = [str(w.message) for w in caught if "cannot write" in str(w.message)]
        assert len(said) == 1 and "/sys/neff_cache_cannot_be_made" in said[0], [str(w.message) for w in caught]
    finally:
        monkeypatch.undo()
        cache.reset()


def test_a_full_disk_warns_once_and_leaves_no_partial_entry(tmp_path):
    # a file size limit makes every write past 2 KB fail as a full disk does (EFBIG)
    code = """
        import json, resource, signal, warnings
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))
        import torch
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            x = torch.arange(10.).to('neuron')
            doubled, total = (x * 2).cpu().tolist(), (x + 1).sin().sum().item()
        print(json.dumps([doubled, total, sum('cannot write' in str(w.message) for w in caught)]))
    """
    folder = tmp_path / "full"
    r = run_with_cache(code, folder)
    assert r.returncode == 0, r.stderr
    doubled, total, warned = json.loads(r.stdout.splitlines()[-1])
    assert doubled == [2.0 * i for i in range(10)]
    assert abs(total - float((torch.arange(10.) + 1).sin().sum())) < 1e-5
    assert warned == 1
    for path in entries(folder):
        store.decode(path.read_bytes(), path.stem)  # anything that is there is whole
    assert not list(folder.rglob("*.tmp"))


def test_the_disable_switch_writes_nothing(tmp_path):
    folder = tmp_path / "off"
    r = run_with_cache("import torch\nprint((torch.ones(3).to('neuron') * 4).cpu().tolist())", folder,
                       TORCH_NEURONX_NEFF_DISABLE_CACHE="1")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == [4.0, 4.0, 4.0]
    assert not folder.exists()


# ---- bounds


def test_the_memory_bound_evicts_the_least_recently_used_and_disk_gives_it_back(fresh_cache, monkeypatch):
    monkeypatch.setenv(cache.MEMORY_ENTRIES_ENV, "4")
    cache.reset()
    held = cache.executable_cache()
    x = randn(2, 3, seed=0).to("neuron")
    y = x * 2  # the oldest
    for k in range(6):  # six more signatures: the first ones leave memory
        torch.testing.assert_close((x[:, : k % 3 + 1] + k).cpu(), x.cpu()[:, : k % 3 + 1] + k)
        _ = torch.ones(k + 1, device="neuron")
    assert len(held.memory) <= 4
    stats = metrics.executable_cache_stats()
    assert stats["memory_evictions"] >= 3
    hits = stats["op_disk_hits"]
    torch.testing.assert_close((x * 2).cpu(), y.cpu())  # evicted: it comes back from disk
    assert metrics.executable_cache_stats()["op_disk_hits"] == hits + 1
    assert len(held.memory) <= 4


def test_the_memory_size_bound(fresh_cache, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_MEMORY_SIZE", "40K")  # our alias, a size
    cache.reset()
    held = cache.executable_cache()
    x = randn(3, 12, seed=0)
    for k in range(1, 12):  # each a new signature of mul
        torch.testing.assert_close((x.to("neuron")[:, :k] * k).cpu(), x[:, :k] * k)
    assert 0 < held.memory.nbytes <= 40 * 1024
    assert metrics.executable_cache_stats()["memory_evictions"] > 0


def test_the_disk_bound_removes_the_least_recently_used(fresh_cache, monkeypatch):
    monkeypatch.setenv(cache.MAX_SIZE_ENV, "120K")
    cache.reset()
    disk = cache.executable_cache().disk
    x = randn(8, seed=0)
    torch.testing.assert_close((x.to("neuron") * 2).cpu(), x * 2)
    (first,) = op_entries(fresh_cache, "aten.mul.Tensor")
    os.utime(first, (1, 1))  # used long ago: the first to go
    for k in range(2, 40):
        torch.testing.assert_close((x.to("neuron")[:k % 8 + 1] + k * torch.ones(1).to("neuron")).cpu(),
                                   x[:k % 8 + 1] + k)
        torch.testing.assert_close(x.to("neuron")[: k % 7 + 1].exp().cpu(), x[: k % 7 + 1].exp())
    assert disk.total_bytes() <= 120 * 1024
    assert not first.exists()
    assert metrics.executable_cache_stats()["disk_evictions"] > 0
    assert entries(fresh_cache)  # pruned to the low mark, not emptied


def test_size_settings_parse_and_bad_ones_name_the_variable():
    assert cache.parse_size("1048576", "V") == 1 << 20
    assert cache.parse_size("500M", "V") == 500 << 20
    assert cache.parse_size("1.5G", "V") == int(1.5 * (1 << 30))
    assert cache.parse_size("2GiB", "V") == 2 << 30
    with pytest.raises(ValueError, match="TORCH_NEURONX_NEFF_CACHE_MAX_SIZE='lots'"):
        cache.parse_size("lots", cache.MAX_SIZE_ENV)


# ---- graphs


@torch.library.custom_op("neuron_cache_test::twice_plus_one", mutates_args=())
def twice_plus_one(x: torch.Tensor) -> torch.Tensor:  # nothing lowers it: it runs on the host
    return x * 2 + 1


@twice_plus_one.register_fake
def _(x):
    return torch.empty_like(x)


@pytest.mark.cpu_fallback
def test_a_graph_that_runs_an_op_on_the_host_stays_in_memory(fresh_cache):
    x = randn(8, seed=0)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback's own warning
        compiled = torch.compile(lambda a: twice_plus_one(a.sin()) - 1, backend="neuron", fullgraph=True)
        got = compiled(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), x.sin() * 2)
    assert torch.neuron.get_dynamo_metrics()["graphs"][-1]["fallback_ops"] == ["neuron_cache_test.twice_plus_one.default"]
    kinds = {store.decode(p.read_bytes(), p.stem)[0].kind for p in entries(fresh_cache)}
    assert "graph" not in kinds  # a host callback cannot be serialized
    assert metrics.executable_cache_stats()["unstorable"] >= 1
    torch.testing.assert_close(compiled(x.to("neuron")).cpu(), x.sin() * 2)  # and it is still held


def _kinds(folder) -> list[str]:
    return sorted(store.decode(p.read_bytes(), p.stem)[0].kind for p in entries(folder))


def test_aot_autograd_is_skipped_only_where_its_wrapper_does_nothing(fresh_cache):
    torch._dynamo.reset()
    x = randn(4, 5, seed=0)

    def pure(a):
        return (a * 2).softmax(-1)

    def mutates(a):
        a.mul_(3)
        return a + 1

    def aliases(a):
        return a.t(), a.exp()

    f = torch.compile(pure, backend="neuron", fullgraph=True, dynamic=False)
    torch.testing.assert_close(f(x.to("neuron")).cpu(), pure(x))
    assert _kinds(fresh_cache).count("aot") == 1
    for fn in (mutates, aliases):
        torch._dynamo.reset()
        n = x.to("neuron")
        got = torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False)(n)
        want = fn(x.clone())
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            torch.testing.assert_close(g.cpu(), w)
        assert _kinds(fresh_cache).count("aot") == 1, fn.__name__  # nothing stored for it
    # Dynamo traces `pure` again (a fresh start): AOTAutograd's graph comes from disk, and a new
    # default dtype is another key (the graph's code does not show it)
    torch._dynamo.reset()
    metrics.clear_op_tracking()
    torch.neuron.reset_dynamo_metrics()
    f = torch.compile(pure, backend="neuron", fullgraph=True, dynamic=False)
    torch.testing.assert_close(f(x.to("neuron")).cpu(), pure(x))
    assert sum(torch.neuron.get_dynamo_metrics()["aot_autograd_skipped"].values()) == 1
    torch._dynamo.reset()
    with torch.no_grad():
        g = torch.compile(lambda a: a + torch.ones(5, device=a.device), backend="neuron", fullgraph=True, dynamic=False)
        torch.testing.assert_close(g(x.to("neuron")).cpu(), x + 1)
        torch._dynamo.reset()
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            g = torch.compile(lambda a: a + torch.ones(5, device=a.device), backend="neuron", fullgraph=True, dynamic=False)
            got = g(x.to("neuron"))
        finally:
            torch.set_default_dtype(previous)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got.cpu(), x + torch.ones(5, dtype=torch.float64))


def test_a_dynamo_graph_calling_an_op_packet_qualifies_for_the_aot_record(fresh_cache):
    # torch.ops.aten.add (a packet, not an overload) is the node's target: it has no `namespace`
    torch._dynamo.reset()
    x = randn(4, 5, seed=0)
    f = torch.compile(lambda a: torch.ops.aten.add(a, 1).exp(), backend="neuron", fullgraph=True, dynamic=False)
    torch.testing.assert_close(f(x.to("neuron")).cpu(), (x + 1).exp())
    assert _kinds(fresh_cache).count("aot") == 1


def test_cache_artifacts_carry_graphs_to_a_fresh_folder_and_process(tmp_path):
    save = """
        import sys, torch
        f = torch.compile(lambda a, b: (a @ b).relu() + b.sum(), backend='neuron', fullgraph=True, dynamic=False)
        a = torch.arange(12.).reshape(3, 4).to('neuron') / 7
        print(f(a, a.t()).cpu().sum().item())
        artifacts = torch.compiler.save_cache_artifacts()
        assert artifacts is not None
        blob, info = artifacts
        open(sys.argv[-1] if len(sys.argv) > 1 else %r, 'wb').write(blob)
        print(len(info.neuron_executable_artifacts))
    """ % str(tmp_path / "artifacts.bin")
    r = run_with_cache(save, tmp_path / "first")
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[-1]) == 2  # the graph's executable and AOTAutograd's graph
    load = f"""
        import torch
        info = torch.compiler.load_cache_artifacts(open({str(tmp_path / 'artifacts.bin')!r}, 'rb').read())
        print(len(info.neuron_executable_artifacts))
    """
    fresh = tmp_path / "fresh"
    r = run_with_cache(load, fresh)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[-1]) == 2
    assert _kinds(fresh) == ["aot", "graph"]
    use = """
        import torch
        f = torch.compile(lambda a, b: (a @ b).relu() + b.sum(), backend='neuron', fullgraph=True, dynamic=False)
        a = torch.arange(12.).reshape(3, 4).to('neuron') / 7
        print(f(a, a.t()).cpu().sum().item())
        d = torch.neuron.get_dynamo_metrics()
        print(d['graphs_compiled'], sum(d['loaded_from_disk'].values()), sum(d['aot_autograd_skipped'].values()))
    """
    r = run_with_cache(use, fresh)
    assert r.returncode == 0, r.stderr
    value, counts = r.stdout.splitlines()[-2:]
    a = torch.arange(12.).reshape(3, 4) / 7
    assert abs(float(value) - float(((a @ a.t()).relu() + a.t().sum()).sum())) < 1e-4
    assert counts.split() == ["0", "1", "1"]
