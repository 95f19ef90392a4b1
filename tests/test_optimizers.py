"""Training on neuron: torch.optim's optimizers in their foreach, fused and for-loop forms, the `_foreach_*`
ops under them, clip_grad_norm_, GradScaler and compiled training steps (ops/optim.py), each against the
same run on the CPU, with no op on the host (conftest's no-fallback policy, asserted here too).

Run it with eager fusion on (the default) and off (TORCH_NEURONX_EAGER_FUSION=0)."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_neuronx  # noqa: E402
from helpers import randn  # noqa: E402

aten = torch.ops.aten
F32, BF = torch.float32, torch.bfloat16
NAN, INF = float("nan"), float("inf")


def neuron(xs):
    return [x.to("neuron") for x in xs] if isinstance(xs, (list, tuple)) else xs.to("neuron")


def assert_ran_on_device():
    assert not torch_neuronx.get_fallback_ops() and not torch_neuronx.metrics.get_refused_fallbacks()


def assert_same(got, expected, **tol):
    if isinstance(expected, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e, **tol)
        return
    if not isinstance(expected, torch.Tensor):
        assert got == expected
        return
    assert got.device.type == "neuron" and got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got.cpu(), expected, equal_nan=True, **tol)


# ---------------------------------------------------------------------------------------------
# The foreach ops, one call each: mixed shapes and dtypes in a list, as the CPU's slow path takes them


def _lists():
    a = [randn(3, seed=0), randn(2, 3, seed=1), randn(4, seed=2).to(BF)]
    b = [randn(3, seed=3), randn(2, 3, seed=4), randn(4, seed=5).to(BF)]
    c = [x.abs() + 0.5 for x in (randn(3, seed=6), randn(2, 3, seed=7), randn(4, seed=8).to(BF))]
    a[0][1] = NAN  # NaN handling of maximum/minimum and the rest
    b[1][0, 2] = NAN
    return a, b, c


# name -> fn(a, b, c, scalar0d): the result compared; in-place calls return the written list
FOREACH = {
    "add.Scalar": lambda a, b, c, s: torch._foreach_add(a, 0.3),
    "add.List": lambda a, b, c, s: torch._foreach_add(a, b, alpha=-2),
    "add.ScalarList": lambda a, b, c, s: torch._foreach_add(a, [0.5, -1, 2.25]),
    "add.Tensor": lambda a, b, c, s: torch._foreach_add(a, s, alpha=0.5),
    "sub.Scalar": lambda a, b, c, s: torch._foreach_sub(a, 1.5),
    "sub.List": lambda a, b, c, s: torch._foreach_sub(a, b, alpha=3),
    "sub.ScalarList": lambda a, b, c, s: torch._foreach_sub(a, [1, 2.5, -0.5]),
    "mul.Scalar": lambda a, b, c, s: torch._foreach_mul(a, -0.7),
    "mul.List": lambda a, b, c, s: torch._foreach_mul(a, b),
    "mul.ScalarList": lambda a, b, c, s: torch._foreach_mul(a, [2, 0.1, -3.0]),
    "mul.Tensor": lambda a, b, c, s: torch._foreach_mul(a, s),
    "div.Scalar": lambda a, b, c, s: torch._foreach_div(a, 3.0),
    "div.List": lambda a, b, c, s: torch._foreach_div(a, c),
    "div.ScalarList": lambda a, b, c, s: torch._foreach_div(a, [0.3, 7, -2.0]),
    "div.Tensor": lambda a, b, c, s: torch._foreach_div(a, s),
    "addcmul.Scalar": lambda a, b, c, s: torch._foreach_addcmul(a, b, c, value=0.25),
    "addcmul.ScalarList": lambda a, b, c, s: torch._foreach_addcmul(a, b, c, [0.1, -2, 3.5]),
    "addcdiv.Scalar": lambda a, b, c, s: torch._foreach_addcdiv(a, b, c, value=-1.5),
    "addcdiv.ScalarList": lambda a, b, c, s: torch._foreach_addcdiv(a, b, c, [0.1, 2, -0.5]),
    # packed scalars on the CPU, as CUDA takes them
    "addcdiv.Tensor": lambda a, b, c, s: torch._foreach_addcdiv(a, b, c, torch.tensor([0.5, -1.0, 2.0])),
    "lerp.Scalar": lambda a, b, c, s: torch._foreach_lerp(a, b, 0.3),
    "lerp.ScalarList": lambda a, b, c, s: torch._foreach_lerp(a, b, [0.1, 0.9, 0.6]),
    "lerp.List": lambda a, b, c, s: torch._foreach_lerp(a, b, c),
    "maximum.List": lambda a, b, c, s: torch._foreach_maximum(a, b),
    "maximum.Scalar": lambda a, b, c, s: torch._foreach_maximum(a, 0.2),
    "maximum.ScalarList": lambda a, b, c, s: torch._foreach_maximum(a, [0.0, NAN, -1.0]),
    "minimum.List": lambda a, b, c, s: torch._foreach_minimum(a, b),
    "clamp_min.Scalar": lambda a, b, c, s: torch._foreach_clamp_min(a, -0.5),
    "clamp_max.List": lambda a, b, c, s: torch._foreach_clamp_max(a, c),
    "pow.Scalar2": lambda a, b, c, s: torch._foreach_pow(a, 2),
    "pow.Scalar0.5": lambda a, b, c, s: torch._foreach_pow(c, 0.5),
    "pow.List": lambda a, b, c, s: torch._foreach_pow(c, b),
    "pow.ScalarList": lambda a, b, c, s: torch._foreach_pow(c, [3, 0.5, -1.5]),
    "pow.ScalarAndTensor": lambda a, b, c, s: torch._foreach_pow(0.9, a),
    "sqrt": lambda a, b, c, s: torch._foreach_sqrt(c),
    "exp": lambda a, b, c, s: torch._foreach_exp(a),
    "reciprocal": lambda a, b, c, s: torch._foreach_reciprocal(c),
    "sign": lambda a, b, c, s: torch._foreach_sign(a),
    "abs": lambda a, b, c, s: torch._foreach_abs(a),
    "neg": lambda a, b, c, s: torch._foreach_neg(a),
    "log1p": lambda a, b, c, s: torch._foreach_log1p(c),
    "zero": lambda a, b, c, s: aten._foreach_zero.default(a),
    "norm2": lambda a, b, c, s: torch._foreach_norm(b[:1] + c),
    "norm1": lambda a, b, c, s: torch._foreach_norm(c, 1),
    "norm_inf": lambda a, b, c, s: torch._foreach_norm(c, INF),
    "norm_f64": lambda a, b, c, s: torch._foreach_norm(c, 2, dtype=torch.float64),
    "max": lambda a, b, c, s: torch._foreach_max(c),
    "powsum": lambda a, b, c, s: [*torch._foreach_powsum(c, 0), *torch._foreach_powsum(c, 3)],
    "copy": lambda a, b, c, s: aten._foreach_copy.default(a, b),
    "clone": lambda a, b, c, s: aten._foreach_clone.default(a),
    # in place: the list written, tensor by tensor
    "add_.List": lambda a, b, c, s: (torch._foreach_add_(a, b, alpha=0.5), a)[1],
    "mul_.Tensor": lambda a, b, c, s: (torch._foreach_mul_(a, s), a)[1],
    "div_.ScalarList": lambda a, b, c, s: (torch._foreach_div_(a, [2.0, 3, 0.5]), a)[1],
    "addcdiv_.ScalarList": lambda a, b, c, s: (torch._foreach_addcdiv_(a, b, c, [0.5, 1, 2]), a)[1],
    "addcmul_.Scalar": lambda a, b, c, s: (torch._foreach_addcmul_(a, b, b, value=0.1), a)[1],
    "lerp_.Scalar": lambda a, b, c, s: (torch._foreach_lerp_(a, b, 0.9), a)[1],
    "maximum_.List": lambda a, b, c, s: (torch._foreach_maximum_(a, b), a)[1],
    "sqrt_": lambda a, b, c, s: (torch._foreach_sqrt_(c), c)[1],
    "pow_.Scalar": lambda a, b, c, s: (torch._foreach_pow_(a, 3), a)[1],
    "neg_": lambda a, b, c, s: (torch._foreach_neg_(a), a)[1],
    "zero_": lambda a, b, c, s: (torch._foreach_zero_(a), a)[1],
    "copy_": lambda a, b, c, s: (torch._foreach_copy_(a, b), a)[1],
    "add.Scalar_out": lambda a, b, c, s: (aten._foreach_add.Scalar_out(a, 2.0, out=b), b)[1],
}


@pytest.mark.parametrize("name", FOREACH)
def test_foreach_op(name):
    fn = FOREACH[name]
    a, b, c = _lists()
    s = torch.tensor(-1.25)
    expected = fn(a, b, c, s)
    a, b, c = _lists()
    got = fn(neuron(a), neuron(b), neuron(c), neuron(s))
    assert_same(got, expected)
    assert_ran_on_device()


def test_foreach_op_is_one_program():
    """An in-place foreach op over many tensors is one op of the device (one executable), not one per
    tensor; its Scalar[] is traced: new step sizes each step, no new signature."""
    params = neuron([randn(4, seed=i) for i in range(6)])
    grads = neuron([randn(4, seed=10 + i) for i in range(6)])
    torch._foreach_add_(params, grads, alpha=-0.1)  # first call: traced (and compiled with fusion off)
    torch._foreach_addcdiv_(params, grads, grads, [0.1] * 6)
    torch.neuron.synchronize()
    torch_neuronx.clear_op_tracking()
    for step in range(3):
        torch._foreach_add_(params, grads, alpha=-0.1)
        torch._foreach_addcdiv_(params, grads, grads, [0.01 * (step + 1)] * 6)
    torch.neuron.synchronize()
    ran = torch_neuronx.metrics.get_executed_ops()
    assert ran == {"aten._foreach_add_.List": 3, "aten._foreach_addcdiv_.ScalarList": 3}, ran
    assert torch_neuronx.metrics.cache_stats()["misses"] == 0, "a new step size made a new signature"


def _cpu_error(fn, *args):
    with pytest.raises(RuntimeError) as info:
        fn(*args)
    return str(info.value)


@pytest.mark.parametrize("case", ["lengths", "scalars", "tensor", "packed", "powsum", "adam", "sgd"])
def test_bad_arguments_raise_the_cpus_error(case):
    def call(xs, ys, zs):
        if case == "lengths":
            return torch._foreach_add(xs, ys[:1])
        if case == "scalars":
            return torch._foreach_mul_(xs, [1.0])
        if case == "tensor":
            return torch._foreach_mul(xs, zs[0])  # not 0-d
        if case == "packed":  # packed scalars on the device: the CPU's kernel wants them on the CPU
            return torch._foreach_addcmul(xs, xs, xs, torch.ones(2, device="neuron"))
        if case == "powsum":  # the CPU's kernel takes floating and complex tensors only
            return torch._foreach_powsum([x.long() for x in xs])
        steps = [torch.tensor(1.0, device=xs[0].device)] * 2
        if case == "adam":
            return torch._fused_adam_(xs, ys, xs, xs, [], steps[:1], lr=0.1, beta1=0.9, beta2=0.99,
                                      weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
        return torch._fused_sgd_(xs, ys, [], weight_decay=0.0, momentum=0.9, lr=0.1, dampening=0.0,
                                 nesterov=False, maximize=False, is_first_step=True)

    xs, ys, zs = [randn(3, seed=0), randn(3, seed=1)], [randn(3, seed=2), randn(3, seed=3)], [randn(2, seed=4)]
    if case == "packed":  # the CPU's check of CPU lists with scalars on the device
        message = _cpu_error(torch._foreach_addcmul, xs, xs, xs, torch.ones(2, device="neuron"))
    else:
        message = _cpu_error(call, xs, ys, zs)
    with pytest.raises(RuntimeError, match=re.escape(message)):
        call(neuron(xs), neuron(ys), neuron(zs))
    assert_ran_on_device()


# ---------------------------------------------------------------------------------------------
# The optimizers: a few steps of a small MLP on neuron against the same on the CPU


def _mlp(dtype=F32):
    torch.manual_seed(0)
    # both layers alike: the for-loop forms meet two parameter shapes, not four
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8))
    return model.to(dtype)


def _train(device, cls, options, dtype=F32, steps=3):
    """`steps` steps of `cls`; the parameters and optimizer state after them, on the CPU."""
    model = _mlp(dtype).to(device)
    opt = cls(model.parameters(), **options)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(5, 8, generator=gen).to(dtype).to(device)
        opt.zero_grad()
        (model(x) ** 2).mean().backward()
        if device != "cpu":  # the backward's run apart from the step's (shared by every optimizer here)
            torch.neuron.synchronize()
        opt.step()
        if device != "cpu":
            torch.neuron.synchronize()
    state = [v for s in opt.state.values() for k, v in sorted(s.items()) if isinstance(v, torch.Tensor)]
    return [p.detach().cpu() for p in model.parameters()], [v.cpu() for v in state]


OPTIMIZERS = {
    "sgd": (torch.optim.SGD, dict(lr=0.1)),
    "sgd_nesterov_wd": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1)),
    "sgd_dampening_maximize": (torch.optim.SGD, dict(lr=0.1, momentum=0.8, dampening=0.3, maximize=True)),
    "adam_wd": (torch.optim.Adam, dict(lr=0.01, weight_decay=0.1)),
    "adam_amsgrad_maximize": (torch.optim.Adam, dict(lr=0.01, amsgrad=True, maximize=True)),
    "adamw": (torch.optim.AdamW, dict(lr=0.01)),
    "adamw_amsgrad_maximize": (torch.optim.AdamW, dict(lr=0.01, amsgrad=True, maximize=True, weight_decay=0.05)),
}
FORMS = {"foreach": dict(foreach=True), "fused": dict(fused=True), "for_loop": dict(foreach=False)}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizer_matches_cpu(name, form):
    cls, options = OPTIMIZERS[name]
    options = {**options, **FORMS[form]}
    expected = _train("cpu", cls, options)
    got = _train("neuron", cls, options)
    for g, e in zip(got[0] + got[1], expected[0] + expected[1]):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    assert_ran_on_device()


@pytest.mark.parametrize("cls, lr_device", [(torch.optim.Adam, "neuron"), (torch.optim.AdamW, "cpu"),
                                             (torch.optim.SGD, "neuron")])
def test_fused_tensor_lr(cls, lr_device):
    """A tensor lr (`.tensor_lr` overloads): on the device, or a CPU scalar tensor (traced as a number)."""
    options = dict(fused=True) | (dict(momentum=0.9) if cls is torch.optim.SGD else {})
    expected = _train("cpu", cls, dict(options, lr=torch.tensor(0.02)))
    got = _train("neuron", cls, dict(options, lr=torch.tensor(0.02, device=lr_device)))
    for g, e in zip(got[0] + got[1], expected[0] + expected[1]):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    assert_ran_on_device()


@pytest.mark.parametrize("form", ["foreach", "fused"])
def test_capturable_adam(form):
    """capturable=True (step counts and bias corrections as device tensors: `_foreach_pow.ScalarAndTensor`,
    `_foreach_div_.List`, ...), which the CPU refuses: against the CPU's usual Adam."""
    options = dict(lr=0.01, weight_decay=0.1, **FORMS[form])
    expected = _train("cpu", torch.optim.Adam, options)
    got = _train("neuron", torch.optim.Adam, dict(options, capturable=True))
    for g, e in zip(got[0] + got[1], expected[0] + expected[1]):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    assert_ran_on_device()


