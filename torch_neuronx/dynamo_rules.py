"""TorchDynamo must never trace this package's Python, nor jax's: the device module (torch.neuron.*)
and the eager kernels run inside compiled regions (a graph break, a backend such as aot_eager, a
model calling torch.neuron.synchronize()), and Dynamo converting their frames breaks jax's tracing.
They are registered as skipped files, like torch's own, when torch._dynamo is first imported:
importing it here would add over a second to `import torch`."""
from __future__ import annotations

from .import_hooks import after_import

SKIPPED = ("torch_neuronx", "jax", "jaxlib")
_TRACE_RULES = "torch._dynamo.trace_rules"
_REGISTRY = "torch._dynamo.backends.registry"
_done = False


def _apply(trace_rules) -> None:
    global _done
    if _done:
        return
    _done = True
    for name in SKIPPED:
        trace_rules.add(name)


_registering = False


def _register_backend(registry) -> None:
    """Left to its entry point, the backend is loaded on the first torch.compile(backend="neuron"),
    and that lazy load races: two threads compiling at once both register it and the second fails
    with "duplicate name: neuron". Registered as the registry is imported, it is never lazy. Then
    torch.compile's default backend becomes `compile.default.neuron_or_inductor` (neuron graphs to
    `neuron`, the others to Inductor), unless the user set another default."""
    global _registering
    if _registering:
        return
    _registering = True  # importing .compile calls install() again
    from .compile import default, neuron_backend

    if "neuron" not in registry._COMPILER_FNS:
        registry.register_backend(compiler_fn=neuron_backend, name="neuron")
    default.install()


def install() -> None:
    after_import(_TRACE_RULES, _apply, defined_last="add")
    after_import(_REGISTRY, _register_backend, defined_last="register_backend")
