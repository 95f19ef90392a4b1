"""Eager fusion: queued ops run as one executable per run, with the values op-by-op launches give.

Every value is compared with the CPU and with the same ops run one launch each (`fusion.disabled()`).
"""
import json
import os

import pytest
import torch

from helpers import run_python
from torch_neuronx import metrics
from torch_neuronx.eager import fusion
from torch_neuronx.runtime import storage


@pytest.fixture(autouse=True)
def _fusion_on():
    """These tests are about fusion: on, also when the suite runs with TORCH_NEURONX_EAGER_FUSION=0."""
    with fusion.setting(True):
        yield


def _program(x, y, w):
    """Fresh results, in-place writes, writes through views, a view read after its base changed."""
    a = x * y + 1.5
    b = a.t() @ w
    a.add_(y)
    v = a[1:3]
    v.mul_(2.0)
    a.diagonal().sub_(0.25)
    c = torch.softmax(b, dim=-1) + a[:, :4].sum(-1, keepdim=True)
    d = torch.cat([c, b.relu()], dim=1)
    e = d.clone()
    e[0].zero_()
    return a, v, b, c, d, e


def _inputs():
    g = torch.Generator().manual_seed(3)
    return torch.randn(6, 6, generator=g), torch.randn(6, 6, generator=g), torch.randn(6, 5, generator=g)


def _on(ts):
    return tuple(t.to("neuron") for t in ts)


def test_a_fused_run_gives_what_op_by_op_launches_and_the_cpu_give():
    cpu = _program(*_inputs())
    metrics.clear_op_tracking()
    fused = _program(*_on(_inputs()))
    assert storage.has_queued(), "the ops should be queued, not launched"
    got = [fused[0].cpu()]
    stats = metrics.fusion_stats()
    assert stats["runs"] == 1 and stats["ops"] >= 12, stats  # one read runs them all
    got += [t.cpu() for t in fused[1:]]
    with fusion.disabled():
        single = [t.cpu() for t in _program(*_on(_inputs()))]
    for f, s, c in zip(got, single, cpu):
        # the same lowerings; XLA may contract a multiply and an add of two ops into one fused
        # multiply-add, as it does inside one op, and order a reduction fused into a larger loop
        # differently: the last bits can move (measured: 6.5e-7 relative on a sum of 4 plus a softmax,
        # 2-core Zen 3)
        torch.testing.assert_close(f, s, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(f, c)


def test_views_see_writes_in_program_order():
    base = torch.arange(12.0).reshape(3, 4)
    dev = base.to("neuron")
    v = dev[:, 1]
    before = v * 1  # read before the write
    dev.mul_(10)  # written through the base
    after = v + 0  # read after it
    v.add_(1)  # written through the view
    assert storage.has_queued()
    torch.testing.assert_close(before.cpu(), base[:, 1])
    torch.testing.assert_close(after.cpu(), base[:, 1] * 10)
    expected = base * 10
    expected[:, 1] += 1
    torch.testing.assert_close(dev.cpu(), expected)


def test_a_host_read_ends_the_run():
    x = torch.randn(8, device="neuron")
    torch.neuron.synchronize()
    metrics.clear_op_tracking()
    y = (x * 2).exp()
    assert storage.has_queued()
    value = y.sum().item()
    assert not storage.has_queued()
    stats = metrics.fusion_stats()
    assert stats["runs"] == 1 and stats["ops"] == 3 and stats["ended_by"] == {"host read": 1}, stats
    assert value == pytest.approx((x.cpu() * 2).exp().sum().item(), rel=1e-6)


def test_synchronize_and_an_op_with_value_checks_end_the_run():
    x = torch.randn(5, 3, device="neuron")
    idx = torch.tensor([4, 0], device="neuron")
    metrics.clear_op_tracking()
    y = x + 1
    torch.neuron.synchronize()
    assert not storage.has_queued() and metrics.fusion_stats()["ended_by"] == {"synchronize": 1}
    z = y * 3
    picked = z[idx]  # index checks its values on the device: the run ends with it
    assert not storage.has_queued()
    stats = metrics.fusion_stats()
    assert stats["ended_by"] == {"synchronize": 1, "value checks of aten.index.Tensor": 1}, stats
    assert stats["max_ops_per_run"] == 2  # z and the index, one launch
    torch.testing.assert_close(picked.cpu(), ((x.cpu() + 1) * 3)[[4, 0]])
    bad = torch.tensor([7], device="neuron")
    w = z * 2
    with pytest.raises(IndexError, match="aten.index.Tensor: index 7 is out of bounds for dimension 0 with size 5"):
        w[bad]  # raised by its own call, as on the CPU
    torch.testing.assert_close(w.cpu(), (x.cpu() + 1) * 6)  # what ran before it stands


def test_a_result_that_died_before_the_run_is_never_computed():
    """What only dead tensors needed is not computed: a synchronize applies the frees before the queue runs,
    so a product whose result was dropped is no output of the run (XLA removes it). A lazy device's
    saving: transformers' text encoders compute logits and later layers a pipeline drops."""
    x = torch.randn(192, 192, device="neuron")
    torch.neuron.synchronize()

    def run_flops(keep):
        before = metrics.estimate_summary()["flops"]
        y = x @ x  # 2 * 192^3 flops
        z = x + 1
        kept = y if keep else None
        del y
        torch.neuron.synchronize()
        return metrics.estimate_summary()["flops"] - before, z, kept

    alive, z1, y = run_flops(keep=True)
    dead, z2, _ = run_flops(keep=False)
    assert alive >= 2 * 192 ** 3 and dead < 192 ** 2 * 4, (alive, dead)
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu())
    for z in (z1, z2):
        torch.testing.assert_close(z.cpu(), x.cpu() + 1)


