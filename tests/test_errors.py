"""Errors: what the CPU rejects, neuron rejects (the CPU's exception type and message, the ATen op
named), and where an error surfaces. Bad input never crashes the interpreter.

The table cases run on the CPU and on neuron; the neuron error must be the CPU's type, name the ATen op
and contain the given fragment of the CPU's message (which the CPU's own message must contain too, so a
case that stops failing on the CPU fails here). benchmarks/error_inputs.py is the wide sweep.

Ops are launched without waiting for the device; the errors a launch can produce are nonetheless raised
by the op that failed, at its own call: value checks (out-of-range indices) are computed inside the op's
executable and the op waits for them, an allocation failure is reported by the launch, and a host-run op
that raises inside a compiled graph fails that graph's call. Nothing is left to surface at a later
`.item()`, `.cpu()` or `torch.neuron.synchronize()`, and the device stays usable with correct results
afterwards.
"""
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx
import torch_neuronx.neuron_dynamo_backend as ndb

B, F32, L = torch.bfloat16, torch.float32, torch.long


# ---- (1) device, shape and dtype mistakes

def test_mixing_cpu_and_neuron_is_a_device_error():
    a = torch.ones(3, device="neuron")
    b = torch.ones(3)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*neuron:0 and cpu"):
        a + b
    with pytest.raises(RuntimeError, match="same device"):
        torch.mm(torch.ones(2, 2, device="neuron"), torch.ones(2, 2))


def test_mixing_neuron_devices_is_a_device_error():
    with pytest.raises(RuntimeError, match="same device.*neuron:0 and neuron:1"):
        torch.ones(3, device="neuron:0") * torch.ones(3, device="neuron:1")


def test_cpu_scalar_tensor_mixes_like_on_cuda():
    a = torch.arange(3.0, device="neuron")
    got = a * torch.tensor(2.0)
    assert got.device.type == "neuron"
    assert got.cpu().tolist() == [0.0, 2.0, 4.0]


def test_shape_mismatch_names_the_op():
    with pytest.raises(RuntimeError, match=r"aten.add.Tensor: The size of tensor a \(3\) must match the size of tensor b \(4\) at non-singleton dimension 0"):
        torch.ones(3, device="neuron") + torch.ones(4, device="neuron")
    with pytest.raises(RuntimeError, match=r"aten.mm.default: .*(cannot be multiplied|same reduction dim)"):
        torch.mm(torch.ones(2, 3, device="neuron"), torch.ones(4, 2, device="neuron"))


def test_unsupported_dtype_is_a_clear_error():
    with pytest.raises(NotImplementedError, match=r"_to_copy.*complex32 is not supported on the neuron device"):
        torch.ones(2, device="neuron").to(torch.complex32)


