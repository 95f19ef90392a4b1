"""torch's own CPU kernels inside XLA executables: the shim's XLA FFI handlers, registered with jax, and
which 16-bit products use them on this CPU.

XLA's CPU backend runs a bfloat16 or float16 dot or convolution on float32 copies of both operands (or,
given float32 accumulation and bf16 operands, YNNPACK's bf16 kernel, fast only where the CPU has bf16
dot instructions). Where torch has native 16-bit kernels for the CPU (oneDNN on AVX-512 or AMX: AVX-512
BF16 and AMX run bf16 natively), they are several times faster than either, with no copies. So on the
CPU platform `ops/native.py` lowers those products to custom calls of the handlers in
`csrc/native_kernels.cpp`, which run torch's kernel on XLA's buffers; bfloat16 attention on a CPU with
AVX-512 BF16 runs the shim's own kernel instead (`csrc/bf16_attention.cpp`, about twice torch's flash
kernel's speed). XLA keeps fusing everything around them. Other platforms keep XLA's own kernels.

Which products are native is decided per kind and dtype, from the CPU (`TORCH_NEURONX_NATIVE_KERNELS=auto`,
the default): torch's 16-bit matmuls and convolutions are fast only where oneDNN takes them
(`torch.ops.mkldnn._is_mkldnn_bf16_supported()` / `_fp16_`); elsewhere (an AVX2-only CPU) torch falls
back to reference loops, 100x slower than XLA's float32 path (bf16 mm 1.2 GFLOP/s, conv 0.3, against
XLA's 120-137 on a 2-core Zen 3), and XLA keeps them. torch's CPU flash attention converts its blocks
itself and is fast on every CPU, so attention stays native. A float32 convolution with a kernel wider
than 1x1 is native wherever torch has oneDNN: its kernel ran 1.3-1.5x XLA's speed on 3x3 convolutions of 128-512
channels (Zen 4, AVX-512; the AVX2 Zen 3 measured 129 against 52 GFLOP/s); a 1x1 convolution is a matrix
product, where XLA's dot is as fast, and stays XLA's. `1` makes every 16-bit product and float32
convolution native, `0` none.

The targets are registered once, when jax starts (`lazy_jax.load`), before any executable is compiled or
loaded from the disk cache: a stored executable names its targets and finds them at load.
"""
from __future__ import annotations

import functools

from . import config

PRODUCTS = "products"  # mm, addmm, bmm, baddbmm, convolution
ATTENTION = "attention"  # 4-d attention, with or without a mask
CONVOLUTION = "convolution"  # float32 convolutions with a kernel wider than 1x1
DTYPES = ("bfloat16", "float16")

_registered = False


@functools.cache
def choices() -> tuple:
    """((kind, dtype names), ...): which 16-bit products run torch's CPU kernels in this process's
    executables (empty off the CPU platform). Decided once a process (the in-memory executables were built
    with it); a value: it is part of every executable's disk key."""
    if config.platform() != "cpu":
        return ()
    mode = config.native_kernels()
    if mode == "off":
        return ()
    if mode == "on":
        return ((PRODUCTS, DTYPES), (ATTENTION, DTYPES), (CONVOLUTION, ("float32",)))
    return ((PRODUCTS, _onednn_dtypes()), (ATTENTION, DTYPES), (CONVOLUTION, _onednn_float32()))


def uses(kind: str, dtype_name: str) -> bool:
    """Whether a `kind` product (PRODUCTS, ATTENTION or CONVOLUTION) in `dtype_name` runs torch's CPU kernel
    here."""
    return any(k == kind and dtype_name in names for k, names in choices())


def key() -> tuple:
    """What of this module's choices shapes programs, as a value for the executable key's environment."""
    return (("native", choices()), ("xla_upcasts", tuple(d for d in DTYPES if xla_upcasts(d))))


def xla_upcasts(dtype_name: str) -> bool:
    """Whether XLA's own 16-bit dot or convolution runs faster on float32 operands than on 16-bit ones with
    float32 accumulation: on the CPU platform, unless the CPU has bf16 dot instructions (AVX-512 BF16 or AMX)
    that XLA's bf16 kernel uses. Both forms accumulate in float32 and round once: the same result but for
    the order of the sums. (A 2-core Zen 3: 102-133 GFLOP/s against 84-97; a Zen 4 with AVX-512 BF16:
    268 against 661.)"""
    if config.platform() != "cpu":
        return False
    return not (dtype_name == "bfloat16" and _cpu_has_bf16_dot())


def bf16_attention_available() -> bool:
    """Whether bfloat16 attention (4-d, not causal, masked or not) runs the shim's own kernel on this CPU
    (`csrc/bf16_attention.cpp`, AVX-512 BF16 without AMX) rather than torch's CPU flash kernel (whose products
    run on AMX tiles where the CPU has them, several times faster)."""
    from .. import _C

    return uses(ATTENTION, "bfloat16") and _C._bf16_attention_available()


def onednn_supports(dtype) -> bool:
    """Whether torch's CPU runs 16-bit `dtype` (a torch dtype) matmuls and convolutions with oneDNN here (else
    with reference loops, whose argument checks also differ)."""
    return str(dtype).removeprefix("torch.") in _onednn_dtypes()


@functools.cache
def _onednn_dtypes() -> tuple:
    """The 16-bit dtypes whose matmuls and convolutions torch runs with oneDNN on this CPU."""
    import torch

    mkldnn = torch.ops.mkldnn
    return tuple(name for name, supported in (("bfloat16", mkldnn._is_mkldnn_bf16_supported),
                                              ("float16", mkldnn._is_mkldnn_fp16_supported)) if supported())


@functools.cache
def _onednn_float32() -> tuple:
    """("float32",) where torch runs float32 convolutions with oneDNN (every x86 build), else ()."""
    import torch

    return ("float32",) if torch.backends.mkldnn.is_available() else ()


@functools.cache
def _cpu_has_bf16_dot() -> bool:
    import torch

    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def register(jax) -> None:
    """Register every handler of the shim with jax's CPU platform (once; `jax` is the module)."""
    global _registered
    if _registered or config.platform() != "cpu":
        return
    from .. import _C

    for name, handler in _C._native_kernel_handlers().items():
        jax.ffi.register_ffi_target(name, handler, platform="cpu")
    _registered = True
