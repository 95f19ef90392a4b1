"""Argument checks the CPU's kernels make and PyTorch's meta kernels lack, made before the meta call.

An eager op learns its result from the meta kernel, which for some ops checks less than the CPU
kernel does: `mm` of a bfloat16 and a float32 matrix has a meta result (the first one's dtype)
where the CPU raises, and the convolution meta kernel computes a size from a zero stride or a
negative padding. `check(op, args, kwargs)` raises what the CPU raises for such calls, with its
message, so the executor (which names the op) rejects them as the CPU does. `CHECKS` maps an
overload packet's name (`aten.mm`: every overload, `out=` ones too) to a function taking the
schema's arguments; it runs on the call's own tensors (overlap checks need their storages), and,
for a compiled graph, on fake copies of its inputs as Dynamo's graph dispatches them
(`compile/graph_argument_checks.py`): a check reads shapes, dtypes, strides and storages, and no value of a
fake tensor.
"""
from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake

from ..runtime import native_kernels
from .cpu_messages import cpp_type_name, named, scalar_type_name
from . import out_checks


def _tensor(x) -> bool:
    return isinstance(x, torch.Tensor)


# ---- the matmul family: the CPU's BLAS kernels take one dtype


def _mm(self, mat2, *_, **__):
    if _tensor(self) and _tensor(mat2) and self.dtype != mat2.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: "
                           f"{cpp_type_name(self.dtype)} != {cpp_type_name(mat2.dtype)}")


def _addmm_like(self, mat1, mat2):
    """addmm's order: the two matrices, then the added tensor against the second one."""
    if mat1.dtype != mat2.dtype:
        raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got "
                           f"{scalar_type_name(mat1.dtype)} and {scalar_type_name(mat2.dtype)}")
    if _tensor(self) and self.dtype != mat2.dtype:
        raise RuntimeError(f"self and mat2 must have the same dtype, but got "
                           f"{scalar_type_name(self.dtype)} and {scalar_type_name(mat2.dtype)}")


def _addmm(self, mat1, mat2, *_, **__):
    _addmm_like(self, mat1, mat2)


def _addbmm(self, batch1, batch2, *_, **__):
    _addmm_like(self, batch1, batch2)


def _mv(self, vec, *_, **__):
    if self.dtype != vec.dtype:
        result = torch.promote_types(self.dtype, vec.dtype)
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got "
                           f"{scalar_type_name(result)}, {scalar_type_name(self.dtype)}, and "
                           f"{scalar_type_name(vec.dtype)}")


# ---- convolution: at::_convolution's checks (aten/src/ATen/native/Convolution.cpp)


def _expand(values, dim, name):
    values = list(values)
    if len(values) == 1:
        return values * dim
    if len(values) != dim:
        raise RuntimeError(f"expected {name} to be a single integer value or a list of {dim} values to match "
                           f"the convolution dimensions, but got {name}={values}")
    return values


def _convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, *_, **__):
    dim = weight.dim() - 2
    if dim <= 0:
        raise RuntimeError("weight should have at least three dimensions")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    stride = _expand(stride, dim, "stride")
    padding = _expand(padding, dim, "padding")
    dilation = _expand(dilation, dim, "dilation")
    output_padding = _expand(output_padding, dim, "output_padding")
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if any(p < 0 for p in output_padding):
        raise RuntimeError("negative output_padding is not supported")
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError("dilation should be greater than zero")
    k, w = input.dim(), list(weight.shape)
    if weight.dim() != k:
        raise RuntimeError(f"Expected {len(w)}-dimensional input for {len(w)}-dimensional weight {w}, but got "
                           f"{k}-dimensional input of size {list(input.shape)} instead")
    if w[0] < groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be at least {groups} at dimension 0, "
                           f"but got weight of size {w} instead")
    if w[0] % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, "
                           f"but got weight of size [{w}] instead")
    channels = input.shape[1]
    if not transposed:
        if channels != w[1] * groups:
            raise RuntimeError(f"Given groups={groups}, weight of size {w}, expected input{list(input.shape)} to "
                               f"have {w[1] * groups} channels, but got {channels} channels instead")
        if bias is not None and (bias.dim() != 1 or bias.shape[0] != w[0]):
            raise RuntimeError(f"Given weight of size {w}, expected bias to be 1-dimensional with {w[0]} elements, "
                               f"but got bias of size {list(bias.shape)} instead")
        padded = [input.shape[i + 2] + 2 * padding[i] for i in range(dim)]
        kernel = [dilation[i] * (w[i + 2] - 1) + 1 for i in range(dim)]
        if any(p < q for p, q in zip(padded, kernel)):
            raise RuntimeError(f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). "
                               f"Kernel size: ({' x '.join(map(str, kernel))}). "
                               "Kernel size can't be greater than actual input size")
    else:
        if channels != w[0]:
            raise RuntimeError(f"Given transposed={int(bool(transposed))}, weight of size {w}, expected "
                               f"input{list(input.shape)} to have {w[0]} channels, but got {channels} "
                               "channels instead")
        if bias is not None and (bias.dim() != 1 or bias.shape[0] != w[1] * groups):
            raise RuntimeError(f"Given transposed={int(bool(transposed))}, weight of size {w}, expected bias to be "
                               f"1-dimensional with {w[1] * groups} elements, but got bias of size "
                               f"{list(bias.shape)} instead")
    if input.dtype != weight.dtype:
        if input.dtype in (torch.bfloat16, torch.float16) and not native_kernels.onednn_supports(input.dtype):
            # no oneDNN kernel for a 16-bit input on this CPU: torch's reference kernel reads the weight as
            # the input's type and says so
            raise RuntimeError(f"expected scalar type {scalar_type_name(input.dtype)} but found "
                               f"{scalar_type_name(weight.dtype)}")
        raise RuntimeError(f"Input type ({cpp_type_name(input.dtype)}) and weight type "
                           f"({cpp_type_name(weight.dtype)}) should be the same")
    if bias is not None and input.dtype != bias.dtype:
        raise RuntimeError(f"Input type ({cpp_type_name(input.dtype)}) and bias type "
                           f"({cpp_type_name(bias.dtype)}) should be the same")


