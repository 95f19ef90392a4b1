"""Custom kernels: a jax function as the neuron implementation of a torch.library op (TorchNeuron's
NKI kernels, in this package's terms). See docs/custom_kernels.md.

    @torch_neuronx.nki_op("mylib::rms_norm", mutates_args=())
    def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        xf = x.astype(jnp.float32)                  # x, weight: jax arrays; eps: a Python float
        y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + eps)
        return (y * weight.astype(jnp.float32)).astype(x.dtype)

    @rms_norm.register_kernel("cpu")                # torch.library's own API: the CPU implementation
    def _(x, weight, eps): ...

`nki_op` returns torch.library's CustomOpDef: `register_fake`, `register_autograd`, `register_kernel`
work on it as on any custom op. `register_jax_kernel(op, fn)` gives an existing op (a
`torch.library.custom_op`, any OpOverload the package does not lower itself) a jax kernel.
"""
from __future__ import annotations

import sys

import torch

from .eager import custom_kernels
from .ops import LOWERINGS, custom

__all__ = ["nki_op", "register_jax_kernel"]


def register_jax_kernel(op, fn=None, /, *, static=(), dynamic=()):
    """Make jax function `fn` the neuron implementation of `op`: a `torch.library.custom_op`
    (CustomOpDef), an OpOverload, an OpOverloadPacket with one overload, or a name ("mylib::op",
    "mylib::op.overload"). Usable as a decorator (`@register_jax_kernel(op)`); returns `fn`.

    `fn` is called with every schema argument positionally (defaults filled in): tensors as jax arrays,
    `Scalar`s as 0-d jax values, every other argument as its Python value (part of the executable's
    key). It returns the op's returns, then the new value of each mutated argument, in schema order
    (None for one given None). `static` names Scalar arguments to pass as Python values instead,
    `dynamic` float arguments to pass traced (no recompile per value), as in the lowering table.
    Registering again replaces the kernel."""

    def register(fn):
        overload = _overload(op)
        previous = LOWERINGS.get(overload)
        lowering = custom.add(overload, fn, static=tuple(static), dynamic=tuple(dynamic))
        custom_kernels.register(overload)
        if previous is not None and previous.digest != lowering.digest:
            _forget_old_kernel()
        return fn

    return register if fn is None else register(fn)


def nki_op(name: str, fn=None, /, *, mutates_args, cpu=None, schema: str | None = None, tags=None,
           static=(), dynamic=()):
    """Create the custom op `name` ("mylib::op") with the decorated jax function as its neuron
    implementation: TorchNeuron's `@nki_op(name, mutates_args=...)`, spelled the same. The op's schema
    comes from the function's annotations, as `torch.library.custom_op` infers it (`mutates_args`: the
    names of the arguments it mutates, or "unknown" for every tensor argument), or from `schema`.

    The CPU implementation is `cpu=` (a torch function, as a `custom_op` body: it mutates in place),
    or `register_kernel("cpu")` on the result; without either, CPU tensors run the jax kernel on the
    current neuron device. The fake (meta) kernel is derived from the jax function (`jax.eval_shape`)
    until `register_fake` replaces it. Returns the op's CustomOpDef."""

    def make(kernel):
        schema_str = schema if schema is not None else torch.library.infer_schema(kernel, mutates_args=mutates_args)
        parsed = torch._C.parse_schema(f"{name}{schema_str}")
        mutated = tuple(a.name for a in parsed.arguments if a.alias_info is not None and a.alias_info.is_write)
        reference = cpu if cpu is not None else custom_kernels.on_device(name, getattr(kernel, "__name__", "kernel"))
        opdef = torch.library.custom_op(name, reference, mutates_args=mutated, device_types="cpu", schema=schema_str,
                                        tags=tags)
        overload = _overload(opdef)
        register_jax_kernel(overload, kernel, static=static, dynamic=dynamic)
        if custom.own_returns(parsed):
            opdef.register_fake(custom.fake_from_kernel(overload, kernel))
        return opdef

    return make if fn is None else make(fn)


def _forget_old_kernel() -> None:
    """A kernel was replaced by different code: what this process holds of the old one goes. Eager
    executables: in memory their keys equal the new kernel's (`protocol.KernelName`). Dynamo's compiled
    code: its graphs keep the structure digest (the old kernel's) they were made with, so they would
    run, and store on disk, the new kernel under the old one's key."""
    custom_kernels.forget_executables()
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:  # not imported: nothing compiled yet
        dynamo.reset()


def _overload(op) -> torch._ops.OpOverload:
    if isinstance(op, torch._ops.OpOverload):
        return op
    if isinstance(op, torch.library.CustomOpDef):
        return op._opoverload
    if isinstance(op, str):
        qualname, _, overload = op.partition(".")
        namespace, _, opname = qualname.partition("::")
        if not namespace or not opname:
            raise ValueError(f"expected an op name 'namespace::op' or 'namespace::op.overload', got {op!r}")
        op = getattr(getattr(torch.ops, namespace), opname)
        return getattr(op, overload or "default")
    if isinstance(op, torch._ops.OpOverloadPacket):
        overloads = op.overloads()
        if len(overloads) != 1:
            raise ValueError(f"{op} has overloads {overloads}: name one (torch.ops.ns.op.overload)")
        return getattr(op, overloads[0])
    raise TypeError(f"expected a custom op, an OpOverload or an op name, got {type(op).__name__}")
