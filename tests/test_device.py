"""The neuron device: registration and autoload, the torch.neuron device module, and torch.accelerator,
which answers for neuron through the shim's PrivateUse1 hooks, device guard, DeviceAllocator and host
allocator (torch.accelerator.synchronize() waits for the device as torch.neuron.synchronize() does: the
guard calls back into runtime/streams.py). Errors for a device index past the count: test_errors.py."""
import pytest
import torch

from helpers import run_python


@pytest.fixture(autouse=True)
def device_zero():
    """Every test starts and ends on device 0."""
    torch.accelerator.set_device_index(0)
    yield
    torch.accelerator.set_device_index(0)


# ---- registration and autoload


def test_autoload_registers_without_importing_jax():
    r = run_python(
        "import sys, torch\n"
        "assert torch._C._get_privateuse1_backend_name() == 'neuron'\n"
        "assert hasattr(torch, 'neuron') and 'torch_neuronx' in sys.modules\n"
        "assert 'jax' not in sys.modules, 'jax must load on first device use, not at import torch'\n"
        "assert 'ml_dtypes' not in sys.modules, 'ml_dtypes (half a second) must load with jax'\n"
        "print(torch.neuron.is_available(), torch.neuron.device_count())\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "2"]


def test_manual_registration_when_autoload_is_off():
    r = run_python(
        "import torch\n"
        "assert not hasattr(torch, 'neuron')\n"
        "import torch_neuronx\n"
        "x = torch.ones(3, device='neuron') * 2\n"
        "print(x.cpu().tolist())\n",
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[2.0, 2.0, 2.0]"


def test_importing_the_package_before_torch():
    # torch's own import (autoload) meets this package half imported: it must find its entry point
    r = run_python("import torch_neuronx, torch\nprint((torch.ones(2, device='neuron') + 1).cpu().tolist())\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[2.0, 2.0]"


def test_autoload_problem_warns_and_reports_unavailable():
    r = run_python(
        "import torch\n"
        "print(torch.neuron.is_available(), torch.neuron.device_count())\n",
        NEURON_RT_NUM_CORES="many",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "0"]
    assert "neuron device is unavailable" in r.stderr and "NEURON_RT_NUM_CORES" in r.stderr


def test_distribution_metadata_for_diffusers():
    from importlib.metadata import version

    assert version("torch-neuronx") == "0.1.0"
    from diffusers.utils import is_torch_neuronx_available

    assert is_torch_neuronx_available()


# ---- the torch.neuron device module


def test_device_module_basics():
    assert torch.neuron.is_available()
    assert torch.neuron.device_count() == 2
    assert isinstance(torch.neuron.current_device(), int)
    assert torch.neuron.current_device() == 0
    assert torch.neuron.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    assert "NeuronCore 1" in torch.neuron.get_device_name(1)
    props = torch.neuron.get_device_properties(0)
    assert props.platform == "cpu" and props.index == 0
    torch.neuron.synchronize()
    assert torch.neuron.is_initialized()


def _in_bad_fork_of_a_child(code_before_fork: str) -> str:
    """What `torch.neuron._is_in_bad_fork()` says in the parent and in a child forked after running
    `code_before_fork` (in a fresh interpreter, so that this process's device state is not involved)."""
    r = run_python(
        "import os, torch\n"
        + code_before_fork
        + "r, w = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.write(w, str(torch.neuron._is_in_bad_fork()).encode()); os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "print(torch.neuron._is_in_bad_fork(), os.read(r, 16).decode())\n"
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_bad_fork_is_a_fork_after_the_device_started():
    """As torch.cuda: a child forked after the device runtime started is in a bad fork; one forked
    before any device use is not."""
    assert torch.neuron._is_in_bad_fork() is False
    assert _in_bad_fork_of_a_child("") == ["False", "False"]
    assert _in_bad_fork_of_a_child("torch.ones(2, device='neuron').cpu()\n") == ["False", "True"]


def test_set_device_and_context_manager():
    assert torch.neuron.current_device() == 0
    with torch.neuron.device(1):
        assert torch.neuron.current_device() == 1
        t = torch.empty(2, device="neuron")
        assert t.device == torch.device("neuron", 1)
    assert torch.neuron.current_device() == 0
    torch.neuron.set_device(1)
    try:
        assert torch.ones(1, device="neuron").device.index == 1
    finally:
        torch.neuron.set_device(0)


def test_generated_tensor_and_module_methods():
    t = torch.ones(2)
    assert t.neuron().is_neuron
    m = torch.nn.Linear(2, 2).neuron()
    assert m.weight.device.type == "neuron"


def test_visible_cores_restrict_the_device_count():
    r = run_python(
        "import torch\nprint(torch.neuron.device_count())\n"
        "x = torch.arange(4.0, device='neuron:1')\nprint(x.sum().item())\n",
        NEURON_RT_NUM_CORES="4",
        NEURON_RT_VISIBLE_CORES="1,3",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["2", "6.0"]


# ---- torch.accelerator


def test_neuron_is_the_available_accelerator():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.current_accelerator(check_available=True) == torch.device("neuron")
    assert torch.accelerator.device_count() == torch.neuron.device_count() == 2
    t = torch.ones(2, device=0)  # a bare index is the current accelerator's device
    assert t.device == torch.device("neuron", 0)


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
    assert all(b.is_ready() for b in storage.every_buffer())
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
    from torch_neuronx.runtime.numpy_dtypes import TORCH_TO_NUMPY

    for device in (None, "neuron:1"):
        assert torch.accelerator.get_device_capability(device)["supported_dtypes"] == set(TORCH_TO_NUMPY)


def test_empty_host_cache_after_using_the_device_does_not_crash():
    r = run_python("import torch; torch.ones(3, device='neuron').cpu(); torch.accelerator.empty_host_cache()",
                   timeout=120)
    assert r.returncode == 0, f"exit status {r.returncode}: {r.stderr[-2000:]}"
