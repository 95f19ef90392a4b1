"""torch's CPU kernels inside executables (runtime/native_kernels.py, ops/native.py, csrc/native_kernels.cpp):
bfloat16/float16 mm, addmm, bmm, baddbmm and attention on the CPU platform run the kernel torch's CPU eager
runs, so their results equal the CPU's bit for bit, in eager mode (op by op and in fused runs), in compiled
graphs and from the disk cache (a new process loading them: tests/test_warm_cache.py's slice, with every
16-bit product native); transposed operands are read where they lie (no copy in the program).
bfloat16 attention on a CPU with AVX-512 BF16 runs the shim's own kernel (csrc/bf16_attention.cpp): within
bfloat16 rounding of the CPU, and as close to the exact result as the CPU's."""
import os
import textwrap

import pytest
import torch
import torch.nn.functional as F

from helpers import randn, run_python
from tolerances import tol
from torch_neuronx import metrics
from torch_neuronx.eager import fusion
from torch_neuronx.runtime import native_kernels

DTYPES = [torch.bfloat16, torch.float16]


def _calls():
    return metrics.native_kernel_calls()


def _on(x):
    return x.to("neuron")


def _same(got, want, what=""):
    """Bit for bit (NaNs in the same places)."""
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, what
    assert torch.equal(got.isnan(), want.isnan()), what
    assert torch.equal(got.nan_to_num(), want.nan_to_num()), (what, (got.float() - want.float()).abs().max())


def _randn(*shape, dtype):
    """Normal values drawn in dtype, seeded with the sum of the shape."""
    return randn(*shape, dtype=dtype, drawn_in=dtype, seed=sum(shape))


@pytest.mark.native_products
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_products_equal_the_cpu(dtype, fused):
    a, b = _randn(64, 96, dtype=dtype), _randn(96, 40, dtype=dtype)
    w = _randn(40, 96, dtype=dtype)  # a Linear's weight: used transposed
    bias = _randn(40, dtype=dtype)
    x3 = _randn(2, 64, 96, dtype=dtype)
    b1, b2 = _randn(3, 64, 96, dtype=dtype), _randn(3, 96, 40, dtype=dtype)
    cases = {
        "mm": lambda a, b, w, bias, x3, b1, b2: a @ b,
        "mm transposed": lambda a, b, w, bias, x3, b1, b2: a @ w.t(),
        "linear": lambda a, b, w, bias, x3, b1, b2: F.linear(a, w, bias),
        "linear 3-d": lambda a, b, w, bias, x3, b1, b2: F.linear(x3, w, bias),
        "addmm beta alpha": lambda a, b, w, bias, x3, b1, b2: torch.addmm(bias, a, b, beta=0.5, alpha=-2),
        "addmm 2-d self": lambda a, b, w, bias, x3, b1, b2: torch.addmm(a @ b, a, w.t(), beta=1.5),
        "bmm": lambda a, b, w, bias, x3, b1, b2: torch.bmm(b1, b2),
        "bmm transposed": lambda a, b, w, bias, x3, b1, b2: torch.bmm(b1, b1.transpose(1, 2)),
        "baddbmm": lambda a, b, w, bias, x3, b1, b2: torch.baddbmm(bias, b1, b2, beta=2, alpha=0.25),
        "matmul broadcast": lambda a, b, w, bias, x3, b1, b2: b1 @ b,
        "chain": lambda a, b, w, bias, x3, b1, b2: F.relu(F.linear(a, w, bias)) @ w,
    }
    args = (a, b, w, bias, x3, b1, b2)
    dev = tuple(_on(t) for t in args)
    before = sum(_calls().values())
    with fusion.setting(fused):
        for name, fn in cases.items():
            _same(fn(*dev), fn(*args), name)
    assert sum(_calls().values()) >= before + len(cases)


@pytest.mark.native_products
@pytest.mark.parametrize("dtype", DTYPES)
def test_beta_zero_ignores_nan_self(dtype):
    a, b = _randn(8, 16, dtype=dtype), _randn(16, 4, dtype=dtype)
    self = torch.full((8, 4), float("nan"), dtype=dtype)
    _same(torch.addmm(_on(self), _on(a), _on(b), beta=0), torch.addmm(self, a, b, beta=0))