# ---- written-to tensors that overlap an input (at::assert_no_overlap, aten/src/ATen/MemoryOverlap.cpp):
# kernels that read an input while they write must not write where they read


def _extent(t):
    """The byte range [start, end) the view `t` spans in its storage (None: it spans none). From the
    storage offset, not the data pointer: a compiled graph's fake tensors have none, but share a
    storage between views as real ones do."""
    if t.numel() == 0:
        return None
    last = sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()))
    first = t.storage_offset() - sum((n - 1) * -s for n, s in zip(t.shape, t.stride()) if s < 0)
    return first * t.element_size(), (first + last + 1) * t.element_size()


def overlap(a, b):
    """"full" if views `a` and `b` are the same memory, "partial" if they share some, else None."""
    if not (_tensor(a) and _tensor(b)) or a.device != b.device:
        return None
    if a.untyped_storage()._cdata != b.untyped_storage()._cdata:
        return None
    ea, eb = _extent(a), _extent(b)
    if ea is None or eb is None or ea[1] <= eb[0] or eb[1] <= ea[0]:
        return None
    if (a.storage_offset() * a.element_size() == b.storage_offset() * b.element_size() and a.shape == b.shape
            and a.stride() == b.stride() and a.element_size() == b.element_size()):
        return "full"
    return "partial"


def _no_overlap(written, read, partial_only=False):
    status = overlap(written, read)
    if status == "partial" or (status == "full" and not partial_only):
        raise RuntimeError("unsupported operation: some elements of the input tensor and the written-to tensor "
                           "refer to a single memory location. Please clone() the tensor before performing the "
                           "operation.")


def _no_internal_overlap(written):
    """at::assert_no_internal_overlap: an expanded (stride 0) written-to tensor, checked before a resize."""
    if _tensor(written) and any(n > 1 and s == 0 for n, s in zip(written.shape, written.stride())):
        raise RuntimeError("unsupported operation: more than one element of the written-to tensor refers to a "
                           "single memory location. Please clone() the tensor before performing the operation.")


def _index_select(self, dim, index, *_, out=None, **__):
    _no_internal_overlap(out)
    _no_overlap(out, self)
    _no_overlap(out, index)


def _take(self, index, *_, out=None, **__):
    _no_internal_overlap(out)
    _no_overlap(out, index)
    _no_overlap(out, self)


def _masked_select(self, mask, *_, out=None, **__):
    _no_internal_overlap(out)
    _no_overlap(out, self)
    _no_overlap(out, mask)


def _gather(self, dim, index, *_, out=None, **__):
    _no_internal_overlap(out)
    _no_overlap(out, self)
    _no_overlap(out, index, partial_only=True)


def _kthvalue(self, k, *_, values=None, indices=None, **__):
    _no_overlap(values, self)
    _no_overlap(indices, self)


# ---- cat (aten/src/ATen/native/TensorShape.cpp: cat's meta function on the CPU)


def _cat(tensors, dim=0, *_, out=None, **__):
    tensors = list(tensors)
    for i, t in enumerate(tensors):
        if t.dim() == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    shaped = [t for t in tensors if not (t.dim() == 1 and t.numel() == 0)]  # legacy empty tensors: skipped
    for t in shaped[1:]:
        if t.dim() != shaped[0].dim():
            raise RuntimeError(f"Tensors must have same number of dimensions: got {shaped[0].dim()} and {t.dim()}")
    _no_internal_overlap(out)
    for t in tensors:
        _no_overlap(out, t)


# ---- reductions without an identity (aten/src/ATen/native/ReduceOps.cpp)


def _amax_amin(name):
    def check(self, dim=(), keepdim=False, *_, out=None, **__):
        if _tensor(out) and out.dtype != self.dtype:
            raise RuntimeError(f"Expected the dtype for input and out to match, but got "
                               f"{scalar_type_name(self.dtype)} for input's dtype and "
                               f"{scalar_type_name(out.dtype)} for out's dtype.")
        if self.numel() == 0:
            dims = [dim] if isinstance(dim, int) else list(dim)
            if not dims:
                raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                                   "Specify the reduction dim with the 'dim' argument.")
            for d in dims:
                d = d + self.dim() if d < 0 else d
                if 0 <= d < self.dim() and self.shape[d] == 0:
                    raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    return check


# ---- multinomial (aten/src/ATen/native/Distributions.cpp: multinomial_out)


def _multinomial(self, num_samples, replacement=False, *_, out=None, **__):
    if not 0 < self.dim() <= 2:
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not self.dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{scalar_type_name(self.dtype)}")
    if _tensor(out) and out.dtype != torch.int64:
        raise RuntimeError(f"multinomial expects Long tensor out, got: {scalar_type_name(out.dtype)}")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if not replacement and num_samples > self.shape[-1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    if self.shape[-1] > 2 ** 24:
        raise RuntimeError("number of categories cannot exceed 2^24")


def _masked_scatter(self, mask, source, *_, **__):
    if _tensor(source) and source.dtype != self.dtype:  # (the CPU's words: no space after "got")
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but got"
                           f"{scalar_type_name(self.dtype)} and {scalar_type_name(source.dtype)}")
    if _tensor(mask) and mask.dtype != torch.bool:
        raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with dtype "
                           f"{scalar_type_name(mask.dtype)}")


