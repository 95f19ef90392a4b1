"""The CPU's rules for `out=` tensors, where PyTorch's Python meta kernels and decompositions follow others.

An `out=` overload's eager kernel learns its result from the op's meta call, and a decomposed one runs
PyTorch's decomposition; for most out= overloads either is a Python reference (`torch/_refs`,
`torch/_meta_registrations.py`) wrapped by `out_wrapper`, which casts its result into any out tensor it
can "safely" cast to and resizes it with a warning of its own. The CPU's kernels decide op by op:
TensorIterator's unary ops want the out tensor in the input's dtype (`Found dtype Double but expected
Float`), structured kernels the dtype their meta function computes (`resize_out`: `Expected out tensor
to have dtype float, but got double instead`), others check in words of their own.

- `check(op, args, kwargs)` raises what the CPU raises for an out tensor of another dtype, by `RULES`
  (an overload packet's name -> its kernel's rule), before the meta kernel or decomposition would cast
  instead (or raise in its own words); `argument_checks.check` calls it, so eager kernels,
  decompositions and a compiled graph's checks share it. A rule compares each out tensor with the
  dtype the op's functional overload computes for the same arguments (`result_dtypes`, its meta call).
- Resizing: an out tensor of a wrong, non-empty shape is resized with the CPU's warning
  (`warn_resized`: `at::native::resize_output`'s words, or a kernel's own, or none where the kernel
  resizes quietly), to the strides of the op's own result where the kernel restrides it (structured
  and TensorIterator kernels do; `restrides`). `CpuResizeWarnings` keeps PyTorch's Python resize
  warnings (their required shape left unformatted) from the user.
- `meta_call`: the kernels that cast into an out tensor of any dtype where the meta kernel refuses
  (`_ANY_DTYPE_OUT`).
"""
from __future__ import annotations

import functools
import sys
import warnings

import torch
from torch._subclasses.fake_tensor import is_fake

from .cpu_messages import cpp_type_name, scalar_type_name


def _tensor(x) -> bool:
    return isinstance(x, torch.Tensor)


# ---- resizing an out tensor


def resize_warning(old_shape, new_shape) -> str:
    """at::native::resize_output's warning for an out tensor with elements that it resizes."""
    return (f"An output with one or more elements was resized since it had shape {list(old_shape)}, which does not "
            f"match the required output shape {list(new_shape)}. This behavior is deprecated, and in a future "
            "PyTorch release outputs will not be resized unless they have zero elements. You can explicitly reuse "
            "an out tensor t by resizing it, inplace, to zero elements with t.resize_(0).")


# the same warning from PyTorch's Python out= wrapper (torch/_prims_common/wrappers.py), with its
# required shape left unformatted, and from the C++ meta kernels that have one
_RESIZE_PREFIX = "An output with one or more elements was resized since it had shape "


def is_resize_warning(message) -> bool:
    return str(message).startswith(_RESIZE_PREFIX)


_PACKAGE = __name__.split(".", 1)[0]


def _caller_stacklevel() -> int:
    """The stacklevel of the first frame outside torch and this package (the user's call)."""
    frame, level = sys._getframe(1), 1
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not (module == "torch" or module.startswith(("torch.", _PACKAGE + "."))):
            return level
        frame, level = frame.f_back, level + 1
    return 1


def _kept_dim_shape(args, kwargs, new_shape, dim_at):
    """The shape with the reduced dimension kept: kthvalue and mode resize their outs so, then squeeze."""
    dim = args[dim_at] if len(args) > dim_at else kwargs.get("dim", -1)
    keepdim = args[dim_at + 1] if len(args) > dim_at + 1 else kwargs.get("keepdim", False)
    shape = list(new_shape)
    if keepdim:
        return shape
    rank = len(shape) + 1
    dim = dim + rank if dim < 0 else dim
    return shape[:dim] + [1] + shape[dim:]


def _arange_warning(op, args, kwargs, old_shape, new_shape):
    n = 1
    for s in old_shape:
        n *= s
    return (f"The number of elements in the out tensor of shape {list(old_shape)} is {n} which does not match the "
            f"computed number of elements {new_shape[0]}. Note that this may occur as a result of rounding error. "
            f"The out tensor will be resized to a tensor of shape ({new_shape[0]},).")


