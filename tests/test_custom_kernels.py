"""Custom kernels (torch_neuronx.nki_op, torch_neuronx.register_jax_kernel): a jax function as the neuron
implementation of a torch.library op, in eager mode (queued into fused runs, and op by op), in compiled
graphs (a mutating op as AOTAutograd's auto_functionalized_v2), through register_autograd, under a
Trainium target, from the disk cache in a new process, and keyed by the kernel's code. Every value is
compared with the CPU implementation of the same op."""
import json
import os
import textwrap

import jax
import jax.numpy as jnp
import pytest
import torch
from jax.experimental import pallas as pl
from torch import Tensor

import torch_neuronx
from helpers import run_python
from torch_neuronx import metrics
from torch_neuronx.eager import executor, fusion
from torch_neuronx.ops import custom, protocol


# ---- the ops


def _rms_norm_cpu(x, w, eps):
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)


@torch_neuronx.nki_op("test_ck::rms_norm", mutates_args=(), cpu=_rms_norm_cpu, dynamic=("eps",))
def rms_norm(x: Tensor, w: Tensor, eps: float) -> Tensor:  # eps traced: no executable per value
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + eps)
    return (y * w.astype(jnp.float32)).astype(x.dtype)


def _rms_norm_backward_cpu(grad, x, w, eps):
    xf, gf, wf = x.float(), grad.float(), w.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    xhat, gxhat = xf * r, gf * wf
    dx = r * (gxhat - xhat * (gxhat * xhat).mean(-1, keepdim=True))
    return dx.to(x.dtype), (gf * xhat).reshape(-1, x.shape[-1]).sum(0).to(w.dtype)


@torch_neuronx.nki_op("test_ck::rms_norm_backward", mutates_args=(), cpu=_rms_norm_backward_cpu)
def rms_norm_backward(grad: Tensor, x: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    xf, gf, wf = x.astype(jnp.float32), grad.astype(jnp.float32), w.astype(jnp.float32)
    r = jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + eps)
    xhat, gxhat = xf * r, gf * wf
    dx = r * (gxhat - xhat * jnp.mean(gxhat * xhat, -1, keepdims=True))
    return dx.astype(x.dtype), (gf * xhat).reshape(-1, x.shape[-1]).sum(0).astype(w.dtype)


def _setup(ctx, inputs, output):
    x, w, eps = inputs
    ctx.save_for_backward(x, w)
    ctx.eps = eps


def _backward(ctx, grad):
    x, w = ctx.saved_tensors
    dx, dw = rms_norm_backward(grad, x, w, ctx.eps)  # the backward is another custom op
    return dx, dw, None


rms_norm.register_autograd(_backward, setup_context=_setup)


def _scale_cpu(x, s, factor):
    x.mul_(s * factor)
    return x.sum(-1)


@torch_neuronx.nki_op("test_ck::scale_", mutates_args=("x",), cpu=_scale_cpu)
def scale_(x: Tensor, s: Tensor, factor: float) -> Tensor:
    new = (x * s * factor).astype(x.dtype)
    return new.sum(-1), new  # the result, then the new value of the mutated x


@torch_neuronx.nki_op("test_ck::accumulate_", mutates_args=("acc",))  # no CPU implementation: the jax kernel
def accumulate_(acc: Tensor, x: Tensor) -> None:
    return acc + 2 * x


# an op torch.library made, with its own CPU body and fake, given a jax kernel (porting is this one line)
@torch.library.custom_op("test_ck::swiglu", mutates_args=())
def swiglu(a: Tensor, b: Tensor) -> Tensor:
    return torch.nn.functional.silu(a) * b


@swiglu.register_fake
def _(a, b):
    return torch.empty_like(a)


@torch_neuronx.register_jax_kernel("test_ck::swiglu")
def _swiglu_jax(a, b):
    return jax.nn.silu(a) * b


