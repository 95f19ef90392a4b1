"""The errors compiled graphs raise (the names TorchNeuron users catch)."""


class NEFFCompilationError(RuntimeError):
    """A graph could not be compiled: the message names the graph and the first failing op."""


class NEFFExecutionError(RuntimeError):
    """A compiled graph failed while running: the message names the graph and the failing op."""
