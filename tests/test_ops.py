"""The ops an MLP and a transformer block need, on neuron vs the CPU, in float32 and bfloat16.

Each case also proves the op ran on the device: no CPU fallback, and the lowered op was executed.
"""
import pytest
import torch
import torch.nn.functional as F

import torch_neuronx
from helpers import rand

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}


def _r(*shape, low=-2.0, high=2.0, seed=0):
    """Uniform values in [low, high), seeded with seed plus the sum of the shape."""
    return rand(*shape, lo=low, hi=high, seed=seed + sum(shape))


# name -> (fn, inputs builder, an ATen op that must have run on the device)
CASES = {
    "linear": (lambda x, w, b: F.linear(x, w, b), lambda: (_r(4, 8), _r(6, 8), _r(6)), "aten.addmm.default"),
    "linear_3d": (lambda x, w: F.linear(x, w), lambda: (_r(2, 4, 8), _r(6, 8)), "aten.mm.default"),
    "mm": (torch.mm, lambda: (_r(5, 7), _r(7, 3)), "aten.mm.default"),
    "bmm": (torch.bmm, lambda: (_r(2, 5, 7), _r(2, 7, 3)), "aten.bmm.default"),
    "addmm": (lambda a, b, c: torch.addmm(a, b, c, beta=0.5, alpha=2.0), lambda: (_r(5, 3), _r(5, 7), _r(7, 3)), "aten.addmm.default"),
    "matmul_batched": (torch.matmul, lambda: (_r(2, 3, 5, 7), _r(7, 4)), "aten.mm.default"),
    "matmul_bcast": (torch.matmul, lambda: (_r(2, 3, 5, 7), _r(3, 7, 4)), "aten.bmm.default"),
    "add": (lambda a, b: a + b * 3, lambda: (_r(4, 5), _r(5)), "aten.add.Tensor"),
    "sub_alpha": (lambda a, b: torch.sub(a, b, alpha=2), lambda: (_r(4, 5), _r(4, 5)), "aten.sub.Tensor"),
    "mul_scalar": (lambda a: a * 0.1, lambda: (_r(4, 5),), "aten.mul.Tensor"),
    "div": (lambda a, b: a / b, lambda: (_r(4, 5), _r(4, 5, low=0.5)), "aten.div.Tensor"),
    "rsub": (lambda a: 1 - a, lambda: (_r(4, 5),), "aten.rsub.Scalar"),
    "neg_abs": (lambda a: (-a).abs(), lambda: (_r(4, 5),), "aten.abs.default"),
    "eq_lt_where": (lambda a, b: torch.where(a < b, a, b + (a == b)), lambda: (_r(4, 5), _r(4, 5)), "aten.where.self"),
    "where_scalar": (lambda a: torch.where(a > 0, a, 0.0), lambda: (_r(4, 5),), "aten.where.self"),
    "comparisons": (lambda a, b: torch.stack([a > b, a >= b, a <= b, a != b]).float(), lambda: (_r(4, 5), _r(4, 5)), "aten.gt.Tensor"),
    "relu": (F.relu, lambda: (_r(4, 5),), "aten.relu.default"),
    "gelu": (F.gelu, lambda: (_r(4, 5),), "aten.gelu.default"),
    "gelu_tanh": (lambda a: F.gelu(a, approximate="tanh"), lambda: (_r(4, 5),), "aten.gelu.default"),
    "silu": (F.silu, lambda: (_r(4, 5),), "aten.silu.default"),
    "tanh": (torch.tanh, lambda: (_r(4, 5),), "aten.tanh.default"),
    "sigmoid": (torch.sigmoid, lambda: (_r(4, 5),), "aten.sigmoid.default"),
    "exp": (torch.exp, lambda: (_r(4, 5),), "aten.exp.default"),
    "log": (torch.log, lambda: (_r(4, 5, low=0.1),), "aten.log.default"),
    "rsqrt": (torch.rsqrt, lambda: (_r(4, 5, low=0.1),), "aten.rsqrt.default"),
    "pow_scalar": (lambda a: a.pow(2), lambda: (_r(4, 5),), "aten.pow.Tensor_Scalar"),
    "pow_tensor": (lambda a, b: a.pow(b), lambda: (_r(4, 5, low=0.1), _r(4, 5)), "aten.pow.Tensor_Tensor"),
    "sum": (lambda a: a.sum(), lambda: (_r(4, 5),), "aten.sum.default"),
    "sum_dim": (lambda a: a.sum(dim=(0, 2), keepdim=True), lambda: (_r(3, 4, 5),), "aten.sum.dim_IntList"),
    "mean": (lambda a: a.mean(-1), lambda: (_r(3, 4, 5),), "aten.mean.dim"),
    "amax": (lambda a: a.amax(1), lambda: (_r(3, 4, 5),), "aten.amax.default"),
    "max_dim": (lambda a: torch.max(a, 1), lambda: (_r(3, 4, 5),), "aten.max.dim"),
    "min_dim": (lambda a: torch.min(a, -1, keepdim=True), lambda: (_r(3, 4, 5),), "aten.min.dim"),
    "argmax": (lambda a: a.argmax(dim=1), lambda: (_r(3, 4, 5),), "aten.argmax.default"),
    "var": (lambda a: a.var(dim=-1), lambda: (_r(3, 4, 5),), "aten.var.correction"),
    "softmax": (lambda a: a.softmax(-1), lambda: (_r(3, 4, 5),), "aten._softmax.default"),
    "log_softmax": (lambda a: F.log_softmax(a, dim=1), lambda: (_r(3, 4, 5),), "aten._log_softmax.default"),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (8,), w, b), lambda: (_r(2, 3, 8), _r(8), _r(8)), "aten.native_layer_norm.default"),
    "rms_norm": (lambda x, w: F.rms_norm(x, (8,), w, eps=1e-6), lambda: (_r(2, 3, 8), _r(8)), "aten.rsqrt.default"),
    "embedding": (lambda w: F.embedding(torch.tensor([[0, 3], [9, 3]]).to(w.device), w), lambda: (_r(10, 4),), "aten.embedding.default"),
    "cat": (lambda a, b: torch.cat([a, b, a], dim=1), lambda: (_r(2, 3), _r(2, 4)), "aten.cat.default"),
    "stack": (lambda a, b: torch.stack([a, b], dim=-1), lambda: (_r(2, 3), _r(2, 3)), "aten.stack.default"),
    "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), lambda: (_r(2, 2, 5, 8), _r(2, 2, 6, 8), _r(2, 2, 6, 8)), "aten._scaled_dot_product_fused_attention_overrideable.default"),
    "sdpa_causal": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), lambda: (_r(2, 2, 5, 8), _r(2, 2, 5, 8), _r(2, 2, 5, 8)), "aten._scaled_dot_product_fused_attention_overrideable.default"),
    "sdpa_bool_mask": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.tril(torch.ones(5, 6, dtype=torch.bool)).to(q.device)), lambda: (_r(2, 2, 5, 8), _r(2, 2, 6, 8), _r(2, 2, 6, 8)), "aten._scaled_dot_product_fused_attention_overrideable.default"),
    "sdpa_float_mask": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), lambda: (_r(2, 2, 5, 8), _r(2, 2, 6, 8), _r(2, 2, 6, 8), _r(5, 6)), "aten._scaled_dot_product_fused_attention_overrideable.default"),
    "sdpa_broadcast_batch": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), lambda: (_r(3, 5, 8), _r(2, 3, 6, 8), _r(2, 3, 6, 8)), "aten.bmm.default"),  # a 3-d query: the math path
    "to_dtype": (lambda a: a.to(torch.float16).to(torch.float32), lambda: (_r(4, 5),), "aten._to_copy.default"),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_cpu(name, dtype, track):
    fn, make, must_run = CASES[name]
    inputs = [t.to(dtype) if t.is_floating_point() else t for t in make()]
    want = fn(*inputs)
    got = fn(*[t.to("neuron") for t in inputs])
    wants = want if isinstance(want, tuple) else (want,)
    gots = got if isinstance(got, tuple) else (got,)
    assert len(gots) == len(wants)
    for g, w in zip(gots, wants):
        assert g.device.type == "neuron"
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g.cpu(), w, **(TOL[dtype] if w.is_floating_point() else {}))
    assert torch_neuronx.get_fallback_ops() == {}, torch_neuronx.get_fallback_ops()
    assert must_run in torch_neuronx.get_executed_ops(), torch_neuronx.get_executed_ops()


