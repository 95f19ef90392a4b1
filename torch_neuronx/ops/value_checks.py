"""Checks on values (out-of-range indices), computed inside an op's or a graph's executable.

XLA clamps an out-of-range index silently. A lowering states what must hold with `require(ok,
error, message)`; the caller that traces it collects the checks (`CheckedCall`), returns one flag per
check from its program (`CheckedCall.failure_flags`: True where the check failed) and, after the
launch, raises the first failed check's error as PyTorch's CPU kernel would.

TORCH_NEURONX_VALUE_CHECKS=0 turns them off, only to measure what they cost
(benchmarks/index_check.py): without them an out-of-range index is silently clamped, a wrong answer.
"""
from __future__ import annotations

import threading

from ..runtime import config

ENABLED = config.settings.value_checks  # read once: it is part of every executable's key

# The checks being collected, per thread: several threads may trace lowerings at once, and a check
# one thread's trace makes must land in that trace (in another, it is lost: a silent clamp; or it
# leaks a tracer into the other program).
_state = threading.local()


class CheckedCall:
    """Collects the `require`s lowerings make while traced on this thread: `checks` holds
    (traced ok, error type, message) in the order they were made."""

    def __enter__(self):
        self._outer = getattr(_state, "checks", None)
        self.checks = _state.checks = []
        return self

    def __exit__(self, *exc):
        _state.checks = self._outer
        return False

    def failure_flags(self):
        """One bool per check, True where it failed: the array the program returns last."""
        from ..runtime.lazy_jax import jnp

        return jnp.stack([~jnp.asarray(ok) for ok, _error, _message in self.checks])

    def described(self) -> list[tuple[type, str]]:
        """(error type, message) per check, what the caller raises after the launch."""
        return [(error, message) for _ok, error, message in self.checks]


def require(ok, error: type[Exception], message: str) -> None:
    """Inside a lowering: `ok` (a traced bool) must hold, else the op raises `error(message)`."""
    checks = getattr(_state, "checks", None)
    if checks is not None and ENABLED:
        checks.append((ok, error, message))


def require_in_range(index, size: int, error: type[Exception], message: str, allow_negative: bool) -> None:
    from ..runtime.lazy_jax import jnp

    low = -size if allow_negative else 0
    require(jnp.all((index >= low) & (index < size)), error, message)


def first_failure(flags, described):
    """The (error type, message) of the first failed check, given the program's flags (waits for
    them), or None."""
    import numpy as np

    for bad, what in zip(np.asarray(flags), described):
        if bad:
            return what
    return None
