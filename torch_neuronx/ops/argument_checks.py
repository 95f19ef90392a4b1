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
    dtype). A value tensor is read only where it is complex and `self` is not."""
    if self.dtype not in _OVERFLOW_NAME:
        return
    if _tensor(value):
        if not (value.dtype.is_complex and value.dim() == 0) or is_fake(value):
            return  # a compiled graph's value tensor holds no number to read
        value = value.item()
    if isinstance(value, complex):
        if value.imag != 0:
            raise RuntimeError(f"value cannot be converted to type {_OVERFLOW_NAME[self.dtype]} without overflow")
        value = value.real
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if self.dtype.is_floating_point:
        bad = value == value and abs(value) != float("inf") and abs(value) > torch.finfo(self.dtype).max
    else:
        info = torch.iinfo(self.dtype)
        bad = (value != value or abs(value) == float("inf")) or not info.min <= value <= info.max
    if bad:
        raise RuntimeError(f"value cannot be converted to type {_OVERFLOW_NAME[self.dtype]} without overflow")


def _uniform(self, from_=0.0, to=1.0, *_, **__):
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


CHECKS = {
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


# Checks that read a Python number's value, which is not part of an executable's key: they run on
# every call, not only when the op compiles (a cached masked_fill(int8, 1) must not let 1000 through)
_ON_EVERY_CALL = frozenset({"aten.masked_fill", "aten.masked_fill_", "aten.uniform", "aten.uniform_"})


def checks_every_call(op) -> bool:
    """Whether `op`'s check must run on every call, not only when it compiles."""
    return str(op.overloadpacket) in _ON_EVERY_CALL


def check(op, args, kwargs) -> None:
    """Raise what the CPU's kernel of `op` (an OpOverload) raises for these arguments, if it is one
    of the errors PyTorch's meta kernel does not raise: its type, the CPU's message, the op named."""
    fn = CHECKS.get(str(op.overloadpacket))
    if fn is not None:
        try:
            fn(*args, **kwargs)
        except Exception as e:
            raise named(e, str(op)) from None
