"""torch's CPU kernels as operations of a jax program: the custom calls of `runtime/native_kernels.py`.

`matmul`, `addmatmul`, `attention`, `attention_backward` and `convolution` are jax primitives whose CPU
lowering is a custom call into the ATen op they stand for (`mm`/`bmm`, `addmm`/`baddbmm`,
`_scaled_dot_product_flash_attention_for_cpu` and its backward, `convolution`), run on XLA's buffers. The linalg,
attention and conv lowerings use them for float16/bfloat16 on the CPU platform (`usable`); everywhere
else they keep their jax forms.

Operands are read where they lie. A custom call takes row-major buffers, so an operand that is a
transpose in the program (a transposed weight, a permuted head layout: what `layout.read` makes of a
strided view, or a graph's `t`/`permute`) would be copied first. The lowering looks through such
transposes instead: it passes the transpose's input and the permutation, and the kernel permutes its
tensor view back, which is how torch's CPU eager receives the same operand (a strided view). XLA then
drops the transpose.
"""
from __future__ import annotations

import functools

import numpy as np

from ..runtime import native_kernels
from ..runtime.lazy_jax import jax, jnp

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


PRODUCTS = native_kernels.PRODUCTS
ATTENTION = native_kernels.ATTENTION
CONVOLUTION = native_kernels.CONVOLUTION


def usable(kind: str, *arrays) -> bool:
    """Whether these operands' `kind` product (PRODUCTS: mm, addmm, bmm, baddbmm, convolution; ATTENTION;
    CONVOLUTION: a float32 convolution) runs torch's CPU kernel here: operands of one dtype, where
    `runtime.native_kernels` chose torch's kernel for that kind and dtype on this CPU (16-bit floats, and
    float32 for CONVOLUTION)."""
    dtype = np.dtype(arrays[0].dtype)
    return all(np.dtype(a.dtype) == dtype for a in arrays) and native_kernels.uses(kind, dtype.name)


def contraction_operands(a, b):
    """(a, b, preferred_element_type) for XLA's own dot or convolution of a and b in PyTorch's precision:
    16-bit floats accumulate in float32 and round once, either as float32 operands (where XLA's CPU code
    is faster so: `native_kernels.xla_upcasts`) or as 16-bit operands with a float32 result; other dtypes
    as they are. Either way the result is float32 for 16-bit inputs."""
    dtype = np.dtype(a.dtype)
    if dtype not in (np.dtype(np.float16), np.dtype(jnp.bfloat16)):
        return a, b, None
    if native_kernels.xla_upcasts(dtype.name):
        return a.astype(_F32), b.astype(_F32), None
    return a, b, _F32


def matmul(a, b):
    """a @ b for 2-d (mm) or 3-d (bmm) operands, in their dtype (torch accumulates in float32)."""
    return _primitives().matmul.bind(a, b)


def addmatmul(self, a, b, beta, alpha):
    """beta * self + alpha * (a @ b) (addmm for 2-d, baddbmm for 3-d), `self` broadcast as ATen does;
    beta and alpha may be traced numbers."""
    return _primitives().addmatmul.bind(self, a, b, jnp.asarray(beta, _F64), jnp.asarray(alpha, _F64))


def attention(query, key, value, mask, is_causal: bool, scale):
    """torch's CPU flash attention of 4-d (B, H, L, E) q, k, v, `mask` None or broadcastable to (B, H, L, S)
    (boolean: True attends; else added to the scaled scores): the output (B, H, L, Ev) in the inputs' dtype
    and the logsumexp (B, H, L) in float32. A fully masked row's output is zeros."""
    out, lse = _primitives().attention.bind(
        query, key, value, _flash_mask(mask, key), is_causal=bool(is_causal), has_scale=scale is not None,
        scale=0.0 if scale is None else float(scale), has_mask=mask is not None,
    )
    return jnp.transpose(out, (0, 2, 1, 3)), lse  # the kernel writes (B, L, H, Ev): a free transpose back


def attention_backward(grad_out, query, key, value, out, lse, mask, is_causal: bool, scale):
    """The gradients (dq, dk, dv) of `attention(query, key, value, mask, is_causal, scale)` given its output
    `out`, logsumexp `lse` and the output's gradient, by torch's CPU flash attention backward; each in the
    inputs' dtype and shape."""
    grads = _primitives().attention_backward.bind(
        grad_out, query, key, value, out, lse, _flash_mask(mask, key), is_causal=bool(is_causal),
        has_scale=scale is not None, scale=0.0 if scale is None else float(scale), has_mask=mask is not None,
    )
    return tuple(jnp.transpose(g, (0, 2, 1, 3)) for g in grads)  # written (B, L, H, E)


def _flash_mask(mask, key):
    """What the flash kernels take for `mask`: an additive float32 mask of 4 dims, keys contiguous in each
    row (the kernel reads a row of biases per query row); an empty placeholder for none."""
    if mask is None:
        return jnp.zeros((0,), _F32)
    if mask.dtype == np.bool_:
        mask = jnp.where(mask, jnp.zeros((), _F32), jnp.full((), -jnp.inf, _F32))
    mask = mask.astype(_F32)
    mask = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
    return jnp.broadcast_to(mask, mask.shape[:3] + (key.shape[2],))


def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """aten.convolution of a batched input (N, C, *spatial); stride, padding, dilation and output_padding
    one entry per spatial dim."""
    has_bias = bias is not None
    if not has_bias:
        bias = jnp.zeros((0,), input.dtype)
    return _primitives().convolution.bind(
        input, weight, bias, stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation),
        transposed=bool(transposed), output_padding=tuple(output_padding), groups=int(groups),
        has_bias=has_bias,
    )


