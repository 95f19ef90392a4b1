"""Lowerings of ops/attention.py (the _scaled_dot_product_fused_attention_overrideable forward and
backward) against PyTorch's math attention (tests/lowering_harness.py)."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from helpers import randn  # noqa: E402
from lowering_harness import compare_outputs, run_lowering, tolerance  # noqa: E402

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")
SDPA = aten._scaled_dot_product_fused_attention_overrideable.default


def _reference_lse(q, k, bias, is_causal, scale, enable_gqa=False):
    q, k = q.double(), k.double()
    if enable_gqa and k.shape[-3] != q.shape[-3]:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
    s = q @ k.transpose(-2, -1) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if bias is not None:
        s = s.masked_fill(~bias, -INF) if bias.dtype == torch.bool else s + bias.double()
    if is_causal:
        s = s.masked_fill(~torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).tril(), -INF)
    lse = torch.logsumexp(s, -1)
    return lse.float() if lse.dim() == 3 else lse.float()[None]


SDPA_CASES = [
    # (B, Hq, Hk, L, S, E, Ev, bias, is_causal, scale)
    (2, 3, 3, 5, 7, 8, 8, None, False, None),
    (1, 2, 2, 6, 4, 4, 5, "float", False, 0.3),
    (2, 2, 2, 5, 7, 8, 8, "bool", False, None),
    (2, 4, 2, 6, 6, 8, 8, None, True, None),  # GQA
    (1, 2, 2, 7, 5, 8, 8, "float2d", False, None),
    (2, 2, 2, 7, 5, 8, 8, None, True, 0.5),  # causal, L > S (top-left aligned)
    (1, 2, 2, 3, 6, 8, 8, None, True, None),  # causal, L < S
    (None, 2, 2, 5, 5, 4, 4, None, False, None),  # 3-d inputs
]


def _sdpa_inputs(case, dtype=torch.float32):
    B, Hq, Hk, L, S, E, Ev, bias, causal, scale = case
    lead = () if B is None else (B,)
    q, k, v = randn(*lead, Hq, L, E, dtype=dtype), randn(*lead, Hk, S, E, dtype=dtype), randn(*lead, Hk, S, Ev, dtype=dtype)
    if bias == "float":
        bias = randn(*lead, Hq, L, S, dtype=dtype)
    elif bias == "float2d":
        bias = randn(L, S, dtype=dtype)
    elif bias == "bool":
        bias = torch.rand(L, S) > 0.3
        bias[1] = False  # a fully masked row gives 0 (PyTorch's safe softmax)
    return q, k, v, bias, causal, scale


def _math_mask(bias, dtype=None):
    """The float mask scaled_dot_product_attention hands the fused kernels (and math) for a bool one."""
    if bias is None or bias.dtype != torch.bool:
        return bias
    return torch.zeros(bias.shape, dtype=dtype).masked_fill(~bias, -INF)


SDPA_BWD = aten._scaled_dot_product_fused_attention_overrideable_backward.default


# ---------------------------------------------------------------------------------------------
# attention


@pytest.mark.parametrize(
    "case, dtype",
    [(c, torch.float32) for c in range(len(SDPA_CASES))] + [(1, torch.bfloat16), (3, torch.bfloat16)],
)
def test_sdpa_overrideable_forward(case, dtype, none_ok):
    q, k, v, bias, causal, scale = _sdpa_inputs(SDPA_CASES[case], dtype)
    gqa = k.shape[-3] != q.shape[-3]
    # what the CPU computes for a user: its flash kernel where it takes it, else the math path
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=causal, scale=scale,
                                              enable_gqa=gqa)
    got = none_ok(SDPA, q, k, v, bias, 0.0, causal, False, scale=scale)
    out, lse, cum_q, cum_k, max_q, max_k, seed, offset, debug = got
    assert out.dtype == dtype and out.shape == expected.shape
    torch.testing.assert_close(out, expected)
    assert lse.dtype == torch.float32
    torch.testing.assert_close(lse, _reference_lse(q, k, bias, causal, scale, gqa))
    assert cum_q is None and cum_k is None and debug is None
    assert int(max_q) == q.shape[-2] and int(max_k) == k.shape[-2]
    assert seed.dtype == torch.int64 and offset.dtype == torch.int64


def test_sdpa_overrideable_dropout_refused():
    q = randn(1, 1, 2, 4)
    with pytest.raises(NotImplementedError, match="dropout"):
        run_lowering(SDPA, q, q, q, None, 0.1)


@pytest.mark.parametrize("case", range(len(SDPA_CASES)))
def test_sdpa_overrideable_backward(case, none_ok):
    q, k, v, bias, causal, scale = _sdpa_inputs(SDPA_CASES[case])
    gqa = k.shape[-3] != q.shape[-3]
    float_bias = bias is not None and bias.dtype != torch.bool
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    b_leaf = bias.double().requires_grad_() if float_bias else _math_mask(bias, torch.float64)
    out_ref = aten._scaled_dot_product_attention_math(*leaves, b_leaf, 0.0, causal, scale=scale, enable_gqa=gqa)[0]
    g = randn(*out_ref.shape)
    out_ref.backward(g.double())
    fwd = none_ok(SDPA, q, k, v, bias, 0.0, causal, False, scale=scale)
    out, lse = fwd[0], fwd[1]
    mask = [True, True, True, float_bias]
    grads = none_ok(
        SDPA_BWD, g, q, k, v, bias, mask, out, lse, None, None, fwd[4].item(), fwd[5].item(),
        0.0, causal, fwd[6], fwd[7], scale=scale,
    )
    expected = [t.grad.float() for t in leaves] + [b_leaf.grad.float() if float_bias else None]
    compare_outputs(expected, grads)
    # masked-off gradients are not computed
    part = none_ok(
        SDPA_BWD, g, q, k, v, bias, [False, True, False, False], out, lse, None, None,
        fwd[4].item(), fwd[5].item(), 0.0, causal, fwd[6], fwd[7], scale=scale,
    )
    assert part[0] is None and part[2] is None and part[3] is None
    torch.testing.assert_close(part[1], expected[1])


def test_sdpa_overrideable_backward_bf16(none_ok):
    q, k, v, bias, causal, scale = _sdpa_inputs(SDPA_CASES[1], torch.bfloat16)
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    b_leaf = bias.double().requires_grad_()
    out_ref = aten._scaled_dot_product_attention_math(*leaves, b_leaf, 0.0, causal, scale=scale)[0]
    g = randn(*out_ref.shape, dtype=torch.bfloat16)
    out_ref.backward(g.double())
    fwd = none_ok(SDPA, q, k, v, bias, 0.0, causal, False, scale=scale)
    grads = none_ok(
        SDPA_BWD, g, q, k, v, bias, [True] * 4, fwd[0], fwd[1], None, None, fwd[4].item(), fwd[5].item(),
        0.0, causal, fwd[6], fwd[7], scale=scale,
    )
    for r, t in zip(grads, leaves + [b_leaf]):
        want = t.grad.to(torch.bfloat16)  # the exact gradient, rounded once
        torch.testing.assert_close(r, want, **tolerance(want, family="attention_bf16"))
