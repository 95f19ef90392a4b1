"""Random ops on CPU tensors that a neuron generator drives.

PyTorch dispatches on a Generator argument's device too, so `torch.randn(shape, device="cpu",
generator=torch.Generator("neuron"))` reaches our `normal_` with a CPU tensor. diffusers does exactly
this: its `randn_tensor` draws a neuron pipeline's latents on the CPU whatever generator the user
passed. The numbers come from the neuron generator's stream (drawn on its device, advancing it as any
draw does) and land in the CPU tensors the op writes or returns, so a neuron seed gives the same
numbers whether the tensor is created on the CPU or on `neuron`. (CUDA refuses a CUDA generator for a
CPU tensor; diffusers' neuron path would then reject every user's neuron generator.)
"""
from __future__ import annotations

import torch
import torch.utils._pytree as pytree

from ..ops.specs import OpSpec


def neuron_generator(spec: OpSpec, args: tuple, kwargs: dict):
    """The call's neuron Generator when every tensor argument is on the CPU, else None."""
    if spec.generator is None:
        return None
    gen = spec.arg_value(args, kwargs, spec.generator[1])
    if not isinstance(gen, torch.Generator) or gen.device.type != "neuron":
        return None
    tensors = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    return gen if tensors and all(t.device.type == "cpu" for t in tensors) else None


def run(spec: OpSpec, args: tuple, kwargs: dict, gen: torch.Generator):
    """Run the op on the generator's device and bring what it wrote and returned back to the CPU."""
    moved_args, moved_kwargs = pytree.tree_map_only(torch.Tensor, lambda t: t.to(gen.device), (args, kwargs))
    out = spec.op(*moved_args, **moved_kwargs)
    for name in spec.written:  # in-place self, out=: the CPU tensor gets the drawn values
        original = spec.arg_value(args, kwargs, name)
        if original is not None:
            drawn = spec.arg_value(moved_args, moved_kwargs, name)
            if original.shape != drawn.shape:  # an out= the op resized (randperm(n, out=...))
                original.resize_(drawn.shape)
            original.copy_(drawn)
    results = out if isinstance(out, tuple) else (out,)
    back = []
    for r, written in zip(results, spec.returns):
        back.append(spec.arg_value(args, kwargs, written) if written else
                    r.cpu() if isinstance(r, torch.Tensor) else r)
    return tuple(back) if isinstance(out, tuple) else back[0]
