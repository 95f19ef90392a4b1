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

setup(
    ext_modules=[
        CppExtension(
            "torch_neuronx._C",
            sorted(glob.glob("csrc/*.cpp")),
            include_dirs=_KINETO,
            extra_compile_args=["-O2", "-std=c++20"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