@pytest.mark.cpu_fallback
def test_unsupported_dtype_is_not_swallowed_by_operators():
    """A dtype the device does not carry is not a TypeError, which Python's operators turn into
    "unsupported operand type(s)"; nor does the CPU fallback (allowed here) take the op: its result
    could not come back. The error names the op and the dtype."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ComplexHalf's experimental-support warning
        a = torch.empty(2, dtype=torch.complex32, device="neuron")
    with pytest.raises(NotImplementedError, match=r"aten\.add\.Tensor: .*complex32 is not supported on the neuron"):
        a + a
    with pytest.raises(NotImplementedError, match=r"aten\.mul\.Tensor: .*complex32 is not supported on the neuron"):
        a * 2
    assert torch_neuronx.get_fallback_ops() == {}


def test_inplace_type_error_matches_cpu():
    a = torch.ones(3, dtype=torch.int64, device="neuron")
    with pytest.raises(RuntimeError, match=r"aten.add_.Tensor: .*(Promotion|can't be cast)"):
        a.add_(torch.ones(3, device="neuron") * 0.5)


def test_errors_leave_the_device_usable():
    with pytest.raises(RuntimeError, match=r"aten.add.Tensor: The size of tensor a \(3\) must match the size of tensor b \(4\) at non-singleton dimension 0"):
        torch.ones(3, device="neuron") + torch.ones(4, device="neuron")
    assert (torch.ones(3, device="neuron") + 1).cpu().tolist() == [2.0, 2.0, 2.0]


# ---- (2) the CPU's errors, case by case


def _r(*shape, dtype=F32, device="cpu"):
    return torch.ones(*shape, dtype=dtype, device=device)


# (id, the call on a device, the ATen op neuron names, a fragment of the CPU's message)
CASES = [
    # the matmul family's one-dtype rule
    ("linear", lambda d: F.linear(_r(2, 3, dtype=B, device=d), _r(4, 3, device=d)), "aten.mm",
     "expected m1 and m2 to have the same dtype, but got: c10::BFloat16 != float"),
    ("linear_3d", lambda d: F.linear(_r(2, 2, 3, dtype=B, device=d), _r(4, 3, device=d)), "aten.mm",
     "expected m1 and m2 to have the same dtype, but got: c10::BFloat16 != float"),
    ("linear_bias", lambda d: F.linear(_r(2, 3, device=d), _r(4, 3, device=d), _r(4, dtype=B, device=d)),
     "aten.addmm", "self and mat2 must have the same dtype, but got BFloat16 and Float"),
    ("mm", lambda d: torch.mm(_r(2, 3, device=d), _r(3, 4, dtype=B, device=d)), "aten.mm",
     "expected m1 and m2 to have the same dtype, but got: float != c10::BFloat16"),
    ("matmul", lambda d: _r(2, 3, dtype=B, device=d) @ _r(3, 4, device=d), "aten.mm", "same dtype"),
    ("addmm", lambda d: torch.addmm(_r(2, 4, device=d), _r(2, 3, dtype=B, device=d), _r(3, 4, device=d)),
     "aten.addmm", "mat1 and mat2 must have the same dtype, but got BFloat16 and Float"),
    ("addbmm", lambda d: torch.addbmm(_r(2, 4, device=d), _r(2, 2, 3, dtype=B, device=d), _r(2, 3, 4, device=d)),
     "aten.addbmm", "mat1 and mat2 must have the same dtype, but got BFloat16 and Float"),
    ("mv", lambda d: torch.mv(_r(2, 3, dtype=B, device=d), _r(3, device=d)), "aten.mv",
     "addmv input tensors must have the same dtype, but got Float, BFloat16, and Float"),
    ("bmm", lambda d: torch.bmm(_r(2, 2, 3, dtype=B, device=d), _r(2, 3, 4, device=d)), "aten.bmm",
     "expected scalar type BFloat16 but found Float"),
    ("einsum", lambda d: torch.einsum("ij,jk->ik", _r(2, 3, dtype=B, device=d), _r(3, 4, device=d)), "aten.bmm",
     "expected scalar type BFloat16 but found Float"),
    # the CPU's words depend on its kernel: oneDNN's where it has bf16 kernels, else the reference loop's
    ("conv2d_dtype", lambda d: F.conv2d(_r(1, 2, 4, 4, dtype=B, device=d), _r(3, 2, 3, 3, device=d)),
     "aten.convolution", "and weight type" if torch.ops.mkldnn._is_mkldnn_bf16_supported()
     else "expected scalar type BFloat16 but found Float"),
    # convolution's parameter checks (at::_convolution)
    ("conv_stride", lambda d: F.conv2d(_r(1, 1, 4, 4, device=d), _r(1, 1, 2, 2, device=d), stride=0),
     "aten.convolution", "non-positive stride is not supported"),
    ("conv_padding", lambda d: F.conv2d(_r(1, 1, 4, 4, device=d), _r(1, 1, 2, 2, device=d), padding=-1),
     "aten.convolution", "negative padding is not supported"),
    ("conv_dilation", lambda d: F.conv1d(_r(1, 1, 4, device=d), _r(1, 1, 2, device=d), dilation=0),
     "aten.convolution", "dilation should be greater than zero"),
    ("conv_groups", lambda d: F.conv1d(_r(1, 3, 4, device=d), _r(2, 1, 2, device=d), groups=3),
     "aten.convolution", "Given groups=3, expected weight to be at least 3 at dimension 0"),
    ("conv_kernel", lambda d: F.conv2d(_r(1, 1, 2, 2, device=d), _r(1, 1, 3, 3, device=d)),
     "aten.convolution", "Kernel size can't be greater than actual input size"),
    # written-to tensors overlapping what the op reads
    ("index_select_out", lambda d: torch.index_select(_r(3, 4, device=d), 0, torch.tensor([0, 1], device=d),
                                                      out=_r(1, 4, device=d).expand(2, 4)),
     "aten.index_select", "more than one element of the written-to tensor refers to a single memory location"),
    ("take_out", lambda d: (lambda x: torch.take(x, torch.tensor([0, 1], device=d), out=x[:2]))(_r(4, device=d)),
     "aten.take", "some elements of the input tensor and the written-to tensor refer to a single memory location"),
    ("cat_out", lambda d: (lambda x: torch.cat([x[:2], _r(2, device=d)], out=x))(_r(4, device=d)),
     "aten.cat", "the written-to tensor refer to a single memory location"),
    # cat's own checks
    ("cat_dims", lambda d: torch.cat([_r(2, 3, device=d), _r(2, 3, 1, device=d)]), "aten.cat",
     "Tensors must have same number of dimensions: got 2 and 3"),
    ("cat_zero_dim", lambda d: torch.cat([_r(2, device=d), torch.tensor(1.0, device=d)]), "aten.cat",
     "zero-dimensional tensor (at position 1) cannot be concatenated"),
    # reductions without an identity, multinomial, embedding
    ("amax_out_dtype", lambda d: torch.amax(_r(2, 3, device=d), 1, out=torch.empty(2, dtype=torch.int32, device=d)),
     "aten.amax", "Expected the dtype for input and out to match, but got Float for input's dtype and Int"),
    ("amin_zero_size", lambda d: torch.amin(_r(2, 0, device=d), 1), "aten.amin",
     "amin(): Expected reduction dim 1 to have non-zero size."),
    ("multinomial_dims", lambda d: torch.multinomial(_r(2, 2, 2, device=d), 1), "aten.multinomial",
     "prob_dist must be 1 or 2 dim"),
    ("multinomial_n", lambda d: torch.multinomial(_r(2, device=d), 3), "aten.multinomial",
     "cannot sample n_sample > prob_dist.size(-1) samples without replacement"),
    ("embedding", lambda d: F.embedding(torch.tensor([0], device=d), _r(2, 2, 2, device=d)), "aten.embedding",
     "'weight' must be 2-D"),
    # scalar arguments and out= dtypes
    ("masked_fill_complex", lambda d: _r(3, device=d).masked_fill(torch.ones(3, dtype=torch.bool, device=d), 1j),
     "aten.masked_fill", "value cannot be converted to type float without overflow"),
    ("masked_fill_overflow", lambda d: _r(3, dtype=torch.int8, device=d).masked_fill(
        torch.ones(3, dtype=torch.bool, device=d), 1000), "aten.masked_fill",
     "value cannot be converted to type int8_t without overflow"),
    ("masked_scatter_mask", lambda d: _r(3, device=d).masked_scatter(_r(3, device=d), _r(3, device=d)),
     "aten.masked_scatter", "masked_scatter_ only supports boolean masks, but got mask with dtype Float"),
    ("uniform_range", lambda d: torch.empty(3, device=d).uniform_(3, -1), "aten.uniform",
     "uniform_ expects to return a [from, to) range, but found from=3 > to=-1"),
    ("bucketize_dims", lambda d: torch.bucketize(_r(3, device=d), _r(2, 2, device=d)), "aten.bucketize",
     "boundaries tensor must be 1 dimension, but got dim(2)"),
    ("aminmax_out", lambda d: torch.aminmax(_r(3, device=d), out=(torch.empty((), device=d),
                                                                   torch.empty((), dtype=torch.float64, device=d))),
     "aten.aminmax", "Expected out tensor to have dtype float, but got double instead"),
    ("complex_out", lambda d: torch.complex(_r(2, dtype=torch.float64, device=d), _r(2, dtype=torch.float64, device=d),
                                            out=torch.empty(2, dtype=torch.complex64, device=d)),
     "aten.complex", "Expected object of scalar type ComplexDouble but got scalar type ComplexFloat for argument 'out'"),
    # meta kernels' and decompositions' messages, spelled as the CPU spells dtypes and sizes
    ("mean_int", lambda d: torch.mean(torch.ones(3, dtype=torch.int64, device=d), 0), "aten.mean",
     "Input dtype must be either a floating point or complex dtype. Got: Long"),
    ("multilabel_margin", lambda d: F.multilabel_margin_loss(_r(5, 4, device=d), torch.ones(4, dtype=torch.long,
                                                                                               device=d)),
     "aten.multilabel_margin_loss", "inconsistent target size: [4] for input of size: [5, 4]"),
    # broadcasting as TensorIterator states it (the meta kernels' Python broadcasting words it otherwise)
    ("broadcast", lambda d: _r(10, 2, 3, device=d) - _r(10, 2, 2, device=d), "aten.sub.Tensor",
     "The size of tensor a (3) must match the size of tensor b (2) at non-singleton dimension 2"),
    ("broadcast_inplace", lambda d: _r(3, device=d).sub_(_r(2, 1, device=d)), "aten.sub_.Tensor",
     "output with shape [3] doesn't match the broadcast shape [2, 3]"),
    # an out= the CPU fallback writes: its copies would hide the overlap
    ("masked_select_out", lambda d: (lambda y: torch.masked_select(y, y > 0, out=y))(_r(6, device=d)),
     "aten.masked_select.out", "some elements of the input tensor and the written-to tensor refer to a single"),
    # multi_margin_loss as the CPU kernel checks it, before the decomposition reshapes
    ("multi_margin_empty", lambda d: torch.ops.aten.multi_margin_loss(_r(0, device=d), torch.zeros(
        5, dtype=torch.long, device=d)), "aten.multi_margin_loss",
     "Expected non-empty vector or matrix with optional 0-dim batch size, but got: [0]"),
    ("multi_margin_target", lambda d: F.multi_margin_loss(_r(5, 4, device=d), torch.zeros(5, 4, dtype=torch.long,
                                                                                         device=d)),
     "aten.multi_margin_loss", "Expected target size [5], but got [5, 4]. Input has shape [5, 4]."),
    ("multi_margin_target_dtype", lambda d: F.multi_margin_loss(_r(5, 4, device=d), _r(5, device=d)),
     "aten.multi_margin_loss", "expected scalar type Long but found Float"),
    ("multi_margin_weight", lambda d: F.multi_margin_loss(_r(5, 4, device=d), torch.zeros(5, dtype=torch.long,
                                                                                         device=d), weight=_r(5, device=d)),
     "aten.multi_margin_loss", "inconsistent weight size, expected 4 but got [5]"),
    # ormqr: tau's length is min(other's, input's) on the CPU; its dtype message as it spells it
    ("ormqr_tau", lambda d: torch.ormqr(_r(5, 3, device=d), _r(2, device=d), _r(5, 5, device=d)), "aten.ormqr",
     "torch.ormqr: tau.shape[-1] must be equal to min(other.shape[-2], input.shape[-1])"),
    ("ormqr_dtype", lambda d: torch.ormqr(_r(5, 3, device=d), _r(3, dtype=torch.float64, device=d), _r(5, 5, device=d)),
     "aten.ormqr", "Expected input and tau to have the same dtype, but input has dtypeFloat and tau has dtype Double"),
    ("ormqr_tau_0d", lambda d: torch.ormqr(_r(3, 3, device=d), torch.tensor(1.0, device=d), _r(3, 3, device=d)),
     "aten.ormqr", "Dimension specified as -1 but tensor has no dimensions"),
    # index_add / index_reduce as index_func_meta_impl checks them (the meta kernel lets another slice shape by)
    ("index_add_shape", lambda d: torch.index_add(_r(3, 2, device=d), 0, torch.tensor([0, 2], device=d),
                                                  _r(2, device=d)), "aten.index_add",
     "source tensor shape must match self tensor shape, excluding the specified dimension. Got self.shape = [3, 2] "
     "source.shape = [2]"),
    ("index_add_count", lambda d: _r(3, 2, device=d).index_add_(0, torch.tensor([0, 2, 1], device=d),
                                                                _r(2, 2, device=d)), "aten.index_add_",
     "index_add_(): Number of indices (3) should be equal to source.size(dim): (2), for dim: 0"),
    ("index_reduce_dim", lambda d: torch.index_reduce(_r(3, 2, device=d), 5, torch.tensor([0], device=d),
                                                      _r(1, 2, device=d), "prod"), "aten.index_reduce",
     "Dimension out of range (expected to be in range of [-2, 1], but got 5)"),
    # value checks inside the executables, as the CPU's kernels word them
    ("nll_loss_target", lambda d: F.nll_loss(_r(3, 5, device=d), torch.tensor([1, 7, 2], device=d)),
     "aten.nll_loss_forward", "Target 7 is out of bounds."),
    ("nll_loss2d_target", lambda d: F.nll_loss(_r(2, 3, 2, 2, device=d), torch.tensor([[[0, 1], [2, -3]]] * 2,
                                                                                      device=d)),
     "aten.nll_loss2d_forward", "Target -3 is out of bounds."),
    ("index_copy_range", lambda d: _r(3, 2, device=d).index_copy_(0, torch.tensor([5], device=d), _r(1, 2, device=d)),
     "aten.index_copy", "index_copy_(): index 5 is out of bounds for dimension 0 with size 3"),
    ("index_fill_range", lambda d: _r(3, 2, device=d).index_fill(0, torch.tensor([1, -4], device=d), 2.0),
     "aten.index_fill", "index -4 is out of bounds for dimension 0 with size 3"),
    ("repeat_interleave_negative", lambda d: torch.repeat_interleave(torch.tensor([1, -1], device=d)),
     "repeat_interleave", "repeats can not be negative"),
    # as_strided_scatter past the end of self's storage
    ("as_strided_scatter_bounds", lambda d: torch.as_strided_scatter(_r(4, 4, device=d), _r(2, 2, device=d), [2, 2],
                                                                     [4, 1], 11), "aten.as_strided_scatter",
     "setStorage: sizes [2, 2], strides [4, 1], storage offset 11, and itemsize 4 requiring a storage size of 68 are "
     "out of bounds for storage of size 64"),
    # the add/sub family's checks: alpha's type and value, bool operands (the meta kernel raised a ValueError)
    ("add_alpha_float", lambda d: torch.add(_r(2, dtype=L, device=d), _r(2, dtype=L, device=d), alpha=0.5),
     "aten.add.Tensor", "For integral input tensors, argument alpha must not be a floating point number."),
    ("add_alpha_bool", lambda d: torch.add(_r(2, device=d), _r(2, device=d), alpha=True), "aten.add.Tensor",
     "Boolean alpha only supported for Boolean results."),
    ("sub_alpha_complex", lambda d: torch.sub(_r(2, device=d), 1, alpha=1j), "aten.sub", "For non-complex input "
     "tensors, argument alpha must not be a complex number."),
    ("add_alpha_overflow", lambda d: torch.add(_r(2, dtype=torch.int8, device=d), _r(2, dtype=torch.int8, device=d),
                                               alpha=1000), "aten.add.Tensor",
     "value cannot be converted to type int8_t without overflow"),
    ("sub_bools", lambda d: _r(2, dtype=torch.bool, device=d) - _r(2, dtype=torch.bool, device=d), "aten.sub.Tensor",
     "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()`"),
    ("rsub_bool", lambda d: torch.rsub(_r(2, dtype=torch.bool, device=d), 1), "aten.rsub",
     "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert a mask"),
    # in place: TensorIterator's shapes, then the result's cast to self's dtype
    ("add_inplace_cast", lambda d: _r(2, dtype=L, device=d).add_(_r(2, device=d)), "aten.add_.Tensor",
     "result type Float can't be cast to the desired output type Long"),
    ("mul_inplace_cast", lambda d: _r(2, dtype=L, device=d).mul_(0.5), "aten.mul_",
     "result type Float can't be cast to the desired output type Long"),
    ("sin_inplace_cast", lambda d: _r(2, dtype=torch.bool, device=d).sin_(), "aten.sin_.default",
     "result type Float can't be cast to the desired output type Bool"),
    ("inplace_shape_first", lambda d: _r(5, 1, dtype=L, device=d).copysign_(_r(5, 5, device=d)), "aten.copysign_",
     "output with shape [5, 1] doesn't match the broadcast shape [5, 5]"),
    ("addcmul_inplace_cast", lambda d: _r(2, dtype=L, device=d).addcmul_(_r(2, device=d), _r(2, device=d)),
     "aten.addcmul_", "result type Float can't be cast to the desired output type Long"),
    # numbers the op converts to its dtype (c10::checked_convert), and clamp's own checks
    ("clamp_inplace_cast", lambda d: _r(2, dtype=L, device=d).clamp_(0.5), "aten.clamp_",
     "result type Float can't be cast to the desired output type long int"),
    ("clamp_overflow", lambda d: torch.clamp(_r(2, dtype=torch.int8, device=d), 1000), "aten.clamp",
     "value cannot be converted to type int8_t without overflow"),
    ("clamp_complex", lambda d: torch.clamp(_r(2, dtype=torch.complex64, device=d), 0), "aten.clamp",
     "clamp is not supported for complex types"),
    ("fill_overflow", lambda d: _r(2, dtype=torch.int8, device=d).fill_(1000), "aten.fill_",
     "value cannot be converted to type int8_t without overflow"),
    ("fill_complex", lambda d: _r(2, device=d).fill_(1j), "aten.fill_", "value cannot be converted to type float "
     "without overflow"),
    ("full_overflow", lambda d: torch.full((2,), 300, dtype=torch.uint8, device=d), "aten.full",
     "value cannot be converted to type uint8_t without overflow"),
    ("index_fill_complex", lambda d: _r(2, device=d).index_fill(0, torch.tensor([0], device=d), 1j), "aten.index_fill",
     "index_fill_(): Converting complex Scalar to non-complex type is not supported"),
    ("addcmul_value", lambda d: torch.addcmul(_r(2, device=d), _r(2, device=d), _r(2, device=d), value=1j),
     "aten.addcmul", "value cannot be converted to type float without overflow"),
    ("addcdiv_int", lambda d: torch.addcdiv(_r(2, dtype=L, device=d), _r(2, dtype=L, device=d),
                                            _r(2, dtype=L, device=d)), "aten.addcdiv",
     "Integer division with addcdiv is no longer supported, and in a future  release addcdiv will perform a true "
     "division of tensor1 and tensor2."),
    ("pow_negative", lambda d: torch.pow(_r(2, dtype=L, device=d), -1), "aten.pow",
     "Integers to negative integer powers are not allowed."),
    ("topk_k", lambda d: torch.topk(_r(2, device=d), 3), "aten.topk", "selected index k out of range"),
    # integer division by zero: the CPU's ZeroDivisionError, by a number (on the host) or a tensor (on the
    # device; zeros the fused run holds as constants crashed XLA's compiler with SIGFPE)
    ("floor_divide_zero", lambda d: _r(2, dtype=L, device=d) // 0, "aten.floor_divide",
     "ZeroDivisionError"),
    ("remainder_zero", lambda d: torch.remainder(_r(2, dtype=L, device=d), torch.zeros(2, dtype=L, device=d)),
     "aten.remainder", "ZeroDivisionError"),
    ("fmod_zero", lambda d: torch.fmod(_r(2, dtype=torch.int32, device=d), torch.zeros(1, dtype=torch.int32, device=d)),
     "aten.fmod", "ZeroDivisionError"),
    ("div_trunc_zero", lambda d: torch.div(_r(2, dtype=L, device=d), torch.zeros((), dtype=L, device=d),
                                           rounding_mode="trunc"), "aten.div", "ZeroDivisionError"),
    ("div_floor_bool", lambda d: torch.div(_r(2, dtype=torch.bool, device=d), _r(2, dtype=torch.bool, device=d),
                                           rounding_mode="floor"), "aten.div",
     "\"div_floor_cpu\" not implemented for 'Bool'"),
    # out= of cat (and stack, which calls it): a TypeError on the CPU
    ("cat_out_dtype", lambda d: torch.cat([_r(2, device=d)], out=torch.empty(2, dtype=L, device=d)), "aten.cat",
     "torch.cat(): input types can't be cast to the desired output type Long"),
    ("stack_out_dtype", lambda d: torch.stack([_r(2, device=d)], out=torch.empty(1, 2, dtype=L, device=d)),
     "aten.stack", "torch.cat(): input types can't be cast to the desired output type Long"),
    # dtype checks the meta kernels word otherwise
    ("masked_scatter_dtype", lambda d: _r(2, dtype=L, device=d).masked_scatter_(_r(2, dtype=torch.bool, device=d),
                                                                                _r(2, device=d)),
     "aten.masked_scatter_", "masked_scatter: expected self and source to have same dtypes but gotLong and Float"),
    ("lerp_dtype", lambda d: torch.lerp(_r(2, device=d), _r(2, dtype=torch.float64, device=d), 0.5), "aten.lerp",
     "expected dtype float for `end` but got dtype double"),
    ("baddbmm_dtype", lambda d: torch.baddbmm(_r(1, 2, 2, dtype=L, device=d), _r(1, 2, 2, device=d),
                                              _r(1, 2, 2, device=d)), "aten.baddbmm",
     "Input dtypes must be the same, got: input long int, batch1: float, batch2: float"),
    ("heaviside_dtype", lambda d: torch.heaviside(_r(2, device=d), _r(2, dtype=torch.float64, device=d)),
     "aten.heaviside", "heaviside is not yet implemented for tensors with different dtypes."),
    ("put_dtype", lambda d: _r(2, dtype=L, device=d).put_(torch.tensor([0], device=d), _r(1, device=d)), "aten.put_",
     "put_(): self and source expected to have the same dtype, but got self.dtype = Long and source.dtype = Float"),
    ("index_put_dtype", lambda d: _r(2, dtype=L, device=d).index_put_((torch.tensor([0], device=d),), _r(1, device=d)),
     "aten.index_put_", "Index put requires the source and destination dtypes match, got Long for the destination "
     "and Float for the source."),
    # kernels of floating dtypes only (the meta kernel raised a ValueError, a decomposition another error)
    ("elu_int", lambda d: F.elu(_r(2, dtype=L, device=d)), "aten.elu", "\"elu_cpu\" not implemented for 'Long'"),
    ("leaky_relu_bool", lambda d: F.leaky_relu_(_r(2, dtype=torch.bool, device=d)), "aten.leaky_relu_",
     "\"leaky_relu_cpu\" not implemented for 'Bool'"),
    ("frac_bool", lambda d: torch.frac(_r(2, dtype=torch.bool, device=d)), "aten.frac",
     "\"frac_cpu\" not implemented for 'Bool'"),
    # random ops' dtypes
    ("exponential_int", lambda d: _r(2, dtype=L, device=d).exponential_(), "aten.exponential_",
     "Exponential distribution is a continuous probability distribution. dtype must be a floating point but you "
     "specified Long"),
    ("cauchy_int", lambda d: _r(2, dtype=L, device=d).cauchy_(), "aten.cauchy_",
     "Cauchy distribution is a continuous probability distribution. dtype must be a floating point but you "
     "specified long int"),
    ("log_normal_int", lambda d: _r(2, dtype=L, device=d).log_normal_(), "aten.log_normal_",
     "\"log_normal_cpu\" not implemented for 'Long'"),
    ("normal_int", lambda d: _r(2, dtype=L, device=d).normal_(), "aten.normal_",
     "\"normal_kernel_cpu\" not implemented for 'Long'"),
    ("uniform_int", lambda d: _r(2, dtype=L, device=d).uniform_(), "aten.uniform_",
     "\"check_uniform_bounds\" not implemented for 'Long'"),
    ("geometric_bool", lambda d: _r(2, dtype=torch.bool, device=d).geometric_(0.5), "aten.geometric_",
     "\"geometric_cpu\" not implemented for 'Bool'"),
    ("bernoulli_complex", lambda d: _r(2, dtype=torch.complex64, device=d).bernoulli_(0.5), "aten.bernoulli_",
     "\"bernoulli_scalar_cpu_\" not implemented for 'ComplexFloat'"),
    # multinomial's weights, checked on the device
    ("multinomial_negative", lambda d: torch.multinomial(torch.tensor([-1.0, 1.0], device=d), 1), "aten.multinomial",
     "probability tensor contains either `inf`, `nan` or element < 0"),
    ("multinomial_zero_sum", lambda d: torch.multinomial(torch.zeros(2, 2, device=d), 1), "aten.multinomial",
     "invalid multinomial distribution (sum of probabilities <= 0)"),
    ("multinomial_replacement_nan", lambda d: torch.multinomial(torch.tensor([1.0, float("nan")], device=d), 2, True),
     "aten.multinomial", "invalid multinomial distribution (encountering probability entry < 0)"),
    # an index out of range, as the CPU reports it (the value, the CPU's dimension among the indexed ones)
    ("index_value", lambda d: torch.arange(6.0, device=d)[torch.tensor([7], device=d)], "aten.index.Tensor",
     "index 7 is out of bounds for dimension 0 with size 6"),
    ("index_negative", lambda d: torch.arange(6.0, device=d)[torch.tensor([0, -7], device=d)], "aten.index.Tensor",
     "index -7 is out of bounds for dimension 0 with size 6"),
    ("index_second_dim", lambda d: _r(3, 4, device=d)[:, torch.tensor([4], device=d)], "aten.index.Tensor",
     "index 4 is out of bounds for dimension 0 with size 4"),
    ("index_put_value", lambda d: _r(2, 3, device=d).index_put_(
        (torch.tensor([0], device=d), torch.tensor([-4], device=d)), torch.tensor(1.0, device=d)), "aten.index_put_",
     "index -4 is out of bounds for dimension 1 with size 3"),
    ("gather_value", lambda d: torch.gather(torch.arange(6.0, device=d), 0, torch.tensor([1, 7], device=d)),
     "aten.gather", "index 7 is out of bounds for dimension 0 with size 6"),
    ("scatter_value", lambda d: torch.zeros(6, device=d).scatter_(0, torch.tensor([7], device=d), 1.0), "aten.scatter_",
     "index 7 is out of bounds for dimension 0 with size 6"),
    ("take_value", lambda d: torch.take(_r(2, device=d), torch.tensor([5], device=d)), "aten.take",
     "out of range: tried to access index 5 on a tensor of 2 elements."),
    ("put_value", lambda d: torch.zeros(6, device=d).put_(torch.tensor([7], device=d), _r(1, device=d)), "aten.put_",
     "out of range: tried to access index 7 on a tensor of 6 elements."),
    ("embedding_bag_value", lambda d: F.embedding_bag(torch.tensor([[1, 7]], device=d), _r(6, 2, device=d)),
     "aten._embedding_bag", "Index 1 of input takes value 7 which is not in the valid range [0, 6)"),
]


def _raised(fn, device):
    try:
        fn(device)
    except Exception as e:
        return e
    return None


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_neuron_raises_what_the_cpu_raises(case):
    _name, fn, op, fragment = case
    cpu = _raised(fn, "cpu")
    assert cpu is not None and fragment in str(cpu), f"the CPU no longer raises this: {cpu!r}"
    neuron = _raised(fn, "neuron")
    assert neuron is not None, "neuron computed what the CPU rejects"
    assert type(neuron) is type(cpu), f"{type(neuron).__name__} on neuron, {type(cpu).__name__} on the CPU: {neuron}"
    assert op in str(neuron), f"the error does not name {op}: {neuron}"
    assert fragment in str(neuron), str(neuron)


def test_same_dtypes_still_compute():
    """The checks reject only what the CPU rejects: the same ops with one dtype compute as there."""
    for d in (F32, B):
        x, w, b = _r(2, 3, dtype=d, device="neuron"), _r(4, 3, dtype=d, device="neuron"), _r(4, dtype=d, device="neuron")
        assert F.linear(x, w, b).cpu().tolist() == [[4.0] * 4] * 2
    y = F.conv2d(_r(1, 1, 3, 3, device="neuron"), _r(1, 1, 2, 2, device="neuron"), stride=1, padding=0)
    assert y.cpu().tolist() == [[[[4.0, 4.0], [4.0, 4.0]]]]
    x = torch.arange(4.0, device="neuron")
    assert torch.cat([x, torch.empty(0, device="neuron")]).cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("case", [
    lambda d: torch.ormqr(_r(5, 3, device=d), _r(3, device=d), _r(5, 5, device=d)),
    lambda d: torch.ormqr(_r(5, 3, device=d), _r(3, device=d), _r(4, 5, device=d), left=False),
    lambda d: torch.ormqr(_r(5, 0, device=d), _r(0, device=d), _r(5, 5, device=d)),
    lambda d: torch.as_strided_scatter(_r(4, 4, device=d), _r(2, 2, device=d), [2, 2], [4, 1], 10),
    lambda d: torch.as_strided_scatter(_r(4, 4, device=d), _r(0, 2, device=d), [0, 2], [200, 200], 0),
    lambda d: F.multi_margin_loss(_r(5, 4, device=d), torch.zeros(5, dtype=torch.long, device=d), weight=_r(4, device=d)),
    lambda d: torch.ops.aten.multi_margin_loss(_r(4, device=d), torch.zeros((), dtype=torch.long, device=d)),
    lambda d: torch.ops.aten.multi_margin_loss(_r((), device=d), torch.zeros(1, dtype=torch.long, device=d)),
    lambda d: torch.index_add(_r(3, 2, device=d), -1, torch.tensor([1], device=d), _r(3, 1, device=d), alpha=2),
    lambda d: torch.index_add(_r((), device=d), 0, torch.tensor([0], device=d), _r((), device=d)),
], ids=["ormqr", "ormqr_right", "ormqr_empty", "as_strided_scatter_edge", "as_strided_scatter_empty",
        "multi_margin_weight", "multi_margin_1d", "multi_margin_0d", "index_add_last_dim",
        "index_add_0d"])
def test_what_the_cpu_accepts_still_computes(case):
    """The stricter checks at their edges: what the CPU accepts computes the CPU's values."""
    cpu, neuron = case("cpu"), case("neuron")
    torch.testing.assert_close(neuron.cpu(), cpu)


