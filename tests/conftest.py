import os
import sys

# Two emulated NeuronCores on the CPU (the default, stated here so tests do not depend on it).
os.environ.setdefault("NEURON_RT_NUM_CORES", "2")
os.environ.setdefault("TORCH_NEURONX_PLATFORM", "cpu")
sys.path.insert(0, os.path.dirname(__file__))

import pytest  # noqa: E402
import torch  # noqa: E402  (autoloads torch_neuronx)

import torch_neuronx  # noqa: E402


@pytest.fixture
def track():
    """Clears op tracking before the test; the test asserts on torch_neuronx.metrics after."""
    torch_neuronx.clear_op_tracking()
    yield torch_neuronx.metrics