# kernels that warn otherwise: (op, args, kwargs, old shape, new shape) -> the warning
RESIZE_WARNINGS = {
    "aten.arange": _arange_warning,
    "aten.kthvalue": lambda op, args, kwargs, old, new: resize_warning(old, _kept_dim_shape(args, kwargs, new, 2)),
    "aten.mode": lambda op, args, kwargs, old, new: resize_warning(old, _kept_dim_shape(args, kwargs, new, 1)),
}


def warn_resized(op, args, kwargs, old_shape, new_shape) -> None:
    """Warn as the CPU's kernel of `op` does when it resizes an out tensor that had elements (one of 0
    elements is resized quietly)."""
    n = 1
    for s in old_shape:
        n *= s
    if n and warns_on_resize(op):
        text = RESIZE_WARNINGS.get(str(op.overloadpacket))
        message = resize_warning(old_shape, new_shape) if text is None else text(op, args, kwargs, old_shape, new_shape)
        warnings.warn(message, UserWarning, stacklevel=_caller_stacklevel())


# kernels that resize their out tensors without a warning (`Tensor::resize_`, not `resize_output`)
QUIET_RESIZE = frozenset({"aten.addbmm", "aten.linspace", "aten.logspace", "aten.eye", "aten.log_sigmoid_forward",
                          "aten.narrow_copy", "aten.multinomial", "aten.bernoulli"})


@functools.lru_cache(maxsize=None)
def meta_kernel_is_cpp(op) -> bool:
    """Whether the kernel `op` runs on meta tensors is C++ (a structured kernel's meta function, or a
    C++ composite): its resize warnings are the CPU's and reach the caller's caller when the call
    returns, out of reach of `CpuResizeWarnings`."""
    kernel = torch._C._dispatch_get_computed_kernel_for_dispatch_key(op.name(), torch._C.DispatchKey.Meta)
    return ".cpp:" in repr(kernel)


# kernels that resize their outs in another order than their schema's (the C++ meta function's order)
_RESIZE_ORDER = {"aten._linalg_eigh": (1, 0), "aten.histogram": (1, 0)}
# A kernel that resizes an out tensor gives it the strides of its result where it is structured or a
# TensorIterator's (`resize_out`, `set_output_raw_strided`); these resize it contiguous and copy their
# result into it (`resize_output` then `copy_`), the linalg ones of _RESTRIDE_EMPTY_ONLY unless it had
# no elements (then it takes the result's strides)
_CONTIGUOUS_RESIZE = frozenset({"aten._fft_c2c", "aten._fft_r2c", "aten._fft_c2r", "aten.cholesky"})
_RESTRIDE_EMPTY_ONLY = frozenset({"aten.geqrf", "aten.ormqr", "aten.linalg_householder_product",
                                  "aten.linalg_lstsq", "aten.linalg_eig"})


def resize_order(op, n: int) -> tuple:
    """The order in which the CPU's kernel of `op` resizes its `n` out tensors."""
    order = _RESIZE_ORDER.get(str(op.overloadpacket))
    return order if order is not None and len(order) == n else tuple(range(n))


def restrides(op, old_shape) -> bool:
    """Whether the CPU's kernel of `op` gives an out tensor of shape `old_shape` that it resizes the
    strides of its result (else the out tensor is contiguous)."""
    name = str(op.overloadpacket)
    if name in _CONTIGUOUS_RESIZE:
        return False
    return name not in _RESTRIDE_EMPTY_ONLY or 0 in tuple(old_shape)


def warns_on_resize(op) -> bool:
    """Whether the CPU's kernel of `op` warns of an out tensor it resizes (not those that resize with
    `Tensor::resize_`)."""
    return str(op.overloadpacket) not in QUIET_RESIZE


