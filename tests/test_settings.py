"""The settings table (runtime/config.py): every setting parses the forms its type takes and names
itself when its text does not parse; values follow the environment within the process; README
documents every one. (That nothing else in the package reads an environment variable is checked with
the package's structure, tests/test_layers.py.)"""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

from torch_neuronx.runtime import config

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG = ROOT / "torch_neuronx" / "runtime" / "config.py"

GiB, MiB = 1 << 30, 1 << 20
FLAG_FORMS = [("1", True), ("true", True), ("Yes", True), ("ON", True), (" on ", True),
              ("0", False), ("false", False), ("No", False), ("OFF", False)]
FLAG_BAD = ["2", "maybe", "enabled"]
SIZE_FORMS = [("1048576", MiB), ("500M", 500 * MiB), ("1.5G", int(1.5 * GiB)), ("2GiB", 2 * GiB),
              ("24gib", 24 * GiB), ("512 K", 512 << 10), ("2GB", 2 * 10**9), ("0", 0)]
SIZE_BAD = ["lots", "12XB", "inf", "nan", "-1", "5Mi", "1e400"]
CORES_FORMS = [("0", (0,)), ("0-3", (0, 1, 2, 3)), ("0,2", (0, 2)), ("1-2, 5", (1, 2, 5))]
CORES_BAD = ["x", "1-b", "-1", ","]

