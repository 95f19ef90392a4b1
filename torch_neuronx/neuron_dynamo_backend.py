"""The helper module TorchNeuron users call around torch.compile(backend="neuron")."""
from .compile import (  # noqa: F401
    NEFFCompilationError,
    NEFFExecutionError,
    get_model_name,
    neuron_backend,
    set_model_name,
)
from .metrics import get_dynamo_metrics, reset_dynamo_metrics  # noqa: F401

__all__ = [
    "neuron_backend", "set_model_name", "get_model_name", "NEFFCompilationError", "NEFFExecutionError",
    "get_dynamo_metrics", "reset_dynamo_metrics",
]
