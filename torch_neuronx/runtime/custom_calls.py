"""The custom-call targets an executable calls, and what makes them ready to run in a process that
loads the executable instead of compiling it.

XLA runs a custom call through the handler registered under its target's name. Three kinds of
target appear in a compiled program:

- XLA's own, which its compiler emits and runs itself (TopK on the CPU, say): never in the
  process's registry, nothing to prepare.
- handlers the runtime registers when it starts. jax registers jaxlib's targets when it is imported
  (LAPACK on the CPU; cuSOLVER, PRNG and hybrid solver kernels on a GPU) and `native_kernels.register`
  the shim's when jax starts. Some of them need state that jax sets up only when it lowers such an
  op: jaxlib's LAPACK handlers call LAPACK through function pointers that `_lapack.initialize()`
  fills in, which jax runs while lowering a linalg op (the GPU's hybrid kernels alike). A process
  that only loads a stored executable never lowered one, and its first call jumped through a null
  pointer: a warm disk cache crashed every LAPACK-backed op.
- handlers a user registered (`jax.ffi.register_ffi_target`) for a custom kernel's jax function.

So an executable records, when it is compiled, the registered targets it calls (`referenced`: those
in the registry then; the rest are XLA's own), and the record travels with it on disk. Before one is
loaded, `prepare` runs the initializer of every family those targets belong to (once a process) and
requires each target to be registered; one that is not raises `Unready`, and the cache compiles the
program instead of loading it (the entry stays: a later process that registered the target loads it).
What remains unchecked: a handler some other library registers at import and initializes later, as
jaxlib's LAPACK does, whose family is not in `_FAMILIES`.
"""
from __future__ import annotations

import functools
import importlib
import re
import threading

from . import config, devices

_TARGET = re.compile(r'custom_call_target="([^"]+)"')
# our platform names -> the registry's (XLA's platform names)
_REGISTRY_PLATFORMS = {"cpu": "Host", "cuda": "CUDA", "gpu": "CUDA", "rocm": "ROCM"}


class Unready(RuntimeError):
    """A stored executable calls a custom-call target this process cannot make ready."""


def _init_lapack() -> None:
    # what jax runs when it lowers a LAPACK-backed op: fills in the LAPACK functions the handlers call
    import numpy as np
    from jaxlib import lapack

    lapack.prepare_lapack_call("potrf_ffi", np.float32)


def _init_gpu_solver() -> None:
    from jaxlib import gpu_solver

    gpu_solver.initialize_hybrid_kernels()


# (jaxlib module, its registrations' platform names, the initializer jax runs when it lowers one of
# its ops): targets registered at import whose handlers need state set up later
_FAMILIES = (
    ("jaxlib.lapack", ("cpu",), _init_lapack),
    ("jaxlib.gpu_solver", ("CUDA", "ROCM"), _init_gpu_solver),
)

_lock = threading.Lock()
_initialized: set = set()


@functools.cache
def _family_of() -> dict:
    """{target name: its family's initializer} for the families jaxlib has in this install."""
    out = {}
    for module_name, platforms, init in _FAMILIES:
        try:
            module = importlib.import_module(module_name)
            registrations = module.registrations()
        except Exception:  # noqa: BLE001 (a jaxlib without the module or its plugin: no targets)
            continue
        for platform in platforms:
            for entry in registrations.get(platform, ()):
                out[entry[0]] = init
    return out


def registry(platform: str | None = None) -> frozenset | None:
    """The names of the custom-call targets registered for `platform` (default: this process's) in
    this process now, or None where the registry cannot be read."""
    from jaxlib import xla_client

    devices.jax_devices()  # the backend started: registrations made before it are in its registry then
    name = _REGISTRY_PLATFORMS.get(platform or config.platform(), (platform or config.platform()).upper())
    try:
        return frozenset(xla_client.custom_call_targets(name))
    except Exception:  # noqa: BLE001 (a jaxlib without the query)
        return None


def referenced(hlo_text: str) -> tuple | None:
    """The registered targets an optimized program (its text) calls, sorted; None where the registry
    cannot be read (then nothing can be checked at load, and `prepare` refuses the entry if it calls
    any target at all)."""
    names = set(_TARGET.findall(hlo_text))
    if not names:
        return ()
    known = registry()
    if known is None:
        return None
    return tuple(sorted(names & known))


def prepare(targets) -> None:
    """Make every target of a stored executable ready to be called in this process (see the module
    doc), or raise Unready. `targets`: what `referenced` gave when it was compiled."""
    if targets is None:
        raise Unready("its custom-call targets were not recorded")
    if not targets:
        return
    families = _family_of()
    for name in targets:
        init = families.get(name)
        if init is not None and init not in _initialized:
            with _lock:
                if init not in _initialized:
                    init()
                    _initialized.add(init)
    known = registry()
    missing = [name for name in targets if known is None or name not in known]
    if missing:
        raise Unready(f"it calls custom-call target{'s' if len(missing) > 1 else ''} {', '.join(missing)}, "
                      f"not registered in this process")
