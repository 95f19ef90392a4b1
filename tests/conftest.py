import os
import sys

# torch's OpenMP threads spin while idle and starve XLA's CPU threads on a small machine (and the
# other way round): a 64x64 CPU matmul goes from 10 µs to 5 ms right after a device op. Passive
# waiting must be chosen before torch loads OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

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


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def none_ok():
    """run_lowering, for lowerings that return None for undefined outputs."""
    from lowering_harness import run_lowering

    return run_lowering
