"""torch-neuronx: the TorchNeuron programming model (a `neuron` PyTorch device) on OpenXLA/PJRT.

`import torch` loads this package through the `torch.backends` entry point (`_autoload`); with
TORCH_DEVICE_BACKEND_AUTOLOAD=0, `import torch_neuronx` registers the device by hand. Registration
never imports jax (that happens on first device use) and never makes `import torch` fail: a problem
is warned about and the device reports itself unavailable.
"""
from __future__ import annotations

import warnings


def _autoload() -> None:
    """Entry point of the `torch.backends` group: importing this package registered the device.
    Defined before `import torch`: when this package is imported first, torch's own import calls
    it on the partly initialized module."""


import torch  # noqa: E402

from . import device as _device_module
from .metrics import clear_op_tracking, get_executed_ops, get_fallback_ops

__all__ = ["get_fallback_ops", "get_executed_ops", "clear_op_tracking", "metrics", "is_registered", "nki_op",
           "register_jax_kernel"]

_registered = False


def _register() -> None:
    global _registered
    if _registered:
        return
    if torch._C._get_privateuse1_backend_name() != "neuron":
        torch.utils.rename_privateuse1_backend("neuron")
    if not hasattr(torch, "neuron"):
        torch._register_device_module("neuron", _device_module)
    try:
        from . import _C  # the C++ shim: allocator, views, guard, hooks, generators
        from .runtime import config, devices, profiling, streams

        config.announce_inert()  # TorchNeuron settings that are set but mean nothing off Trainium
        _C._set_runtime_hooks(streams)  # what the guard asks about streams, events, synchronize
        profiling.register()  # torch.profiler's ProfilerActivity.PrivateUse1 (runtime/profiling.py)
        if config.platform() == "cpu":
            devices.set_native_count(config.cpu_device_count())
        else:
            devices.set_native_count(1)  # replaced by the real count when the runtime starts
        from .eager import registration

        registration.register()
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
        _device_module._initialized = True
    except Exception as e:  # never break `import torch`: say why, and report the device unavailable
        _device_module._load_error = e
        warnings.warn(f"torch_neuronx: the neuron device is unavailable: {type(e).__name__}: {e}")
        return
    from .cache import artifacts  # noqa: F401  (this package's entries in torch.compiler's cache artifacts)
    from . import distributed

    distributed.register()  # the c10d backend `neuron`
    from . import dynamo_rules

    dynamo_rules.install()  # Dynamo skips this package's and jax's frames (applied on its import)
    from . import safetensors_device

    safetensors_device.install()  # safetensors' safe_open/load_file take device="neuron"
    if config.settings.estimate:  # TORCH_NEURONX_ESTIMATE=1 (`torch-neuronx estimate`): the report at exit
        import atexit

        atexit.register(_print_estimate)
    _registered = True


def _print_estimate() -> None:
    import sys

    from . import metrics

    try:
        text = metrics.estimate_report()
    except Exception as e:  # noqa: BLE001 (at exit: say why, never raise)
        text = f"torch_neuronx: no estimate: {type(e).__name__}: {e}"
    print(text, file=sys.stderr)


def is_registered() -> bool:
    return _registered


_register()

from . import metrics  # noqa: E402
from .custom_ops import nki_op, register_jax_kernel  # noqa: E402  (custom kernels: docs/custom_kernels.md)