@pytest.mark.parametrize("inplace", [False, True])
def test_a_number_the_cached_executable_never_saw_is_still_checked(inplace):
    """A Python number's value is not part of the executable's key: masked_fill(int8, 1) compiles
    and caches, and masked_fill(int8, 1000) must still raise the CPU's overflow error, not wrap."""
    for device in ("cpu", "neuron"):
        t = torch.zeros(3, dtype=torch.int8, device=device)
        mask = torch.tensor([True, False, True], device=device)
        fill = t.masked_fill_ if inplace else t.masked_fill
        assert fill(mask, 1).cpu().tolist() == [1, 0, 1]
        with pytest.raises(RuntimeError, match="value cannot be converted to type int8_t without overflow"):
            fill(mask, 1000)


# ---- (3) a device index past the device count


def _device_error(fn):
    n = torch.neuron.device_count()
    with pytest.raises(RuntimeError) as info:
        fn(f"neuron:{n + 5}")
    message = str(info.value)
    assert f"index {n + 5}" in message and f"{n} devices" in message, message
    assert "could not be lowered" not in message
    return message


@pytest.mark.parametrize("factory", [
    lambda dev: torch.ones(2, device=dev),
    lambda dev: torch.zeros(2, device=dev),
    lambda dev: torch.empty(2, device=dev),
    lambda dev: torch.full((2,), 1.0, device=dev),
    lambda dev: torch.arange(3, device=dev),
    lambda dev: torch.randn(2, device=dev),
    lambda dev: torch.tensor([1.0], device=dev),
], ids=["ones", "zeros", "empty", "full", "arange", "randn", "tensor"])
def test_factory_on_a_missing_device_is_a_runtime_error(factory):
    _device_error(factory)


