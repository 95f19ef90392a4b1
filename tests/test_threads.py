"""Several Python threads using the device at once: each result equals the CPU's, nothing hangs,
nothing crashes. Python switches threads every 5 ms by default; the tests switch far more often so
that one thread's op (its tracing, its compile, its launch) interleaves with the others'."""
import sys
import threading
import time
import traceback

import pytest
import torch

import torch_neuronx
from helpers import run_python
from torch_neuronx.runtime import storage

JOIN_S = 120  # a deadlock fails the test instead of hanging it


@pytest.fixture
def fast_switching():
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


def _run_threads(workers):
    """Start one thread per (function, args); join each with a timeout; return the failures."""
    errors = []

    def guarded(fn, *args):
        try:
            fn(*args)
        except BaseException:
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=guarded, args=(fn, *args), daemon=True) for fn, *args in workers]
    for t in threads:
        t.start()
    deadline = time.monotonic() + JOIN_S
    for t in threads:
        t.join(max(deadline - time.monotonic(), 0))
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"threads still running after {JOIN_S}s (deadlock?): {hung}"
    return errors


def _views_and_inplace(seed, dev, rounds):
    g = torch.Generator().manual_seed(seed)
    for r in range(rounds):
        base = torch.randn(6 + r, 8, generator=g)
        got = base.to(dev)
        want = base.clone()
        for t in (want, got):
            v = t.t()[1:, ::2]  # a strided view of the base, written in place
            v.mul_(3).add_(1)
            t[2:4].sub_(t[0])
        assert got.device == torch.device(dev)
        torch.testing.assert_close(got.cpu(), want)


def _indexing(seed, dev, rounds):
    g = torch.Generator().manual_seed(seed)
    for r in range(rounds):
        n = 5 + 3 * r + seed  # a new signature every round
        w = torch.randn(n, 4, generator=g)
        idx = torch.randint(0, n, (7,), generator=g)
        got = w.to(dev).index_select(0, idx.to(dev)).sum(1)
        torch.testing.assert_close(got.cpu(), w.index_select(0, idx).sum(1))