def _convolution_shape(x, w, stride, padding, dilation, transposed, output_padding, groups):
    kernel = w.shape[2:]
    if transposed:
        spatial = tuple((n - 1) * s - 2 * p + d * (k - 1) + o + 1
                        for n, k, s, p, d, o in zip(x.shape[2:], kernel, stride, padding, dilation, output_padding))
        channels = w.shape[1] * groups
    else:
        spatial = tuple((n + 2 * p - d * (k - 1) - 1) // s + 1
                        for n, k, s, p, d in zip(x.shape[2:], kernel, stride, padding, dilation))
        channels = w.shape[0]
    return (x.shape[0], channels) + spatial


# ---------------------------------------------------------------------------------------------------------


def _peel(value):
    """(the value a chain of transposes starts from, the permutation that gives `value` back from it)."""
    from jax.interpreters.mlir import ir

    perm = list(range(len(ir.RankedTensorType(value.type).shape)))
    while True:
        owner = value.owner
        op = getattr(owner, "operation", None)
        if op is None or op.name != "stablehlo.transpose":
            return value, perm
        inner = [int(p) for p in ir.DenseI64ArrayAttr(op.attributes["permutation"])]
        perm = [inner[p] for p in perm]
        value = op.operands[0]


def _lower(target, peeled, attrs_as_arrays, ctx, *operands, **params):
    """The custom call of `target`, operands at `peeled` read through their transposes (attribute
    `<name>_perm` each); the tuple parameters named in `attrs_as_arrays` pass as int64 arrays."""
    from jax.core import ShapedArray
    from jax.interpreters.mlir import ir

    avals, values, attrs = list(ctx.avals_in), list(operands), {}
    for index, name in peeled:
        source, perm = _peel(values[index])
        values[index] = source
        avals[index] = ShapedArray(tuple(ir.RankedTensorType(source.type).shape), avals[index].dtype)
        attrs[f"{name}_perm"] = np.asarray(perm, np.int64)
    for name in attrs_as_arrays:
        params[name] = np.asarray(params[name], np.int64)
    rule = jax.ffi.ffi_lowering(target)
    return rule(ctx.replace(avals_in=avals), *values, **attrs, **params)


def _product_shape(a, b, what):
    if a.ndim != b.ndim or a.ndim not in (2, 3) or a.shape[-1] != b.shape[-2] or a.shape[:-2] != b.shape[:-2]:
        raise ValueError(f"{what}: operands {a.shape} and {b.shape} do not multiply")
    return a.shape[:-1] + b.shape[-1:]


class _Primitives:
    def __init__(self):
        from jax.core import ShapedArray
        from jax.extend.core import Primitive
        from jax.interpreters import mlir

        def make(name, target, peeled, abstract, multiple=False, attrs_as_arrays=()):
            prim = Primitive(name)
            prim.multiple_results = multiple
            prim.def_abstract_eval(abstract)
            # outside a trace (a lowering called on concrete arrays) it runs as its own small program
            prim.def_impl(lambda *args, **params: jax.jit(functools.partial(prim.bind, **params))(*args))
            # not cacheable: the rule looks at its operands' producers, so it is lowered where they are
            # (a cached rule is lowered into a function of its own, its operands arguments of it)
            mlir.register_lowering(prim, functools.partial(_lower, target, peeled, attrs_as_arrays), platform="cpu",
                                   cacheable=False)
            return prim

        self.matmul = make(
            "neuron_native_matmul", "torch_neuronx_matmul", ((0, "a"), (1, "b")),
            lambda a, b: ShapedArray(_product_shape(a, b, "matmul"), a.dtype),
        )
        self.addmatmul = make(
            "neuron_native_addmatmul", "torch_neuronx_addmatmul", ((1, "a"), (2, "b")),
            lambda s, a, b, beta, alpha: ShapedArray(_product_shape(a, b, "addmm"), a.dtype),
        )

        def attention_shapes(q, k, v, mask, *, is_causal, has_scale, scale, has_mask):
            B, H, L, _ = q.shape
            return [ShapedArray((B, L, H, v.shape[-1]), q.dtype), ShapedArray((B, H, L), _F32)]

        def convolution_shape(x, w, b, *, stride, padding, dilation, transposed, output_padding, groups,
                              has_bias):
            shape = _convolution_shape(x, w, stride, padding, dilation, transposed, output_padding, groups)
            return ShapedArray(shape, x.dtype)

        self.convolution = make(
            "neuron_native_convolution", "torch_neuronx_convolution", ((0, "input"),), convolution_shape,
            attrs_as_arrays=("stride", "padding", "dilation", "output_padding"),
        )
        self.attention = make(
            "neuron_native_attention", "torch_neuronx_attention", ((0, "q"), (1, "k"), (2, "v")),
            attention_shapes, multiple=True,
        )

        def attention_backward_shapes(grad_out, q, k, v, out, lse, mask, *, is_causal, has_scale, scale, has_mask):
            return [ShapedArray((t.shape[0], t.shape[2], t.shape[1], t.shape[3]), q.dtype) for t in (q, k, v)]

        self.attention_backward = make(
            "neuron_native_attention_backward", "torch_neuronx_attention_backward",
            ((0, "grad_out"), (1, "q"), (2, "k"), (3, "v"), (4, "out")), attention_backward_shapes, multiple=True,
        )


@functools.cache
def _primitives() -> _Primitives:
    return _Primitives()
