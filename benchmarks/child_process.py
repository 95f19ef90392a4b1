"""One side of a benchmark in a process of its own: the one way the benchmarks start a child Python.

Each side runs as its users run it (torch under its default threading, its own process), so the parent
only starts children and reads what each prints (a JSON object on its last line, for most). run_child
runs one to its end, start_child starts one to stream from; child_env makes its environment; last_json
reads its result; run_json_child is the common case (a fresh executable cache, `script --child <spec as
JSON>`, the JSON on its last line: flux_real.py and flux_tiny.py).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Settings a side must not inherit from the parent's shell: each child gets its own or none.
CONTROLLED = ("OMP_WAIT_POLICY", "TORCH_NEURONX_NEFF_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")


def child_env(settings: Mapping[str, str | None] | None = None, *, unset: Iterable[str] = (),
              root_on_path: bool = False) -> dict:
    """This process's environment without the variables named in `unset`, with `settings` on top (a value
    of None leaves that variable unset); root_on_path puts the repository first on PYTHONPATH."""
    settings = dict(settings or {})
    drop = set(unset) | {k for k, v in settings.items() if v is None}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update({k: v for k, v in settings.items() if v is not None})
    if root_on_path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    return env


def run_child(args: Sequence[str], *, label: str, env: Mapping[str, str] | None = None, timeout: float | None = None,
              cwd: str | None = None, capture: bool | str = True, check: bool = True) -> subprocess.CompletedProcess:
    """`python *args` (this interpreter) in a child process, in `env` (this process's if None).

    capture: True keeps stdout and stderr (text), "stdout" keeps stdout and lets stderr through to this
    process's, False lets both through. check: a nonzero exit writes the tail of what was kept to stderr
    and exits, naming `label`; without check the caller reads returncode. A timeout raises
    subprocess.TimeoutExpired."""
    kept = {True: dict(capture_output=True), "stdout": dict(stdout=subprocess.PIPE), False: {}}[capture]
    p = subprocess.run([sys.executable, *args], env=None if env is None else dict(env), cwd=cwd, timeout=timeout,
                       text=True, **kept)
    if check and p.returncode != 0:
        sys.stderr.write((p.stdout or "")[-4000:] + (p.stderr or "")[-4000:])
        raise SystemExit(f"child {label} failed (exit {p.returncode})")
    return p


def start_child(args: Sequence[str], *, env: Mapping[str, str] | None = None, **popen) -> subprocess.Popen:
    """`python *args` started and not waited for (text pipes), for a parent that streams a child's output
    or feeds its input while it runs; popen: subprocess.Popen's other arguments (stdin, stdout, ...)."""
    return subprocess.Popen([sys.executable, *args], env=None if env is None else dict(env), text=True, **popen)


def last_json(text: str, tag: str = "") -> dict:
    """The JSON object on the last line of `text` that is `tag` followed by one (the tag removed); a
    ValueError where there is none."""
    lines = [ln[len(tag):] for ln in (line.strip() for line in text.splitlines()) if ln.startswith(tag + "{")]
    if not lines:
        raise ValueError(f"no {tag!r}JSON object line in the child's output")
    return json.loads(lines[-1])


def run_json_child(script: str, spec: dict, *, label: str, settings: dict | None = None, autoload: bool = True,
                   empty_inductor_cache: bool = True, timeout: float = 900) -> dict:
    """Runs `script --child <spec as JSON>` and returns the JSON object on its last line of stdout.

    settings: environment variables to set (a value of None leaves the variable unset in the child).
    The neuron executable cache is always a fresh, empty folder, so first calls compile; Inductor's
    too unless empty_inductor_cache is False (then the parent's TORCHINDUCTOR_CACHE_DIR, if any, is kept).
    """
    settings = dict(settings or {})
    env = child_env(settings, unset=CONTROLLED, root_on_path=True)
    if not autoload:  # torch alone: torch_neuronx (its entry point) stays out of the process
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    tmp = tempfile.mkdtemp(prefix=os.path.splitext(os.path.basename(script))[0] + "-")
    env["TORCH_NEURONX_NEFF_CACHE_DIR"] = os.path.join(tmp, "neff")
    if empty_inductor_cache:
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor")  # Inductor's first call compiles too
    elif "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        env["TORCHINDUCTOR_CACHE_DIR"] = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    try:
        p = run_child([os.path.abspath(script), "--child", json.dumps(spec)], label=label, env=env, timeout=timeout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return last_json(p.stdout)
