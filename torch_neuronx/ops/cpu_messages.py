"""Error messages as the CPU's kernels spell them: c10's names of dtypes and sizes, and the op named.

PyTorch's meta kernels and Python decompositions format a dtype as `torch.float32` and sizes as
`torch.Size([5, 0])` where the CPU's C++ kernel, checking the same thing, says `Float` and `[5, 0]`.
`named(e, op)` is the error an op raises on neuron: `e`'s type, its message respelled the CPU's way
(`respell`) and prefixed with the op's name.
"""
from __future__ import annotations

import re

import torch

# c10's names of scalar types: `toString` ("BFloat16", what a ScalarType streams as) and the C++ type
# name (what a caffe2::TypeMeta streams as: "c10::BFloat16", "float")
_SCALAR_TYPE = {
    torch.float64: "Double", torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.complex128: "ComplexDouble", torch.complex64: "ComplexFloat", torch.complex32: "ComplexHalf",
    torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
    torch.bool: "Bool",
}
_CPP_TYPE = {
    torch.float64: "double", torch.float32: "float", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16",
    torch.complex128: "c10::complex<double>", torch.complex64: "c10::complex<float>",
    torch.complex32: "c10::complex<c10::Half>", torch.int64: "long int", torch.int32: "int",
    torch.int16: "short int", torch.int8: "signed char", torch.uint8: "unsigned char", torch.bool: "bool",
}


def scalar_type_name(dtype) -> str:
    return _SCALAR_TYPE.get(dtype, str(dtype).removeprefix("torch."))


def cpp_type_name(dtype) -> str:
    return _CPP_TYPE.get(dtype, str(dtype).removeprefix("torch."))


_SIZE = re.compile(r"torch\.Size\((\[[^\]]*\])\)")
_DTYPE = re.compile(r"\btorch\.([a-z][a-z0-9_]*)\b")


def _dtype_name(match) -> str:
    value = getattr(torch, match.group(1), None)
    return scalar_type_name(value) if isinstance(value, torch.dtype) else match.group(0)


def respell(message: str) -> str:
    """`message` with sizes and dtypes spelled as c10 spells them: `[5, 0]`, `Float`."""
    return _DTYPE.sub(_dtype_name, _SIZE.sub(r"\1", message))


def named(e: Exception, op_name: str) -> Exception:
    """The error `e` raised by (or inside) `op_name`, as neuron raises it: same type, the CPU's
    spellings, the op named first (once: a message that already starts with it keeps it)."""
    text = respell(str(e))
    message = text if text.startswith(op_name + ":") else f"{op_name}: {text}"
    try:
        return type(e)(message)
    except Exception:  # an exception type that takes other arguments
        return RuntimeError(message)