def _embedding(weight, indices, *_, **__):
    if weight.dim() != 2:
        raise RuntimeError("'weight' must be 2-D")


# ---- scalar arguments and out= dtypes


_OVERFLOW_NAME = {
    torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16",
    torch.int8: "int8_t", torch.int16: "int16_t", torch.int32: "int32_t", torch.int64: "int64_t",
    torch.uint8: "uint8_t",
}


def _masked_fill(self, mask, value, *_, **__):
    """c10::checked_convert: a number the tensor's dtype cannot hold (a finite float beyond its range,
    an int dtype's non-finite or out-of-range value, a complex one with an imaginary part for a real
    dtype). A value tensor is read only where it is complex and `self` is not. And the mask's dtype
    (the meta kernel takes a uint8 one)."""
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype {cpp_type_name(mask.dtype)}")
    if self.dtype not in _OVERFLOW_NAME:
        return
    if _tensor(value):
        if not (value.dtype.is_complex and value.dim() == 0) or is_fake(value):
            return  # a compiled graph's value tensor holds no number to read
        value = value.item()
    _checked_convert(value, self.dtype)


def _uniform(self, from_=0.0, to=1.0, *_, **__):
    _random_dtype(self, "check_uniform_bounds", complex_ok=True)
    if from_ > to:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={from_:g} > to={to:g}")


def _bucketize(self, boundaries, *_, **__):
    if _tensor(boundaries) and boundaries.dim() != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.dim()})")


def _aminmax(self, *_, min=None, max=None, **__):
    for out in (min, max):
        if _tensor(out) and out.dtype != self.dtype:
            raise RuntimeError(f"Expected out tensor to have dtype {cpp_type_name(self.dtype)}, but got "
                               f"{cpp_type_name(out.dtype)} instead")


def _complex(real, imag, *_, out=None, **__):
    reals = (torch.float16, torch.float32, torch.float64)
    if _tensor(real) and _tensor(imag) and real.dtype in reals and imag.dtype in reals and real.dtype != imag.dtype:
        # the decomposition raises it too, in eager mode; a compiled graph's decomposition runs in
        # AOTAutograd's trace, which would hide it in a compilation error
        raise RuntimeError(f"Expected object of scalar type {scalar_type_name(real.dtype)} but got scalar type "
                           f"{scalar_type_name(imag.dtype)} for second argument")
    if _tensor(out) and _tensor(real) and real.dtype.is_floating_point:
        expected = torch.complex128 if real.dtype == torch.float64 else torch.complex64
        if out.dtype != expected:
            raise RuntimeError(f"Expected object of scalar type {scalar_type_name(expected)} but got scalar type "
                               f"{scalar_type_name(out.dtype)} for argument 'out'")


# ---- losses and linear algebra whose CPU kernels check other conditions (or in another order)
# than PyTorch's decomposition or meta kernel


def _multi_margin_loss(self, target, p=1, margin=1, weight=None, *_, **__):
    """aten/src/ATen/native/LossMultiMargin.cpp: the decomposition reshapes before it checks (its
    messages name the reshaped sizes) and leaves the dtypes to gather and promotion."""
    if p not in (1, 2):
        raise RuntimeError("only p == 1 and p == 2 supported")
    n = self.dim()
    if not ((n == 2 and self.shape[1] != 0) or (n == 1 and self.shape[0] != 0) or n == 0):
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                           f"{list(self.shape)}")
    frames, dim = (self.shape[0], self.shape[1]) if n == 2 else (1, self.shape[0] if n == 1 else 1)
    if target.dim() > 1 or target.numel() != frames:
        raise RuntimeError(f"multi_margin_loss: target tensor should be 1-D with size equal to the number of input "
                           f"samples (batch size). Expected target size [{frames}], but got {list(target.shape)}. "
                           f"Input has shape {list(self.shape)}.")
    if _tensor(weight) and (weight.dim() > 1 or weight.numel() != dim):
        raise RuntimeError(f"inconsistent weight size, expected {dim} but got {list(weight.shape)}")
    # the CPU kernel's dispatch takes float and double; the reduced float types stay accepted here
    if not self.dtype.is_floating_point:
        raise NotImplementedError(f'"multi_margin_loss_cpu_kernel" not implemented for '
                                  f"'{scalar_type_name(self.dtype)}'")
    if target.dtype != torch.int64:
        raise RuntimeError(f"expected scalar type Long but found {scalar_type_name(target.dtype)}")
    if _tensor(weight) and weight.dtype != self.dtype:
        raise RuntimeError(f"expected scalar type {scalar_type_name(self.dtype)} but found "
                           f"{scalar_type_name(weight.dtype)}")