class CpuResizeWarnings(warnings.catch_warnings):
    """Around a meta call or a decomposition that may resize out tensors: their resize warnings (PyTorch's
    Python ones, whose required shape is left unformatted) are dropped, for the caller to warn as the
    CPU does (`warn_resized`); every other warning is passed on as it was raised."""

    def __init__(self):
        super().__init__(record=True)
        self.dropped = 0  # resize warnings dropped

    def __enter__(self):
        self._caught = super().__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        super().__exit__(*exc)
        for w in self._caught:
            if is_resize_warning(w.message):
                self.dropped += 1
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
        return False


# ---- the dtypes the op computes


@functools.lru_cache(maxsize=None)
def functional_overload(op):
    """The overload of `op`'s packet that takes its arguments without the out= ones (None: none)."""
    wanted = [(a.name, str(a.type)) for a in op._schema.arguments if not a.is_out]
    packet = op.overloadpacket
    for name in packet.overloads():
        other = getattr(packet, name)
        arguments = other._schema.arguments
        if other is op or any(a.alias_info is not None and a.alias_info.is_write for a in arguments):
            continue
        if [(a.name, str(a.type)) for a in arguments] == wanted:
            return other
    return None


def _meta(x):
    if isinstance(x, torch.Tensor):
        if is_fake(x) or x.device.type == "meta" or (x.device.type == "cpu" and x.dim() == 0):
            return x
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, (list, tuple)):
        return type(x)(_meta(v) for v in x)
    if isinstance(x, torch.device) and x.type != "cpu":
        return torch.device("meta")
    return x


def _functional_results(op, args, kwargs) -> list | None:
    """The results of `op`'s functional overload for these arguments on meta tensors (fake ones stay),
    or None where there is none or it raises (the op's own meta call then raises as it does)."""
    functional = functional_overload(op)
    if functional is None:
        return None
    outs = {a.name for a in op._schema.arguments if a.is_out}
    try:
        result = functional(*_meta(tuple(args)), **{k: _meta(v) for k, v in kwargs.items() if k not in outs})
    except Exception:
        return None
    return list(result) if isinstance(result, (tuple, list)) else [result]


def result_dtypes(op, args, kwargs) -> list | None:
    """The dtype of each result of `op`'s functional overload for these arguments (None: none)."""
    results = _functional_results(op, args, kwargs)
    return None if results is None else [r.dtype if _tensor(r) else None for r in results]


def result_layouts(op, args, kwargs) -> list | None:
    """The (shape, strides) of each result of `op`'s functional overload for these arguments (None: none)."""
    results = _functional_results(op, args, kwargs)
    return None if results is None else [(tuple(r.shape), tuple(r.stride())) if _tensor(r) else None
                                         for r in results]


def resize_outs(op, args, kwargs) -> bool:
    """Resize the out= tensors of this call that have another shape than the op's results, as the CPU
    does before it computes (warning where it warns), to the strides the op gives its own results.
    False where the op's functional overload gives no results to go by (nothing resized)."""
    layouts = result_layouts(op, args, kwargs)
    if layouts is None:
        return False
    outs = _outs(op, kwargs)
    for i in resize_order(op, len(outs)):
        out, layout = outs[i], layouts[i] if i < len(layouts) else None
        if _tensor(out) and layout is not None and tuple(out.shape) != layout[0]:
            old_shape = tuple(out.shape)
            warn_resized(op, args, kwargs, old_shape, layout[0])
            out.resize_(layout[0])
            if restrides(op, old_shape) and out.stride() != layout[1]:
                out.as_strided_(layout[0], layout[1])
    return True


def _outs(op, kwargs) -> list:
    return [kwargs.get(a.name) for a in op._schema.arguments if a.is_out]


# ---- the rules: each takes (op, args, kwargs, outs) and raises the CPU's error


def _each_out(test):
    """A rule that checks each out tensor against the dtype the op computes for it."""
    def rule(op, args, kwargs, outs):
        results = result_dtypes(op, args, kwargs)
        if results is None:
            return
        for i, (out, result) in enumerate(zip(outs, results)):
            if _tensor(out) and result is not None and out.dtype != result:
                test(op, args, i, out.dtype, result)
    return rule