def test_integer_ops_are_exact(track):
    a = torch.tensor([7, -7, 9, -2**40], dtype=torch.int64)
    b = torch.tensor([2, 2, -4, 3], dtype=torch.int64)
    da, db = a.to("neuron"), b.to("neuron")
    for f, op in ((lambda x, y: x + y, "aten.add.Tensor"), (lambda x, y: x * y, "aten.mul.Tensor"),
                  (lambda x, y: x // y, "aten.floor_divide.default"), (lambda x, y: x % y, "aten.remainder.Tensor"),
                  (lambda x, y: torch.div(x, y, rounding_mode="trunc"), "aten.div.Tensor_mode"),
                  (lambda x, y: x / y, "aten.div.Tensor"), (lambda x, y: x.sum() + y, "aten.sum.default")):
        got, want = f(da, db), f(a, b)
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
        assert op in track.get_executed_ops(), op


def test_executable_is_reused_for_a_seen_signature(track, memory_only_cache, no_fusion):
    a = torch.ones(3, 7, 11, device="neuron")
    track.clear_op_tracking()
    a + a
    a + a
    b = a + 2.0
    c = a + 3.0  # a new scalar value is a traced input: no new executable
    assert track.compile_stats()["aten.add.Tensor"][0] == 2
    assert track.get_executed_ops()["aten.add.Tensor"] == 4
    assert track.cache_stats() == {"hits": 2, "misses": 2}
    assert b[0, 0, 0].item() == 3.0 and c[2, 6, 10].item() == 4.0


def test_data_dependent_shapes_run_on_the_device(track):
    x = torch.randn(6, 5)
    d = x.to("neuron")
    m = x > 0.3
    assert torch.equal(d.nonzero().cpu(), x.nonzero())
    assert torch.equal(d[m.to("neuron")].cpu(), x[m])
    assert torch.equal(d[:, m[0].to("neuron")].cpu(), x[:, m[0]])
    assert torch.equal(torch.masked_select(d, d > 0).cpu(), torch.masked_select(x, x > 0))
    y, dy = x.clone(), d.clone()
    y[m] = -1.0
    dy[m.to("neuron")] = -1.0
    assert torch.equal(dy.cpu(), y)
    assert torch_neuronx.get_fallback_ops() == {}
    assert "aten.nonzero_static.default" in track.get_executed_ops()


def test_complex64_elementwise(track):
    a = torch.randn(4, dtype=torch.complex64)
    b = torch.randn(4, dtype=torch.complex64)
    got = a.to("neuron") * b.to("neuron") + 1
    assert got.dtype == torch.complex64
    torch.testing.assert_close(got.cpu(), a * b + 1)
    assert {"aten.mul.Tensor", "aten.add.Tensor"} <= set(track.get_executed_ops())


def test_repeat_interleave_with_tensor_repeats(track):
    x = torch.randn(3, 4)
    r = torch.tensor([1, 2, 0])
    assert torch.equal(x.to("neuron").repeat_interleave(r.to("neuron"), dim=0).cpu(), x.repeat_interleave(r, dim=0))
    assert torch.equal(torch.repeat_interleave(r.to("neuron"), output_size=3).cpu(), torch.repeat_interleave(r))
    assert torch_neuronx.get_fallback_ops() == {}


def test_multinomial_draws_on_the_device_with_the_right_law(track):
    p = torch.tensor([[0.1, 0.2, 0.7], [0.5, 0.5, 0.0]])
    torch.manual_seed(0)
    s = torch.multinomial(p.to("neuron"), 20000, replacement=True).cpu()
    assert s.shape == (2, 20000) and s.dtype == torch.int64
    assert (s[1] == 2).sum() == 0  # zero weight: never drawn
    freq = torch.stack([(s[0] == k).float().mean() for k in range(3)])
    torch.testing.assert_close(freq, p[0], atol=0.015, rtol=0)
    for _ in range(5):  # without replacement: distinct categories, never a zero-weight one
        row0, row1 = torch.multinomial(p.to("neuron"), 2).cpu().tolist()
        assert len(set(row0)) == 2 and sorted(row1) == [0, 1]
    torch.manual_seed(3)
    a = torch.multinomial(p.to("neuron"), 5, replacement=True).cpu()
    torch.manual_seed(3)
    assert torch.equal(torch.multinomial(p.to("neuron"), 5, replacement=True).cpu(), a)
    assert torch_neuronx.get_fallback_ops() == {}


def test_lazy_conjugate_and_ifft(track):
    c = torch.randn(4, dtype=torch.complex64)
    d = c.to("neuron")
    assert torch.equal(d.conj().cpu(), c.conj())
    assert torch.equal((d.conj() * 1).cpu(), c.conj() * 1)
    cc, dd = c.clone(), c.to("neuron")
    cc.conj().mul_(1j)
    dd.conj().mul_(1j)  # a write through a conjugate view
    torch.testing.assert_close(dd.cpu(), cc)
    x = torch.randn(8)
    torch.testing.assert_close(torch.fft.ifft(x.to("neuron")).cpu(), torch.fft.ifft(x))
    torch.testing.assert_close(torch.fft.ihfft(x.to("neuron")).cpu(), torch.fft.ihfft(x))
    assert {"aten.mul_.Tensor", "aten._fft_r2c.default"} <= set(track.get_executed_ops())


def test_embedding_max_norm_renormalizes_rows_in_place():
    torch.manual_seed(0)
    w = torch.randn(10, 4) * 3
    ids = torch.tensor([[1, 2, 1], [9, 0, 0]])
    wc, wd = w.clone(), w.to("neuron")
    want = F.embedding(ids, wc, max_norm=1.5)
    got = F.embedding(ids.to("neuron"), wd, max_norm=1.5)
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(wd.cpu(), wc)  # the looked-up rows of the weight were renormalized
    assert torch_neuronx.get_fallback_ops() == {}


def test_softmax_of_an_empty_tensor(track):
    x = torch.empty(5, 0, 3)
    got = torch.softmax(x.to("neuron"), -1)
    assert got.device.type == "neuron" and torch.equal(got.cpu(), torch.softmax(x, -1))
    assert "aten._softmax.default" in track.get_executed_ops()


def test_bool_scatter_add_is_logical_or(track):
    x = torch.zeros(10, 5, dtype=torch.bool)
    idx = torch.randint(0, 10, (5, 5))
    src = torch.rand(5, 5) > 0.5
    for f, op in ((lambda a, i, s: a.scatter_add(0, i, s), "aten.scatter_add.default"),
                  (lambda a, i, s: a.scatter(0, i, s, reduce="add"), "aten.scatter.reduce"),
                  (lambda a, i, s: torch.ones_like(a).scatter(0, i, s, reduce="multiply"), "aten.scatter.reduce")):
        got, want = f(x.to("neuron"), idx.to("neuron"), src.to("neuron")), f(x, idx, src)
        assert got.dtype == torch.bool and torch.equal(got.cpu(), want)
        assert op in track.get_executed_ops()


def test_equal_returns_a_python_bool(track):
    a = torch.arange(6.0).view(2, 3)
    d = a.to("neuron")
    assert torch.equal(d, a.clone().to("neuron")) is True
    assert torch.equal(d, (a + 1).to("neuron")) is False
    assert torch.equal(d, a.view(3, 2).to("neuron")) is False
    nan = torch.tensor([float("nan")])
    assert torch.equal(nan.to("neuron"), nan.to("neuron")) == torch.equal(nan, nan)
    assert torch_neuronx.get_fallback_ops() == {}
    torch.testing.assert_close(torch.cov(d).cpu(), torch.cov(a))