# name -> (texts and the values they give, texts each rejected with an error naming the variable)
FORMS = {
    "TORCH_NEURONX_PLATFORM": ([("cpu", "cpu"), ("CUDA", "cuda"), ("auto", "auto")], []),
    "NEURON_RT_NUM_CORES": ([("1", 1), ("8", 8)], ["0", "-2", "many", "1.5"]),
    "NEURON_RT_VISIBLE_CORES": (CORES_FORMS, CORES_BAD),
    "TORCH_NEURONX_CORE_MEMORY": ([f for f in SIZE_FORMS if f[1]], SIZE_BAD + ["0"]),
    "TORCH_NEURONX_HOST_CACHE": (SIZE_FORMS, SIZE_BAD),
    "TORCH_NEURONX_NATIVE_KERNELS": ([("auto", "auto"), ("1", "on"), ("true", "on"), ("0", "off"), ("Off", "off")],
                                     ["always", "2"]),
    "TORCH_NEURONX_TARGET": ([("trn2", "trn2"), ("Trn1", "trn1"), ("TRN3", "trn3")], ["trn4", "inf2", "1"]),
    "NEURON_LOGICAL_NC_CONFIG": ([("1", 1), ("2", 2)], ["0", "two", "-1"]),
    "TORCH_NEURONX_TARGET_FIGURES": ([("hbm_bandwidth=3e12", (("hbm_bandwidth", 3e12),)),
                                      ("peak_bf16=1e15, launch_seconds=2e-5",
                                       (("peak_bf16", 1e15), ("launch_seconds", 2e-5)))],
                                     ["hbm_bandwidth", "hbm_bandwidth=fast", "=3", "cores=0", "cores=-1"]),
    "TORCH_NEURONX_TARGET_CHECK": ([("off", "off"), ("compare", "compare"), ("Compare", "compare")], ["1", "on"]),
    "TORCH_NEURONX_RECOMPILE_WARN": ([("1", 1), ("50", 50)], ["0", "many"]),
    "TORCH_NEURONX_ESTIMATE": (FLAG_FORMS, FLAG_BAD),
    "NEURON_LAUNCH_BLOCKING": (FLAG_FORMS, FLAG_BAD),
    "TORCH_NEURONX_ENABLE_CONCATENATION": (FLAG_FORMS, FLAG_BAD),
    "TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT": ([("1", 1), ("4", 4), ("4096", 4096)],
                                                      ["0", "-4", "many", "2.5"]),
    "TORCH_NEURONX_CONCATENATION_QUEUE_LOW_THRESHOLD": ([("0", 0), ("15", 15)], ["-1", "few", "1.5"]),
    "TORCH_NEURONX_INDEX_LENGTH_BUCKETS": ([("4", 4), ("0", 0), ("32", 32)], ["-1", "some", "2.5"]),
    "TORCH_NEURONX_CPU_FALLBACK": ([("warn", "warn"), ("error", "error"), ("ERROR", "error"), ("silent", "silent")],
                                   ["1", "raise"]),
    "TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS": (FLAG_FORMS, FLAG_BAD),
    "TORCH_NEURONX_ENABLE_NKI_SDPA": (FLAG_FORMS, FLAG_BAD),
    "NEURON_COMPILER_OPT_LEVEL": ([("-O0", 0), ("-O1", 1), ("O2", 2), ("3", 3), ("-o3", 3)], ["-O4", "fast", "-O"]),
    "NEURON_CC_FLAGS": ([("--target trn2  -O2", ("--target", "trn2", "-O2"))], []),
    "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION": (FLAG_FORMS, FLAG_BAD),
    "TORCH_NEURONX_VALUE_CHECKS": (FLAG_FORMS, FLAG_BAD),
    "TORCH_NEURONX_CPU_INPUTS": ([("copy", "copy"), ("error", "error"), ("Error", "error")], ["refuse", "0"]),
    "TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS": (FLAG_FORMS, FLAG_BAD),
    "TORCH_NEURONX_DEBUG_DIR": ([("/tmp/debug", "/tmp/debug"), ("rel/dir", "rel/dir")], []),
    "TORCH_NEURONX_NEFF_CACHE_DIR": ([("/var/cache/neff", "/var/cache/neff")], []),
    "TORCH_NEURONX_DISABLE_NEFF_CACHE": (FLAG_FORMS, FLAG_BAD),
    "TORCH_NEURONX_NEFF_CACHE_MAX_SIZE": (SIZE_FORMS, SIZE_BAD),
    "NEURON_COMPILATION_CACHE_MAX_ENTRIES": ([("1", 1), ("4", 4), ("0", None)], ["many", "-1", "1.5"]),
    "NEURON_COMPILATION_CACHE_MAX_SIZE_MB": ([("1", MiB), ("1024", GiB), ("0", None)], ["1G", "-1", "lots"]),
    "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT": ([("1200", 1200.0), ("0.5", 0.5)], ["0", "-1", "soon", "inf"]),
    "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": ([("/local/locks", "/local/locks")], []),
    "TORCH_NEURONX_DIST_CHECKS": (FLAG_FORMS, FLAG_BAD),
    "LOCAL_RANK": ([("3", "3"), (" 1 ", "1")], []),
    "LOCAL_WORLD_SIZE": ([("8", "8")], []),
    "TORCHELASTIC_RESTART_COUNT": ([("2", "2")], []),
    "XLA_FLAGS": ([("--a=1  --b", ("--a=1", "--b"))], []),
}


def test_every_setting_has_its_forms_here():
    assert set(FORMS) == set(config.BY_NAME), "a new setting needs its forms in FORMS"


@pytest.mark.parametrize("setting", config.SETTINGS, ids=lambda s: s.name)
def test_a_setting_parses_its_forms_and_names_itself_when_it_cannot(setting, monkeypatch):
    good, bad = FORMS[setting.name]
    with monkeypatch.context() as m:  # restored before the suite's per-test device checks run
        for spelling in config.spellings(setting):  # (the suite may run under an alias, EAGER_FUSION=0)
            m.delenv(spelling.name, raising=False)
        assert config.value(setting.name) == setting.default
        m.setenv(setting.name, "  ")  # blank: unset
        assert config.value(setting.name) == setting.default
        for text, want in good:
            m.setenv(setting.name, text)
            assert config.value(setting.name) == want, text
            assert getattr(config.settings, setting.attr) == want, text
        for text in bad:
            m.setenv(setting.name, text)
            with pytest.raises(ValueError, match=f"^{re.escape(setting.name)}={re.escape(repr(text))}: expected"):
                config.value(setting.name)
            with pytest.raises(ValueError, match=re.escape(setting.name)):  # every read, not only the first
                getattr(config.settings, setting.attr)
            got = config.describe(setting.name)
            assert got["value"] is None and setting.name in got["problem"] and got["text"] == text