def _axpy_body(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + 2 * y_ref[...]


@torch_neuronx.nki_op("test_ck::pallas_axpy", mutates_args=(), cpu=lambda x, y: x + 2 * y)
def pallas_axpy(x: Tensor, y: Tensor) -> Tensor:
    return pl.pallas_call(_axpy_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x, y)


def _inputs(dtype=torch.float32):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 5, 16, generator=g).to(dtype)
    w = (torch.rand(16, generator=g) + 0.5).to(dtype)
    return x, w


def _program(x, w):
    """The custom op between ATen ops, its result read by ATen ops."""
    h = rms_norm(x * 1.5 + 0.25, w, 1e-6)
    return torch.tanh(h) + swiglu(h, x)


def _compile(fn):
    return torch.compile(fn, backend="neuron", fullgraph=True)


# bfloat16: the kernel rounds rms_norm's result once, as torch's CPU rms_norm does, but its float32 sum
# may differ in the last bit: one bfloat16 ulp of h (2^-7 |h|), which tanh(h) + silu(h) * x carries into
# a result that cancels to near zero (measured 3.9e-3 at |h| ~ 1)
BF16_PROGRAM = dict(rtol=1.6e-2, atol=1e-2)


# ---- eager


def test_eager_queues_the_op_into_the_fused_run_without_ending_it():
    x, w = _inputs()
    want = _program(x, w)
    with fusion.setting(True):
        metrics.clear_op_tracking()
        got = _program(x.to("neuron"), w.to("neuron"))
        assert metrics.fusion_stats()["runs"] == 0  # still queued
        got = got.cpu()
    stats = metrics.fusion_stats()
    assert stats["runs"] == 1 and stats["ops"] == 6 and stats["ended_by"] == {"host read": 1}, stats
    ops = metrics.get_executed_ops()
    assert ops["test_ck.rms_norm.default"] == 1 and ops["test_ck.swiglu.default"] == 1
    torch.testing.assert_close(got, want)


def test_eager_op_by_op_with_fusion_off():
    x, w = _inputs(torch.bfloat16)
    want = _program(x, w)
    with fusion.disabled():
        metrics.clear_op_tracking()
        got = _program(x.to("neuron"), w.to("neuron")).cpu()
    assert metrics.fusion_stats()["runs"] == 0
    assert metrics.get_executed_ops()["test_ck.rms_norm.default"] == 1
    torch.testing.assert_close(got, want, **BF16_PROGRAM)


def test_a_pallas_kernel_in_interpret_mode():
    x, y = _inputs()
    want = pallas_axpy(x, y)
    torch.testing.assert_close(want, x + 2 * y)
    with fusion.setting(True):
        eager = (pallas_axpy(x.to("neuron"), y.to("neuron")) - 1).cpu()
    compiled = _compile(lambda a, b: pallas_axpy(a, b) - 1)(x.to("neuron"), y.to("neuron")).cpu()
    torch.testing.assert_close(eager, want - 1)
    torch.testing.assert_close(compiled, want - 1)


# ---- compiled


def test_compiled_fullgraph_lowers_the_op_inline():
    from torch._dynamo.utils import counters

    x, w = _inputs(torch.bfloat16)
    want = _program(x, w)
    xn, wn = x.to("neuron"), w.to("neuron")
    torch._dynamo.reset()
    counters.clear()
    fn = _compile(_program)
    fn(xn, wn)
    metrics.clear_op_tracking()
    got = fn(xn, wn).cpu()
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert metrics.get_executed_ops() == {}  # the call is the graph's one launch: no eager op ran
    torch.testing.assert_close(got, want, **BF16_PROGRAM)


# ---- training