def _same_dtype(op, args, i, dtype, result):
    """TensorIterator's unary ops (check_all_same_dtype): every operand in the input's dtype."""
    raise RuntimeError(f"Found dtype {scalar_type_name(dtype)} but expected {scalar_type_name(result)}")


def _resize_out(op, args, i, dtype, result):
    """A structured kernel's out tensor (`resize_out`): the dtype its meta function computes."""
    raise RuntimeError(f"Expected out tensor to have dtype {cpp_type_name(result)}, but got {cpp_type_name(dtype)} "
                       "instead")


def _cast_to_out(op, args, i, dtype, result):
    """TensorIterator's ops that cast their result into the out tensor: a cast within the dtype's category."""
    if not torch.can_cast(result, dtype):
        raise RuntimeError(f"result type {scalar_type_name(result)} can't be cast to the desired output type "
                           f"{scalar_type_name(dtype)}")


def _castable(prefix, names):
    """linalg's checkLinalgCompatibleDtype: the result must cast safely into each out tensor."""
    def test(op, args, i, dtype, result):
        if not torch.can_cast(result, dtype):
            name = names[i]
            raise RuntimeError(f"{prefix}Expected {name} to be safely castable from {scalar_type_name(result)} dtype, "
                               f"but got {name} with dtype {scalar_type_name(dtype)}")
    return test


def _same_as_self(message):
    """A kernel that wants its (first) out tensor in `self`'s dtype: `message(self_dtype, out_dtype)`."""
    def rule(op, args, kwargs, outs):
        out, self = outs[0], args[0] if args else kwargs.get("self")
        if _tensor(out) and _tensor(self) and out.dtype != self.dtype:
            raise RuntimeError(message(self.dtype, out.dtype))
    return rule


_DOT = _same_as_self(lambda s, o: f"result dtype {scalar_type_name(o)} does not match input dtype "
                                  f"{scalar_type_name(s)}")


def _bool_out(message):
    def rule(op, args, kwargs, outs):
        if _tensor(outs[0]) and outs[0].dtype != torch.bool:
            raise RuntimeError(message(outs[0].dtype))
    return rule


def _mv(op, args, kwargs, outs):
    """mv(out=) is addmv(out, out, self, vec): the out tensor is addmv's input too."""
    self, vec, out = args[0], args[1], outs[0]
    if _tensor(out) and out.dtype != self.dtype:
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got {scalar_type_name(out.dtype)}, "
                           f"{scalar_type_name(self.dtype)}, and {scalar_type_name(vec.dtype)}")


def _addbmm(op, args, kwargs, outs):
    """addbmm(out=) sums the products into the out tensor with addmm(out, out, ...)."""
    batch2, out = args[2], outs[0]
    if _tensor(out) and out.dtype != batch2.dtype:
        raise RuntimeError(f"self and mat2 must have the same dtype, but got {scalar_type_name(out.dtype)} and "
                           f"{scalar_type_name(batch2.dtype)}")


def _max_min_unary(op, args, kwargs, outs):
    """max/min over all elements (max.unary_out); max.dim_max's C++ meta kernel checks its own outs."""
    self, out = args[0], outs[0]
    if len(outs) == 1 and _tensor(out) and not torch.can_cast(self.dtype, out.dtype):
        raise RuntimeError("Expected canCast( typeMetaToScalarType(self.dtype()), typeMetaToScalarType(out.dtype())) "
                           "to be true, but got false.  (Could this error message be improved?  If so, please report "
                           "an enhancement request to PyTorch.)")


def _heaviside(op, args, kwargs, outs):
    self, values, out = args[0], args[1], outs[0]
    if not _tensor(out) or not _tensor(values):
        return
    if self.is_complex() or values.is_complex() or out.is_complex():
        raise RuntimeError("heaviside is not yet implemented for complex tensors.")
    if self.dtype != values.dtype or out.dtype != self.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")


