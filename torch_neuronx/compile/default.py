"""torch.compile's default backend (no `backend=` given): a graph on the neuron device compiles with the
`neuron` backend, any other graph with Inductor, as before.

Installed through PyTorch's public `torch.compiler.set_default_backend` (by `dynamo_rules` when Dynamo's
backend registry is imported, so `import torch` stays as fast), and only while the default is still
torch's own "inductor": a default the user set is left alone. The choice is made per graph, from the
devices of Dynamo's example inputs (parameters and buffers are graph inputs under Dynamo's inlining of
nn.Modules) and of any tensor the graph holds: one neuron tensor makes it a neuron graph.

Given this callable as the default, torch.compile calls it with the `mode` and `options` it was given
(left out when default/empty) instead of building its Inductor wrapper itself, so for a CPU graph this
builds that same wrapper (`torch._TorchCompileInductorWrapper`: mode -> Inductor options, the options
checked against Inductor's config). What torch.compile keeps to itself before choosing a backend is
not seen here: `options={"use_aoti": True}` (popped first, it picks AOTInductor only for the string
"inductor") and `name=`; pass `backend="inductor"` for those. The neuron backend's own option
(`fallback_execution`) is left out of a CPU graph's options: Inductor's config has no such key, and one
`options` dict serves every graph of the compiled function, neuron's and the CPU's.
"""
from __future__ import annotations

import torch


def neuron_or_inductor(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """The default TorchDynamo backend: `neuron` for a graph with a neuron tensor, else Inductor."""
    if is_neuron_graph(gm, example_inputs):
        from .backend import neuron_backend

        return neuron_backend(gm, example_inputs, **kwargs)
    options = kwargs.pop("options", None)
    if options and _NEURON_OPTIONS & set(options):
        options = {k: v for k, v in options.items() if k not in _NEURON_OPTIONS} or None
    return _inductor(kwargs.pop("mode", None), options, kwargs)(gm, example_inputs)


_NEURON_OPTIONS = frozenset({"fallback_execution"})  # backend.FALLBACK_OPTION (not imported: it pulls in jax)


def is_neuron_graph(gm: torch.fx.GraphModule, example_inputs) -> bool:
    tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
    tensors += list(gm.parameters()) + list(gm.buffers())
    return any(t.device.type == "neuron" for t in tensors)


def _inductor(mode, options, rest):
    if rest:
        raise TypeError(f"torch.compile's default backend got unexpected arguments {sorted(rest)}")
    return torch._TorchCompileInductorWrapper(mode, options, _requested_dynamic())


def _requested_dynamic() -> bool | None:
    """torch.compile's `dynamic=` as Dynamo's config shows it while the frame is traced (it is not
    passed to a backend): True sets assume_static_by_default=False, False turns automatic dynamic
    shapes off, None leaves both at their defaults."""
    import torch._dynamo.config as dynamo_config

    if not dynamo_config.assume_static_by_default:
        return True
    if not dynamo_config.automatic_dynamic_shapes:
        return False
    return None


def install() -> None:
    """Make `neuron_or_inductor` torch.compile's default, unless the user chose another default."""
    if torch.compiler.get_default_backend() == "inductor":
        torch.compiler.set_default_backend(neuron_or_inductor)
