"""Helpers the tests share: test data drawn from seeded or global generators, and a child Python process.

Draws: `seed=None` takes torch's global generator (conftest seeds it with 0 before every test, so such a
draw depends on the draws the test made before it); an int seed takes a generator of its own, seeded so
(the same values wherever the call is made)."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence

import torch


def gen(seed: int) -> torch.Generator:
    """A CPU generator of its own, seeded with `seed`."""
    return torch.Generator().manual_seed(seed)


def _generator(seed: int | None) -> torch.Generator | None:
    return None if seed is None else gen(seed)


def randn(*shape, dtype=torch.float32, scale=1.0, seed=None, drawn_in=None):
    """Normal values of this shape times `scale`, cast to dtype: drawn in `drawn_in` (torch's default
    dtype if None; e.g. float64, for the same matrix rounded to each dtype), from the generator `seed`
    names (module docstring)."""
    x = torch.randn(*shape, generator=_generator(seed), dtype=drawn_in)
    return (x if scale == 1 else x * scale).to(dtype)


def rand(*shape, lo=0.0, hi=1.0, dtype=torch.float32, seed=None):
    """Uniform values in [lo, hi) of this shape, cast to dtype, from the generator `seed` names."""
    return (torch.rand(*shape, generator=_generator(seed)) * (hi - lo) + lo).to(dtype)


def randint(*shape, lo=-20, hi=20, dtype=torch.int32, seed=None):
    """Integers in [lo, hi) of this shape, cast to dtype, from the generator `seed` names."""
    return torch.randint(lo, hi, shape, generator=_generator(seed)).to(dtype)


def run_python(code: str | None = None, *, args: Sequence[str] = (), env: Mapping[str, str] | None = None,
               timeout: float = 300, cwd=None, **env_vars: str) -> subprocess.CompletedProcess:
    """This interpreter in a child process: `python -c code *args` (`python *args` where code is None),
    stdout and stderr captured as text, killed after `timeout` seconds. Its environment: `env` (this
    process's if None) with env_vars set on top. A fresh interpreter: its device runtime has not
    started unless its code starts it."""
    command = [sys.executable, *(("-c", code) if code is not None else ()), *args]
    environment = {**(os.environ if env is None else env), **env_vars}
    return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=timeout, cwd=cwd)
