"""Compiled mode: the TorchDynamo backend `neuron` (registered through the `torch_dynamo_backends`
entry point, so `torch.compile(m, backend="neuron")` finds it without importing this first). Dynamo's
rules for this package (`dynamo_rules`) are installed when the package itself is imported."""
from .backend import get_model_name, neuron_backend, set_model_name
from .graph import clear_cache
from .errors import NEFFCompilationError, NEFFExecutionError

__all__ = ["neuron_backend", "clear_cache", "set_model_name", "get_model_name", "NEFFCompilationError", "NEFFExecutionError"]