def test_a_run_donates_only_what_an_output_can_take():
    """A storage a queued op writes and that died before the run has no output to give its buffer to:
    it is not donated (jax would warn that a donated buffer went unused: FSDP2 and DDP runs did, at
    every new run); one whose written values come out is, and the values are the CPU's."""
    import warnings

    x = torch.randn(333, device="neuron")
    w = torch.randn(333, device="neuron")
    torch.neuron.synchronize()
    x_cpu = x.cpu()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x.mul_(2)
        total = x.sum()
        del x  # written, then dead: no output of the run
        w.add_(1)  # written and alive
        torch.testing.assert_close(total.cpu(), (x_cpu * 2).sum())
        torch.neuron.synchronize()
    assert not [c for c in caught if "donated buffers" in str(c.message)], [str(c.message) for c in caught]
    assert w.cpu().shape == (333,)


def test_a_run_is_cached_by_its_signature():
    x = torch.randn(4, 7, device="neuron")
    for _ in range(2):  # the first compiles, the second finds it
        (torch.sin(x) * x).sum(0).cpu()
    metrics.clear_op_tracking()
    for _ in range(3):
        out = (torch.sin(x) * x).sum(0).cpu()
    stats = metrics.fusion_stats()
    assert stats["runs"] == 3 and stats["compiled"] == 0, stats
    torch.testing.assert_close(out, (torch.sin(x.cpu()) * x.cpu()).sum(0))


def test_the_length_bound_ends_a_run(monkeypatch):
    monkeypatch.setenv(fusion.MAX_OPS_ENV, "4")
    monkeypatch.setenv(fusion.ENV, "1")
    fusion.reload_settings()
    try:
        x, ref = torch.ones(3, device="neuron"), torch.ones(3)
        metrics.clear_op_tracking()
        for _ in range(10):
            x, ref = x + 1, ref + 1
        assert metrics.fusion_stats()["ended_by"] == {"length bound": 2}
        torch.testing.assert_close(x.cpu(), ref)
    finally:
        monkeypatch.delenv(fusion.MAX_OPS_ENV)
        fusion.reload_settings()
    assert fusion.max_ops() == fusion.DEFAULT_MAX_OPS


def test_a_determinism_request_turns_it_off():
    x = torch.randn(6, device="neuron")
    torch.neuron.synchronize()
    torch.use_deterministic_algorithms(True)
    try:
        assert not fusion.enabled()
        metrics.clear_op_tracking()
        y = x * 2 + 1
        assert not storage.has_queued()  # launched at once
        torch.testing.assert_close(y.cpu(), x.cpu() * 2 + 1)
        assert metrics.fusion_stats()["runs"] == 0
    finally:
        torch.use_deterministic_algorithms(False)
    assert fusion.enabled()


def test_random_draws_keep_their_order_and_seeds():
    def draws():
        torch.neuron.manual_seed(5)
        a = torch.rand(4, device="neuron")
        b = torch.randn(4, device="neuron") + a
        return a.cpu(), b.cpu()

    fused = draws()
    with fusion.disabled():
        single = draws()
    for f, s in zip(fused, single):
        torch.testing.assert_close(f, s, rtol=0, atol=0)