def test_factory_error_names_the_op():
    assert "aten.ones.default" in _device_error(lambda dev: torch.ones(2, device=dev))


def test_to_a_missing_device_is_a_runtime_error():
    _device_error(lambda dev: torch.ones(2).to(dev))
    _device_error(lambda dev: torch.ones(2, device="neuron").to(dev))


def test_set_device_past_the_count_is_a_runtime_error():
    before = torch.neuron.current_device()
    _device_error(lambda dev: torch.neuron.set_device(int(dev.split(":")[1])))
    assert torch.neuron.current_device() == before


def test_out_of_range_device_index_is_a_clear_error():
    with pytest.raises(RuntimeError, match="out of range"):
        torch.empty(2, device="neuron:7")
    with pytest.raises(RuntimeError, match="out of range"):
        torch.neuron.set_device(5)


# ---- (4) compiled graphs: the same table checks a Dynamo graph's calls (compile/graph_argument_checks.py). The CPU's
# compiled graph (backend "eager": its kernels run the graph) raises from its kernel when called;
# neuron's raises the same type and message, the op named. Inputs are the graph's arguments.


def _i(*shape, dtype=torch.int64):
    return lambda d: torch.zeros(*shape, dtype=dtype, device=d)


def _f(*shape, dtype=F32):
    return lambda d: torch.ones(*shape, dtype=dtype, device=d)


