"""Runs one lowering the way the executor does (jitted, tensors and Scalars as traced inputs) on
CPU tensors converted to jax arrays, and compares it with the same ATen op run by PyTorch on the CPU.
For testing the lowering table on its own; the device tests go through the real `neuron` device."""
from __future__ import annotations

import numpy as np
import torch

from torch_neuronx._jax import jax, jnp
from torch_neuronx.ops import LOWERINGS, normalize
from torch_neuronx.ops._dtypes import to_numpy_dtype, to_torch_dtype


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


def check_lowering(op, *args, atol=None, rtol=None, **kwargs):
    """Assert the lowering matches PyTorch's CPU result for `op(*args, **kwargs)` (dtype cast as the executor does)."""
    expected = op(*args, **kwargs)
    got = run_lowering(op, *args, **kwargs)
    exp_list = expected if isinstance(expected, (tuple, list)) else (expected,)
    got_list = got if isinstance(got, tuple) else (got,)
    assert len(exp_list) == len(got_list), f"{op}: {len(got_list)} outputs, expected {len(exp_list)}"
    for e, g in zip(exp_list, got_list):
        assert tuple(g.shape) == tuple(e.shape), f"{op}: shape {tuple(g.shape)} != {tuple(e.shape)}"
        torch.testing.assert_close(g.to(e.dtype), e, atol=atol, rtol=rtol, equal_nan=True)
