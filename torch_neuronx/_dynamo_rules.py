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
_done = False


def _apply(trace_rules) -> None:
    global _done
    if _done:
        return
    _done = True
    for name in SKIPPED:
        trace_rules.add(name)


class _Finder(importlib.abc.MetaPathFinder):
    """Runs `_apply` right after torch._dynamo.trace_rules finishes importing."""

    def find_spec(self, name, path, target=None):
        if name != _TRACE_RULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_apply(module):
            exec_module(module)
            sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]
            _apply(module)

        spec.loader.exec_module = exec_and_apply
        return spec


def install() -> None:
    module = sys.modules.get(_TRACE_RULES)
    if module is not None and hasattr(module, "add"):
        _apply(module)
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