def test_float32_keeps_xla():
    a, b = _randn(32, 48, dtype=torch.float32), _randn(48, 16, dtype=torch.float32)
    before = _calls()
    got = (_on(a) @ _on(b)).cpu()
    assert _calls() == before
    torch.testing.assert_close(got, a @ b, rtol=1e-5, atol=1e-5)


def _own_attention(dtype, causal) -> bool:
    """Whether this attention runs the shim's own bf16 kernel here (else torch's CPU flash kernel)."""
    return dtype == torch.bfloat16 and not causal and native_kernels.bf16_attention_available()


def _attention_close(got, want, q, k, v, scale, what="", mask=None):
    """The own kernel's result: within bf16 rounding of the CPU's, and no farther from the exact (float64)
    attention than the CPU's own result is (plus an eighth of an ulp of the largest output)."""
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, what
    torch.testing.assert_close(got, want, **tol("attention_bf16_kernel", want.dtype, want))
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.double()
    exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask, scale=scale)
    exact = exact.nan_to_num()  # a fully masked row: the CPU's flash kernel and ours give zeros
    ours, cpus = ((t.double() - exact).abs().max().item() for t in (got, want))
    assert ours <= cpus + exact.abs().max().item() * 2 ** -10, (what, ours, cpus)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_matches_the_cpu(dtype, causal):
    """bf16 (not causal, on a CPU with AVX-512 BF16) runs the shim's own kernel, within bf16 rounding of the
    CPU; float16 and causal attention run torch's flash kernel, equal to the CPU bit for bit."""
    # (B, L, H, E) projections permuted to (B, H, L, E), as diffusers' attention does
    q, k, v = (_randn(2, n, 4, 64, dtype=dtype).permute(0, 2, 1, 3) for n in (40, 56, 56))
    if causal:
        k, v = k[:, :, :40], v[:, :, :40]
    before = _calls()["attention"]
    for scale in (None, 0.3):
        got = F.scaled_dot_product_attention(_on(q), _on(k), _on(v), is_causal=causal, scale=scale)
        want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        if _own_attention(dtype, causal):
            _attention_close(got, want, q, k, v, scale)
        else:
            _same(got, want)
    assert _calls()["attention"] == before + 2


# (B, H, L, S, E, Ev): a partial last block of 24 query rows, keys past a multiple of 64 (odd too), several
# chunks of 256 key pairs (S > 512), value head sizes of 1 to 8 columns of 16, one head and batch 3
_KERNEL_SHAPES = [(1, 3, 50, 700, 64, 64), (2, 2, 7, 131, 32, 32), (3, 1, 24, 64, 128, 128), (1, 2, 30, 77, 48, 48),
                  (1, 1, 5, 9, 16, 16)]


@pytest.mark.parametrize("shape", _KERNEL_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_bf16_attention_kernel_shapes(shape):
    B, H, L, S, E, Ev = shape
    dtype = torch.bfloat16
    q = _randn(B, L, H, E, dtype=dtype).permute(0, 2, 1, 3)
    k, v = _randn(B, S, H, E, dtype=dtype).permute(0, 2, 1, 3), _randn(B, H, S, Ev, dtype=dtype)  # v contiguous
    for scale in (None, -0.7):  # a negative scale: the row max is of the scaled scores
        got = F.scaled_dot_product_attention(_on(q), _on(k), _on(v), scale=scale)
        want = F.scaled_dot_product_attention(q, k, v, scale=scale)
        if _own_attention(dtype, False):
            _attention_close(got, want, q, k, v, scale, (shape, scale))
        else:
            _same(got, want, (shape, scale))


def test_bf16_attention_kernel_logsumexp_and_grad():
    """The kernel's logsumexp is what the backward reads: it matches the CPU flash kernel's, and the
    gradients through the neuron attention match the CPU's."""
    dtype = torch.bfloat16
    q, k, v = (_randn(1, 2, n, 32, dtype=dtype) for n in (70, 90, 90))
    out, lse = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(_on(q), _on(k), _on(v))[:2]
    want_out, want_lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)[:2]
    assert lse.dtype == want_lse.dtype == torch.float32
    torch.testing.assert_close(lse.cpu(), want_lse, rtol=1e-5, atol=1e-5)
    if _own_attention(dtype, False):
        _attention_close(out, want_out, q, k, v, None)
    else:
        _same(out, want_out)
    grads = []
    for dev in ("neuron", "cpu"):
        leaves = [t.to(dev).requires_grad_() for t in (q, k, v)]
        F.scaled_dot_product_attention(*leaves).float().square().sum().backward()
        grads.append([t.grad.cpu() for t in leaves])
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want, **tol("attention_bf16", dtype))