@pytest.mark.parametrize("name, form", [("adamw", "foreach"), ("adamw", "fused"), ("sgd_nesterov_wd", "fused")])
def test_bfloat16_parameters(name, form):
    """bfloat16 parameters and state: as far from float32's run on the CPU as the CPU's own bfloat16 run.
    (torch 2.13's CPU fused SGD leaves the vectorized part of a bfloat16 parameter unchanged, so fused
    SGD's CPU reference is its foreach run.)"""
    cls, options = OPTIMIZERS[name]
    reference = _train("cpu", cls, {**options, **FORMS[form]})[0]
    cpu_form = "foreach" if cls is torch.optim.SGD else form
    cpu = _train("cpu", cls, {**options, **FORMS[cpu_form]}, dtype=BF)[0]
    got = _train("neuron", cls, {**options, **FORMS[form]}, dtype=BF)[0]
    for g, c, r in zip(got, cpu, reference):
        assert g.dtype == BF
        cpu_error = (c.float() - r).abs().max().item()
        assert (g.float() - r).abs().max().item() <= 1.5 * cpu_error + 1e-3
    assert_ran_on_device()


@pytest.mark.parametrize("foreach", [True, False])
def test_clip_grad_norm(foreach):
    def run(device):
        model = _mlp().to(device)
        x = randn(5, 8, seed=3, scale=4.0).to(device)
        (model(x) ** 2).sum().backward()
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=foreach)
        return total, [p.grad for p in model.parameters()]

    expected, got = run("cpu"), run("neuron")
    torch.testing.assert_close(got[0].cpu(), expected[0], rtol=1e-5, atol=1e-6)
    for g, e in zip(got[1], expected[1]):
        torch.testing.assert_close(g.cpu(), e, rtol=1e-5, atol=1e-6)
    assert_ran_on_device()


