"""torch's own CPU kernels inside XLA executables: the shim's XLA FFI handlers, registered with jax.

XLA's CPU backend runs a bfloat16 or float16 dot by converting both operands (weights included) to float32
copies first; torch runs the same product with oneDNN's native 16-bit kernels (AMX or AVX-512 BF16 where
the CPU has them), several times faster, with no copies. So on the CPU platform `ops/native.py` lowers
those products (mm, addmm, bmm, baddbmm and attention) to custom calls of the handlers in
`csrc/native_kernels.cpp`, which run torch's kernel on XLA's buffers; bfloat16 attention on a CPU with
AVX-512 BF16 runs the shim's own kernel instead (`csrc/bf16_attention.cpp`, about twice torch's flash
kernel's speed). XLA keeps fusing everything around them. Other platforms keep XLA's own kernels;
`TORCH_NEURONX_NATIVE_KERNELS=0` keeps them on the CPU too.

The targets are registered once, when jax starts (`lazy_jax.load`), before any executable is compiled or
loaded from the disk cache: a stored executable names its targets and finds them at load.
"""
from __future__ import annotations

from . import config

_registered = False


def enabled() -> bool:
    """Whether executables on this platform call torch's CPU kernels."""
    return config.platform() == "cpu" and config.native_kernels()


def bf16_attention_available() -> bool:
    """Whether bfloat16 attention (4-d, no mask, not causal) runs the shim's own kernel on this CPU
    (`csrc/bf16_attention.cpp`, AVX-512 BF16) rather than torch's CPU flash kernel."""
    from .. import _C

    return enabled() and _C._bf16_attention_available()


def register(jax) -> None:
    """Register every handler of the shim with jax's CPU platform (once; `jax` is the module)."""
    global _registered
    if _registered or config.platform() != "cpu":
        return
    from .. import _C

    for name, handler in _C._native_kernel_handlers().items():
        jax.ffi.register_ffi_target(name, handler, platform="cpu")
    _registered = True