def test_bf16_attention_kernel_fallbacks():
    """What the kernel does not take runs torch's flash kernel, bit for bit the CPU's: an odd head size, a
    value head size that is not a multiple of 16."""
    dtype = torch.bfloat16
    cases = {"odd head size": ((1, 2, 9, 33), (1, 2, 11, 33), (1, 2, 11, 33)),
             "value head 24": ((1, 2, 9, 24), (1, 2, 11, 24), (1, 2, 11, 24))}
    before = _calls()["attention"]
    for name, shapes in cases.items():
        q, k, v = (_randn(*s, dtype=dtype) for s in shapes)
        _same(F.scaled_dot_product_attention(_on(q), _on(k), _on(v)), F.scaled_dot_product_attention(q, k, v), name)
    assert _calls()["attention"] == before + len(cases)


@pytest.mark.native_products
@pytest.mark.parametrize("dtype", DTYPES)
def test_convolutions_equal_the_cpu(dtype):
    x = _randn(2, 8, 17, 19, dtype=dtype)
    w, wg, w1 = _randn(12, 8, 3, 3, dtype=dtype), _randn(12, 4, 3, 3, dtype=dtype), _randn(5, 8, 1, 1, dtype=dtype)
    wt, b = _randn(8, 6, 3, 3, dtype=dtype), _randn(12, dtype=dtype)
    xl = x.contiguous(memory_format=torch.channels_last)
    # wide enough for oneDNN's blocked kernels (the 16-bit ones run channels-last inside the executable)
    xw, ww, bw = _randn(1, 64, 24, 40, dtype=dtype), _randn(96, 64, 3, 3, dtype=dtype), _randn(96, dtype=dtype)
    cases = {
        "wide": lambda: F.conv2d(xw, ww, bw, padding=1),
        "padded": lambda: F.conv2d(x, w, b, padding=1),
        "strided groups": lambda: F.conv2d(x, wg, b, stride=2, groups=2),
        "dilated": lambda: F.conv2d(x, w, b, dilation=2, padding=2),
        "transposed": lambda: F.conv_transpose2d(x, wt, stride=2, output_padding=1),
        "channels last": lambda: F.conv2d(xl, w1),
        "1-d": lambda: F.conv1d(x[:, :, 0], w1[:, :, 0]),
        "unbatched": lambda: F.conv2d(x[0], w, b),
    }
    before = _calls()["convolution"]
    for name, fn in cases.items():
        want = fn()
        x, w, wg, w1, wt, b, xl, xw, ww, bw = (_on(t) for t in (x, w, wg, w1, wt, b, xl, xw, ww, bw))
        _same(fn(), want, name)
        x, w, wg, w1, wt, b, xl, xw, ww, bw = (t.cpu() for t in (x, w, wg, w1, wt, b, xl, xw, ww, bw))
    assert _calls()["convolution"] == before + len(cases)


# (mask shape, boolean): a mask of (L, S) broadcast over batch and heads, one per batch, one per head
_MASKS = [((40, 56), True), ((2, 1, 40, 56), True), ((2, 4, 40, 56), False), ((1, 1, 40, 56), False)]


def _mask(shape, boolean, dtype):
    g = torch.Generator().manual_seed(sum(shape))
    if boolean:
        m = torch.rand(shape, generator=g) > 0.3
        m[..., 3, :] = False  # a fully masked query row: zeros, as the CPU's flash kernel gives
        return m
    m = torch.randn(shape, generator=g).to(dtype)
    m[..., 5, 7:] = float("-inf")  # an additive mask with masked keys
    return m