# ---------------------------------------------------------------------------------------------
# GradScaler: float16 autocast, one step with an inf gradient


@pytest.mark.parametrize("form", ["foreach", "fused"])
def test_grad_scaler(form):
    def run(device):
        model = _mlp().to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=0.01, **FORMS[form])
        scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 10, growth_interval=1)
        gen = torch.Generator().manual_seed(1)
        record = []
        for step in range(3):
            x = torch.randn(5, 8, generator=gen).to(device)
            opt.zero_grad()
            with torch.autocast(device, dtype=torch.float16):
                loss = (model(x) ** 2).mean()
            scaler.scale(loss).backward()
            if step == 1:  # an overflow: the step is skipped and the scale backs off
                with torch.no_grad():
                    model[0].weight.grad[1, 2] = INF
            if form == "foreach":  # unscale_ first (clip_grad_norm_ reads unscaled gradients)
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
            record.append((scaler.get_scale(), scaler._growth_tracker.item(),
                           [p.detach().cpu().clone() for p in model.parameters()]))
        return record

    expected, got = run("cpu"), run("neuron")
    assert [r[:2] for r in got] == [r[:2] for r in expected] == [(2048.0, 0), (1024.0, 0), (2048.0, 0)]
    for (_, _, g), (_, _, e) in zip(got, expected):
        # the float16 products of forward and backward round differently on each side (a gradient may
        # differ by a float16 ulp); the optimizer and the scaler's ops match at float32 (tests above)
        for gp, ep in zip(g, e):
            torch.testing.assert_close(gp, ep, rtol=2e-3, atol=1e-4)
    for before, after in zip(got[0][2], got[1][2]):  # the skipped step left the parameters as they were
        assert torch.equal(before, after)
    assert_ran_on_device()


