"""The one place jax is imported and configured.

jax is imported on first device use, never at `import torch`: the modules that need it take `jax`,
`jnp` and `lax` from here as lazy proxies that import and configure jax on first attribute access.
"""
import contextlib
import importlib
import os
import threading

from . import config

_lock = threading.Lock()
_jax = None


# XLA's CPU backend by default schedules a program for concurrency, starting independent work early and
# holding its buffers at once (every bf16 dot's float32 operand copies of a many-layer run, say). Without
# it, a FLUX.2-klein-4B transformer at real width (1 + 2 blocks, bf16, 2-core Zen 3) peaks at 1.87 GB of
# device memory instead of 3.37 (process RSS 2.60 GB instead of 4.21; torch's CPU eager 2.11) at the same
# speed. A process flag, not a compile option: passed per compile it left the peak as it was. The user's
# own setting in XLA_FLAGS wins; either way it is part of every executable's key (cache.keys.xla_flags).
_CPU_SCHEDULER = "xla_cpu_enable_concurrency_optimized_scheduler"


xla_compiles = 0  # every program XLA compiled in this process (`executables.xla_compiles`)

# what the layers above register to run once jax is imported (lowering rules of their own)
_on_load: list = []


def on_load(callback) -> None:
    """Run `callback(jax)` once jax is imported and configured (at once if it is already)."""
    if _jax is not None:
        callback(_jax)
    else:
        _on_load.append(callback)


def _count_compiles(event, _seconds, **_kwargs):
    global xla_compiles
    if event == "/jax/core/compile/backend_compile_duration":  # jax's event for each XLA compile
        xla_compiles += 1


def load():
    """Import jax once, configured for PyTorch semantics (64-bit types on) and our device count."""
    global _jax
    if _jax is not None:
        return _jax
    with _lock:
        if _jax is not None:
            return _jax
        # NEURON_RT_NUM_CORES decides how many CPU devices XLA makes (replacing any inherited flag,
        # e.g. from a parent process that set its own count). XLA_FLAGS is XLA's own variable, which
        # XLA reads when jax starts its backend: read through config like every other, written here.
        config.announce_inert()  # (again: a script may set them after `import torch`)
        flags = [f for f in config.settings.xla_flags if "xla_force_host_platform_device_count" not in f]
        flags.append(f"--xla_force_host_platform_device_count={config.host_device_count()}")
        if config.platform() == "cpu" and not any(f.startswith(f"--{_CPU_SCHEDULER}=") for f in flags):
            flags.append(f"--{_CPU_SCHEDULER}=false")
        os.environ["XLA_FLAGS"] = " ".join(flags)
        import jax

        # PyTorch's dtype rules: int64 and float64 stay exact, never silently downcast.
        jax.config.update("jax_enable_x64", True)
        # jax's persistent compilation cache is on by default even with no folder to keep it in: it
        # then hashes every program it compiles (its IR canonicalized, ~1 ms an eager op, more for a
        # graph) for a cache that is never read. Executables persist in our own cache; a folder set
        # for jax's keeps it: JAX_COMPILATION_CACHE_DIR (which jax reads into its config when it is
        # imported), or jax.config before the first device use.
        if not jax.config.jax_compilation_cache_dir:
            jax.config.update("jax_enable_compilation_cache", False)
        # torch's CPU kernels that executables call (before any executable is compiled or loaded)
        from . import native_kernels

        native_kernels.register(jax)
        jax.monitoring.register_event_duration_secs_listener(_count_compiles)
        for callback in _on_load:
            callback(jax)
        _jax = jax
        return jax


_deferring = False


@contextlib.contextmanager
def deferring():
    """While the lowering table is imported, `jnp.arccos` and the like name jax functions without
    importing jax: they resolve on first call."""
    global _deferring
    previous, _deferring = _deferring, True
    try:
        yield
    finally:
        _deferring = previous


class _Deferred:
    __slots__ = ("_module", "_path")

    def __init__(self, module, path):
        self._module = module
        self._path = path

    def _resolve(self):
        obj = self._module._load()
        for name in self._path:
            obj = getattr(obj, name)
        return obj

    def __call__(self, *args, **kwargs):
        return self._resolve()(*args, **kwargs)

    def __getattr__(self, name):
        if _jax is None and _deferring:
            return _Deferred(self._module, self._path + (name,))
        return getattr(self._resolve(), name)


class _LazyModule:
    def __init__(self, name):
        self._name = name
        self._mod = None

    def _load(self):
        if self._mod is None:
            load()
            self._mod = importlib.import_module(self._name)
        return self._mod

    def __getattr__(self, attr):
        if self._mod is None and _jax is None and _deferring:
            return _Deferred(self, (attr,))
        return getattr(self._load(), attr)


jax = _LazyModule("jax")
jnp = _LazyModule("jax.numpy")
lax = _LazyModule("jax.lax")