def test_backward_through_register_autograd_eager_and_compiled():
    x, w = _inputs()

    def loss(x, w):
        return (rms_norm(x, w, 1e-5) * torch.linspace(-1, 1, 16, device=x.device)).square().sum()

    def grads(x, w, fn=loss):
        x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
        fn(x, w).backward()
        return x.grad.cpu(), w.grad.cpu()

    cpu = grads(x, w)
    # the op's CPU autograd against torch's own rms_norm's
    reference = grads(x, w, lambda x, w: (_rms_norm_cpu(x, w, 1e-5) * torch.linspace(-1, 1, 16)).square().sum())
    torch.testing.assert_close(cpu, reference)
    metrics.clear_op_tracking()
    eager = grads(x.to("neuron"), w.to("neuron"))
    assert metrics.get_executed_ops()["test_ck.rms_norm_backward.default"] == 1
    compiled = grads(x.to("neuron"), w.to("neuron"), _compile(loss))
    torch.testing.assert_close(eager, cpu)
    torch.testing.assert_close(compiled, cpu)


# ---- mutation


def _mutations(x, s):
    """The mutating op on a fresh tensor, on views of it (a slice, a transpose's slice), on an input."""
    buf = x.clone()
    r1 = scale_(buf[1:3], s, 0.5)
    r2 = scale_(buf.t()[2:5], s[:4], -1.5)
    r3 = scale_(x, s, 2.0)
    return buf, r1, r2, r3


@pytest.mark.parametrize("mode", ["eager", "eager_unfused", "compiled", "compiled_v1"])
def test_a_mutating_kernel_writes_its_arguments(mode):
    """Compiled, the op reaches the backend as auto_functionalized_v2 (its arguments views of bases),
    or as auto_functionalized where torch is set to make that."""
    import torch._inductor.config

    g = torch.Generator().manual_seed(7)
    x, s = torch.randn(4, 8, generator=g), torch.randn(8, generator=g)
    x_cpu = x.clone()
    want = _mutations(x_cpu, s)
    xn, sn = x.to("neuron"), s.to("neuron")
    torch._dynamo.reset()  # Dynamo keeps the last mode's graph for this function otherwise
    with fusion.setting(mode != "eager_unfused"), \
            torch._inductor.config.patch(enable_auto_functionalized_v2=mode != "compiled_v1"):
        got = (_compile(_mutations) if mode.startswith("compiled") else _mutations)(xn, sn)
        got = [t.cpu() for t in got]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(xn.cpu(), x_cpu)  # the input mutation


def test_a_kernel_returning_nothing_and_its_cpu_tensors_run_the_kernel():
    g = torch.Generator().manual_seed(8)
    acc, x = torch.randn(6, 3, generator=g), torch.randn(6, 3, generator=g)
    want = acc + 2 * x
    on_cpu = acc.clone()
    assert accumulate_(on_cpu, x) is None  # CPU tensors: the jax kernel on the device, the result copied back
    torch.testing.assert_close(on_cpu, want)
    eager = acc.to("neuron")
    assert accumulate_(eager, x.to("neuron")) is None
    torch.testing.assert_close(eager.cpu(), want)

    def twice(acc, x):
        accumulate_(acc, x)
        accumulate_(acc[2:], x[2:])
        return acc * 1

    expected = twice(acc.clone(), x)
    compiled_acc = acc.to("neuron")
    torch.testing.assert_close(_compile(twice)(compiled_acc, x.to("neuron")).cpu(), expected)
    torch.testing.assert_close(compiled_acc.cpu(), expected)


@torch_neuronx.nki_op("test_ck::swap_", mutates_args="unknown")  # every tensor argument may be written
def swap_(x: Tensor, y: Tensor) -> None:
    return y, x


def test_mutates_args_unknown_writes_every_tensor_argument():
    x, y = torch.arange(4.0), -torch.arange(4.0)
    a, b = x.clone(), y.clone()
    swap_(a, b)
    assert torch.equal(a, y) and torch.equal(b, x)
    a, b = x.to("neuron"), y.to("neuron")
    swap_(a, b)
    assert torch.equal(a.cpu(), y) and torch.equal(b.cpu(), x)


