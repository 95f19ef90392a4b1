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


# PyTorch's Python broadcasting (the meta kernels of elementwise ops) against TensorIterator's
_BROADCAST = re.compile(r"Attempting to broadcast a dimension of length (\d+) at (-\d+)! Mismatching argument at "
                        r"index \d+ had \[[^\]]*\]; but expected shape should be broadcastable to \[([^\]]*)\]")


def _broadcast_message(match) -> str:
    """The same mismatch as the CPU states it: the shape so far (a) against the argument (b), at a
    dimension counted from the front of the broadcast shape."""
    length, at = int(match.group(1)), int(match.group(2))
    common = [int(n) for n in match.group(3).split(",") if n.strip()]
    return (f"The size of tensor a ({common[at]}) must match the size of tensor b ({length}) at non-singleton "
            f"dimension {len(common) + at}")


_BROADCAST_SHAPE = re.compile(r"(doesn't match the broadcast shape )\(([^)]*)\)")  # a tuple where c10 has a list


def _shape_list(match) -> str:
    return f"{match.group(1)}[{match.group(2).rstrip(', ')}]"


# PyTorch's out= wrapper of Python meta kernels (in-place ones too) against TensorIterator's cast check
_UNSAFE_CAST = re.compile(r"Attempting to cast from (\w+) to out tensor with dtype (\w+), but this can't be cast "
                          r"because it is not safe!")


def respell(message: str) -> str:
    """`message` with sizes and dtypes spelled as c10 spells them: `[5, 0]`, `Float`; a broadcasting
    mismatch and an unsafe cast of the result as TensorIterator states them."""
    text = _DTYPE.sub(_dtype_name, _SIZE.sub(r"\1", message))
    text = _UNSAFE_CAST.sub(r"result type \1 can't be cast to the desired output type \2", text)
    return _BROADCAST_SHAPE.sub(_shape_list, _BROADCAST.sub(_broadcast_message, text))


def _message(e: Exception) -> str:
    """`e`'s message; the parts of one that torch._check was given as a tuple (a meta kernel's
    mistake: its str is the tuple's repr), joined as the C++ check joins them."""
    if len(e.args) == 1 and isinstance(e.args[0], tuple) and e.args[0] and all(isinstance(a, str) for a in e.args[0]):
        return "".join(e.args[0])
    return str(e)


def named(e: Exception, op_name: str) -> Exception:
    """The error `e` raised by (or inside) `op_name`, as neuron raises it: same type, the CPU's
    spellings, the op named first (once: a message that already starts with it keeps it)."""
    text = respell(_message(e))
    message = text if text.startswith(op_name + ":") else f"{op_name}: {text}"
    try:
        return type(e)(message)
    except Exception:  # an exception type that takes other arguments
        return RuntimeError(message)
