"""Runs one lowering the way the executor does (jitted, tensors and Scalars as traced inputs) on
CPU tensors converted to jax arrays, and compares it with the same ATen op run by PyTorch on the CPU.
For testing the lowering table on its own; the device tests go through the real `neuron` device.

The comparison is of the lowering's own results: no cast first. The executor (eager and compiled)
casts each result to the meta kernel's dtype, which would hide a lowering that computes the wrong
dtype; the lowerings must give PyTorch's dtype themselves (DTYPE_EXCEPTIONS lists where PyTorch's
CPU kernel and its meta kernel disagree, and why the lowering follows meta there)."""
from __future__ import annotations

import numpy as np
import torch

from torch_neuronx.runtime.lazy_jax import jax, jnp
from torch_neuronx.ops import LOWERINGS, normalize
from torch_neuronx.ops.dtypes import to_numpy_dtype, to_torch_dtype

aten = torch.ops.aten

# (op, output index) -> reason. PyTorch's CPU kernel and its meta kernel (which sizes and types the
# device's outputs: the executor allocates what meta says) give different dtypes here, so the device
# cannot match the CPU's dtype. The lowering must give meta's dtype; its values are compared after
# rounding to the CPU's dtype (the statistics convention tests/opinfo_support.py's STAT_OUTPUTS allows).
_BN_STATS = ("batch norm statistics (save_mean, save_invstd) of a 16-bit input without float32 running stats: "
             "the CPU kernel returns them in the input's dtype, meta (like CUDA and PyTorch's reference "
             "decomposition) in float32, the dtype they are computed in")
_LN_STATS = ("layer norm statistics (mean, rstd) of a 16-bit input with 16-bit (or no) weights: the CPU kernel "
             "returns them in the input's dtype, meta (and the CPU itself when the weights are float32) in "
             "float32, the dtype they are computed in")
DTYPE_EXCEPTIONS = {
    (aten._native_batch_norm_legit.no_stats, 1): _BN_STATS,
    (aten._native_batch_norm_legit.no_stats, 2): _BN_STATS,
    (aten.native_layer_norm.default, 1): _LN_STATS,
    (aten.native_layer_norm.default, 2): _LN_STATS,
}


def to_jax(t: torch.Tensor):
    t = t.detach().contiguous()
    if t.dtype in (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2):
        view = {1: torch.uint8, 2: torch.int16}[t.element_size()]
        return jnp.asarray(t.view(view).numpy().view(to_numpy_dtype(t.dtype)))
    return jnp.asarray(t.numpy())


def to_torch(a) -> torch.Tensor | None:
    if a is None:  # a lowering's undefined output (a gradient masked off)
        return None
    a = np.asarray(a)
    dtype = to_torch_dtype(a.dtype)
    if dtype in (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2):
        view = {1: np.uint8, 2: np.int16}[a.dtype.itemsize]
        return torch.from_numpy(a.view(view).copy()).view(dtype)
    return torch.from_numpy(a.copy())


def run_lowering(op, *args, key_seed: int = 0, **kwargs):
    """The lowering of `op` on these CPU arguments, as torch CPU tensors (a tuple for several outputs)."""
    lowering = LOWERINGS[op]
    values = normalize(op, args, kwargs)
    schema = op._schema.arguments
    dynamic, slots = [], []
    for i, (a, v) in enumerate(zip(schema, values)):
        kind = str(a.type)
        if isinstance(v, torch.Tensor):
            slots.append(("dyn", len(dynamic))); dynamic.append(to_jax(v))
        elif isinstance(v, (list, tuple)) and v and all(isinstance(x, torch.Tensor) for x in v):
            slots.append(("dynlist", len(dynamic), len(v))); dynamic.extend(to_jax(x) for x in v)
        elif "Generator" in kind:
            # a jax key passed by the caller is used as given; else one made from key_seed
            slots.append(("key",) if v is None or isinstance(v, torch.Generator) else ("static", v))
        elif kind.startswith("Scalar") and v is not None and a.name not in lowering.static:
            slots.append(("dyn", len(dynamic))); dynamic.append(v)
        else:
            slots.append(("static", v))

    def call(*dyn):
        full = []
        for s in slots:
            if s[0] == "dyn":
                full.append(dyn[s[1]])
            elif s[0] == "dynlist":
                full.append(list(dyn[s[1]: s[1] + s[2]]))
            elif s[0] == "key":
                full.append(jax.random.key(key_seed))
            else:
                full.append(s[1])
        if lowering.rng:
            full.append(jax.random.key(key_seed))
        return lowering.fn(*full)

    out = jax.jit(call)(*dynamic)
    if isinstance(out, (tuple, list)):
        return tuple(to_torch(o) for o in out)
    return to_torch(out)


def _meta_dtypes(op, args, kwargs):
    def meta(x):
        if isinstance(x, torch.Tensor):
            return torch.empty_like(x, device="meta")
        if isinstance(x, (list, tuple)):
            return type(x)(meta(v) for v in x)
        return x

    out = op(*meta(args), **{k: meta(v) for k, v in kwargs.items()})
    return [o.dtype if isinstance(o, torch.Tensor) else None for o in (out if isinstance(out, (tuple, list)) else (out,))]


def assert_same_dtype(op, index, got, expected, meta_dtype=None):
    """The lowering's own dtype is PyTorch's (or meta's, for a listed exception)."""
    want = expected.dtype
    if (op, index) in DTYPE_EXCEPTIONS and meta_dtype is not None:
        want = meta_dtype
    assert got.dtype == want, f"{op} output {index}: the lowering gives {got.dtype}, PyTorch {want}"


def check_lowering(op, *args, atol=None, rtol=None, family=None, **kwargs):
    """Assert the lowering matches PyTorch's CPU result for `op(*args, **kwargs)`: the same dtype (the
    lowering's own, not cast), shape and values: within atol/rtol if given, else within the
    tests/tolerances.py entry `family` for each output's dtype, else torch's defaults."""
    expected = op(*args, **kwargs)
    got = run_lowering(op, *args, **kwargs)
    exp_list = expected if isinstance(expected, (tuple, list)) else (expected,)
    got_list = got if isinstance(got, tuple) else (got,)
    assert len(exp_list) == len(got_list), f"{op}: {len(got_list)} outputs, expected {len(exp_list)}"
    metas = _meta_dtypes(op, args, kwargs) if any((op, i) in DTYPE_EXCEPTIONS for i in range(len(exp_list))) else None
    for i, (e, g) in enumerate(zip(exp_list, got_list)):
        assert g is not None, f"{op} output {i}: the lowering returned None, PyTorch a tensor"
        assert tuple(g.shape) == tuple(e.shape), f"{op} output {i}: shape {tuple(g.shape)} != {tuple(e.shape)}"
        assert_same_dtype(op, i, g, e, metas[i] if metas else None)
        if g.dtype != e.dtype:  # a listed exception: meta's dtype, compared once rounded to the CPU's
            g = g.to(e.dtype)
        torch.testing.assert_close(g, e, equal_nan=True, **tolerance(e, atol, rtol, family))


def tolerance(expected, atol=None, rtol=None, family=None) -> dict:
    """assert_close's rtol/atol for one output: the explicit ones, else the table entry `family` at the
    output's dtype (its atol_scale applied to `expected`), else torch's defaults (an empty dict)."""
    if atol is not None or rtol is not None:
        return dict(atol=atol, rtol=rtol)
    if family is None:
        return {}
    from tolerances import tol

    return tol(family, expected.dtype, expected)