def test_a_dynamic_float_is_traced_not_part_of_the_key():
    x, w = _inputs()
    xn, wn = x.to("neuron"), w.to("neuron")
    op = torch.ops.test_ck.rms_norm.default
    keys = {protocol.key_digest(executor.call_key(op, (xn, wn, eps), {})) for eps in (1e-6, 0.5)}
    assert len(keys) == 1
    for eps in (1e-6, 0.5):
        torch.testing.assert_close(rms_norm(xn, wn, eps).cpu(), _rms_norm_cpu(x, w, eps))


# ---- errors name the op


@torch.library.custom_op("test_ck::bad", mutates_args=())
def bad(x: Tensor) -> Tensor:
    return x * 2


@bad.register_fake
def _(x):
    return torch.empty_like(x)


@pytest.mark.parametrize("kernel, message", [
    (lambda x: jnp.reshape(x, (-1,)) * 2, r"returned float32\[32\] for result 0, where the op's fake \(meta\) kernel "
                                          r"says float32\[4, 8\]"),
    (lambda x: (x * 2).astype(jnp.float64), r"returned float64\[4, 8\] for result 0.* says float32\[4, 8\]"),
    (lambda x: (x, x), r"returned 2 values, where the op has 1"),
    (lambda x: jnp.einsum("ij,jk->ik", x, x), r"its jax kernel test_custom_kernels.<lambda> raised ValueError: "
                                              r"Size of label 'j'"),
])
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_a_failing_or_mismatched_kernel_raises_naming_the_op(kernel, message, mode):
    torch_neuronx.register_jax_kernel(bad, kernel)
    x = torch.ones(4, 8, device="neuron")
    fn = _compile(lambda x: bad(x) + 1) if mode == "compiled" else bad
    with pytest.raises(Exception, match=r"test_ck.bad.default") as info:
        fn(x).cpu()
    assert info.match(message)


# ---- keys


def _kernel(source: str):
    """A new function object from source, as a new process (or an edit) makes it."""
    namespace = {"jnp": jnp}
    exec(textwrap.dedent(source), namespace)
    return namespace["kernel"]


@torch.library.custom_op("test_ck::edited", mutates_args=())
def edited(x: Tensor) -> Tensor:
    return x.clone()


edited.register_fake(lambda x: torch.empty_like(x))


def test_an_edited_kernel_gets_a_new_key_and_the_same_code_the_same_key():
    double = "def kernel(x):\n    return x * 2\n"
    triple = "def kernel(x):\n    return x * 3\n"
    x = torch.arange(6.0, device="neuron")
    compiled = _compile(lambda x: edited(x) - 1)

    def run(source):
        torch_neuronx.register_jax_kernel(edited, _kernel(source))
        key = protocol.key_digest(executor.call_key(torch.ops.test_ck.edited.default, (x,), {}))
        return key, edited(x).cpu(), compiled(x).cpu()

    k1, v1, c1 = run(double)
    k2, v2, c2 = run(triple)  # the process held the first kernel's executables (eager, and Dynamo's graph)
    k3, v3, c3 = run(double)
    assert k1 != k2 and k1 == k3
    torch.testing.assert_close(v1, torch.arange(6.0) * 2)
    torch.testing.assert_close(v2, torch.arange(6.0) * 3)
    torch.testing.assert_close(v3, v1)
    torch.testing.assert_close(c1, v1 - 1)
    torch.testing.assert_close(c2, v2 - 1)
    torch.testing.assert_close(c3, v1 - 1)
    # a helper the kernel calls is part of its code, and a global value it reads
    helper = _kernel("SCALE = 2.0\ndef helper(x):\n    return x * SCALE\ndef kernel(x):\n    return helper(x) + 1\n")
    before = custom.kernel_digest(helper)
    helper.__globals__["SCALE"] = 3.0
    assert custom.kernel_digest(helper) != before
    helper.__globals__["SCALE"] = 2.0
    assert custom.kernel_digest(helper) == before
    exec("def helper(x):\n    return x * SCALE - 0\n", helper.__globals__)
    assert custom.kernel_digest(helper) != before


