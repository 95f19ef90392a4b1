"""Builds the C++ shim (torch_neuronx._C) against the torch that is installed.

Install with `pip install --no-build-isolation .` so the extension links the installed torch.
"""
import glob
import os

# A stale install of this package (moved checkout) must not break importing torch here.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, include_paths

# Kineto's headers (the profiler's PrivateUse1 activity, csrc/profiler.cpp) ship with torch
_KINETO = [os.path.join(p, "kineto") for p in include_paths() if os.path.isdir(os.path.join(p, "kineto"))]


def _xla_ffi_include() -> list[str]:
    """jaxlib's headers of XLA's FFI (csrc/native_kernels.cpp), found without importing jax."""
    import importlib.util

    spec = importlib.util.find_spec("jaxlib")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("building torch_neuronx._C needs jaxlib installed (its XLA FFI headers)")
    include = os.path.join(list(spec.submodule_search_locations)[0], "include")
    if not os.path.isfile(os.path.join(include, "xla", "ffi", "api", "ffi.h")):
        raise RuntimeError(f"jaxlib at {include} has no XLA FFI headers (xla/ffi/api/ffi.h)")
    return [include]


setup(
    ext_modules=[
        CppExtension(
            "torch_neuronx._C",
            sorted(glob.glob("csrc/*.cpp")),
            include_dirs=_KINETO + _xla_ffi_include(),
            # OpenMP as torch is built with it: at::parallel_for (bf16_attention.cpp) runs on torch's own
            # thread pool (the libgomp.so.1 torch loads, which the loader reuses by its name)
            extra_compile_args=["-O2", "-std=c++20", "-fopenmp"],
            extra_link_args=["-fopenmp"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
