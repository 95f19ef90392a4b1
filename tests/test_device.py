"""Registration, autoload and the torch.neuron device module."""
import os
import subprocess
import sys

import pytest
import torch



def _python(code: str, **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=300)


def test_autoload_registers_without_importing_jax():
    r = _python(
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
    r = _python(
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
    r = _python("import torch_neuronx, torch\nprint((torch.ones(2, device='neuron') + 1).cpu().tolist())\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[2.0, 2.0]"


def test_autoload_problem_warns_and_reports_unavailable():
    r = _python(
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
    r = _python(
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


def test_out_of_range_device_index_is_a_clear_error():
    with pytest.raises(RuntimeError, match="out of range"):
        torch.empty(2, device="neuron:7")
    with pytest.raises(RuntimeError, match="out of range"):
        torch.neuron.set_device(5)


def test_neuron_is_the_current_accelerator():
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.device_count() == 2
    t = torch.ones(2, device=0)
    assert t.device == torch.device("neuron", 0)


def test_generated_tensor_and_module_methods():
    t = torch.ones(2)
    assert t.neuron().is_neuron
    m = torch.nn.Linear(2, 2).neuron()
    assert m.weight.device.type == "neuron"


def test_visible_cores_restrict_the_device_count():
    r = _python(
        "import torch\nprint(torch.neuron.device_count())\n"
        "x = torch.arange(4.0, device='neuron:1')\nprint(x.sum().item())\n",
        NEURON_RT_NUM_CORES="4",
        NEURON_RT_VISIBLE_CORES="1,3",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["2", "6.0"]
