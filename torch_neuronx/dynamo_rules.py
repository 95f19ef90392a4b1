"""TorchDynamo must never trace this package's Python, nor jax's: the device module (torch.neuron.*)
and the eager kernels run inside compiled regions (a graph break, a backend such as aot_eager, a
model calling torch.neuron.synchronize()), and Dynamo converting their frames breaks jax's tracing.
They are registered as skipped files, like torch's own, when torch._dynamo is first imported:
importing it here would add over a second to `import torch`."""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

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


# module -> (hook, a name the module defines once it has finished importing)
_HOOKS = {_TRACE_RULES: (_apply, "add"), _REGISTRY: (_register_backend, "register_backend")}


class _Finder(importlib.abc.MetaPathFinder):
    """Runs each hook right after its torch._dynamo module finishes importing."""

    def __init__(self, pending):
        self.pending = set(pending)

    def find_spec(self, name, path, target=None):
        if name not in self.pending:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_apply(module):
            exec_module(module)
            self.pending.discard(name)
            if not self.pending:
                sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]
            _HOOKS[name][0](module)

        spec.loader.exec_module = exec_and_apply
        return spec


def install() -> None:
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return  # hooks still waiting for their modules
    pending = []
    for name, (hook, defined_last) in _HOOKS.items():
        module = sys.modules.get(name)
        if module is None:
            pending.append(name)
        elif hasattr(module, defined_last):  # fully imported
            hook(module)
    if pending:
        sys.meta_path.insert(0, _Finder(pending))