def _ormqr(self, input2, input3, left=True, transpose=False, *_, **__):
    """BatchLinearAlgebra.cpp's ormqr checks: tau's length is min(other's, input's), where the meta
    kernel only bounds it; the dtype messages as the CPU spells them ("dtypeFloat")."""
    tau, other = input2, input3
    if self.dim() < 2:
        raise RuntimeError("torch.ormqr: input must have at least 2 dimensions.")
    if other.dim() < 2:
        raise RuntimeError("torch.ormqr: other must have at least 2 dimensions.")
    side = -2 if left else -1
    if other.shape[side] != self.shape[-2]:
        raise RuntimeError(f"torch.ormqr: other.shape[{side}] must be equal to input.shape[-2]")
    if tau.dim() == 0:  # the CPU reads tau.size(-1)
        raise IndexError("Dimension specified as -1 but tensor has no dimensions")
    if tau.shape[-1] != min(other.shape[side], self.shape[-1]):
        raise RuntimeError(f"torch.ormqr: tau.shape[-1] must be equal to min(other.shape[{side}], input.shape[-1])")
    if self.dim() - tau.dim() != 1:
        raise RuntimeError(f"torch.ormqr: Expected tau to have one dimension less than input, but got tau.ndim "
                           f"equal to {tau.dim()} and input.ndim is equal to {self.dim()}")
    if self.dim() != other.dim():
        raise RuntimeError(f"torch.ormqr: Expected other to have the same number of dimensions as input, but got "
                           f"other.ndim equal to {other.dim()} and input.ndim is equal to {self.dim()}")
    if self.dim() > 2:
        if tuple(tau.shape[:-1]) != tuple(self.shape[:-2]):
            raise RuntimeError(f"torch.ormqr: Expected batch dimensions of tau to be equal to input.shape[:-2], "
                               f"but got {list(tau.shape[:-1])}")
        if tuple(other.shape[:-2]) != tuple(self.shape[:-2]):
            raise RuntimeError(f"torch.ormqr: Expected batch dimensions of other to be equal to input.shape[:-2], "
                               f"but got {list(other.shape[:-2])}")
    for name, t in (("tau", tau), ("other", other)):
        if t.dtype != self.dtype:
            raise RuntimeError(f"torch.ormqr: Expected input and {name} to have the same dtype, but input has "
                               f"dtype{scalar_type_name(self.dtype)} and {name} has dtype {scalar_type_name(t.dtype)}")


def _as_strided_scatter(self, src, size, stride, storage_offset=None, *_, **__):
    """The CPU views a clone of `self` (a storage of its numel) through (size, stride, offset): a
    view past its end is setStorage's error. The checks before it (a negative offset or stride,
    lengths that differ) are the meta kernel's, raised by it."""
    offset = 0 if storage_offset is None else storage_offset
    size, stride = list(size), list(stride)
    if offset < 0 or len(size) != len(stride) or any(s < 0 for s in stride) or any(n == 0 for n in size):
        return
    itemsize = self.element_size()
    needed = (offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1) * itemsize
    have = self.numel() * itemsize
    if needed > have:
        raise RuntimeError(f"setStorage: sizes {size}, strides {stride}, storage offset {offset}, and itemsize "
                           f"{itemsize} requiring a storage size of {needed} are out of bounds for storage of size "
                           f"{have}")


def _index_func(name):
    """index_func_meta_impl (TensorAdvancedIndexing.cpp), the CPU's checks of index_add and
    index_reduce: PyTorch's meta kernel words the index count otherwise and lets a source of another
    slice shape through (the lowering then broadcast it, or failed in jax)."""
    def check(self, dim, index, source, *rest, **kwargs):
        if name == "index_reduce":
            reduce = rest[0] if rest else kwargs.get("reduce")
            if reduce not in ("prod", "mean", "amax", "amin"):
                raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got "
                                   f"{reduce}.")
        if not (_tensor(index) and _tensor(source)):
            return
        rank = max(self.dim(), 1)
        if not -rank <= dim < rank:  # index_reduce's meta kernel does not wrap it
            raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
        d = dim + rank if dim < 0 else dim
        if index.dim() > 1:
            raise IndexError(f"{name}_(): Index is supposed to be a vector, but got dim: {index.dim()} with type: "
                             f"{scalar_type_name(index.dtype)} and size: {list(index.shape)}")
        if index.dtype not in (torch.int64, torch.int32):
            raise RuntimeError(f"{name}_(): Expected dtype int32/int64 for index but got: "
                               f"{scalar_type_name(index.dtype)}")
        if self.dtype != source.dtype:
            raise RuntimeError(f"{name}_(): self ({scalar_type_name(self.dtype)}) and source "
                               f"({scalar_type_name(source.dtype)}) must have the same scalar type")
        if not (d == 0 or d < source.dim()):
            raise RuntimeError(f"{name}_(): Indexing dim {d} is out of bounds of the source tensor with dim "
                               f"{source.dim()}")
        if index.numel() != (1 if source.dim() == 0 else source.shape[d]):
            if source.dim() == 0:  # the CPU's message reads source.size(dim)
                raise IndexError(f"Dimension specified as {d} but tensor has no dimensions")
            raise RuntimeError(f"{name}_(): Number of indices ({index.numel()}) should be equal to source.size(dim): "
                               f"({source.shape[d]}), for dim: {d}")
        mine, theirs = list(self.shape), list(source.shape)
        if self.dim() and source.dim():
            del mine[d], theirs[d]
        if mine != theirs:
            raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the specified dimension. "
                               f"Got self.shape = {list(self.shape)} source.shape = {list(source.shape)}")
    return check


_INDEX_DTYPES = (torch.int64, torch.int32, torch.bool, torch.uint8)


_MASK_DTYPES = (torch.bool, torch.uint8)


def index_masks(self, indices) -> None:
    """The CPU's checks of the boolean/uint8 masks among `indices` (ATen's `expandTensors`): each
    mask's sizes equal those of the dims of `self` it covers, else an IndexError naming both shapes."""
    dim = 0
    for index in indices:
        if index is None or index.dtype not in _MASK_DTYPES:
            dim += 1
            continue
        for j in range(index.dim()):
            if dim + j >= self.dim():
                raise IndexError(f"too many indices for tensor of dimension {self.dim()}")
            if index.shape[j] != self.shape[dim + j]:
                raise IndexError(f"The shape of the mask {list(index.shape)} at index {j} does not match the "
                                 f"shape of the indexed tensor {list(self.shape)} at index {dim + j}")
        dim += index.dim()