def test_the_table_is_well_formed():
    for s in config.SETTINGS:
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", s.name) and s.attr.isidentifier() and s.doc, s
        assert s.source in (config.USER, config.LAUNCHER, config.XLA), s
        aliases = [a.name for a in config.spellings(s)[1:]]
        assert all(re.fullmatch(r"[A-Z][A-Z0-9_]*", a) and a not in config.BY_NAME for a in aliases), s
        assert not s.inert or s.source == config.USER, s
    names = [a.name for s in config.SETTINGS for a in config.spellings(s)]
    assert len(names) == len(set(names)) == len(config.ROWS)


def test_values_follow_the_environment_within_the_process(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_CPU_INPUTS", "error")
    assert config.settings.cpu_inputs == "error"
    monkeypatch.setenv("TORCH_NEURONX_CPU_INPUTS", "copy")
    assert config.settings.cpu_inputs == "copy"
    monkeypatch.delenv("TORCH_NEURONX_CPU_INPUTS")
    assert config.settings.cpu_inputs == "copy"
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_MEMORY_SIZE", "40K")
    assert config.settings.neff_cache_memory_size == 40 << 10
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_MEMORY_SIZE", "nonsense")
    with pytest.raises(ValueError, match="TORCH_NEURONX_NEFF_CACHE_MEMORY_SIZE='nonsense'"):
        config.settings.neff_cache_memory_size
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_MEMORY_SIZE", "40K")  # a good value again: read again
    assert config.settings.neff_cache_memory_size == 40 << 10


def test_the_package_reads_through_the_table(monkeypatch, tmp_path):
    from torch_neuronx import cache
    from torch_neuronx.compile import debug_dumps
    from torch_neuronx.distributed import process_group
    from torch_neuronx.eager import fallback

    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", "yes")
    assert cache.directory() == str(tmp_path) and not cache.disk_enabled()
    monkeypatch.setenv("TORCH_NEURONX_DIST_CHECKS", "off")
    assert not process_group.checks_enabled()
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "on")
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(tmp_path / "dbg"))
    assert debug_dumps.enabled() and debug_dumps.directory() == str(tmp_path / "dbg")
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", "rel")
    monkeypatch.chdir(tmp_path)
    assert debug_dumps.directory() == str(tmp_path / "rel")
    monkeypatch.delenv("TORCH_NEURONX_DEBUG_DIR")
    assert debug_dumps.directory() == "/tmp/neuron_backend"  # TorchNeuron's default
    monkeypatch.setenv("TORCH_NEURONX_CPU_FALLBACK", "silent")
    fallback.check_cpu_fallback("aten.not_a_real_op.default")  # neither raises nor warns
    assert cache.parse_size is config.parse_size  # one size parser


def test_config_imports_nothing_heavy():
    """config is read before jax starts, at `import torch`: standard-library imports only."""
    allowed = {"__future__", "functools", "importlib", "importlib.util", "math", "os", "typing", "warnings"}
    tree = ast.parse(CONFIG.read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= allowed, imported - allowed


def test_readme_documents_every_setting():
    rows = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `")]
    missing = []
    for s in config.SETTINGS:
        row = next((r for r in rows if r.startswith(f"| `{s.name}`")), None)
        if row is None or any(f"`{a.name}`" not in row for a in config.spellings(s)[1:]):
            missing.append(s.name)
    assert not missing, f"README.md needs a settings row '| `NAME` |' (with its aliases) for {missing}"
