"""torch.accelerator answers for neuron through the shim's PrivateUse1 hooks, device guard,
DeviceAllocator and host allocator. torch.accelerator.synchronize() waits for the device as
torch.neuron.synchronize() does (the guard calls back into runtime/streams.py)."""
import os
import subprocess
import sys

import pytest
import torch


@pytest.fixture(autouse=True)
def device_zero():
    torch.accelerator.set_device_index(0)
    yield
    torch.accelerator.set_device_index(0)


def test_neuron_is_the_available_accelerator():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.current_accelerator(check_available=True) == torch.device("neuron")
    assert torch.accelerator.device_count() == torch.neuron.device_count() == 2


def test_set_device_index_moves_the_current_device():
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == torch.neuron.current_device() == 1
    assert torch.empty(2, device="neuron").device == torch.device("neuron", 1)
    torch.accelerator.set_device_index("neuron:0")
    assert torch.neuron.current_device() == 0


def test_the_deprecated_idx_names_answer_the_same():
    with pytest.warns(FutureWarning):
        torch.accelerator.set_device_idx(1)
    with pytest.warns(FutureWarning):
        assert torch.accelerator.current_device_idx() == 1


def test_device_index_context_computes_on_that_device_and_restores():
    x = torch.randn(4, 3)
    with torch.accelerator.device_index(1):
        assert torch.accelerator.current_device_index() == 1
        y = (x.to("neuron") * 2 + 1).sum(0)
    assert torch.accelerator.current_device_index() == 0
    assert y.device == torch.device("neuron", 1)
    torch.testing.assert_close(y.cpu(), (x * 2 + 1).sum(0))
    with torch.accelerator.device_index(None):  # None changes nothing
        assert torch.accelerator.current_device_index() == 0


def test_synchronize_returns_and_results_match_the_cpu():
    x = torch.randn(64, 64)
    y = x.to("neuron") @ x.to("neuron")
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(1)
    torch.accelerator.synchronize("neuron:0")
    torch.testing.assert_close(y.cpu(), x @ x)


def test_synchronize_waits_for_the_devices_work():
    """After torch.accelerator.synchronize() every buffer of the device is computed (the work is
    queued big enough that it cannot all be done by the time the call is made)."""
    from torch_neuronx.runtime import storage

    a = torch.randn(1024, 1024, device="neuron")
    outs = [a @ a for _ in range(8)]
    torch.accelerator.synchronize()
    storage.sync()
    assert all(b.is_ready() for b in storage.BUFFERS.values())
    torch.testing.assert_close(outs[-1].cpu(), a.cpu() @ a.cpu(), rtol=1e-4, atol=1e-3)


def test_the_only_stream_is_each_devices_default_stream():
    """The device guard has one ordered stream per device (torch's default stream, id 0): no other
    stream is made, and setting the current one back is accepted."""
    s = torch.accelerator.current_stream()
    assert (s.device, s.stream_id) == (torch.device("neuron", 0), 0)
    assert torch.accelerator.current_stream(1).device == torch.device("neuron", 1)
    assert s == torch.neuron.current_stream()
    torch.accelerator.set_stream(s)
    assert torch.accelerator.current_stream() == s


def test_memory_allocated_counts_a_tensor():
    before = torch.accelerator.memory_allocated()
    x = torch.empty(1024, device="neuron")
    assert torch.accelerator.memory_allocated() == torch.neuron.memory_allocated() == before + x.nbytes


def test_memory_stats_match_torch_neuron():
    assert torch.accelerator.memory_stats()["allocated_bytes.all.peak"] == torch.neuron.max_memory_allocated()


def test_empty_cache_releases_dead_buffers():
    x = torch.ones(1024, device="neuron")
    del x  # its buffer stays reserved until the allocator's events are applied
    assert torch.accelerator.memory_reserved() > torch.accelerator.memory_allocated()
    torch.accelerator.empty_cache()
    assert torch.accelerator.memory_reserved() == torch.accelerator.memory_allocated()


def test_memory_info_is_the_capacity_less_what_is_reserved():
    free, total = torch.accelerator.get_memory_info()
    assert total == torch.neuron.get_device_properties(0).total_memory > 0
    assert free == total - torch.accelerator.memory_reserved()


def test_device_capability_is_the_dtypes_the_device_carries():
    from torch_neuronx.runtime.dtypes import TORCH_TO_NUMPY

    for device in (None, "neuron:1"):
        assert torch.accelerator.get_device_capability(device)["supported_dtypes"] == set(TORCH_TO_NUMPY)


def test_empty_host_cache_after_using_the_device_does_not_crash():
    code = "import torch; torch.ones(3, device='neuron').cpu(); torch.accelerator.empty_host_cache()"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ), timeout=120)
    assert r.returncode == 0, f"exit status {r.returncode}: {r.stderr[-2000:]}"