# (id, the compiled function, its inputs (one maker per argument, given the device), the ATen op, a fragment)
COMPILED_CASES = [
    ("matmul", lambda a, b: a @ b, [_f(2, 3, dtype=B), _f(3, 4)], "aten.mm",
     "expected m1 and m2 to have the same dtype, but got: c10::BFloat16 != float"),
    ("linear_bias", lambda x, w, b: F.linear(x, w, b), [_f(2, 3), _f(4, 3), _f(4, dtype=B)], "aten.addmm",
     "self and mat2 must have the same dtype, but got BFloat16 and Float"),
    ("conv_dilation", lambda x, w: F.conv1d(x, w, dilation=0), [_f(1, 1, 4), _f(1, 1, 2)], "aten.convolution",
     "dilation should be greater than zero"),
    ("multinomial_n", lambda p: torch.multinomial(p, 3), [_f(2)], "aten.multinomial",
     "cannot sample n_sample > prob_dist.size(-1) samples without replacement"),
    ("masked_fill_overflow", lambda t, m: t.masked_fill(m, 1000), [_i(3, dtype=torch.int8), _i(3, dtype=torch.bool)],
     "aten.masked_fill", "value cannot be converted to type int8_t without overflow"),
    ("uniform_range", lambda t: t.uniform_(3, -1), [_f(3)], "aten.uniform", "uniform_ expects to return a [from, to) "
     "range, but found from=3 > to=-1"),
    ("bucketize_dims", lambda x, b: torch.bucketize(x, b), [_f(3), _f(2, 2)], "aten.bucketize",
     "boundaries tensor must be 1 dimension, but got dim(2)"),
    ("aminmax_out", lambda x, lo, hi: torch.aminmax(x, out=(lo, hi)), [_f(3), _f(()), _f((), dtype=torch.float64)],
     "aten.aminmax", "Expected out tensor to have dtype float, but got double instead"),
    ("take_out_overlap", lambda x, i: torch.take(x, i, out=x[:2]), [_f(4), _i(2)], "aten.take",
     "some elements of the input tensor and the written-to tensor refer to a single memory location"),
    ("index_add_shape", lambda x, i, s: x.index_add(0, i, s), [_f(3, 2), _i(2), _f(2)], "aten.index_add",
     "source tensor shape must match self tensor shape, excluding the specified dimension"),
    # what no meta kernel checks: an in-place result's dtype, numbers the op converts, integer division by 0
    ("mul_inplace_cast", lambda t: t.mul_(0.5), [_i(2)], "aten.mul_",
     "result type Float can't be cast to the desired output type Long"),
    ("pow_negative", lambda t: torch.pow(t, -1), [_i(2)], "aten.pow", "Integers to negative integer powers are not "
     "allowed."),
    ("fill_overflow", lambda t: t.fill_(1000), [_i(2, dtype=torch.int8)], "aten.fill_",
     "value cannot be converted to type int8_t without overflow"),
    ("floor_divide_zero", lambda t: t // 0, [_i(2)], "aten.floor_divide", "ZeroDivisionError"),
    # the decomposition's check, which AOTAutograd's trace would turn into a compilation error
    ("complex_dtypes", lambda a, b: torch.complex(a, b), [_f(2), _f(2, dtype=torch.float64)], "aten.complex",
     "Expected object of scalar type Float but got scalar type Double for second argument"),
]


def _compiled_raised(fn, makers, device, backend):
    torch._dynamo.reset()
    return _raised(lambda d: torch.compile(fn, backend=backend)(*[m(d) for m in makers]), device)


@pytest.mark.parametrize("case", COMPILED_CASES, ids=[c[0] for c in COMPILED_CASES])
def test_compiled_graph_raises_what_the_cpu_raises(case):
    _name, fn, makers, op, fragment = case
    cpu = _compiled_raised(fn, makers, "cpu", "eager")
    assert cpu is not None and fragment in str(cpu), f"the CPU no longer raises this: {cpu!r}"
    neuron = _compiled_raised(fn, makers, "neuron", "neuron")
    assert neuron is not None, "the neuron graph computed what the CPU rejects"
    assert type(neuron) is type(cpu), f"{type(neuron).__name__} on neuron, {type(cpu).__name__} on the CPU: {neuron}"
    assert op in str(neuron), f"the error does not name {op}: {neuron}"
    assert fragment in str(neuron), str(neuron)


def test_compiled_rejection_holds_per_graph():
    """A rejected graph raises on every call; inputs Dynamo guards apart (other dtypes) compile anew,
    and what the CPU accepts computes."""
    torch._dynamo.reset()
    f = torch.compile(lambda a, b: a @ b, backend="neuron")
    a, b = _r(2, 3, dtype=B, device="neuron"), _r(3, 4, device="neuron")
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r"aten.mm.default: expected m1 and m2 to have the same dtype"):
            f(a, b)
    assert f(a.float(), b).cpu().tolist() == [[3.0] * 4] * 2
    x, y = torch.arange(4.0, device="neuron"), _r(2, device="neuron")
    g = torch.compile(lambda x, i, y: torch.take(x, i, out=y), backend="neuron")
    g(x, torch.tensor([3, 1], device="neuron"), y)  # an out= of its own storage: no overlap
    assert y.cpu().tolist() == [3.0, 1.0]