def _frexp(op, args, kwargs, outs):
    self, (mantissa, exponent) = args[0], outs
    if _tensor(mantissa) and mantissa.dtype != self.dtype:
        raise RuntimeError(f"torch.frexp() expects mantissa to have dtype {cpp_type_name(self.dtype)} but got "
                           f"{cpp_type_name(mantissa.dtype)}")
    if _tensor(exponent) and exponent.dtype != torch.int32:
        raise RuntimeError(f"torch.frexp() expects exponent to have int dtype but got {cpp_type_name(exponent.dtype)}")


def _where(op, args, kwargs, outs):
    results = result_dtypes(op, args, kwargs)
    out = outs[0]
    if results and _tensor(out) and out.dtype != results[0]:
        raise RuntimeError(f"Expected out type to be {scalar_type_name(results[0])} but got "
                           f"{scalar_type_name(out.dtype)}")


def _searchsorted(op, args, kwargs, outs):
    out = outs[0]
    out_int32 = kwargs.get("out_int32", False)
    if _tensor(out) and out.dtype != (torch.int32 if out_int32 else torch.int64):
        raise RuntimeError(f"torch.searchsorted(): output tensor's dtype is wrong, it can only be Int(int32) or "
                           f"Long(int64) depending on whether out_int32 flag is True, but we got output tensor's dtype "
                           f"{scalar_type_name(out.dtype)} and out_int32 flag is {'True' if out_int32 else 'False'}")


def _logsumexp(op, args, kwargs, outs):
    out = outs[0]
    if _tensor(out) and not (out.dtype.is_floating_point or out.dtype.is_complex):
        raise RuntimeError(f"logsumexp(): Expected floating point type for result tensor, but got: "
                           f"{scalar_type_name(out.dtype)}")


def _cat(op, args, kwargs, outs):
    """cat's meta function (and stack's, which is cat's): the inputs' result type must cast to the out's."""
    tensors, out = list(args[0]) if args else list(kwargs.get("tensors", ())), outs[0]
    if not _tensor(out) or not tensors or not all(_tensor(t) for t in tensors):
        return
    result = functools.reduce(torch.promote_types, [t.dtype for t in tensors])
    if not torch.can_cast(result, out.dtype):
        raise TypeError(f"torch.cat(): input types can't be cast to the desired output type "
                        f"{scalar_type_name(out.dtype)}")


def _mean(op, args, kwargs, outs):
    """mean(out=) with no dim (mean.dtype_out) and with dims (mean.out, TensorIterator's words)."""
    results = result_dtypes(op, args, kwargs)
    out = outs[0]
    if not results or not _tensor(out) or torch.can_cast(results[0], out.dtype):
        return
    if op._overloadname == "dtype_out":
        raise RuntimeError(f"mean.dtype_out(): input types can't be cast to the desired output type "
                           f"{scalar_type_name(out.dtype)}")
    _cast_to_out(op, args, 0, out.dtype, results[0])


def _kthvalue(op, args, kwargs, outs):
    self, (values, indices) = args[0], outs
    if _tensor(values) and values.dtype != self.dtype:
        raise RuntimeError("output values must be of same type as input")
    if _tensor(indices) and indices.dtype != torch.int64:
        raise RuntimeError("output indices must be of scalar type Long")


def _mode(op, args, kwargs, outs):
    self, (values, indices) = args[0], outs
    for out, want, name in ((values, self.dtype, "values"), (indices, torch.int64, "indices")):
        if _tensor(out) and out.dtype != want:
            raise RuntimeError(f"expected scalar type '{scalar_type_name(want)}' but got "
                               f"'{scalar_type_name(out.dtype)}' for {name} output")


def _cum_max_min(op, args, kwargs, outs):
    """cummax/cummin: at::native::check_scalar_type of the values (the input's dtype) and indices (Long)."""
    self, (values, indices) = args[0], outs
    for out, want in ((values, self.dtype), (indices, torch.int64)):
        if _tensor(out) and out.dtype != want:
            raise RuntimeError(f"expected scalar_type {scalar_type_name(want)} but found {scalar_type_name(out.dtype)}")


def _logcumsumexp(op, args, kwargs, outs):
    self, out = args[0], outs[0]
    results = result_dtypes(op, args, kwargs)
    want = results[0] if results else self.dtype
    if _tensor(out) and out.dtype != want:
        raise RuntimeError(f"expected scalar_type {scalar_type_name(want)} but found {scalar_type_name(out.dtype)}")


