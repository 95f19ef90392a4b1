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


FALLBACK_ENV = "TORCH_NEURONX_CPU_FALLBACK"


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "cpu_fallback: the test exercises the CPU fallback itself; the default policy "
        f"({FALLBACK_ENV}=error, and no fallback allowed) does not apply",
    )


_tally = {"device": 0, "device_no_fallback": 0, "opted_out": 0}


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(
        f"neuron: {_tally['device']} tests allocated device memory in this process (subprocesses not "
        f"counted), {_tally['device_no_fallback']} of them under the no-fallback policy; "
        f"{_tally['opted_out']} tests opted out (cpu_fallback)")


def _allocations() -> int:
    return sum(torch.neuron.memory_stats(i)["num_alloc"] for i in range(torch.neuron.device_count()))


@pytest.fixture(autouse=True)
def _no_cpu_fallback(request, monkeypatch):
    """Every test runs with the CPU fallback as an error and starts with clear op tracking; after it,
    no op may have run on the host, nor been refused (a refusal a test caught would otherwise pass).
    Opt out with @pytest.mark.cpu_fallback, for the tests of the fallback itself."""
    opted_out = request.node.get_closest_marker("cpu_fallback") is not None
    monkeypatch.setenv(FALLBACK_ENV, "warn" if opted_out else "error")
    torch_neuronx.clear_op_tracking()
    allocations = _allocations()
    yield
    used_device = _allocations() > allocations
    _tally["device"] += used_device
    _tally["device_no_fallback"] += used_device and not opted_out
    _tally["opted_out"] += opted_out
    if not opted_out:
        ran, refused = torch_neuronx.get_fallback_ops(), torch_neuronx.metrics.get_refused_fallbacks()
        assert not ran and not refused, f"CPU fallback: ran {ran}, refused {refused}"


@pytest.fixture
def track():
    """torch_neuronx.metrics, for tests that assert on what ran (tracking is cleared before every test)."""
    return torch_neuronx.metrics


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def none_ok():
    """run_lowering, for lowerings that return None for undefined outputs."""
    from lowering_harness import run_lowering

    return run_lowering
