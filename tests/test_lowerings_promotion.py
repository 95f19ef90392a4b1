"""ops/promotion.py's type promotion (`result_dtype`) against torch.result_type (no compilation)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import warm_cache  # noqa: E402
from torch_neuronx.runtime.lazy_jax import jax  # noqa: E402

F32 = torch.float32
BF = torch.bfloat16


# ---------------------------------------------------------------------------------------------
# type promotion helper (no compilation)


def test_result_dtype_matches_torch():
    from torch_neuronx.ops.promotion import result_dtype
    from torch_neuronx.ops.dtypes import to_numpy_dtype

    dtypes = [torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, BF, F32, torch.float64]
    scalars = [True, 3, 2.5]

    def operand(kind, dt_or_value):
        if kind == "scalar":  # a Scalar arrives as a weakly typed 0-d value (a bool as a 0-d bool)
            with warm_cache.harness_compiles():  # jax's own conversion, not the product's
                return dt_or_value, jax.numpy.asarray(dt_or_value)
        shape = () if kind == "zero" else (2,)
        t = torch.zeros(shape, dtype=dt_or_value)
        return t, jax.ShapeDtypeStruct(shape, to_numpy_dtype(dt_or_value))

    cases = [(k, d) for k in ("dim", "zero") for d in dtypes] + [("scalar", s) for s in scalars]
    for ka, a in cases:
        for kb, b in cases:
            if ka == kb == "scalar":
                continue
            ta, ja = operand(ka, a)
            tb, jb = operand(kb, b)
            try:
                want = torch.result_type(ta, tb)
            except RuntimeError:
                continue
            got = result_dtype(ja, jb)
            assert got == to_numpy_dtype(want), (ka, a, kb, b, got, want)