def _index(self, indices, *_, **__):
    """index / index_put: an index tensor's dtype, a mask's shape, and positions into a dimension of
    size 0 (which the meta kernel lets through to the lowering), as the CPU's `AdvancedIndex` rejects them."""
    given = [i for i in indices if i is not None]
    if any(i.dtype not in _INDEX_DTYPES for i in given):
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    index_masks(self, indices)
    if not given or any(i.dtype in (torch.bool, torch.uint8) for i in given) or len(indices) > self.dim():
        return  # masks become positions first; too many indices is the meta kernel's error
    if any(self.shape[d] == 0 for d, i in enumerate(indices) if i is not None) and \
            0 not in torch.broadcast_shapes(*(i.shape for i in given)):
        raise IndexError("index is out of bounds for dimension with size 0")


# ---- numbers a kernel converts to its dtype (c10::checked_convert) and the checks of the add/sub
# family (aten/src/ATen/native/BinaryOps.h), fill and clamp, pow, topk, addcmul/addcdiv


def _overflows(value, dtype) -> bool:
    """c10::overflows: whether the number `value` converted to `dtype` overflows. An unsigned dtype
    takes negative ints down to -max (they wrap), a float dtype any non-finite number, bool and
    complex dtypes any number."""
    if dtype not in _OVERFLOW_NAME:
        return False
    if isinstance(value, complex):
        if value.imag != 0:
            return True
        value = value.real
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if dtype.is_floating_point:
        return value == value and abs(value) != float("inf") and abs(value) > torch.finfo(dtype).max
    info = torch.iinfo(dtype)
    if isinstance(value, float):
        return value != value or abs(value) == float("inf") or not info.min <= value <= info.max
    if info.min == 0 and value < 0:
        return -value > info.max
    return not info.min <= value <= info.max


def _checked_convert(value, dtype) -> None:
    if _overflows(value, dtype):
        raise RuntimeError(f"value cannot be converted to type {_OVERFLOW_NAME[dtype]} without overflow")


def _is_bool(x) -> bool:
    """A bool tensor or a Python bool."""
    return x.dtype == torch.bool if _tensor(x) else isinstance(x, bool)


def _cast_check(result, out, name=scalar_type_name):
    """TensorIterator's check of a written tensor: the result type must cast to its dtype."""
    if not torch.can_cast(result, out.dtype):
        raise RuntimeError(f"result type {scalar_type_name(result)} can't be cast to the desired output type "
                           f"{name(out.dtype)}")


def _in_place_shape_ok(self, *operands) -> bool:
    """Whether the operands broadcast to `self`'s shape (else the meta kernel raises the CPU's error first)."""
    try:
        shape = torch.broadcast_shapes(*(t.shape for t in (self, *operands) if _tensor(t)))
    except RuntimeError:
        return False
    return tuple(shape) == tuple(self.shape)


def _add_sub(name, in_place):
    """sub_check (bool operands), TensorIterator's cast of an in-place result, then alpha_check and
    alpha's conversion to the computation's dtype, in the CPU's order."""
    def check(self, other, *rest, alpha=1, **__):
        if rest:
            alpha = rest[0]  # the .Scalar overloads take it positionally
        if name != "add":
            first, second = _is_bool(self), _is_bool(other)
            if first and second:
                raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                                   "Use the `^` or `logical_xor()` operator instead.")
            if first or second:
                raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. If you are "
                                   "trying to invert a mask, use the `~` or `logical_not()` operator instead.")
        if (type(alpha) is int and alpha == 1 and not in_place) or not (
                _tensor(self) and (_tensor(other) or isinstance(other, (bool, int, float, complex)))):
            return  # (add runs this on every call: the common case returns first)
        dtype = torch.result_type(self, other)
        if in_place and not torch.can_cast(dtype, self.dtype) and _in_place_shape_ok(self, other):
            _cast_check(dtype, self)
        if isinstance(alpha, bool) and dtype != torch.bool:
            raise RuntimeError("Boolean alpha only supported for Boolean results.")
        if isinstance(alpha, (float, complex)) and not (dtype.is_floating_point or dtype.is_complex):
            raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
        if isinstance(alpha, complex) and not dtype.is_complex:
            raise RuntimeError("For non-complex input tensors, argument alpha must not be a complex number.")
        if alpha != 1:
            _checked_convert(alpha, dtype)
    return check


def _fill(self, value, *_, **__):
    _checked_convert(value, self.dtype)


def _index_fill(self, dim, index, value, *_, **__):
    if isinstance(value, complex) and not self.dtype.is_complex:
        raise RuntimeError("index_fill_(): Converting complex Scalar to non-complex type is not supported")
    _checked_convert(value, self.dtype)


def _full(size, fill_value, *_, dtype=None, **__):
    if dtype is not None:
        _checked_convert(fill_value, dtype)


def _full_like(self, fill_value, *_, dtype=None, **__):
    _checked_convert(fill_value, self.dtype if dtype is None else dtype)


def _new_full(self, size, fill_value, *_, dtype=None, **__):
    _checked_convert(fill_value, self.dtype if dtype is None else dtype)


def _clamp(in_place):
    """clamp's meta function (TensorCompare.cpp) for number bounds: complex rejected, an in-place
    result that promotes rejected (its dtype named as a C++ type), then each bound converted to the
    computation's dtype."""
    def check(self, min=None, max=None, *_, **__):
        if self.dtype.is_complex:
            raise NotImplementedError("clamp is not supported for complex types")
        bounds = [b for b in (min, max) if b is not None]
        if not bounds or any(_tensor(b) for b in bounds):
            return  # the meta kernel's error; tensor bounds are TensorIterator's (the in-place rule)
        dtype = self.dtype
        for bound in bounds:
            dtype = torch.result_type(torch.empty(1, dtype=dtype, device="meta"), bound)
        if in_place and dtype != self.dtype:
            raise RuntimeError(f"result type {scalar_type_name(dtype)} can't be cast to the desired output type "
                               f"{cpp_type_name(self.dtype)}")
        for bound in bounds:
            _checked_convert(bound, dtype)
    return check