def _conv_block(x, w, b, gamma, beta):
    """A VAE's unit: group norm, SiLU, a padded 3x3 convolution, nearest upsampling."""
    h = F.silu(F.group_norm(x, 4, gamma, beta))
    return F.interpolate(F.conv2d(h, w, b, padding=1), scale_factor=2.0, mode="nearest")


@pytest.mark.parametrize("mode", ["eager", "fused", "compiled"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_convolution_takes_the_kernel_chosen_for_its_dtype(dtype, mode):
    """Each convolution runs the kernel runtime/native_kernels.py chooses for its dtype on this CPU (torch's
    oneDNN kernel where it is the fast one, XLA's otherwise), op by op, in a fused run and in a compiled
    graph alike; the result is the CPU's (bit for bit where torch's kernel runs)."""
    x, w = _randn(1, 8, 12, 12, dtype=dtype), _randn(16, 8, 3, 3, dtype=dtype)
    b, gamma, beta = _randn(16, dtype=dtype), _randn(8, dtype=dtype), _randn(8, dtype=dtype)
    want = _conv_block(x, w, b, gamma, beta)
    fn = _conv_block
    if mode == "compiled":
        fn = torch.compile(_conv_block, backend="neuron", fullgraph=True, dynamic=False)
    name = str(dtype).removeprefix("torch.")
    native = native_kernels.uses(native_kernels.PRODUCTS, name) or native_kernels.uses(native_kernels.CONVOLUTION, name)
    before = _calls()["convolution"]
    with fusion.setting(mode == "fused"):
        got = fn(*(_on(t) for t in (x, w, b, gamma, beta))).cpu()
    assert _calls()["convolution"] - before == (1 if native else 0), (dtype, mode, native)
    # the norm and the activation around the convolution are XLA's (fused there), within rounding of the CPU's
    torch.testing.assert_close(got, want, **tol("conv", dtype, want))


@pytest.mark.parametrize("kernel", [1, 3, 5])
def test_float32_convolution_kernel_by_width(kernel):
    """float32: a convolution wider than 1x1 runs torch's oneDNN kernel (1.3-1.5x XLA's speed at 128-512
    channels), the CPU's result bit for bit; a 1x1 one is a matrix product and stays XLA's."""
    x, w, b = (_randn(*s, dtype=torch.float32) for s in ((2, 8, 10, 10), (16, 8, kernel, kernel), (16,)))
    want = F.conv2d(x, w, b, padding=kernel // 2)
    native = kernel > 1 and native_kernels.uses(native_kernels.CONVOLUTION, "float32")
    before = _calls()["convolution"]
    got = F.conv2d(_on(x), _on(w), _on(b), padding=kernel // 2).cpu()
    assert _calls()["convolution"] - before == (1 if native else 0)
    if native:
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, **tol("conv", torch.float32, want))


@pytest.mark.parametrize("mask_shape, boolean", _MASKS, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_attention_matches_the_cpu(dtype, mask_shape, boolean):
    """A mask (boolean or additive, broadcast or full) runs the native kernel too (transformers' text models
    pass one: padding and causality as one mask): bf16 on a CPU with AVX-512 BF16 the shim's own kernel, within
    bf16 rounding of the CPU; otherwise torch's flash kernel, equal to the CPU bit for bit."""
    q, k, v = (_randn(2, n, 4, 64, dtype=dtype).permute(0, 2, 1, 3) for n in (40, 56, 56))
    mask = _mask(mask_shape, boolean, dtype)
    before = _calls()["attention"]
    for scale in (None, 0.3):
        got = F.scaled_dot_product_attention(_on(q), _on(k), _on(v), attn_mask=_on(mask), scale=scale)
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        if _own_attention(dtype, False):
            _attention_close(got, want, q, k, v, scale, (mask_shape, scale), mask=mask)
        else:
            _same(got, want, (mask_shape, scale))
    assert _calls()["attention"] == before + 2


def test_masked_attention_compiled_and_grad():
    """A compiled graph with a masked attention runs the native kernel, and gradients through a masked
    attention (the backward reads the kernel's logsumexp) match the CPU's."""
    dtype = torch.bfloat16
    q, k, v = (_randn(1, 2, n, 32, dtype=dtype) for n in (30, 45, 45))
    mask = _mask((30, 45), True, dtype)

    def attend(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    compiled = torch.compile(attend, backend="neuron", fullgraph=True, dynamic=False)
    before = _calls()["attention"]
    got, want = compiled(_on(q), _on(k), _on(v), _on(mask)), attend(q, k, v, mask)
    assert _calls()["attention"] == before + 1
    if _own_attention(dtype, False):
        _attention_close(got, want, q, k, v, None, mask=mask)
    else:
        _same(got, want)
    grads = []
    for dev in ("neuron", "cpu"):
        leaves = [t.to(dev).requires_grad_() for t in (q, k, v)]
        attend(*leaves, mask.to(dev)).float().square().sum().backward()
        grads.append([t.grad.cpu() for t in leaves])
    for got, want in zip(*grads):
        assert not got.isnan().any()
        torch.testing.assert_close(got, want, **tol("attention_bf16", dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["plain", "causal", "float mask", "bool mask"])
def test_attention_backward_matches_the_cpu(dtype, case):
    """The gradients of 16-bit attention run torch's CPU flash backward inside the executable, as the CPU
    does: equal to the CPU's bit for bit where the forward is torch's flash kernel too, within the kernel's
    tolerance where it is the shim's own. Inputs are (B, L, H, E) projections permuted to (B, H, L, E), as
    diffusers' attention makes them; a mask gets no gradient from this kernel (it has none)."""
    causal = case == "causal"
    q, k, v = (_randn(2, n, 3, 32, dtype=dtype).transpose(1, 2) for n in (40, 56, 56))
    mask = _mask((40, 56), case == "bool mask", dtype) if case.endswith("mask") else None
    before = _calls()["attention_backward"]
    grads = []
    for dev in ("neuron", "cpu"):
        leaves = [t.detach().to(dev).requires_grad_() for t in (q, k, v)]
        m = mask.to(dev) if mask is not None else None
        out = F.scaled_dot_product_attention(*leaves, attn_mask=m, is_causal=causal)
        out.float().square().sum().backward()
        grads.append([t.grad.cpu() for t in leaves])
    assert _calls()["attention_backward"] == before + 1
    for got, want in zip(*grads):
        if _own_attention(dtype, causal):
            torch.testing.assert_close(got, want, **tol("attention_bf16", dtype))
        else:
            _same(got, want, case)


@pytest.mark.native_products
def test_compiled_graph_equals_the_cpu():
    dtype = torch.bfloat16
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(96, 192), torch.nn.Linear(192, 96)).to(dtype)
    x = _randn(2, 24, 96, dtype=dtype)
    compiled = torch.compile(block.to("neuron"), backend="neuron", fullgraph=True, dynamic=False)
    before = sum(_calls().values())
    with torch.no_grad():
        got = compiled(_on(x))
        want = block.cpu()(x)
    _same(got, want)
    assert sum(_calls().values()) >= before + 2


@pytest.mark.usefixtures("jax_alone")  # the test's own jax program
def test_transposed_operand_is_not_copied():
    """The custom call reads a transposed weight as the weight itself: no transpose reaches it."""
    import jax
    import jax.numpy as jnp

    from torch_neuronx.ops import native

    def f(x, w):
        return native.matmul(x, jnp.transpose(w))

    x = jnp.asarray(_randn(8, 16, dtype=torch.float32).numpy()).astype(jnp.bfloat16)
    w = jnp.asarray(_randn(4, 16, dtype=torch.float32).numpy()).astype(jnp.bfloat16)
    hlo = jax.jit(f).lower(x, w).compile().as_text()  # after XLA's optimizations
    assert "custom_call_target=\"torch_neuronx_matmul\"" in hlo
    assert "transpose(" not in hlo and " copy(" not in hlo
    want = (x.astype(jnp.float32) @ w.T.astype(jnp.float32)).astype(jnp.bfloat16)
    assert jnp.array_equal(jax.jit(f)(x, w), want)


def test_setting_off_keeps_xla():
    code = textwrap.dedent("""
        import torch
        from torch_neuronx import metrics
        a = torch.randn(16, 32, dtype=torch.bfloat16)
        b = torch.randn(32, 8, dtype=torch.bfloat16)
        got = (a.to("neuron") @ b.to("neuron")).cpu()
        torch.testing.assert_close(got, a @ b, rtol=1e-2, atol=1e-2)
        print(sum(metrics.native_kernel_calls().values()))
    """)
    r = run_python(code, TORCH_NEURONX_NATIVE_KERNELS="0")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[-1] == "0"


def _child(code: str, **env) -> str:
    settings = {k: v for k, v in os.environ.items() if k != "TORCH_NEURONX_NATIVE_KERNELS"}
    r = run_python(textwrap.dedent(code), env=settings, **env)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split()[-1]


def test_auto_follows_torchs_onednn():
    """By default products are native only in the 16-bit dtypes torch runs with oneDNN on this CPU (elsewhere
    torch's own 16-bit matmul and convolution are reference loops, ~100x slower than XLA's float32 path);
    attention is native in both."""
    out = _child("""
        import torch, torch.nn.functional as F
        from torch_neuronx import metrics
        from torch_neuronx.runtime import native_kernels
        onednn = {"bfloat16": torch.ops.mkldnn._is_mkldnn_bf16_supported(),
                  "float16": torch.ops.mkldnn._is_mkldnn_fp16_supported()}
        for name, dtype in (("bfloat16", torch.bfloat16), ("float16", torch.float16)):
            assert native_kernels.uses(native_kernels.PRODUCTS, name) == onednn[name], name
            assert native_kernels.uses(native_kernels.ATTENTION, name), name
            g = torch.Generator().manual_seed(0)
            a, w = (torch.randn(16, 32, generator=g, dtype=dtype) for _ in range(2))
            before = metrics.native_kernel_calls()["matmul"]
            got = F.linear(a.to("neuron"), w.to("neuron")).cpu()
            torch.testing.assert_close(got, F.linear(a, w), rtol=1e-2, atol=1e-2)
            assert (metrics.native_kernel_calls()["matmul"] - before == 1) == onednn[name], name
        print("ok")
    """)
    assert out == "ok"


def test_xla_products_accumulate_in_float32():
    """XLA's 16-bit products (native kernels off) accumulate in float32 and round once, in whichever operand
    form is faster on this CPU: within one rounding of the float32 product, as torch's kernels are."""
    out = _child("""
        import torch, torch.nn.functional as F
        from torch_neuronx import metrics
        g = torch.Generator().manual_seed(0)
        for dtype in (torch.bfloat16, torch.float16):
            r = lambda *s: torch.randn(*s, generator=g).to(dtype)
            a, b, w, bias, b1, b2 = r(48, 256), r(256, 40), r(40, 256), r(40), r(3, 48, 256), r(3, 256, 40)
            x, cw = r(2, 16, 9, 11), r(8, 16, 3, 3)
            cases = {
                "mm": (lambda a, b, w, bias, b1, b2, x, cw: a @ b),
                "linear": (lambda a, b, w, bias, b1, b2, x, cw: F.linear(a, w, bias)),
                "bmm": (lambda a, b, w, bias, b1, b2, x, cw: torch.bmm(b1, b2)),
                "baddbmm": (lambda a, b, w, bias, b1, b2, x, cw: torch.baddbmm(bias, b1, b2, beta=0.5)),
                "conv": (lambda a, b, w, bias, b1, b2, x, cw: F.conv2d(x, cw, padding=1)),
            }
            args = (a, b, w, bias, b1, b2, x, cw)
            for name, fn in cases.items():
                got = fn(*(t.to("neuron") for t in args)).cpu()
                exact = fn(*(t.float() for t in args))
                # one rounding of the float32 result: at most half an ulp of the dtype, plus the sum's order
                ulp = torch.finfo(dtype).eps * exact.abs().clamp_min(torch.finfo(dtype).tiny)
                err = (got.float() - exact).abs()
                assert got.dtype == dtype and bool((err <= ulp * 0.5 + exact.abs().max() * 2e-6).all()), (
                    name, dtype, (err / ulp).max().item())
        assert sum(metrics.native_kernel_calls().values()) == 0
        print("ok")
    """, TORCH_NEURONX_NATIVE_KERNELS="0")
    assert out == "ok"