WARM = """
import json, torch, torch_neuronx, jax.numpy as jnp
from torch_neuronx import metrics

def reference(x, w):
    return torch.tanh(x) * w {sign} 1.5

@torch_neuronx.nki_op("warm::kernel", mutates_args=(), cpu=reference)
def kernel(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return jnp.tanh(x) * w {sign} 1.5

x, w = torch.linspace(-2, 2, 32).reshape(4, 8), torch.linspace(0, 1, 8)
eager = (kernel(x.to("neuron"), w.to("neuron")) * 2).cpu()
compiled = torch.compile(lambda a, b: kernel(a, b) + 1, backend="neuron", fullgraph=True)
compiled = compiled(x.to("neuron"), w.to("neuron"))
ok = torch.allclose(eager, kernel(x, w) * 2) and torch.allclose(compiled.cpu(), kernel(x, w) + 1)
counts, stats = metrics.executable_counts(), metrics.executable_cache_stats()
print(json.dumps({{"ok": ok, "value": eager[0, 0].item(), **counts, "disk_misses": stats["disk_misses"]}}))
"""


def test_a_new_process_loads_the_kernels_executables_from_disk_and_an_edit_compiles(tmp_path):
    env = dict(os.environ, TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path), TORCH_NEURONX_EAGER_FUSION="1")
    env.pop("TORCH_NEURONX_NEFF_DISABLE_CACHE", None)

    def child(sign, seed):
        r = run_python(WARM.format(sign=sign), env=env, PYTHONHASHSEED=seed)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    cold, warm, edited = child("+", "1"), child("+", "2"), child("-", "3")
    assert cold["ok"] and warm["ok"] and edited["ok"]
    assert cold["runs_compiled"] == 1 and cold["graphs_compiled"] == 1
    # the same kernel in a new process (another hash seed): everything from disk, nothing compiled
    assert warm["runs_compiled"] == warm["ops_compiled"] == warm["graphs_compiled"] == 0, warm
    assert warm["runs_loaded"] == 1 and warm["graphs_loaded"] == 1 and warm["disk_misses"] == 0
    # the edited kernel finds nothing of the old one: compiled, with the new values
    assert edited["runs_compiled"] == 1 and edited["graphs_compiled"] == 1 and edited["runs_loaded"] == 0
    assert edited["value"] == pytest.approx(cold["value"] - 6.0)


TARGET = """
import json, torch, torch_neuronx, jax.numpy as jnp

@torch_neuronx.nki_op("target::top", mutates_args=(), cpu=lambda x, i: (x.argmax(-1), x[i]))
def top(x: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return jnp.argmax(x, -1), x[i]

x, i = torch.randn(5, 7, generator=torch.Generator().manual_seed(2)), torch.tensor([4, 0, 2])
want = top(x, i)
eager = [t.cpu() for t in top(x.to("neuron"), i.to("neuron"))]
compiled = [t.cpu() for t in torch.compile(top, backend="neuron", fullgraph=True)(x.to("neuron"), i.to("neuron"))]
print(json.dumps({"dtypes": [str(t.dtype) for t in eager + compiled],
                  "equal": all(torch.equal(a, b) for got in (eager, compiled) for a, b in zip(got, want))}))
"""


def test_a_kernel_with_64_bit_values_under_a_trainium_target():
    """Under TORCH_NEURONX_TARGET=trn2 the kernel runs on 32-bit indices, as any lowering does there, and
    its int64 result comes back as PyTorch's int64."""
    r = run_python(TARGET, TORCH_NEURONX_TARGET="trn2", TORCH_NEURONX_NEFF_DISABLE_CACHE="1")
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"dtypes": ["torch.int64", "torch.float32"] * 2, "equal": True}