def test_bfloat16_results_are_rounded_between_ops_as_op_by_op():
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(500, generator=g).to(torch.bfloat16) for _ in range(3))

    def f(a, b, c):
        y = torch.exp(a * b + c) * 0.3 - a
        return (y * y).sum(), torch.nn.functional.gelu(y * c)

    fused = [t.cpu() for t in f(*_on((a, b, c)))]
    with fusion.disabled():
        single = [t.cpu() for t in f(*_on((a, b, c)))]
    for x, s, ref in zip(fused, single, f(a, b, c)):
        torch.testing.assert_close(x, s, rtol=0, atol=0)
        torch.testing.assert_close(x, ref)


def test_off_by_environment_and_runs_load_from_disk(tmp_path):
    code = (
        "import torch, torch_neuronx\n"
        "from torch_neuronx import metrics\n"
        "x = torch.arange(6.0, device='neuron')\n"
        "y = (x * 3 + 1).cos()\n"
        "value = y.sum().item()\n"
        "f = metrics.fusion_stats()\n"
        "print(value, f['runs'], f['compiled'], f['loaded'])\n"
    )
    env = dict(os.environ, TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path))
    for name in ("TORCH_NEURONX_DISABLE_NEFF_CACHE", "TORCH_NEURONX_NEFF_DISABLE_CACHE"):
        env.pop(name, None)

    def child(**extra):
        r = run_python(code, env=env, **extra)
        assert r.returncode == 0, r.stderr
        value, runs, compiled, loaded = r.stdout.split()
        return float(value), int(runs), int(compiled), int(loaded)

    expected = (torch.arange(6.0) * 3 + 1).cos().sum().item()
    first, again = child(TORCH_NEURONX_EAGER_FUSION="1"), child(TORCH_NEURONX_EAGER_FUSION="1")
    off = child(TORCH_NEURONX_EAGER_FUSION="0")
    assert first[1:] == (1, 1, 0)  # one run (the four ops), compiled
    assert again[1:] == (1, 0, 1)  # a new process loads it from disk
    assert off[1:] == (0, 0, 0)  # off: every op its own launch
    for value, *_ in (first, again, off):
        assert value == pytest.approx(expected, rel=1e-6)



def test_a_new_process_takes_each_ops_output_plan_from_disk_and_runs_no_meta_kernel(tmp_path):
    """Under fusion each op's output plan (what its meta call gave) is kept on disk (kind "plan")
    beside the run: a new process meeting the same ops skips their meta calls (PyTorch's Python meta
    kernels import torch._dynamo, a second or more), compiles nothing, and gets the same values,
    through fresh results, an in-place op, an out= argument and two returns. A plan record that does
    not unpickle is learned again."""
    from torch_neuronx.cache import store

    code = (
        "import json, sys, torch\n"
        "from torch_neuronx import metrics\n"
        "x = torch.arange(12.0).reshape(3, 4).to('neuron')\n"
        "y = torch.ones(3, 4, device='neuron') + 1\n"
        "y.mul_(x)\n"
        "out = torch.empty(3, 4, device='neuron')\n"
        "torch.add(x, y, alpha=2, out=out)\n"
        "values, indices = out.max(dim=1)\n"
        "s = metrics.executable_cache_stats()\n"
        "print(json.dumps({'values': values.cpu().tolist(), 'indices': indices.cpu().tolist(),\n"
        "                  'y': y.cpu().tolist(), 'dynamo': 'torch._dynamo' in sys.modules,\n"
        "                  'misses': s['disk_misses'], 'writes': s['disk_writes'],\n"
        "                  'loaded': metrics.fusion_stats()['loaded']}))\n"
    )
    env = dict(os.environ, TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path), TORCH_NEURONX_EAGER_FUSION="1")
    for name in ("TORCH_NEURONX_DISABLE_NEFF_CACHE", "TORCH_NEURONX_NEFF_DISABLE_CACHE"):
        env.pop(name, None)

    def child():
        r = run_python(code, env=env)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.splitlines()[-1])

    x = torch.arange(12.0).reshape(3, 4)
    y = (torch.ones(3, 4) + 1) * x
    values, indices = torch.add(x, y, alpha=2).max(dim=1)
    want = {"values": values.tolist(), "indices": indices.tolist(), "y": y.tolist()}
    cold = child()
    plans = []
    for path in tmp_path.rglob("*.entry"):
        info, _body = store.decode(path.read_bytes(), path.stem)
        if info.kind == "plan":
            plans.append((path, info))
    assert len(plans) == 5, plans  # ones, add, mul_, add.out, max.dim
    warm = child()
    assert {k: cold[k] for k in want} == want and {k: warm[k] for k in want} == want
    assert cold["dynamo"] and not warm["dynamo"]
    assert warm["misses"] == 0 and warm["writes"] == 0 and warm["loaded"] == 1
    # a record whose body does not unpickle (its checksum good): that op's plan is learned and stored again
    path, info = plans[0]
    path.write_bytes(store.encode(info.name, info.kind, info.key, b"not a plan"))
    again = child()
    assert {k: again[k] for k in want} == want and again["dynamo"] and again["writes"] == 1


