"""Compiled mode: the TorchDynamo backend `neuron` (registered through the `torch_dynamo_backends`
entry point, so `torch.compile(m, backend="neuron")` finds it without importing this first)."""
import torch._dynamo.trace_rules

# Dynamo must never trace the backend's own Python, nor jax's: eager kernels run inside compiled
# regions when a graph breaks, and Dynamo would otherwise try to convert their frames (breaking jax's
# tracing). They are treated like torch's own files.
for _module in ("torch_neuronx", "jax", "jaxlib"):
    torch._dynamo.trace_rules.add(_module)

from .backend import get_model_name, neuron_backend, set_model_name
from .graph import clear_cache
from .errors import NEFFCompilationError, NEFFExecutionError

__all__ = ["neuron_backend", "clear_cache", "set_model_name", "get_model_name", "NEFFCompilationError", "NEFFExecutionError"]
