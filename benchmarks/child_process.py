"""One side of a benchmark in a process of its own: a clean environment, empty caches, a JSON result.

Each side runs as its users run it (torch under its default threading, its own process), so the parent
only starts children and reads the last line each prints. Shared by flux_real.py and flux_tiny.py.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Settings a side must not inherit from the parent's shell: each child gets its own or none.
CONTROLLED = ("OMP_WAIT_POLICY", "TORCH_NEURONX_NEFF_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")


def run_json_child(script: str, spec: dict, *, label: str, settings: dict | None = None, autoload: bool = True,
                   empty_inductor_cache: bool = True, timeout: float = 900) -> dict:
    """Runs `script --child <spec as JSON>` and returns the JSON object on its last line of stdout.

    settings: environment variables to set (a value of None leaves the variable unset in the child).
    The neuron executable cache is always a fresh, empty folder, so first calls compile; Inductor's
    too unless empty_inductor_cache is False (then the parent's TORCHINDUCTOR_CACHE_DIR, if any, is kept).
    """
    settings = dict(settings or {})
    env = {k: v for k, v in os.environ.items() if k not in CONTROLLED and k not in settings}
    env.update({k: v for k, v in settings.items() if v is not None})
    if not autoload:  # torch alone: torch_neuronx (its entry point) stays out of the process
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    tmp = tempfile.mkdtemp(prefix=os.path.splitext(os.path.basename(script))[0] + "-")
    env["TORCH_NEURONX_NEFF_CACHE_DIR"] = os.path.join(tmp, "neff")
    if empty_inductor_cache:
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor")  # Inductor's first call compiles too
    elif "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        env["TORCHINDUCTOR_CACHE_DIR"] = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    try:
        p = subprocess.run([sys.executable, os.path.abspath(script), "--child", json.dumps(spec)], env=env,
                           capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-4000:])
        raise SystemExit(f"child {label} failed (exit {p.returncode})")
    return json.loads(p.stdout.strip().splitlines()[-1])