def _clamp_bound(in_place):
    """clamp_min / clamp_max with a number bound."""
    clamp = _clamp(in_place)

    def check(self, bound, *_, **__):
        clamp(self, bound)
    return check


def _pow(self, exponent, *_, **__):
    """pow(Tensor, Scalar): an integral base and a negative integral exponent."""
    if (_tensor(self) and not (self.dtype.is_floating_point or self.dtype.is_complex) and isinstance(exponent, int)
            and not isinstance(exponent, bool) and exponent < 0):
        raise RuntimeError("Integers to negative integer powers are not allowed.")


def _topk(self, k, dim=-1, *_, **__):
    rank = max(self.dim(), 1)
    if not -rank <= dim < rank:
        return  # the meta kernel's error
    size = self.shape[dim] if self.dim() else 1
    if not 0 <= k <= size:
        raise RuntimeError("selected index k out of range")


def _addcdiv(self, tensor1, tensor2, *_, value=1, **__):
    integral = lambda t: not (t.dtype.is_floating_point or t.dtype.is_complex)  # noqa: E731  (bool too)
    if integral(tensor1) and integral(tensor2):
        raise RuntimeError("Integer division with addcdiv is no longer supported, and in a future  release addcdiv "
                           "will perform a true division of tensor1 and tensor2. The historic addcdiv behavior can be "
                           "implemented as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for "
                           "integer inputs and as (input + value * tensor1 / tensor2) for float inputs. The future "
                           "addcdiv behavior is just the latter implementation: (input + value * tensor1 / tensor2), "
                           "for all dtypes.")
    _addcmul(self, tensor1, tensor2, value=value)


def _addcmul(self, tensor1, tensor2, *_, value=1, **__):
    dtype = torch.promote_types(torch.promote_types(self.dtype, tensor1.dtype), tensor2.dtype)
    _checked_convert(value, dtype)


def _int_division(kernel=None):
    """An integer division (floor, trunc, remainder, fmod; `kernel` names the CPU's, None: div, which
    divides as integers only with a rounding mode): bool operands, which the CPU's kernel does not
    take, and the number 0 as the divisor, the CPU's ZeroDivisionError where the result has elements
    (a tensor divisor is checked on the device: ops/elementwise.py)."""
    def check(self, other, *_, rounding_mode=None, **__):
        name = kernel or (None if rounding_mode is None else f"div_{rounding_mode}_cpu")
        if name is None or not _tensor(self):
            return
        if self.dtype == torch.bool and _is_bool(other):
            raise _dispatch_error(name, torch.bool)
        if _tensor(other):
            if other.dim() or other.device.type != "cpu" or is_fake(other):
                return
            other = other.item()
        if not isinstance(other, int) or other != 0 or not self.numel():
            return
        dtype = torch.result_type(self, other)
        if not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool):
            raise RuntimeError("ZeroDivisionError")
    return check


def _dispatch_error(kernel, dtype):
    """What AT_DISPATCH raises for a dtype the CPU's kernel has no case for."""
    return NotImplementedError(f'"{kernel}" not implemented for \'{scalar_type_name(dtype)}\'')


def _random_dtype(self, kernel, complex_ok=False, integral_ok=False):
    """A random kernel's dtypes: floating ones, and complex or integral ones where it takes them."""
    dtype = self.dtype
    if not (dtype.is_floating_point or (complex_ok and dtype.is_complex)
            or (integral_ok and not dtype.is_complex and dtype != torch.bool)):
        raise _dispatch_error(kernel, dtype)


def _floating_kernel(kernel):
    """An op whose CPU kernel takes floating dtypes only (where the meta kernel raised another error
    for an integral one, or a decomposition computed something)."""
    def check(self, *_, **__):
        if _tensor(self) and not self.dtype.is_floating_point:
            raise _dispatch_error(kernel, self.dtype)
    return check


def _continuous(name, type_name):
    def check(self, *_, **__):
        if not self.dtype.is_floating_point:
            raise RuntimeError(f"{name} distribution is a continuous probability distribution. dtype must be a "
                               f"floating point but you specified {type_name(self.dtype)}")
    return check


def _log_normal(self, *_, **__):
    _random_dtype(self, "log_normal_cpu")


def _geometric(self, *_, **__):
    _random_dtype(self, "geometric_cpu", integral_ok=True)


def _normal(self, *_, **__):
    _random_dtype(self, "normal_kernel_cpu", complex_ok=True)


def _bernoulli(self, p=0.5, *_, **__):
    if not _tensor(p) and self.dtype.is_complex:  # (a tensor p: another kernel)
        raise _dispatch_error("bernoulli_scalar_cpu_", self.dtype)


def _lerp(self, end, weight, *_, **__):
    """lerp's meta function (Lerp.cpp), its dtypes named as C++ types."""
    for name, t in (("end", end), ("weight", weight)):
        if _tensor(t) and t.dtype != self.dtype:
            raise RuntimeError(f"expected dtype {cpp_type_name(self.dtype)} for `{name}` but got dtype "
                               f"{cpp_type_name(t.dtype)}")