def test_amp_step_reads_nothing_and_is_one_executable():
    """A whole mixed-precision step with the fused AdamW (zero_grad(set_to_none=True), forward, scaled
    backward, GradScaler's step and update) asks the host for nothing: it is queued, and runs as one
    executable when its results are read; the parameters equal the CPU's step."""
    def run(device, check=False):
        torch.manual_seed(3)
        model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(12)]).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=0.01, fused=True)
        scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 8)
        x = torch.randn(4, 16).to(device)
        for step in range(3):
            if check and step == 2:
                torch.neuron.synchronize()
                torch_neuronx.clear_op_tracking()
                reads = torch_neuronx.metrics.host_reads()["reads"]
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = model(x).float().square().mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        if check:
            assert torch_neuronx.metrics.host_reads()["reads"] == reads, "the step read from the host"
            assert torch_neuronx.metrics.fusion_stats()["runs"] == 0, "the step ran before its results were read"
        params = [p.detach().cpu() for p in model.parameters()]
        if check:
            assert torch_neuronx.metrics.fusion_stats()["runs"] == 1
        return params

    for got, want in zip(run("neuron", check=True), run("cpu")):
        torch.testing.assert_close(got, want, rtol=2e-3, atol=1e-4)


def test_amp_ops_match_cpu():
    """The two ops on their own: found_inf set (and kept) as the CPU sets it, gradients unscaled unless
    inv_scale is 1, the scale grown only to a finite value."""
    def run(device):
        grads = [randn(5, seed=0), randn(3, seed=1).to(torch.float16), randn(2, seed=2)]
        grads[2][1] = NAN
        grads = [g.to(device) for g in grads]
        found = torch.zeros(1, device=device)
        aten._amp_foreach_non_finite_check_and_unscale_(grads[:2], found, torch.full((1,), 0.25, device=device))
        clean = found.clone()
        aten._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.ones(1, device=device))
        out = [*grads, clean, found]
        for scale, tracker, inf in ((3e38, 2, 0.0), (1.5, 2, 0.0), (1.5, 0, 0.0), (1.5, 1, 1.0)):
            s = torch.tensor([scale], device=device)
            t = torch.tensor([tracker], dtype=torch.int32, device=device)
            aten._amp_update_scale_(s, t, torch.tensor([inf], device=device), 2.0, 0.3, 3)
            out += [s, t]
        return out

    expected, got = run("cpu"), run("neuron")
    assert_same(got, expected, rtol=0, atol=0)
    assert_ran_on_device()