def _expected_scalar_type(op, args, kwargs, outs):
    """Kernels that check each out tensor with at::checkScalarType's words against the input's dtype."""
    self = args[0]
    for out in outs:
        if _tensor(out) and out.dtype != self.dtype:
            raise RuntimeError(f"expected scalar type {scalar_type_name(self.dtype)} but found "
                               f"{scalar_type_name(out.dtype)}")


def _polar(op, args, kwargs, outs):
    abs_, out = args[0], outs[0]
    if _tensor(out) and abs_.dtype.is_floating_point:
        expected = torch.complex128 if abs_.dtype == torch.float64 else torch.complex64
        if out.dtype != expected:
            raise RuntimeError(f"Expected object of scalar type {scalar_type_name(expected)} but got scalar type "
                               f"{scalar_type_name(out.dtype)} for argument 'out'")


def _not_implemented_for(kernel, dtypes):
    """A kernel that computes in its out tensor's dtype and has no loop for some dtypes (its AT_DISPATCH)."""
    def rule(op, args, kwargs, outs):
        out = outs[0]
        if _tensor(out) and kwargs.get("dtype") is None and out.dtype in dtypes:
            raise NotImplementedError(f'"{kernel}" not implemented for \'{scalar_type_name(out.dtype)}\'')
    return rule


def _nansum(op, args, kwargs, outs):
    """nansum computes in its out tensor's dtype; its kernel has loops for floating dtypes only (an
    integral input is summed by sum's)."""
    self, out = args[0], outs[0]
    if not _tensor(out) or kwargs.get("dtype") is not None:
        return
    if (self.dtype.is_floating_point or self.dtype.is_complex) and not out.dtype.is_floating_point:
        raise NotImplementedError(f'"nansum_cpu" not implemented for \'{scalar_type_name(out.dtype)}\'')


def _mvlgamma(op, args, kwargs, outs):
    """mvlgamma's own check, which names the input's dtype and the result's (not the out tensor's)."""
    self, out = args[0], outs[0]
    results = result_dtypes(op, args, kwargs)
    if results and _tensor(out) and not torch.can_cast(results[0], out.dtype):
        raise RuntimeError(f"mvlgamma: result type {scalar_type_name(self.dtype)} can't be cast to the desired "
                           f"output type {scalar_type_name(results[0])}")


def _floating_kernel(kernel):
    """A random kernel that draws into its out tensor's dtype and has loops for floating dtypes only."""
    def rule(op, args, kwargs, outs):
        out = outs[0]
        if _tensor(out) and not (out.dtype.is_floating_point or out.dtype.is_complex):
            raise NotImplementedError(f'"{kernel}" not implemented for \'{scalar_type_name(out.dtype)}\'')
    return rule


def _bernoulli(op, args, kwargs, outs):
    out = outs[0]
    if _tensor(out) and out.dtype.is_complex:
        raise NotImplementedError(f'"bernoulli_tensor_cpu_self_" not implemented for \'{scalar_type_name(out.dtype)}\'')


def _histogram(op, args, kwargs, outs):
    self, (hist, bin_edges) = args[0], outs
    if _tensor(hist) and hist.dtype != self.dtype:
        raise RuntimeError(f"torch.histogram: input tensor and hist tensor should have the same dtype, but got input "
                           f"{cpp_type_name(self.dtype)} and hist {cpp_type_name(hist.dtype)}")
    if _tensor(bin_edges) and bin_edges.dtype != self.dtype:
        raise RuntimeError(f"torch.histogram: input tensor and bin_edges tensor should have the same dtype, but got "
                           f"input {cpp_type_name(self.dtype)} and bin_edges {cpp_type_name(bin_edges.dtype)} for "
                           f"dimension 0")