def _reductions(seed, dev, rounds):
    g = torch.Generator().manual_seed(seed)
    for r in range(rounds):
        x = torch.randn(4 + r, 9, generator=g)
        xd = x.to(dev)
        torch.testing.assert_close((xd @ xd.t()).softmax(-1).cpu(), (x @ x.t()).softmax(-1), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(xd.cumsum(1)[:, -1].cpu(), x.cumsum(1)[:, -1], rtol=1e-5, atol=1e-5)


def _compiled(seed, dev, rounds):
    def f(x, w):
        return torch.nn.functional.gelu(x @ w).t().contiguous() * 2 - x.sum()

    c = torch.compile(f, backend="neuron", dynamic=False)
    g = torch.Generator().manual_seed(seed)
    for r in range(rounds):
        x, w = torch.randn(3 + r, 5, generator=g), torch.randn(5, 2 + seed, generator=g)
        got = c(x.to(dev), w.to(dev))  # each round is a new input signature: a new executable
        assert got.device == torch.device(dev)
        torch.testing.assert_close(got.cpu(), f(x, w), rtol=1e-5, atol=1e-5)


@pytest.mark.warm_varies("its fused runs follow how its threads interleave")
def test_threads_run_different_ops_on_both_devices(fast_switching):
    torch._dynamo.reset()
    kinds = (_views_and_inplace, _indexing, _reductions, _compiled)
    workers = [(fn, i, f"neuron:{i % 2}", 4) for i, fn in enumerate(kinds)]
    workers += [(fn, i + 4, f"neuron:{(i + 1) % 2}", 4) for i, fn in enumerate(kinds)]
    errors = _run_threads(workers)
    assert not errors, "\n".join(errors)
    ran = torch_neuronx.get_executed_ops()
    for op in ("aten.mul_.Tensor", "aten.index_select.default", "aten.mm.default", "aten.cumsum.default"):
        assert op in ran, ran
    record = torch.neuron.get_dynamo_metrics()
    assert record["graphs"] or record["loaded_from_disk"], "the compiled workers compiled (or loaded) nothing"


def test_index_checks_stay_with_the_thread_that_traced_them(fast_switching):
    """The value checks a lowering makes while it is traced (out-of-range indices) belong to that
    thread's executable: traced in another thread at the same moment, a check was lost (a silent
    clamp) or leaked a tracer into the other program."""
    def worker(tid):
        g = torch.Generator().manual_seed(tid)
        for r in range(8):
            n = 5 + 40 * tid + r  # every call compiles
            w = torch.randn(n, 3, generator=g)
            bad = r % 2 == 0
            idx = torch.tensor([0, n if bad else n - 1])
            wd, idxd = w.to("neuron"), idx.to("neuron")
            if bad:
                with pytest.raises(IndexError, match="index out of range"):
                    w.index_select(0, idx)  # the CPU's error...
                with pytest.raises(IndexError, match=r"aten\.index_select\.default: .*index out of range"):
                    wd.index_select(0, idxd)  # ...and the device's
            else:
                torch.testing.assert_close(wd.index_select(0, idxd).cpu(), w.index_select(0, idx))

    errors = _run_threads([(worker, t) for t in range(4)])
    assert not errors, "\n".join(errors)
    assert "aten.index_select.default" in torch_neuronx.get_executed_ops()


class _SlowDrain:
    """storage's view of the C++ shim, with a pause between draining the storage events and applying
    them: the window in which another thread used to see an empty queue and read stale buffers."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def _drain_events(self):
        events = self._real._drain_events()
        time.sleep(0.002)
        return events


@pytest.mark.warm_varies("its fused runs follow how its threads interleave")
def test_resized_storage_is_read_after_another_thread_applies_its_move(monkeypatch):
    """resize_ queues a MOVE of the buffer to the new storage; another thread may be the one that
    drains and applies it. Until it has, an op on the resized tensor must wait, not read zeros."""
    monkeypatch.setattr(storage, "_C", _SlowDrain(storage._C))
    stop = threading.Event()

    def churn():  # frees tensors all the time: its ops drain the event queue
        while not stop.is_set():
            xs = [torch.ones(4, device="neuron") + 1 for _ in range(5)]
            del xs

    def resizer():
        try:
            for r in range(60):
                t = torch.arange(4.0, device="neuron") + r
                t.resize_(8 + r % 3)
                want = torch.arange(4.0) + r
                c = torch.arange(4.0) + r
                c.resize_(8 + r % 3)
                torch.testing.assert_close(c[:4], want)  # the CPU keeps the contents too
                torch.testing.assert_close((t[:4] * 1).cpu(), want)
        finally:
            stop.set()

    errors = _run_threads([(churn,), (churn,), (resizer,)])
    assert not errors, "\n".join(errors)


def test_first_device_use_and_torch_compile_in_threads_at_once():
    """In a fresh process, threads start eager ops (whose meta kernels import torch._dynamo on first
    use) while others call torch.compile(backend="neuron") for the first time: the imports must not
    deadlock or see half-imported modules, and the backend must be registered once."""
    code = r'''
import sys, threading, traceback, torch
sys.setswitchinterval(1e-5)
errors = []
barrier = threading.Barrier(5)
def eager(i):
    try:
        x = torch.randn(4, 5)
        xd = x.to(f"neuron:{i % 2}")
        barrier.wait()
        fn = [lambda t: t * 2, lambda t: t.sum(0), lambda t: t.t() + 1][i]
        torch.testing.assert_close(fn(xd).cpu(), fn(x))
    except BaseException:
        errors.append(traceback.format_exc())
def compiled(i):
    try:
        x = torch.randn(3, 3)
        xd = x.to(f"neuron:{i % 2}")
        barrier.wait()
        f = torch.compile(lambda t: (t @ t).relu(), backend="neuron")
        torch.testing.assert_close(f(xd).cpu(), (x @ x).relu())
    except BaseException:
        errors.append(traceback.format_exc())
ts = [threading.Thread(target=eager, args=(i,), daemon=True) for i in range(3)]
ts += [threading.Thread(target=compiled, args=(i,), daemon=True) for i in range(2)]
for t in ts: t.start()
for t in ts: t.join(120)
assert not any(t.is_alive() for t in ts), "deadlock"
assert not errors, "\n".join(errors)
print("ok")
'''
    r = run_python(code, TORCH_NEURONX_CPU_FALLBACK="error")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
