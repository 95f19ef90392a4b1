"""Errors and asynchronous execution. Ops are launched without waiting for the device; the errors a
launch can produce are nonetheless raised by the op that failed, at its own call: value checks
(out-of-range indices) are computed inside the op's executable and the op waits for them, an
allocation failure is reported by the launch, and a host-run op that raises inside a compiled graph
fails that graph's call. Nothing is left to surface at a later `.item()`, `.cpu()` or
`torch.neuron.synchronize()`, and the device stays usable with correct results afterwards."""
import re
import warnings

import pytest
import torch

import torch_neuronx
import torch_neuronx.neuron_dynamo_backend as ndb


def _pending_work(device="neuron"):
    """A chain of launched, not yet awaited ops, and its CPU reference."""
    x = torch.randn(192, 192)
    want = ((x @ x).tanh() @ x).sum(0)
    xd = x.to(device)
    return ((xd @ xd).tanh() @ xd).sum(0), want


BAD_INDEX_OPS = {
    # name: (fn(weight, index), CPU's exception type, op named in the device's message)
    "index_select": (lambda w, i: w.index_select(0, i), IndexError, "aten.index_select.default"),
    "embedding": (lambda w, i: torch.nn.functional.embedding(i, w), IndexError, "aten.embedding.default"),
    "gather": (lambda w, i: torch.gather(w, 0, i.view(-1, 1).expand(-1, 4)), RuntimeError, "aten.gather.default"),
    "index_put_": (lambda w, i: w.index_put_((i,), torch.full((i.numel(), 4), 7.0, device=w.device)),
                   IndexError, "aten.index_put_.default"),
    "scatter_add_": (lambda w, i: w.scatter_add_(0, i.view(-1, 1).expand(-1, 4), torch.ones(i.numel(), 4, device=w.device)),
                     RuntimeError, "aten.scatter_add_.default"),
}


@pytest.mark.parametrize("name", sorted(BAD_INDEX_OPS))
def test_index_error_is_raised_by_the_failing_op_at_its_call(name):
    fn, error, op = BAD_INDEX_OPS[name]
    w = torch.randn(10, 4)
    bad, good = torch.tensor([3, 10]), torch.tensor([9, 0, 4])
    w_cpu = w.clone()
    with pytest.raises(error):
        fn(w_cpu, bad)  # the CPU's type, and what its tensor holds after the failed op
    pending, pending_want = _pending_work()
    wd = w.to("neuron")
    torch_neuronx.clear_op_tracking()
    # the op call itself raises (not a later read), with the CPU's type, naming the op
    with pytest.raises(error, match=re.escape(op) + ": .*(out of range|out of bounds)"):
        fn(wd, bad.to("neuron"))
    assert op in torch_neuronx.get_executed_ops()
    # nothing deferred: waiting and reading raise nothing, and work launched before is intact
    torch.neuron.synchronize()
    torch.testing.assert_close(pending.cpu(), pending_want, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(wd.cpu(), w_cpu)  # a failed in-place op wrote nothing, as on the CPU
    # the device stays usable: the same executable, with good indices, gives the CPU's result
    torch.testing.assert_close(fn(wd, good.to("neuron")).cpu(), fn(w_cpu, good))
    torch.testing.assert_close(wd.cpu(), w_cpu)
    assert (wd.sum() * 0 + 1).item() == 1.0


def test_error_on_one_device_leaves_the_other_one_running():
    pending0, want0 = _pending_work("neuron:0")
    w = torch.randn(6, 3)
    with pytest.raises(IndexError, match=r"aten\.index_select\.default"):
        w.to("neuron:1").index_select(0, torch.tensor([6], device="neuron:1"))
    torch.neuron.synchronize(1)
    torch.neuron.synchronize()
    torch.testing.assert_close(pending0.cpu(), want0, rtol=1e-4, atol=1e-3)
    got = w.to("neuron:1").index_select(0, torch.tensor([5, 0], device="neuron:1"))
    assert got.device == torch.device("neuron", 1)
    torch.testing.assert_close(got.cpu(), w.index_select(0, torch.tensor([5, 0])))


def test_out_of_memory_is_raised_by_the_op_that_allocates():
    """An allocation no machine can satisfy (2**50 bytes): the CPU raises RuntimeError; the device
    raises torch.OutOfMemoryError (a RuntimeError, CUDA's type) naming the op, at the op's call."""
    n = 2**48
    with pytest.raises(RuntimeError, match="can't allocate memory"):
        torch.empty(n)  # the CPU allocator's error (empty: nothing is touched)
    base = torch.neuron.memory_allocated()
    pending, want = _pending_work()
    with pytest.raises(torch.OutOfMemoryError, match=r"aten\.zeros\.default: neuron out of memory"):
        torch.zeros(n, device="neuron")
    torch.neuron.synchronize()
    assert torch.neuron.memory_allocated() == base + pending.numel() * 4  # only the live result
    torch.testing.assert_close(pending.cpu(), want, rtol=1e-4, atol=1e-3)
    x = torch.arange(5.0)
    torch.testing.assert_close((x.to("neuron") * 2).cpu(), x * 2)


def test_compiled_index_error_is_raised_by_the_graph_call():
    f = torch.compile(lambda t, i: torch.index_select(t, 0, i) * 2, backend="neuron", dynamic=False)
    t = torch.randn(4, 2)
    td = t.to("neuron")
    with pytest.raises(IndexError):
        torch.index_select(t, 0, torch.tensor([0, 4]))  # the CPU's (eager) error
    pending, want = _pending_work()
    with pytest.raises(ndb.NEFFExecutionError, match=r"op aten\.index_select\.default .*IndexError.*out of range"):
        f(td, torch.tensor([0, 4], device="neuron"))
    torch.neuron.synchronize()
    torch.testing.assert_close(pending.cpu(), want, rtol=1e-4, atol=1e-3)
    idx = torch.tensor([3, 0, 3])
    torch.testing.assert_close(f(td, idx.to("neuron")).cpu(), torch.index_select(t, 0, idx) * 2)
    torch.testing.assert_close(td.cpu(), t)


@torch.library.custom_op("neuron_test_async::checked_log", mutates_args=())
def checked_log(x: torch.Tensor) -> torch.Tensor:
    if bool((x <= 0).any()):
        raise ValueError("checked_log: every input must be positive")
    return x.log()


@checked_log.register_fake
def _(x):
    return torch.empty_like(x)


@pytest.mark.cpu_fallback
def test_host_op_failing_inside_a_compiled_graph_names_the_op():
    """A custom op with no lowering runs on the host from inside the graph's executable; when it
    raises, the graph call fails naming that op and node, with the op's own error as the cause."""

    def f(x):
        return checked_log(x * 2) + 1

    c = torch.compile(f, backend="neuron", fullgraph=True, dynamic=False)
    good, bad = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, -2.0, 3.0])
    with pytest.raises(ValueError, match="must be positive"):
        f(bad)  # the CPU
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(c(good.to("neuron")).cpu(), f(good))
        with pytest.raises(ndb.NEFFExecutionError,
                           match=r"op neuron_test_async\.checked_log\.default \(node '\w+'\): ValueError: "
                                 r"checked_log: every input must be positive") as caught:
            c(bad.to("neuron"))
        assert isinstance(caught.value.__cause__, ValueError)
        torch.neuron.synchronize()
        again = c(torch.tensor([4.0, 5.0, 6.0], device="neuron"))
    torch.testing.assert_close(again.cpu(), f(torch.tensor([4.0, 5.0, 6.0])))
    assert torch_neuronx.get_fallback_ops() == {"neuron_test_async.checked_log.default": 3}