RULES = {
    # TensorIterator's unary ops: the out tensor in the input's dtype
    **dict.fromkeys(["aten.abs", "aten.bitwise_not", "aten.ceil", "aten.floor", "aten.frac", "aten.neg", "aten.round",
                     "aten.sgn", "aten.sign", "aten.trunc", "aten.conj_physical", "aten.gelu", "aten.hardshrink",
                     "aten.softshrink", "aten.softplus"], _each_out(_same_dtype)),
    # structured kernels (and those that check as they do): the dtype the meta function computes
    **dict.fromkeys(["aten.addmm", "aten.addmv", "aten.baddbmm", "aten.bmm", "aten.mm", "aten._log_softmax",
                     "aten._softmax", "aten.linalg_vector_norm", "aten.triangular_solve", "aten.linalg_cross",
                     "aten.isin", "aten.lu_unpack", "aten.linalg_lu_solve", "aten.avg_pool3d",
                     "aten.slice_scatter", "aten.index_copy", "aten.index_add", "aten.sort", "aten.tril",
                     "aten.triu", "aten.renorm", "aten._linalg_eigh", "aten.linalg_ldl_factor_ex",
                     "aten.linalg_ldl_solve", "aten.linalg_qr", "aten._linalg_slogdet", "aten.linalg_lu_factor_ex",
                     "aten.linalg_lu", "aten._linalg_solve_ex", "aten.scatter_reduce", "aten.diag_embed"],
                    _each_out(_resize_out)),
    # TensorIterator's cast of the result into the out tensor, where the meta kernel casts any
    "aten.angle": _each_out(_cast_to_out),
    # linalg's checkLinalgCompatibleDtype
    "aten.cholesky": _each_out(_castable("cholesky: ", ["result"])),
    "aten.cholesky_inverse": _each_out(_castable("cholesky_inverse: ", ["result"])),
    "aten.cholesky_solve": _each_out(_castable("cholesky_solve: ", ["result"])),
    "aten.linalg_householder_product": _each_out(_castable("torch.linalg.householder_product: ", ["result"])),
    "aten.linalg_eig": _each_out(_castable("torch.linalg.eig: ", ["eigenvalues", "eigenvectors"])),
    "aten.linalg_lstsq": _each_out(_castable("torch.linalg.lstsq: ", ["solution", "residuals", "rank",
                                                                       "singular_values"])),
    "aten.geqrf": _each_out(_castable("torch.geqrf: ", ["a", "tau"])),
    # kernels with words of their own
    "aten.dot": _DOT, "aten.vdot": _DOT, "aten.mv": _mv, "aten.addbmm": _addbmm,
    "aten.max": _max_min_unary, "aten.min": _max_min_unary,
    "aten.heaviside": _heaviside, "aten.frexp": _frexp, "aten.where": _where,
    "aten.searchsorted": _searchsorted, "aten.bucketize": _searchsorted, "aten.histc": _same_as_self(
        lambda s, o: f"torch.histogram: input tensor and hist tensor should have the same dtype, but got input "
                     f"{cpp_type_name(s)} and hist {cpp_type_name(o)}"),
    "aten.logsumexp": _logsumexp, "aten.cat": _cat, "aten.stack": _cat, "aten.mean": _mean,
    "aten.kthvalue": _kthvalue, "aten.mode": _mode, "aten.cummax": _cum_max_min, "aten.cummin": _cum_max_min,
    "aten.logcumsumexp": _logcumsumexp, "aten.native_batch_norm": _expected_scalar_type,
    "aten.log_sigmoid_forward": _expected_scalar_type, "aten.polar": _polar, "aten.ormqr": _same_as_self(
        lambda s, o: f"torch.ormqr: Expected input and result to have the same dtype, but input has dtype"
                     f"{scalar_type_name(s)} and result has dtype {scalar_type_name(o)}"),
    "aten.narrow_copy": _same_as_self(lambda s, o: "Expected self.dtype() == output.dtype() to be true, but got "
                                      "false.  (Could this error message be improved?  If so, please report an "
                                      "enhancement request to PyTorch.)"),
    "aten.index_select": _same_as_self(lambda s, o: "index_select(): self and result must have the same scalar type"),
    "aten.take": _same_as_self(lambda s, o: f"take(): self and out expected to have the same dtype, but got "
                               f"self.dtype = {scalar_type_name(s)} and out.dtype = {scalar_type_name(o)}"),
    "aten.nan_to_num": _same_as_self(lambda s, o: f"nan_to_num: dtype of out: {scalar_type_name(o)} should be same "
                                     f"as input: {scalar_type_name(s)}"),
    "aten.isposinf": _bool_out(lambda o: "isposinf does not support non-boolean outputs."),
    "aten.isneginf": _bool_out(lambda o: "isneginf does not support non-boolean outputs."),
    "aten.signbit": _bool_out(lambda o: "signbit does not support non-boolean outputs."),
    "aten.all": _bool_out(lambda o: f"all only supports bool tensor for result, got: {scalar_type_name(o)}"),
    "aten.any": _bool_out(lambda o: f"any only supports bool tensor for result, got: {scalar_type_name(o)}"),
    "aten.cumsum": _not_implemented_for("cumsum_out_cpu", (torch.bool,)),
    "aten.cumprod": _not_implemented_for("cumprod_out_cpu", (torch.bool,)),
    "aten.nansum": _nansum,
    "aten.mvlgamma": _mvlgamma,
    "aten.normal": _floating_kernel("normal_kernel_cpu"),
    "aten.bernoulli": _bernoulli,
    "aten.linalg_solve_triangular": _expected_scalar_type,
    "aten.histogram": _histogram,
}