@pytest.mark.parametrize("fused", [True, False])
def test_the_default_dtype_is_part_of_an_ops_key(fused):
    """What a factory without dtype= makes, and an integer tensor times a Python float, follow
    torch.get_default_dtype(): a signature met under one default is not reused under another (in
    this process, and through the disk cache: its key is the one a plan record is stored under)."""
    before = torch.get_default_dtype()
    got = []
    try:
        with fusion.setting(fused):
            for dtype in (torch.float32, torch.float64, torch.float32):
                torch.set_default_dtype(dtype)
                ones = torch.ones(2, 3, device="neuron") + 1
                scaled = torch.arange(3, device="neuron") * 1.5
                got.append((dtype, ones.cpu(), scaled.cpu()))
    finally:
        torch.set_default_dtype(before)
    for dtype, ones, scaled in got:
        assert ones.dtype == scaled.dtype == dtype
        torch.testing.assert_close(ones, torch.full((2, 3), 2.0, dtype=dtype))
        torch.testing.assert_close(scaled, torch.arange(3, dtype=dtype) * 1.5)

def test_a_failed_run_loses_its_results_loudly():
    x = torch.randn(3, device="neuron")
    storage.sync()
    storage.buffer(storage.storage_key(x)).delete()  # the platform refuses the run: a deleted input
    y = x * 2
    with pytest.raises(RuntimeError, match="aten.mul.Tensor"):
        y.cpu()
    with pytest.raises(RuntimeError, match="values were lost"):
        (y + 1).cpu()
    del x  # the buffer the test deleted
    torch.neuron.synchronize()  # the failure was raised once; the device goes on working
    torch.testing.assert_close((torch.ones(2, device="neuron") * 3).cpu(), torch.ones(2) * 3)


def test_a_copy_from_the_host_keeps_program_order_without_ending_the_run():
    def program(x, w, queued=lambda: None):
        y = x + 1  # a queued read of x's old values
        w.add_(5)  # a queued write of w
        x.copy_(torch.full((4,), 3.0))  # host -> device: new buffers for whole storages
        w.copy_(torch.full((4,), 7.0))  # the later copy wins over the earlier queued write
        z = x * 2  # reads the new values
        queued()
        return y, z, w

    def still_queued():
        assert storage.has_queued(), "a copy from the host should not end the run"

    x, w = torch.zeros(4, device="neuron"), torch.zeros(4, device="neuron")
    torch.neuron.synchronize()
    got = program(x, w, still_queued)
    for g, want in zip(got, program(torch.zeros(4), torch.zeros(4))):
        torch.testing.assert_close(g.cpu(), want, rtol=0, atol=0)


def test_a_setting_holds_for_its_own_thread_only():
    """fusion.setting(False) in one thread leaves another thread's ops as the environment says
    (queued by default), the block's end restores the thread's own setting, and the values are the
    CPU's either way."""
    import threading

    def in_a_thread(fn):
        out = []
        t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
        t.start()
        t.join(60)
        return out[0]

    # what a thread with no setting of its own does: the environment's choice (this file's fixture
    # turns fusion on for the test's own thread; the suite also runs with the environment's off)
    expected = in_a_thread(fusion.enabled)
    mine_before = fusion.enabled()
    x_cpu = torch.randn(8, 8)
    x = x_cpu.to("neuron")
    seen = {}
    entered, done = threading.Event(), threading.Event()

    def other():
        try:
            entered.wait(60)
            seen["enabled"] = fusion.enabled()
            y = x * 2 + 1
            seen["queued"] = storage.has_queued()
            seen["value"] = y.cpu()
        finally:
            done.set()

    t = threading.Thread(target=other, daemon=True)
    t.start()
    with fusion.setting(False):
        assert not fusion.enabled()
        entered.set()
        assert done.wait(120), "the other thread did not finish"
        assert not fusion.enabled()
        mine = (x - 1).cpu()
    t.join(60)
    assert fusion.enabled() == mine_before and in_a_thread(fusion.enabled) == expected
    assert seen["enabled"] == expected and seen["queued"] == expected
    torch.testing.assert_close(seen["value"], x_cpu * 2 + 1)
    torch.testing.assert_close(mine, x_cpu - 1)