# ---------------------------------------------------------------------------------------------
# torch.compile(backend="neuron"): the step alone, and a whole training step


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2 = torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 8)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.norm(self.fc1(x))))


def _compiled_training(device, whole_step: bool):
    torch.manual_seed(0)
    model = Block().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)

    def train_step(x):
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    step = opt.step
    if device != "cpu":
        if whole_step:
            train_step = torch.compile(train_step, backend="neuron")
        else:
            step = torch.compile(opt.step, backend="neuron")
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(3):
        x = torch.randn(4, 8, generator=gen).to(device)
        if whole_step:
            loss = train_step(x)
        else:
            opt.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            step()
        losses.append(loss.detach().cpu())
    return losses, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("whole_step", [False, True], ids=["step", "train_step"])
def test_compiled(whole_step):
    torch._dynamo.reset()
    torch_neuronx.metrics.reset_dynamo_metrics()
    expected = _compiled_training("cpu", whole_step)
    got = _compiled_training("neuron", whole_step)
    for g, e in zip(got[0] + got[1], expected[0] + expected[1]):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    record = torch_neuronx.metrics.get_dynamo_metrics()
    assert record["graphs"] or record["loaded_from_disk"]  # compiled here, or loaded from a warm cache
    # no op on the host (a graph that runs one calls back into Python: it is never stored, always compiled)
    assert all(not g["fallback_ops"] for g in record["graphs"])
    assert_ran_on_device()