def test_compiled_meta_rejections_are_dynamos_on_both():
    """What a meta kernel rejects, Dynamo's fake tensors reject while tracing: the same error type
    (Dynamo's) on the CPU and on neuron, the meta kernel's message in it."""
    fn, makers = (lambda a, b: torch.bmm(a, b)), [_f(2, 2, 3, dtype=B), _f(2, 3, 4)]
    cpu, neuron = _compiled_raised(fn, makers, "cpu", "eager"), _compiled_raised(fn, makers, "neuron", "neuron")
    assert type(cpu) is type(neuron) is torch._dynamo.exc.TorchRuntimeError
    assert "expected scalar type torch.bfloat16 but found torch.float32" in str(neuron)


# ---- (5) out-of-range indices, and where errors surface under asynchronous execution

# name -> (fn, the ATen op whose executable checks the indices, the CPU's exception type and text)
INDEX_ERRORS = {
    "embedding": (lambda w, i: torch.nn.functional.embedding(i, w), "aten.embedding.default", IndexError,
                  "index out of range in self"),
    "index_select": (lambda w, i: w.index_select(0, i), "aten.index_select.default", IndexError,
                     "index out of range in self"),
    "index": (lambda w, i: w[i], "aten.index.Tensor", IndexError, "index 10 is out of bounds for dimension 0 with size 10"),
    "index_put": (lambda w, i: w.index_put_((i,), torch.zeros(1, 4, device=w.device)), "aten.index_put_.default",
                  IndexError, "index 10 is out of bounds for dimension 0 with size 10"),
    "gather": (lambda w, i: torch.gather(w, 0, i.view(1, 1).expand(1, 4)), "aten.gather.default", RuntimeError,
               "index 10 is out of bounds for dimension 0 with size 10"),
    "scatter_add": (lambda w, i: w.scatter_add(0, i.view(1, 1).expand(1, 4), torch.ones(1, 4, device=w.device)),
                    "aten.scatter_add.default", RuntimeError, "index 10 is out of bounds for dimension 0 with size 10"),
}


