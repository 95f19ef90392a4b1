"""Checks on values (out-of-range indices), computed inside an op's or a graph's executable.

XLA clamps an out-of-range index silently. A lowering states what must hold with `require(ok,
error, message)`; the caller that traces it collects the checks (`CheckedCall`), returns one row per
check from its program (`CheckedCall.failure_flags`: whether the check failed, and the values its
message reports) and, after the launch, raises the first failed check's error as PyTorch's CPU
kernel would. A message reports what failed as the CPU's does ("index 7 is out of bounds ...")
through `VALUE` and `POSITION`, which the program's values replace (`require_in_range`: the first
index out of range, and where it is in the flattened index tensor).

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


# what a check's message holds where the failed value and its position go
VALUE, POSITION = "{value}", "{position}"


class CheckedCall:
    """Collects the `require`s lowerings make while traced on this thread: `checks` holds
    (traced ok, error type, message, traced values reported) in the order they were made."""

    def __enter__(self):
        self._outer = getattr(_state, "checks", None)
        self.checks = _state.checks = []
        return self

    def __exit__(self, *exc):
        _state.checks = self._outer
        return False

    def failure_flags(self):
        """One row per check, (failed, value, position): the array the program returns last."""
        return failure_rows([(ok, values) for ok, _error, _message, values in self.checks])

    def described(self) -> list[tuple[type, str]]:
        """(error type, message) per check, what the caller raises after the launch."""
        return [(error, message) for _ok, error, message, _values in self.checks]


def failure_rows(checks):
    """[(failed, value, position), ...] of (traced ok, (value, position)) pairs, as one int64 array."""
    from ..runtime.lazy_jax import jnp

    return jnp.stack([jnp.stack([jnp.asarray(~jnp.asarray(ok), jnp.int64), jnp.asarray(value, jnp.int64),
                                 jnp.asarray(position, jnp.int64)]) for ok, (value, position) in checks])


def require(ok, error: type[Exception], message: str, value=0, position=0) -> None:
    """Inside a lowering: `ok` (a traced bool) must hold, else the op raises `error(message)`, with
    `value` and `position` (traced integers) in place of VALUE and POSITION in it."""
    checks = getattr(_state, "checks", None)
    if checks is not None and ENABLED:
        checks.append((ok, error, message, (value, position)))


def require_in_range(index, size: int, error: type[Exception], message: str, allow_negative: bool) -> None:
    """Every element of `index` in [0, size) (or [-size, size)); the message may name the first one
    that is not (VALUE) and its position in the flattened index (POSITION)."""
    from ..runtime.lazy_jax import jnp

    low = -size if allow_negative else 0
    bad = jnp.ravel((index < low) | (index >= size))
    if bad.size == 0:
        return
    first = jnp.argmax(bad)
    require(~jnp.any(bad), error, message, jnp.ravel(index)[first], first)


def first_failure(flags, described):
    """The (error type, message) of the first failed check, given the program's rows (waits for
    them), or None."""
    import numpy as np

    for (bad, value, position), (error, message) in zip(np.asarray(flags), described):
        if bad:
            return error, message.replace(VALUE, str(int(value))).replace(POSITION, str(int(position)))
    return None