def _fused_and_amp_steps(params, grads, avgs, sqs, maxs, steps, bufs, found, scale, tracker, lr):
    """GradScaler's check, AdamW and SGD (tensor lr) fused with its grad_scale and found_inf, the update."""
    aten._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.ones_like(scale))
    aten._fused_adamw_(params[:2], grads[:2], avgs, sqs, maxs, steps, lr=0.01, beta1=0.9, beta2=0.999,
                       weight_decay=0.1, eps=1e-8, amsgrad=True, maximize=False, grad_scale=scale, found_inf=found)
    aten._fused_sgd_(params[2:], grads[2:], bufs, weight_decay=0.1, momentum=0.9, lr=lr, dampening=0.0,
                     nesterov=True, maximize=False, is_first_step=False, grad_scale=scale, found_inf=found)
    aten._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 1)


def _fused_inputs(device, overflow):
    params = [randn(3, 2, seed=0), randn(4, seed=1), randn(2, 2, seed=2), randn(5, seed=3)]
    grads = [randn(*p.shape, seed=10 + i, scale=64.0) for i, p in enumerate(params)]
    if overflow:
        grads[3][1] = INF
    moments = [[randn(3, 2, seed=20 + k).abs(), randn(4, seed=30 + k).abs()] for k in range(3)]
    values = [params, grads, *moments, [torch.tensor(3.0)] * 2, [randn(2, 2, seed=40), randn(5, seed=41)],
              torch.zeros(()), torch.tensor(64.0), torch.zeros((), dtype=torch.int32), torch.tensor(0.05)]
    return [[t.clone().to(device) for t in v] if isinstance(v, list) else v.to(device) for v in values]


@pytest.mark.parametrize("overflow", [False, True])
def test_compiled_fused_and_amp_ops(overflow):
    """The fused optimizers' and GradScaler's ops in a compiled graph, as AOTAutograd functionalizes
    them (`_fused_adamw`, `_fused_sgd.tensor_lr`, `_amp_update_scale`, ...), against the CPU's kernels."""
    expected = _fused_inputs("cpu", overflow)
    _fused_and_amp_steps(*expected)
    got = _fused_inputs("neuron", overflow)
    torch.compile(_fused_and_amp_steps, backend="neuron", fullgraph=True)(*got)
    assert_same(got, expected, rtol=1e-5, atol=1e-6)
    assert_ran_on_device()