def _baddbmm(self, batch1, batch2, *_, **__):
    if batch1.dim() == 3 and batch2.dim() == 3 and not (self.dtype == batch1.dtype == batch2.dtype):
        raise RuntimeError(f"Input dtypes must be the same, got: input {cpp_type_name(self.dtype)}, batch1: "
                           f"{cpp_type_name(batch1.dtype)}, batch2: {cpp_type_name(batch2.dtype)}")


def _heaviside(self, values, *_, **__):
    if _tensor(values) and values.dtype != self.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")


def _put(self, index, source, *_, **__):
    if _tensor(index) and index.dtype == torch.int64 and _tensor(source) and source.dtype != self.dtype:
        raise RuntimeError(f"put_(): self and source expected to have the same dtype, but got self.dtype = "
                           f"{scalar_type_name(self.dtype)} and source.dtype = {scalar_type_name(source.dtype)}")


def _index_copy(self, dim, index, source, *_, **__):
    if not (_tensor(index) and _tensor(source)) or index.dim() > 1 or index.dtype != torch.int64:
        return  # the index's checks come first: the meta kernel's (or decomposition's)
    if source.dtype != self.dtype:
        raise RuntimeError(f"index_copy_(): self and source expected to have the same dtype, but got (self) "
                           f"{scalar_type_name(self.dtype)} and (source) {scalar_type_name(source.dtype)}")


def _ldexp_in_place(self, other, *_, **__):
    """ldexp_: a floating result written into `self` (BinaryOps.cpp)."""
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise RuntimeError(f"ldexp can't be cast to the desired output type {scalar_type_name(self.dtype)}")
    if _tensor(other) and other.dtype.is_complex:
        _cast_check(torch.promote_types(self.dtype, other.dtype), self)


def _index_put(self, indices, values, *_, **__):
    """index_put: the index checks (`_index`), then the values' dtype and shape (against the indexed
    result's, where integer indices make it static)."""
    _index(self, indices)
    if not _tensor(values):
        return
    if values.dtype != self.dtype:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{scalar_type_name(self.dtype)} for the destination and {scalar_type_name(values.dtype)} "
                           f"for the source.")
    indexed = indexed_shape(self, indices)
    if indexed is not None and (values.dim() > len(indexed) or any(
            v not in (1, r) for v, r in zip(reversed(values.shape), reversed(indexed)))):
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast to "
                           f"indexing result of shape {list(indexed)}")


def indexed_shape(self, indices):
    """The shape of `self[indices]` for integer index tensors (None where masks make it data-dependent,
    or the indices are the meta kernel's error): the broadcast indices' shape where the indices stand if
    they are adjacent, else first, as ATen's advanced indexing lays it out."""
    places = [d for d, i in enumerate(indices) if i is not None]
    if not places or len(indices) > self.dim() or any(indices[d].dtype in (torch.bool, torch.uint8) for d in places):
        return None
    try:
        shape = tuple(torch.broadcast_shapes(*(indices[d].shape for d in places)))
    except RuntimeError:
        return None
    rest = [n for d, n in enumerate(self.shape) if d not in places]
    at = places[0] if places[-1] - places[0] == len(places) - 1 else 0
    return tuple(rest[:at]) + shape + tuple(rest[at:])


def _in_place_cast(op, args, kwargs) -> None:
    """An in-place pointwise op (TensorIterator's): the operands broadcast to `self`'s shape, then its
    result type, what its functional form returns, must cast to `self`'s dtype."""
    if op.namespace != "aten" or not args or not _tensor(args[0]):
        return
    functional = getattr(getattr(torch.ops.aten, op._schema.name.split("::")[1][:-1], None), op._overloadname, None)
    if functional is None or not (torch.Tag.pointwise in op.tags or torch.Tag.pointwise in functional.tags):
        return  # (PyTorch tags gcd_ and copysign_ as in place only, their functional forms as pointwise)

    def meta(x):
        if not _tensor(x) or is_fake(x) or x.device.type == "meta" or (x.device.type == "cpu" and x.dim() == 0):
            return x
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")

    self = args[0]
    try:
        shape = torch.broadcast_shapes(*(t.shape for t in (*args, *kwargs.values()) if _tensor(t)))
    except RuntimeError:
        return  # the op's own meta call raises it
    if tuple(shape) != tuple(self.shape):  # TensorIterator checks the shapes first
        raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape {list(shape)}")
    try:
        result = functional(*[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()})
    except Exception:
        return  # the op's own meta call raises it
    result = result[0] if isinstance(result, (tuple, list)) else result
    if _tensor(result):
        _cast_check(result.dtype, self)


CHECKS = {
    "aten.index": _index,
    "aten.index_put": _index,
    "aten.index_put_": _index,
    "aten.mm": _mm,
    "aten.addmm": _addmm,
    "aten.addbmm": _addbmm,
    "aten.mv": _mv,
    "aten.convolution": _convolution,
    "aten.index_select": _index_select,
    "aten.take": _take,
    "aten.masked_select": _masked_select,
    "aten.gather": _gather,
    "aten.kthvalue": _kthvalue,
    "aten.cat": _cat,
    "aten.amax": _amax_amin("amax"),
    "aten.amin": _amax_amin("amin"),
    "aten.multinomial": _multinomial,
    "aten.embedding": _embedding,
    "aten.masked_scatter": _masked_scatter,
    "aten.masked_scatter_": _masked_scatter,
    "aten.masked_fill": _masked_fill,
    "aten.masked_fill_": _masked_fill,
    "aten.uniform": _uniform,
    "aten.uniform_": _uniform,
    "aten.bucketize": _bucketize,
    "aten.aminmax": _aminmax,
    "aten.complex": _complex,
    "aten.multi_margin_loss": _multi_margin_loss,
    "aten.ormqr": _ormqr,
    "aten.as_strided_scatter": _as_strided_scatter,
    "aten.index_add": _index_func("index_add"),
    "aten.index_add_": _index_func("index_add"),
    "aten.index_reduce": _index_func("index_reduce"),
    "aten.index_reduce_": _index_func("index_reduce"),
}


