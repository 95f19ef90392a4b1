"""Sparse and quantized tensors: the device holds strided tensors only.

PyTorch reaches a sparse or quantized neuron tensor through dispatch keys of their own
(SparsePrivateUse1, SparseCsrPrivateUse1, QuantizedPrivateUse1): `.to("neuron")` of a sparse COO/CSR or
a quantized tensor, `torch.sparse_coo_tensor(..., device="neuron")`, a factory with `layout=`. Each
of those keys gets a fallback that raises one error naming the layout and what to do instead, in
place of the dispatcher's message about a backend key. A compressed tensor is made without a kernel of
that key (ATen builds it directly), and its accessors have composite defaults a fallback does not
override: they get the same error as kernels (`COMPRESSED_KERNELS`), and so does `_to_copy` (moving a
host compressed tensor to the device reaches this key: its composite kernel would make one).
Converting a neuron tensor to one of these layouts (`to_sparse_csr()`, `quantize_per_tensor`) raises
it too (`CONVERSIONS`: PrivateUse1 kernels), rather than running the conversion on the CPU.
"""
from __future__ import annotations

import torch

# dispatch key -> what the error calls the tensors that reach it
KEYS = {
    "SparsePrivateUse1": "sparse COO tensors (layout torch.sparse_coo)",
    "SparseCsrPrivateUse1": "sparse compressed tensors (layouts torch.sparse_csr, sparse_csc, sparse_bsr, sparse_bsc)",
    "QuantizedPrivateUse1": "quantized tensors",
}
_REMEDY = {
    "QuantizedPrivateUse1": "dequantize() it first, or keep it on the CPU",
}


COMPRESSED = "SparseCsrPrivateUse1"
# conversions of a neuron tensor -> the key whose tensors they would make
CONVERSIONS = {
    "_to_sparse": "SparsePrivateUse1", "_to_sparse.sparse_dim": "SparsePrivateUse1",
    "_to_sparse_csr": COMPRESSED, "_to_sparse_csc": COMPRESSED, "_to_sparse_bsr": COMPRESSED,
    "_to_sparse_bsc": COMPRESSED, "_to_sparse_semi_structured": COMPRESSED,
    "quantize_per_tensor": "QuantizedPrivateUse1", "quantize_per_tensor.tensor_qparams": "QuantizedPrivateUse1",
    "quantize_per_tensor.tensors": "QuantizedPrivateUse1", "quantize_per_channel": "QuantizedPrivateUse1",
    "quantize_per_tensor_dynamic": "QuantizedPrivateUse1",
    "_make_per_tensor_quantized_tensor": "QuantizedPrivateUse1",
    "_make_per_channel_quantized_tensor": "QuantizedPrivateUse1",
}
COMPRESSED_KERNELS = ("_to_copy", "crow_indices", "col_indices", "ccol_indices", "row_indices", "values", "_nnz")


def _message(name: str, key: str) -> str:
    remedy = _REMEDY.get(key, "call .to_dense() first, or keep it on the CPU")
    return f"{name}: the neuron device does not hold {KEYS[key]}: {remedy}"


def fallback_for(key: str):
    """The boxed fallback of `key`: every op raises the error."""

    def refuse(op, *args, **kwargs):
        raise NotImplementedError(_message(op.name(), key))

    refuse.__name__ = f"neuron_refuse_{key}"
    return refuse


def kernel_for(name: str, key: str):
    """A kernel of op `aten::<name>` (an overload name as `torch.library` takes it) that raises the
    error of `key`'s tensors."""

    def refuse(*args, **kwargs):
        raise NotImplementedError(_message(f"aten::{name}", key))

    refuse.__name__ = f"neuron_refuse_{name.replace('.', '_')}"
    return refuse