@pytest.mark.parametrize("name", sorted(INDEX_ERRORS))
def test_out_of_range_indices_raise_as_on_cpu(name, track):
    """XLA clamps out-of-range gathers silently; the device raises the CPU's error, from the op's own
    executable (the message names the ATen op, then the CPU's, with the index the check found; nothing
    fell back)."""
    fn, op, error, cpu_text = INDEX_ERRORS[name]
    w = torch.randn(10, 4)
    bad = torch.tensor([10])
    with pytest.raises(error, match=cpu_text):
        fn(w.clone(), bad)  # what the CPU raises
    with pytest.raises(error, match=rf"^{re.escape(op)}: {re.escape(cpu_text)}$"):
        fn(w.to("neuron"), bad.to("neuron"))
    assert track.get_executed_ops().get(op) == 1
    ok = torch.tensor([9])
    torch.testing.assert_close(fn(w.to("neuron"), ok.to("neuron")).cpu(), fn(w.clone(), ok), rtol=0, atol=0)
    assert track.get_executed_ops().get(op) == 2


def _pending_work(device="neuron"):
    """A chain of launched, not yet awaited ops, and its CPU reference."""
    x = torch.randn(192, 192)
    want = ((x @ x).tanh() @ x).sum(0)
    xd = x.to(device)
    return ((xd @ xd).tanh() @ xd).sum(0), want