# kernels that cast their result into an out tensor of any dtype, where PyTorch's meta kernel refuses
# some casts (bernoulli draws 0 and 1 into any dtype; nansum of an integral input is sum, which
# computes in the out tensor's dtype)
_ANY_DTYPE_OUT = frozenset({"aten.bernoulli", "aten.nansum"})


def casts_into_any_out(op) -> bool:
    """Whether the CPU's kernel of `op` casts its result into out tensors of any dtype (`_ANY_DTYPE_OUT`)."""
    return str(op.overloadpacket) in _ANY_DTYPE_OUT and functional_overload(op) is not None


def meta_call(op, margs, mkwargs):
    """`op` (an out= overload) called on meta tensors, as the CPU's kernel would take them: for the kernels
    of `_ANY_DTYPE_OUT`, its functional overload's result shapes given to the out tensors, whatever
    their dtypes."""
    if str(op.overloadpacket) not in _ANY_DTYPE_OUT or functional_overload(op) is None:
        return op(*margs, **mkwargs)
    names = [a.name for a in op._schema.arguments if a.is_out]
    result = functional_overload(op)(*margs, **{k: v for k, v in mkwargs.items() if k not in names})
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    outs = [mkwargs[name] for name in names]
    for out, r in zip(outs, results):
        if tuple(out.shape) != tuple(r.shape):
            out.resize_(r.shape)
    return outs[0] if len(outs) == 1 else tuple(outs)


def dtype_from_out(op, args, kwargs):
    """The dtype an out= call of `op` computes in where it is its out tensor's, not the op's own: an out=
    overload with a `dtype` argument left None (sum, mean, prod, cumsum...: the CPU's meta function takes
    the out tensor's dtype, `infer_dtype_from_optional`) and an out tensor of another dtype. None otherwise."""
    names = [a.name for a in op._schema.arguments if a.is_out]
    if len(names) != 1 or "dtype" not in [a.name for a in op._schema.arguments] or kwargs.get("dtype") is not None:
        return None
    out = kwargs.get(names[0])
    results = result_dtypes(op, args, kwargs) if _tensor(out) else None
    return out.dtype if results and results[0] is not None and results[0] != out.dtype else None


def check(op, args, kwargs) -> None:
    """Raise what the CPU raises for the out= tensors of this call of `op` (an OpOverload), where its
    rule (`RULES`) and the meta kernel's differ. Not named: `argument_checks.check` names the op."""
    rule = RULES.get(str(op.overloadpacket))
    if rule is None or not kwargs:
        return
    outs = _outs(op, kwargs)
    if not any(_tensor(o) for o in outs):
        return
    rule(op, args, kwargs, outs)
