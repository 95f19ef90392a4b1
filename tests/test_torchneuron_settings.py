"""TorchNeuron's settings, each doing here what docs/torchneuron.md says: launch blocking, the fallback
policies, the cache's bounds, lock timeout, lock folder and spellings, the fusion switch and bound under
both names, the optimization level (options and key), the debug artifacts, and the settings that mean
nothing off Trainium (announced once). Each is checked against what the CPU computes where it runs ops."""
from __future__ import annotations

import fcntl
import json
import os
import textwrap
import time
import warnings

import pytest
import torch

from torch_neuronx import cache, metrics
from torch_neuronx.cache import keys
from torch_neuronx.eager import fusion
from torch_neuronx.runtime import config, executables, storage

from helpers import run_python


def _child(code: str, env: dict, timeout: int = 240) -> dict:
    """Run `code` in a fresh process with `env` added; it prints one JSON line last, returned."""
    proc = run_python(textwrap.dedent(code), timeout=timeout, **env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- NEURON_LAUNCH_BLOCKING

LAUNCH_PROBE = """
    import json, torch
    from torch_neuronx import metrics
    from torch_neuronx.runtime import storage
    a = torch.randn(1500, 1500)
    x = a.to("neuron")
    torch.neuron.synchronize()
    y = x @ x                       # ~7 GFLOP: far longer than returning from the call
    buf = storage.buffer(storage.whole_storage_key(y))
    ready = bool(getattr(buf, "is_ready", lambda: False)())
    g = torch.compile(lambda t: (t @ t).sum(0), backend="neuron")
    z = g(x)
    zbuf = storage.buffer(storage.whole_storage_key(z))
    graph_ready = bool(getattr(zbuf, "is_ready", lambda: False)())
    close = torch.allclose(y.cpu(), a @ a, rtol=1e-4, atol=1e-3) and torch.allclose(z.cpu(), (a @ a).sum(0),
                                                                                    rtol=1e-4, atol=1e-2)
    print(json.dumps({"ready": ready, "graph_ready": graph_ready, "runs": metrics.fusion_stats()["runs"],
                      "close": close}))
"""


def test_launch_blocking_finishes_each_op_and_graph_at_its_call():
    blocking = _child(LAUNCH_PROBE, {"NEURON_LAUNCH_BLOCKING": "1"})
    assert blocking == {"ready": True, "graph_ready": True, "runs": 0, "close": True}
    queued = _child(LAUNCH_PROBE, {})  # the default: the op is queued (a Pending buffer, nothing launched)
    assert queued["ready"] is False and queued["close"] is True


def test_launch_blocking_turns_fusion_off_in_process(monkeypatch):
    monkeypatch.setenv("NEURON_LAUNCH_BLOCKING", "1")
    fusion.reload_settings()
    try:
        assert not fusion.enabled()
        with fusion.setting(True):  # even asked for: every op completes at its call
            assert not fusion.enabled()
    finally:
        monkeypatch.delenv("NEURON_LAUNCH_BLOCKING")
        fusion.reload_settings()


# ---- TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS: recovery from a failed lowering

@pytest.fixture
def broken_lowering(monkeypatch, tmp_path):
    """aten.hypot's lowering made to fail (as a lowering with no form for some inputs would), for this
    test, over a cache of its own (an executable of hypot on disk or in memory would skip the lowering)."""
    from torch_neuronx import ops
    from torch_neuronx.ops.specs import spec_for

    op = torch.ops.aten.hypot.default
    x = torch.randn(3, device="neuron")
    torch.testing.assert_close(torch.hypot(x, x).cpu(), torch.hypot(x.cpu(), x.cpu()))  # its spec exists now
    low = ops.LOWERINGS[op]

    def fails(*args):
        raise ValueError("no form for these inputs")

    fusion.flush("test")
    broken = type(low)(low.op, fails, low.static, low.dynamic, low.rng)
    monkeypatch.setitem(ops.LOWERINGS, op, broken)
    monkeypatch.setattr(spec_for(op), "lowering", broken)  # the spec every caller of hypot shares
    monkeypatch.setenv(cache.DIR_ENV, str(tmp_path / "neff_cache"))
    cache.reset()
    yield op
    fusion.flush("test")
    monkeypatch.undo()
    cache.reset()  # the session's cache again


@pytest.mark.cpu_fallback
@pytest.mark.parametrize("fused", [True, False])
def test_a_failed_lowering_runs_on_the_cpu_by_default(broken_lowering, monkeypatch, fused):
    monkeypatch.setenv("TORCH_NEURONX_CPU_FALLBACK", "warn")
    monkeypatch.delenv("TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS", raising=False)
    a, b = torch.randn(5), torch.randn(5)
    before = metrics.get_fallback_ops().get("aten.hypot.default", 0)
    with fusion.setting(fused), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.hypot(a.to("neuron"), b.to("neuron"))
        assert got.device.type == "neuron"
        torch.testing.assert_close(got.cpu(), torch.hypot(a, b))
    said = [str(w.message) for w in caught if "hypot" in str(w.message)]
    assert len(said) <= 1 and all("runs on the CPU instead" in s and "no form for these inputs" in s for s in said)
    assert metrics.get_fallback_ops()["aten.hypot.default"] == before + 1


@pytest.mark.cpu_fallback
def test_only_for_unimplemented_ops_raises_the_failed_lowering(broken_lowering, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_CPU_FALLBACK", "warn")
    monkeypatch.setenv("TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS", "1")
    x = torch.randn(5, device="neuron")
    with pytest.raises(NotImplementedError, match=r"aten\.hypot\.default could not be lowered .*no form for these"):
        torch.hypot(x, x)


def test_the_fallback_error_policy_also_refuses_recovery(broken_lowering, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_CPU_FALLBACK", "error")
    monkeypatch.delenv("TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS", raising=False)
    x = torch.randn(5, device="neuron")
    with pytest.raises(NotImplementedError, match="no form for these inputs"):
        torch.hypot(x, x)


def test_pytorch_argument_errors_are_never_recovered(monkeypatch):
    """A shape error is PyTorch's own check (the CPU raises it too): it is raised, not run on the CPU."""
    monkeypatch.setenv("TORCH_NEURONX_CPU_FALLBACK", "warn")
    with pytest.raises(RuntimeError) as neuron_error:
        torch.hypot(torch.randn(3, device="neuron"), torch.randn(4, device="neuron"))
    with pytest.raises(RuntimeError) as cpu_error:
        torch.hypot(torch.randn(3), torch.randn(4))
    assert str(cpu_error.value) in str(neuron_error.value)


# ---- the cache: spellings, bounds, lock timeout, lock folder

def test_the_two_spellings_of_disabling_the_disk_cache(monkeypatch):
    for name in ("TORCH_NEURONX_DISABLE_NEFF_CACHE", "TORCH_NEURONX_NEFF_DISABLE_CACHE"):
        monkeypatch.setenv(name, "1")
        assert not cache.disk_enabled()
        monkeypatch.delenv(name)
        assert cache.disk_enabled()


def test_spellings_that_disagree_warn_once_and_torchneuron_s_wins(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", "0")
    monkeypatch.setenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", "1")
    with pytest.warns(RuntimeWarning, match="TORCH_NEURONX_DISABLE_NEFF_CACHE='0' and "
                                            "TORCH_NEURONX_NEFF_DISABLE_CACHE='1'.*TORCH_NEURONX_DISABLE_NEFF_CACHE wins"):
        assert config.settings.neff_disable_cache is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # read again with the same texts: said once
        assert config.settings.neff_disable_cache is False
    monkeypatch.setenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", "0")  # agreeing spellings: nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert config.settings.neff_disable_cache is False


def test_the_memory_bounds_under_torchneuron_s_names(monkeypatch):
    monkeypatch.setenv("NEURON_COMPILATION_CACHE_MAX_SIZE_MB", "3")
    monkeypatch.setenv("NEURON_COMPILATION_CACHE_MAX_ENTRIES", "0")
    assert config.settings.neff_cache_memory_size == 3 << 20 and config.settings.neff_cache_memory_entries is None
    monkeypatch.delenv("NEURON_COMPILATION_CACHE_MAX_SIZE_MB")
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_MEMORY_SIZE", "5M")  # ours, a size
    assert config.settings.neff_cache_memory_size == 5 << 20


EVICT_PROBE = """
    import json, torch
    from torch_neuronx import cache
    from torch_neuronx.eager import fusion
    x = torch.randn(8)
    with fusion.disabled():  # six ops, six executables
        close = all(torch.allclose(f(x.to("neuron")).cpu(), f(x))
                    for f in (torch.exp, torch.sin, torch.cos, torch.tanh, torch.neg, torch.abs))
    c = cache.executable_cache()
    print(json.dumps({"entries": len(c.memory), "max": c.memory.max_entries,
                      "evictions": c.memory.evictions, "close": close}))
"""


def test_an_entries_bound_evicts():
    got = _child(EVICT_PROBE, {"NEURON_COMPILATION_CACHE_MAX_ENTRIES": "2", "TORCH_NEURONX_DISABLE_NEFF_CACHE": "1"})
    assert got["max"] == 2 and got["entries"] <= 2 and got["evictions"] >= 4 and got["close"]
    unbounded = _child(EVICT_PROBE, {"NEURON_COMPILATION_CACHE_MAX_ENTRIES": "0",
                                     "TORCH_NEURONX_DISABLE_NEFF_CACHE": "1"})
    assert unbounded["evictions"] == 0 and unbounded["entries"] >= 6 and unbounded["close"]


def test_a_size_bound_in_mib_evicts(monkeypatch):
    got = _child(EVICT_PROBE.replace('"max": c.memory.max_entries', '"max": c.memory.max_bytes'),
                 {"NEURON_COMPILATION_CACHE_MAX_SIZE_MB": "1"})
    assert got["max"] == 1 << 20 and got["close"]
    # the layer the cache makes from it, fed executables' serialized sizes: least recently used out first
    monkeypatch.setenv("NEURON_COMPILATION_CACHE_MAX_SIZE_MB", "1")
    memory = cache.MemoryCache(2048, config.settings.neff_cache_memory_size)
    for i in range(4):
        memory.put(("exe", i), f"executable {i}", 400 << 10)
    assert memory.keys() == [("exe", 2), ("exe", 3)] and memory.evictions == 2


def test_the_lock_timeout_is_honoured_and_the_lock_folder_is_the_local_one(tmp_path, monkeypatch):
    store_dir, lock_dir = tmp_path / "shared", tmp_path / "local"
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", "0.5")
    store = cache.DiskStore(store_dir, None, lock_dir)
    digest = "ab" * 32
    lock_dir.mkdir()
    fd = os.open(lock_dir / f"{digest}.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another holder (flock is per open file: this one blocks the store's)
    try:
        start = time.monotonic()
        with pytest.warns(RuntimeWarning, match="waited 0.5 s for another process compiling op x"):
            with store.lock(digest, "op x", config.settings.neff_cache_lock_timeout):
                waited = time.monotonic() - start
        assert 0.5 <= waited < 5
    finally:
        os.close(fd)
    assert not (store_dir / "torch_neuronx").exists() or not any((store_dir / "torch_neuronx").rglob("*.lock"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        start = time.monotonic()
        with store.lock(digest, "op x", 0.5):  # free now: taken at once
            assert time.monotonic() - start < 0.5


def test_the_cache_reads_the_lock_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", str(tmp_path / "locks"))
    cache.reset()
    try:
        store = cache.executable_cache().disk
        assert store.lock_dir == tmp_path / "locks"
    finally:
        monkeypatch.undo()
        cache.reset()


# ---- the fusion switch and bound under both names

@pytest.mark.parametrize("switch,bound", [("TORCH_NEURONX_ENABLE_CONCATENATION", "TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT"),
                                          ("TORCH_NEURONX_EAGER_FUSION", "TORCH_NEURONX_EAGER_FUSION_MAX_OPS")])
def test_the_fusion_switch_and_bound_under_both_names(monkeypatch, switch, bound):
    x = torch.randn(16)
    try:
        monkeypatch.setenv(switch, "1")
        monkeypatch.setenv(bound, "3")
        fusion.reload_settings()
        assert fusion.enabled() and fusion.max_ops() == 3
        before = metrics.fusion_stats()
        y = x.to("neuron")
        for _ in range(7):
            y = y * 1.5 + 1
        torch.testing.assert_close(y.cpu(), _reference(x, 7))
        after = metrics.fusion_stats()
        assert after["ended_by"].get("length bound", 0) - before["ended_by"].get("length bound", 0) >= 2
        monkeypatch.setenv(switch, "0")
        fusion.reload_settings()
        assert not fusion.enabled()
    finally:
        monkeypatch.undo()
        fusion.reload_settings()


def _reference(x, n):
    for _ in range(n):
        x = x * 1.5 + 1
    return x


# ---- NEURON_COMPILER_OPT_LEVEL (and -O in NEURON_CC_FLAGS)

OPT_PROBE = """
    import json, torch
    from torch_neuronx.runtime import executables
    from torch_neuronx.cache import keys
    from torch_neuronx import cache
    x = torch.randn(64, 64)
    y = (x.to("neuron") @ x.to("neuron")).softmax(-1).cpu()
    (key_level,) = [part[1] for part in cache.executable_cache().environment() if part[0] == "opt_level"]
    print(json.dumps({"level": executables.opt_level(), "small": executables.compile_options(True),
                      "large": executables.compile_options(False), "key_level": key_level,
                      "close": torch.allclose(y, (x @ x).softmax(-1), rtol=1e-4, atol=1e-5)}))
"""


# one process per level (read once a process); the spellings' parsing is tests/test_settings.py's
@pytest.mark.parametrize("env,level", [({}, 1),
                                       ({"NEURON_COMPILER_OPT_LEVEL": "-O0", "NEURON_CC_FLAGS": "-O3"}, 0),
                                       ({"NEURON_CC_FLAGS": "--target trn2 --optlevel 2"}, 2),
                                       ({"NEURON_COMPILER_OPT_LEVEL": "3"}, 3)])
def test_the_opt_level_changes_the_compile_options_and_the_key(env, level):
    got = _child(OPT_PROBE, {"TORCH_NEURONX_DISABLE_NEFF_CACHE": "1", **env})
    assert got["level"] == got["key_level"] == level and got["close"]
    if level == 0:
        assert got["large"]["xla_backend_optimization_level"] == 0
    elif level == 1:  # XLA's defaults; small programs with the quick CPU options
        assert got["large"] == {} and got["small"] == {"xla_cpu_use_fusion_emitters": False}
    elif level == 2:
        assert got["large"] == got["small"] == {}
    else:
        assert got["large"] == got["small"] == {"exec_time_optimization_effort": 1.0}


def test_each_opt_level_is_its_own_key():
    env = keys.environment("cpu", "cpu", versions=())
    assert ("opt_level", executables.opt_level()) in env
    others = tuple(part for part in env if part[0] != "opt_level")
    spelled = {keys.digest(keys.entry_key(others + (("opt_level", level),), "op", ("x",))) for level in range(4)}
    assert len(spelled) == 4


# ---- settings that mean nothing off Trainium: announced once

INERT_PROBE = """
    import json, warnings
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        import torch
        x = (torch.ones(2, device="neuron") + 1).cpu()
        from torch_neuronx.runtime import config
        config.announce_inert()
        config.announce_inert()
    print(json.dumps({"said": [str(w.message) for w in caught if "torch_neuronx:" in str(w.message)],
                      "ok": x.tolist() == [2.0, 2.0]}))
"""


def test_settings_without_meaning_here_are_announced_once():
    got = _child(INERT_PROBE, {"TORCH_NEURONX_ENABLE_NKI_SDPA": "0",
                               "TORCH_NEURONX_CONCATENATION_QUEUE_LOW_THRESHOLD": "4",
                               "NEURON_CC_FLAGS": "--target trn2 -O2 --auto-cast=matmult"})
    said = got["said"]
    assert got["ok"]
    assert sum("TORCH_NEURONX_ENABLE_NKI_SDPA='0' has no effect here" in s for s in said) == 1
    assert sum("TORCH_NEURONX_CONCATENATION_QUEUE_LOW_THRESHOLD='4' has no effect here" in s for s in said) == 1
    cc = [s for s in said if "NEURON_CC_FLAGS" in s]
    assert len(cc) == 1 and "--target trn2 --auto-cast=matmult are ignored" in cc[0] and "-O2" not in cc[0]


def test_nothing_is_announced_when_no_such_setting_is_set():
    got = _child(INERT_PROBE, {"NEURON_CC_FLAGS": "-O2"})  # only the level, which is honoured
    assert got["said"] == [] and got["ok"]


def test_every_torchneuron_setting_has_a_row_in_the_docs_table():
    """docs/torchneuron.md: one row per TorchNeuron setting, with TorchNeuron's meaning and ours."""
    import pathlib

    text = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "torchneuron.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    torchneuron = ["NEURON_LAUNCH_BLOCKING", "TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS",
                   "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "NEURON_COMPILATION_CACHE_MAX_SIZE_MB",
                   "NEURON_COMPILATION_CACHE_MAX_ENTRIES", "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT",
                   "TORCH_NEURONX_DISABLE_NEFF_CACHE", "TORCH_NEURONX_NEFF_DISABLE_CACHE",
                   "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", "TORCH_NEURONX_ENABLE_CONCATENATION",
                   "TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT", "TORCH_NEURONX_CONCATENATION_QUEUE_LOW_THRESHOLD",
                   "NEURON_CC_FLAGS", "NEURON_COMPILER_OPT_LEVEL", "TORCH_NEURONX_ENABLE_NKI_SDPA",
                   "NEURON_LOGICAL_NC_CONFIG", "TORCH_NEURONX_DEBUG_DIR", "TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS",
                   "TORCH_NEURONX_NEFF_CACHE_DIR", "NEURON_RT_VISIBLE_CORES"]
    missing = [n for n in torchneuron if not any(r.startswith(f"| `{n}`") for r in rows)]
    assert not missing, missing
    for row in rows:
        assert row.count("|") >= 4, row  # name | TorchNeuron's meaning | ours
    # every TorchNeuron name the table lists is one the package reads (or a launcher's)
    for row in rows:
        name = row.split("`")[1]
        assert name in config.ROWS, name
