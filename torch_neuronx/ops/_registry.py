"""The lowering table: ATen overload -> pure jax function. Shared by eager and compiled mode.

A lowering mirrors its ATen schema: it is called with every schema argument, positionally, in schema
order, defaults filled in (`normalize`). Tensors arrive as jax arrays of the tensor's dtype and
logical shape, `Tensor[]` as lists, `Scalar`s as 0-d jax values (weakly typed, so they never widen
a float32 or bfloat16 result), unless named in `static=` (then they arrive as Python numbers, for
scalars that shape the output). `float` arguments named in `dynamic=` arrive traced too (values
that vary from call to call, such as a random op's bounds), and `Scalar[]` ones as lists of traced
numbers (a foreach op's per-tensor scalars: Adam's step sizes change every step). A random op whose schema has no
Generator (native_dropout) asks for a key with `rng=True`: it comes as an extra last argument,
drawn from the device's default generator. Every other argument (int, int[], float, bool, str, ScalarType,
Device...) arrives as the Python value; a `Generator?` argument arrives as a jax PRNG key drawn
from the device generator. A lowering returns a jax array, or a tuple for several returns, each in
the dtype PyTorch's meta kernel gives (tests/lowering_harness.py checks it; the callers still cast
to the meta dtype, a no-op for a correct lowering).

Only functional overloads are written here: in-place (`add_.Tensor`) and `out=` (`add.out`)
variants are derived from them by rule (`eager`), not written twice. Ops that exist only in place
(`normal_`, `fill_.Scalar`) register under that name and return the new value of `self`.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch

aten = torch.ops.aten


@dataclasses.dataclass(frozen=True)
class Lowering:
    op: torch._ops.OpOverload
    fn: Callable
    static: frozenset  # Scalar arguments passed as Python values (they shape the result)
    dynamic: frozenset = frozenset()  # float (and Scalar[]) arguments passed traced (values that vary call to call)
    rng: bool = False  # takes a PRNG key as an extra last argument (random ops without a Generator)
    # a user's custom kernel (ops/custom.py): the digest of its code, part of every key that runs it
    # (the package's own lowerings are keyed by the package's sources instead)
    digest: str | None = None


LOWERINGS: dict[torch._ops.OpOverload, Lowering] = {}


def lower(
    *ops: torch._ops.OpOverload, static: tuple[str, ...] = (), dynamic: tuple[str, ...] = (), rng: bool = False
):
    """Register `fn` as the lowering of each ATen overload in `ops`."""

    def register(fn):
        for op in ops:
            if op in LOWERINGS:
                raise RuntimeError(f"{op} is lowered twice ({LOWERINGS[op].fn.__module__}, {fn.__module__})")
            names = {a.name for a in op._schema.arguments}
            unknown = (set(static) | set(dynamic)) - names
            if unknown:
                raise RuntimeError(f"lowering of {op}: {sorted(unknown)} are not arguments of it")
            LOWERINGS[op] = Lowering(op, fn, frozenset(static), frozenset(dynamic), rng)
        return fn

    return register


# c10::ScalarType enum codes, as schema defaults spell dtypes
SCALAR_TYPES = {
    0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64, 5: torch.float16,
    6: torch.float32, 7: torch.float64, 8: torch.complex32, 9: torch.complex64, 10: torch.complex128,
    11: torch.bool, 15: torch.bfloat16,
}


def normalize(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> list:
    """Every schema argument of `op`, in schema order, defaults filled in."""
    out = []
    schema_args = op._schema.arguments
    for i, a in enumerate(schema_args):
        if i < len(args) and not a.kwarg_only:
            out.append(args[i])
        elif a.name in kwargs:
            out.append(kwargs[a.name])
        elif a.has_default_value():
            default = a.default_value
            if isinstance(default, int) and "int" in str(a.type) and a.name == "dtype":
                default = SCALAR_TYPES[default]  # schemas store a ScalarType default as its enum code
            out.append(default)
        else:
            raise TypeError(f"{op}: missing argument '{a.name}'")
    return out


# the value checks lowerings make (`require`), kept with the protocol that collects them
from .value_checks import require, require_in_range  # noqa: E402,F401