CHECKS.update({
    "aten.add": _add_sub("add", False), "aten.add_": _add_sub("add", True),
    "aten.sub": _add_sub("sub", False), "aten.sub_": _add_sub("sub", True), "aten.rsub": _add_sub("rsub", False),
    "aten.fill": _fill, "aten.fill_": _fill, "aten.index_fill": _index_fill, "aten.index_fill_": _index_fill,
    "aten.full": _full, "aten.full_like": _full_like, "aten.new_full": _new_full,
    "aten.clamp": _clamp(False), "aten.clamp_": _clamp(True),
    "aten.clamp_min": _clamp_bound(False), "aten.clamp_min_": _clamp_bound(True),
    "aten.clamp_max": _clamp_bound(False), "aten.clamp_max_": _clamp_bound(True),
    "aten.pow": _pow, "aten.pow_": _pow, "aten.topk": _topk,
    "aten.addcdiv": _addcdiv, "aten.addcdiv_": _addcdiv, "aten.addcmul": _addcmul, "aten.addcmul_": _addcmul,
    "aten.div": _int_division(), "aten.div_": _int_division(), "aten.floor_divide": _int_division("div_floor_cpu"),
    "aten.floor_divide_": _int_division("div_floor_cpu"), "aten.remainder": _int_division("remainder_cpu"),
    "aten.remainder_": _int_division("remainder_cpu"), "aten.fmod": _int_division("fmod_cpu"),
    "aten.fmod_": _int_division("fmod_cpu"),
    "aten.exponential_": _continuous("Exponential", scalar_type_name),
    "aten.cauchy_": _continuous("Cauchy", cpp_type_name),
    "aten.log_normal_": _log_normal, "aten.geometric_": _geometric, "aten.normal_": _normal,
    "aten.bernoulli_": _bernoulli, "aten.lerp": _lerp, "aten.lerp_": _lerp, "aten.baddbmm": _baddbmm,
    "aten.baddbmm_": _baddbmm, "aten.heaviside": _heaviside, "aten.heaviside_": _heaviside,
    "aten.addmm_": _addmm, "aten.addbmm_": _addbmm, "aten.put": _put, "aten.put_": _put,
    "aten.index_put": _index_put, "aten.index_put_": _index_put,
    "aten.elu": _floating_kernel("elu_cpu"), "aten.elu_": _floating_kernel("elu_cpu"),
    "aten.leaky_relu": _floating_kernel("leaky_relu_cpu"), "aten.leaky_relu_": _floating_kernel("leaky_relu_cpu"),
    "aten.frac": _floating_kernel("frac_cpu"), "aten.frac_": _floating_kernel("frac_cpu"),
    "aten.celu": _floating_kernel("elu_cpu"), "aten.celu_": _floating_kernel("elu_cpu"),
    "aten.index_copy": _index_copy, "aten.index_copy_": _index_copy, "aten.ldexp_": _ldexp_in_place,
})


# Checks that read a Python number's value, which is not part of an executable's key: they run on
# every call, not only when the op compiles (a cached masked_fill(int8, 1) must not let 1000 through)
_ON_EVERY_CALL = frozenset({"aten.masked_fill", "aten.masked_fill_", "aten.uniform", "aten.uniform_",
                            "aten.add", "aten.add_", "aten.sub", "aten.sub_", "aten.rsub", "aten.fill", "aten.fill_",
                            "aten.index_fill", "aten.index_fill_", "aten.full", "aten.full_like", "aten.new_full",
                            "aten.clamp", "aten.clamp_", "aten.clamp_min", "aten.clamp_min_", "aten.clamp_max",
                            "aten.clamp_max_", "aten.pow", "aten.pow_", "aten.addcdiv", "aten.addcdiv_",
                            "aten.addcmul", "aten.addcmul_", "aten.div", "aten.div_", "aten.floor_divide",
                            "aten.floor_divide_", "aten.remainder", "aten.remainder_", "aten.fmod", "aten.fmod_"})


def every_call_check(op):
    """`op`'s check that must run on every call, not only when it compiles (it reads Python numbers,
    which its key does not hold), as `run(args, kwargs)`, resolved once per op; else None. Only the
    check itself: the in-place and out= rules read dtypes, which the key holds."""
    packet = str(op.overloadpacket)
    if packet not in _ON_EVERY_CALL:
        return None
    fn, name = CHECKS[packet], str(op)

    def run(args, kwargs):
        try:
            fn(*args, **kwargs)
        except Exception as e:
            raise named(e, name) from None

    return run


def check(op, args, kwargs) -> None:
    """Raise what the CPU's kernel of `op` (an OpOverload) raises for these arguments, if it is one
    of the errors PyTorch's meta kernel does not raise: its type, the CPU's message, the op named.
    An in-place pointwise op's result type is checked against `self`'s dtype too."""
    fn = CHECKS.get(str(op.overloadpacket))
    in_place = torch.Tag.inplace in op.tags
    if fn is not None or in_place:
        try:
            if fn is not None:
                fn(*args, **kwargs)
            if in_place:
                _in_place_cast(op, args, kwargs)
        except Exception as e:
            raise named(e, str(op)) from None
    if kwargs:  # the CPU's rules for out= tensors (`out_checks`)
        try:
            out_checks.check(op, args, kwargs)
        except Exception as e:
            raise named(e, str(op)) from None