BAD_INDEX_OPS = {
    # name: (fn(weight, index), CPU's exception type, op named in the device's message)
    "index_select": (lambda w, i: w.index_select(0, i), IndexError, "aten.index_select.default"),
    "embedding": (lambda w, i: torch.nn.functional.embedding(i, w), IndexError, "aten.embedding.default"),
    "gather": (lambda w, i: torch.gather(w, 0, i.view(-1, 1).expand(-1, 4)), RuntimeError, "aten.gather.default"),
    "index_put_": (lambda w, i: w.index_put_((i,), torch.full((i.numel(), 4), 7.0, device=w.device)),
                   IndexError, "aten.index_put_.default"),
    "scatter_add_": (lambda w, i: w.scatter_add_(0, i.view(-1, 1).expand(-1, 4), torch.ones(i.numel(), 4, device=w.device)),
                     RuntimeError, "aten.scatter_add_.default"),
}


@pytest.mark.parametrize("name", sorted(BAD_INDEX_OPS))
def test_index_error_is_raised_by_the_failing_op_at_its_call(name):
    fn, error, op = BAD_INDEX_OPS[name]
    w = torch.randn(10, 4)
    bad, good = torch.tensor([3, 10]), torch.tensor([9, 0, 4])
    w_cpu = w.clone()
    with pytest.raises(error):
        fn(w_cpu, bad)  # the CPU's type, and what its tensor holds after the failed op
    pending, pending_want = _pending_work()
    wd = w.to("neuron")
    torch_neuronx.clear_op_tracking()
    # the op call itself raises (not a later read), with the CPU's type, naming the op
    with pytest.raises(error, match=re.escape(op) + ": .*(out of range|out of bounds)"):
        fn(wd, bad.to("neuron"))
    assert op in torch_neuronx.get_executed_ops()
    # nothing deferred: waiting and reading raise nothing, and work launched before is intact
    torch.neuron.synchronize()
    torch.testing.assert_close(pending.cpu(), pending_want, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(wd.cpu(), w_cpu)  # a failed in-place op wrote nothing, as on the CPU
    # the device stays usable: the same executable, with good indices, gives the CPU's result
    torch.testing.assert_close(fn(wd, good.to("neuron")).cpu(), fn(w_cpu, good))
    torch.testing.assert_close(wd.cpu(), w_cpu)
    assert (wd.sum() * 0 + 1).item() == 1.0


def test_error_on_one_device_leaves_the_other_one_running():
    pending0, want0 = _pending_work("neuron:0")
    w = torch.randn(6, 3)
    with pytest.raises(IndexError, match=r"aten\.index_select\.default"):
        w.to("neuron:1").index_select(0, torch.tensor([6], device="neuron:1"))
    torch.neuron.synchronize(1)
    torch.neuron.synchronize()
    torch.testing.assert_close(pending0.cpu(), want0, rtol=1e-4, atol=1e-3)
    got = w.to("neuron:1").index_select(0, torch.tensor([5, 0], device="neuron:1"))
    assert got.device == torch.device("neuron", 1)
    torch.testing.assert_close(got.cpu(), w.index_select(0, torch.tensor([5, 0])))


def test_out_of_memory_is_raised_by_the_op_that_allocates():
    """An allocation no machine can satisfy (2**50 bytes): the CPU raises RuntimeError; the device
    raises torch.OutOfMemoryError (a RuntimeError, CUDA's type) naming the op, at the op's call."""
    n = 2**48
    with pytest.raises(RuntimeError, match="can't allocate memory"):
        torch.empty(n)  # the CPU allocator's error (empty: nothing is touched)
    base = torch.neuron.memory_allocated()
    pending, want = _pending_work()
    with pytest.raises(torch.OutOfMemoryError, match=r"aten\.zeros\.default: neuron out of memory"):
        torch.zeros(n, device="neuron")
    torch.neuron.synchronize()
    assert torch.neuron.memory_allocated() == base + pending.numel() * 4  # only the live result
    torch.testing.assert_close(pending.cpu(), want, rtol=1e-4, atol=1e-3)
    x = torch.arange(5.0)
    torch.testing.assert_close((x.to("neuron") * 2).cpu(), x * 2)


def test_compiled_index_error_is_raised_by_the_graph_call():
    f = torch.compile(lambda t, i: torch.index_select(t, 0, i) * 2, backend="neuron", dynamic=False)
    t = torch.randn(4, 2)
    td = t.to("neuron")
    with pytest.raises(IndexError):
        torch.index_select(t, 0, torch.tensor([0, 4]))  # the CPU's (eager) error
    pending, want = _pending_work()
    with pytest.raises(ndb.NEFFExecutionError, match=r"op aten\.index_select\.default .*IndexError.*out of range"):
        f(td, torch.tensor([0, 4], device="neuron"))
    torch.neuron.synchronize()
    torch.testing.assert_close(pending.cpu(), want, rtol=1e-4, atol=1e-3)
    idx = torch.tensor([3, 0, 3])
    torch.testing.assert_close(f(td, idx.to("neuron")).cpu(), torch.index_select(t, 0, idx) * 2)
    torch.testing.assert_close(td.cpu(), t)


@torch.library.custom_op("neuron_test_errors::checked_log", mutates_args=())
def checked_log(x: torch.Tensor) -> torch.Tensor:
    if bool((x <= 0).any()):
        raise ValueError("checked_log: every input must be positive")
    return x.log()


@checked_log.register_fake
def _(x):
    return torch.empty_like(x)


@pytest.mark.cpu_fallback
def test_host_op_failing_inside_a_compiled_graph_names_the_op():
    """A custom op with no lowering runs on the host from inside the graph's executable; when it
    raises, the graph call fails naming that op and node, with the op's own error as the cause."""

    def f(x):
        return checked_log(x * 2) + 1

    c = torch.compile(f, backend="neuron", fullgraph=True, dynamic=False)
    good, bad = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, -2.0, 3.0])
    with pytest.raises(ValueError, match="must be positive"):
        f(bad)  # the CPU
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(c(good.to("neuron")).cpu(), f(good))
        with pytest.raises(ndb.NEFFExecutionError,
                           match=r"op neuron_test_errors\.checked_log\.default \(node '\w+'\): ValueError: "
                                 r"checked_log: every input must be positive") as caught:
            c(bad.to("neuron"))
        assert isinstance(caught.value.__cause__, ValueError)
        torch.neuron.synchronize()
        again = c(torch.tensor([4.0, 5.0, 6.0], device="neuron"))
    torch.testing.assert_close(again.cpu(), f(torch.tensor([4.0, 5.0, 6.0])))
    assert torch_neuronx.get_fallback_ops() == {"neuron_test_errors.checked_log.default": 3}
