"""Runs diffusers' own offloading and compile tests with torch_device = "neuron" and sorts the outcomes.

    PYTHONPATH=. python benchmarks/diffusers_suite.py [--git-dir DIR] [--commit REV] [--as-is]

diffusers' tests are not in its wheel: they come from a git checkout of diffusers (a bare one is
enough: `--git-dir`, read with `git archive`), at the commit of the installed version's tag when
the checkout has it, else `--commit` (default HEAD). They run on the installed diffusers, with
`DIFFUSERS_TEST_DEVICE=neuron` (diffusers' tests/testing_utils.py reads it into `torch_device`),
one pytest process per target, each with its own JUnit report, and with diffusers' device spec for
neuron (`diffusers_device_spec.py`, DIFFUSERS_TEST_DEVICE_SPEC): diffusers' own table gives neuron a
constant 0 for max_memory_allocated, which its memory assertions cannot pass.

Many of diffusers' offloading tests return early (pass having checked nothing) or skip unless the
device type is "cuda" or "xpu". Unless `--as-is`, the extracted copy of each test file admits
"neuron" to those gates (`["cuda", "xpu"]` -> `["cuda", "xpu", "neuron"]`), so they run; nothing
else in the tests changes. Each failure, error and skip is put in a class by its message (CAUSES
below); the table gives pass/fail/error/skip counts per target and the counts per class.

The tests run under torch's default threading; `--omp passive` runs them with OMP_WAIT_POLICY=PASSIVE
instead and `--omp both` once under each (a row per target and setting), since the setting changes
how long they take and can change whether one ends within `--timeout`.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET

from child_process import child_env, run_child

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TARGETS = [
    "tests/hooks/test_group_offloading.py",
    "tests/models/transformers/test_models_transformer_flux2.py::TestFlux2TransformerCompile",
    "tests/models/transformers/test_models_transformer_flux2.py::TestFlux2TransformerMemory",
]

# (class, whose, pattern on "test name: message"), first match wins
CAUSES = [
    ("streams", "ours", r"backend implements streams"),
    ("another diffusers version", "test (its check of is_available is gone from the installed diffusers)",
     r"test_error_raised_if_streams_used_and_no_accelerator_device"),
    ("param.data = neuron tensor", "PyTorch (pytorch#196975)",
     r"set_data\(tensor\)`?, but `?variable`? and `?tensor`? have incompatible tensor type"),
    ("dynamic=True", "by design (static shapes)", r"StaticShapesRequired"),
    ("AOTInductor", "not applicable (Inductor's C++/CUDA code generation)", r"test_compile_works_with_aot"),
    ("CUDA/XPU-only", "test (skipped off cuda/xpu)", r"requires a CUDA or XPU device"),
    ("needs peft", "environment", r"PEFT backend"),
    ("needs pinned memory", "ours", r"pin_memory|pinned"),
]


def classify(name: str, message: str) -> tuple[str, str]:
    text = f"{name}: {message}"
    for cls, whose, pattern in CAUSES:
        if re.search(pattern, text):
            return cls, whose
    return "unclassified", "?"


def git(git_dir, *args) -> str:
    return subprocess.run(["git", "-C", git_dir, *args], check=True, capture_output=True, text=True).stdout.strip()


def pick_commit(git_dir: str, commit: str | None) -> tuple[str, str]:
    import importlib.metadata

    version = importlib.metadata.version("diffusers")
    for tag in (f"v{version}", version):
        try:
            return git(git_dir, "rev-parse", f"{tag}^{{commit}}"), f"tag {tag}"
        except subprocess.CalledProcessError:
            pass
    rev = commit or "HEAD"
    return git(git_dir, "rev-parse", f"{rev}^{{commit}}"), f"{rev} (no tag for diffusers {version} in {git_dir})"


def extract(git_dir: str, commit: str, dest: str, admit_neuron: bool) -> int:
    """`tests/` of `commit` into dest; returns how many device gates were widened to admit neuron."""
    archive = os.path.join(dest, "tests.tar")
    with open(archive, "wb") as f:
        subprocess.run(["git", "-C", git_dir, "archive", commit, "tests"], check=True, stdout=f)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    widened = 0
    if admit_neuron:
        for target in TARGETS:
            path = os.path.join(dest, target.split("::")[0])
            with open(path) as f:
                text = f.read()
            text, n = re.subn(r"""\[(["'])cuda\1, (["'])xpu\2\]""", '["cuda", "xpu", "neuron"]', text)
            widened += n
            with open(path, "w") as f:
                f.write(text)
    return widened


SPEC = "diffusers_device_spec.py"  # beside this file; copied into the extracted tests


def run_target(src: str, target: str, report: str, timeout: int, policy: str | None = None) -> str:
    env = child_env({
        "OMP_WAIT_POLICY": policy or None, "DIFFUSERS_TEST_DEVICE": "neuron", "HF_HUB_OFFLINE": "1",
        "DIFFUSERS_TEST_DEVICE_SPEC": SPEC,  # imported by module name from the tests' folder
        "PYTHONPATH": os.pathsep.join(p for p in (ROOT, src, os.environ.get("PYTHONPATH")) if p),
    })
    cmd = ["-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", target]
    try:
        out = run_child(cmd, label=target, env=env, cwd=src, timeout=timeout, check=False)
        return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-500:]
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout} s"


def outcomes(report: str):
    """(test name, outcome, message) for each test case in a JUnit report."""
    if not os.path.exists(report):
        return
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                message = (node.get("message") or "") + "\n" + (node.text or "")
                yield name, tag, message
                break
        else:
            yield name, "passed", ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--git-dir", default="/work/.mirror/huggingface+diffusers/repo")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--as-is", action="store_true", help="keep the tests' cuda/xpu gates as they are")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per target")
    ap.add_argument("--show", action="store_true", help="print every failing test and its class")
    ap.add_argument("--omp", choices=("default", "passive", "both"), default="default",
                    help="OpenMP wait policy of the tests: torch's default, OMP_WAIT_POLICY=PASSIVE, or each")
    args = ap.parse_args()

    commit, how = pick_commit(args.git_dir, args.commit)
    with tempfile.TemporaryDirectory(prefix="diffusers-tests-") as src:
        widened = extract(args.git_dir, commit, src, not args.as_is)
        shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), SPEC), src)
        print(f"diffusers tests at {commit[:12]} ({how}); torch_device = neuron; "
              + ("gates as they are" if args.as_is else f"{widened} cuda/xpu gates admit neuron"))
        totals = collections.Counter()
        causes = collections.defaultdict(list)
        policies = {"default": [None], "passive": ["PASSIVE"], "both": [None, "PASSIVE"]}[args.omp]
        print(f"\n{'target':84s} {'threads':>8s} {'pass':>5s} {'fail':>5s} {'error':>5s} {'skip':>5s}")
        for policy in policies:
            for i, target in enumerate(TARGETS):
                report = os.path.join(src, f"report{i}-{policy or 'default'}.xml")
                start = time.perf_counter()
                summary = run_target(src, target, report, args.timeout, policy)
                seconds = time.perf_counter() - start
                counts = collections.Counter()
                for name, outcome, message in outcomes(report):
                    counts[outcome] += 1
                    if outcome != "passed":
                        causes[(outcome,) + classify(name, message)].append(f"{name} ({policy or 'default'})")
                totals.update(counts)
                print(f"{target:84s} {policy or 'default':>8s} {counts['passed']:5d} {counts['failure']:5d} "
                      f"{counts['error']:5d} {counts['skipped']:5d}  {seconds:.0f} s")
                if not counts:
                    print(f"  (no report: {summary})")
        print(f"{'total':84s} {'':8s} {totals['passed']:5d} {totals['failure']:5d} {totals['error']:5d} {totals['skipped']:5d}")
        print(f"\n{'outcome':8s} {'class':28s} {'whose':52s} {'tests':>5s}")
        for (outcome, cls, whose), names in sorted(causes.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
            print(f"{outcome:8s} {cls:28s} {whose:52s} {len(names):5d}")
            if args.show or cls == "unclassified":
                for name in names:
                    print(f"           {name}")
    return 0 if not causes.get(("failure", "unclassified", "?")) and not causes.get(("error", "unclassified", "?")) else 1


if __name__ == "__main__":
    sys.exit(main())
