"""The one place jax is imported and configured.

jax is imported on first device use, never at `import torch`: the modules that need it take `jax`,
`jnp` and `lax` from here as lazy proxies that import and configure jax on first attribute access.
"""
import importlib
import os
import threading

_lock = threading.Lock()
_jax = None


def _num_host_devices() -> int:
    from .runtime import config

    return config.host_device_count()


def load():
    """Import jax once, configured for PyTorch semantics (64-bit types on) and our device count."""
    global _jax
    if _jax is not None:
        return _jax
    with _lock:
        if _jax is not None:
            return _jax
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_force_host_platform_device_count" not in flags:
            os.environ["XLA_FLAGS"] = (
                f"{flags} --xla_force_host_platform_device_count={_num_host_devices()}".strip()
            )
        import jax

        # PyTorch's dtype rules: int64 and float64 stay exact, never silently downcast.
        jax.config.update("jax_enable_x64", True)
        _jax = jax
        return jax


class _LazyModule:
    def __init__(self, name):
        self._name = name
        self._mod = None

    def __getattr__(self, attr):
        mod = self._mod
        if mod is None:
            load()
            mod = self._mod = importlib.import_module(self._name)
        return getattr(mod, attr)


jax = _LazyModule("jax")
jnp = _LazyModule("jax.numpy")
lax = _LazyModule("jax.lax")
