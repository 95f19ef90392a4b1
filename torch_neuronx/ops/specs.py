"""One `OpSpec` per ATen overload: how the overload's arguments map onto its lowering.

Every caller of an overload (its registered eager kernel, a transfer, a host read of a view, a
compiled graph's node) gets the same spec from `spec_for`, and calls the lowering through
`protocol.call_lowering` with it.
"""
from __future__ import annotations

import threading


from . import LOWERINGS, argument_checks
from .protocol import ArgKind, KernelName, arg_kind
from .variants import functional_of


class OpSpec:
    """How one registered ATen overload maps onto a lowering."""

    def __init__(self, op, functional, lowering):
        self.op = op
        # a custom kernel's name carries its code's digest into every key (`protocol.KernelName`)
        digest = None if lowering is None else lowering.digest
        self.name = str(op) if digest is None else KernelName(str(op), digest)
        self.functional = functional  # the overload the lowering implements
        self.lowering = lowering
        schema = op._schema
        self.arg_names = [a.name for a in schema.arguments]
        self.kinds = [arg_kind(a, lowering) for a in schema.arguments]
        self.kind_by_name = dict(zip(self.arg_names, self.kinds))
        self.written = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        # out= arguments are not arguments of the functional overload
        self.out_names = [a.name for a in schema.arguments if a.is_out]
        by_alias = {}
        for a in schema.arguments:
            if a.alias_info is not None and a.alias_info.is_write:
                by_alias[frozenset(a.alias_info.before_set)] = a.name
        # per schema return: the name of the argument it returns, or None for a fresh tensor
        self.returns = [r.alias_info and by_alias.get(frozenset(r.alias_info.before_set)) for r in schema.returns]
        self.single_return = len(schema.returns) == 1
        # the lowering's (the functional overload's) one Tensor[] return: it returns a list, which is
        # that one return (also for an in-place `_foreach_add_`, which returns nothing itself)
        returns = functional._schema.returns
        self.list_return = len(returns) == 1 and str(returns[0].type) == "List[Tensor]"
        # a Generator argument left out still needs a key drawn from the default generator
        gens = [i for i, k in enumerate(self.kinds) if k == ArgKind.GENERATOR]
        self.generator = (gens[0], self.arg_names[gens[0]]) if gens else None
        self.rng_key = lowering is not None and lowering.rng  # a random op whose schema has no Generator
        # the functional overload's arguments traced as numbers: a Python number there is made a
        # weakly typed 0-d value (`protocol.call_lowering`)
        self.traced_numbers = () if lowering is None else tuple(
            i for i, a in enumerate(functional._schema.arguments)
            if arg_kind(a, lowering) in (ArgKind.SCALAR, ArgKind.TENSOR))
        self.every_call_check = argument_checks.every_call_check(op)  # reads Python numbers: on cache hits too

    def arg_value(self, args, kwargs, name):
        i = self.arg_names.index(name)
        return args[i] if i < len(args) else kwargs.get(name)


_specs: dict = {}
_lock = threading.Lock()


def spec_for(op) -> OpSpec:
    """The spec of `op` (a lowered overload, or an in-place/out= variant of one)."""
    spec = _specs.get(op)
    if spec is None:
        functional = functional_of(op)
        with _lock:
            spec = _specs.get(op)
            if spec is None:
                spec = _specs[op] = OpSpec(op, functional, LOWERINGS[functional])
    return spec


def forget(op) -> None:
    """Drop `op`'s spec: its lowering was replaced (a custom kernel registered again)."""
    with _lock:
        _specs.pop(op, None)
