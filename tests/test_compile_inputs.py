"""Compiled graphs (torch.compile(backend="neuron")) and their inputs: strided views, storage
offsets, aliased inputs, mutations written back through views; graphs on neuron:1; and the memory
of graph outputs and intermediates returned when they die. Each case runs the same function on the
CPU and compares."""
import copy
import gc

import pytest
import torch

import torch_neuronx
from torch_neuronx.runtime import storage


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()


def _compiled(fn):
    return torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False)


def _executions() -> int:
    return sum(torch.neuron.get_dynamo_metrics()["executions"].values())


def _base():
    return torch.arange(48.0).reshape(6, 8) * 0.5 - 3


VIEWS = {
    "transposed": lambda b: b.t(),
    "transposed_slice": lambda b: b.t()[:, :6],
    "stepped": lambda b: b[::2, 1::3],
    "offset": lambda b: b[1:, 2:],
    "offset_flat": lambda b: b.view(-1)[5:29].view(4, 6),
    "expanded": lambda b: b[2:3, :].expand(5, 8),
    "diagonal": lambda b: b.diagonal(1),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_strided_and_offset_inputs(name):
    view = VIEWS[name]

    def f(x):
        return (x * 2 + x.sum(0)).softmax(-1)

    bc = _base()
    bd = bc.to("neuron")
    xd = view(bd)
    assert xd.stride() == view(bc).stride() and xd.storage_offset() == view(bc).storage_offset()
    got = _compiled(f)(xd)
    torch.testing.assert_close(got.cpu(), f(view(bc)))
    assert _executions() == 1
    torch.testing.assert_close(bd.cpu(), bc)  # inputs are only read


def test_aliased_inputs_read():
    def f(a, b):
        return a * 10 + b

    bc = _base()
    bd = bc.to("neuron")
    c = _compiled(f)
    cases = [
        (lambda b: (b, b)),  # one tensor passed twice
        (lambda b: (b[:4], b[2:])),  # overlapping views of one storage
        (lambda b: (b[:, ::2], b.t()[1::2].t())),  # interleaved columns
        (lambda b: (b[1], b[1:2].expand(6, 8)[3])),
    ]
    for make in cases:
        torch.testing.assert_close(c(*make(bd)).cpu(), f(*make(bc)))
    torch.testing.assert_close(bd.cpu(), bc)


MUTATED_VIEWS = {
    "rows_and_step": lambda b: b[1:, ::2],
    "transposed": lambda b: b.t(),
    "offset_stepped": lambda b: b[2:4, 1:7:3],
    "column": lambda b: b[:, 5],
}


@pytest.mark.parametrize("name", sorted(MUTATED_VIEWS))
def test_mutation_written_back_through_a_view(name):
    view = MUTATED_VIEWS[name]

    def f(x):
        x.mul_(2)
        return x + 1

    bc, bd = _base(), _base().to("neuron")
    other_c, other_d = bc[:, 3:6], bd[:, 3:6]  # another view of the same storage
    key = torch_neuronx._C._storage_key(bd)
    c = _compiled(f)
    for _ in range(2):  # the second call reuses the executable and writes again
        want = f(view(bc))
        got = c(view(bd))
        torch.testing.assert_close(got.cpu(), want)
        torch.testing.assert_close(bd.cpu(), bc)  # the base's full contents
        torch.testing.assert_close(other_d.cpu(), other_c)  # and what other views see
    assert torch_neuronx._C._storage_key(bd) == key  # written into the base's own storage
    assert _executions() == 2


def test_slice_assignment_inside_the_graph_into_a_view_input():
    def f(x):
        x[1:, ::2] = x[:-1, 1:5] * 3
        return x.sum()

    bc, bd = _base(), _base().to("neuron")
    torch.testing.assert_close(_compiled(f)(bd[:, 1:]).cpu(), f(bc[:, 1:]))
    torch.testing.assert_close(bd.cpu(), bc)


def test_mutations_of_aliased_inputs():
    def both(x, y):
        x.add_(1)
        y.mul_(2)
        return x + y

    def twice(x, y):
        x.mul_(2)
        return y + 1

    for f, make in [
        (both, lambda b: (b[:3], b[1:4])),  # overlapping rows
        (both, lambda b: (b[:, ::2], b[:, 1::2])),  # disjoint, interleaved
        (twice, lambda b: (b, b)),  # the same tensor twice: y sees x's write
        (twice, lambda b: (b.t(), b.t())),
    ]:
        torch._dynamo.reset()
        bc, bd = _base(), _base().to("neuron")
        torch.testing.assert_close(_compiled(f)(*make(bd)).cpu(), f(*make(bc)))
        torch.testing.assert_close(bd.cpu(), bc)


def test_copy_into_a_strided_input():
    def f(src, dst):
        dst.copy_(src.t() * 2)
        return dst.mean()

    sc, dc = torch.randn(4, 4), torch.zeros(8, 8)
    sd, dd = sc.to("neuron"), dc.to("neuron")
    torch.testing.assert_close(_compiled(f)(sd, dd[1::2, ::2]).cpu(), f(sc, dc[1::2, ::2]))
    torch.testing.assert_close(dd.cpu(), dc)


# ---------------------------------------------------------------------------------------------
# neuron:1


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 8))


def test_compiled_model_on_device_one_stays_there(memory_only_cache):
    m = _mlp()
    md = copy.deepcopy(m).to("neuron:1")
    x = torch.randn(4, 16)
    c = _compiled(md)
    gc.collect()
    torch.neuron.empty_cache()
    base0 = torch.neuron.memory_allocated(0)
    xd = x.to("neuron:1")
    with torch.no_grad():
        out = c(xd)
        want = m(x)
    assert out.device == torch.device("neuron", 1)
    (jax_dev,) = storage.buffer(torch_neuronx._C._storage_key(out)).devices()
    assert jax_dev.id == 1  # computed on the second core, not copied there
    torch.testing.assert_close(out.cpu(), want, rtol=1e-5, atol=1e-5)
    assert torch.neuron.memory_allocated(0) == base0  # nothing was put on neuron:0
    # training: gradients and the updated weights stay on neuron:1 too
    opt_c = torch.optim.SGD(m.parameters(), lr=0.1)
    opt_d = torch.optim.SGD(md.parameters(), lr=0.1)
    for model, opt, inp in ((m, opt_c, x), (c, opt_d, xd)):
        loss = model(inp).square().mean()
        loss.backward()
        opt.step()
    for p, q in zip(m.parameters(), md.parameters()):
        assert q.device == torch.device("neuron", 1) and q.grad.device == torch.device("neuron", 1)
        torch.testing.assert_close(q.cpu(), p, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5)
    assert torch.neuron.memory_allocated(0) == base0
    kinds = sorted(g["kind"] for g in torch.neuron.get_dynamo_metrics()["graphs"])
    assert kinds == ["backward", "forward", "inference"]


def test_graph_without_tensor_inputs_runs_on_the_device_it_names():
    """A graph whose only tensors come from factories on neuron:1 runs there (it used to run on the
    current device, neuron:0, and return its result labelled neuron:0)."""
    def f():
        return torch.arange(6.0, device="neuron:1").reshape(2, 3) * 2 + 1

    base0 = torch.neuron.memory_allocated(0)
    got = _compiled(f)()
    assert got.device == torch.device("neuron", 1)
    (jax_dev,) = storage.buffer(torch_neuronx._C._storage_key(got)).devices()
    assert jax_dev.id == 1
    torch.testing.assert_close(got.cpu(), torch.arange(6.0).reshape(2, 3) * 2 + 1)
    assert torch.neuron.memory_allocated(0) == base0


# ---------------------------------------------------------------------------------------------
# memory


def _settled():
    gc.collect()
    torch.neuron.empty_cache()
    return torch.neuron.memory_allocated(0), torch.neuron.memory_allocated(1), storage.live_buffers()


def test_compiled_outputs_and_intermediates_are_freed():
    m = _mlp().to("neuron")
    c = _compiled(m)
    x = torch.randn(8, 16, device="neuron")
    with torch.no_grad():
        c(x)
    base = _settled()
    with torch.no_grad():
        outs = [c(x) for _ in range(20)]
        assert torch.neuron.memory_allocated() == base[0] + 20 * 8 * 8 * 4  # just the outputs
        want = outs[0].cpu()
        for o in outs[1:]:
            assert torch.equal(o.cpu(), want)
    del outs, o
    assert _settled() == base
    for _ in range(30):  # repeated calls: no growth
        with torch.no_grad():
            c(x).sum().item()
    assert _settled() == base


def test_training_graph_saved_tensors_are_freed_after_backward():
    m = _mlp()
    md = copy.deepcopy(m).to("neuron")
    c = _compiled(md)
    x = torch.randn(8, 16)
    xd = x.to("neuron")

    def step(model, inp):
        out = model(inp)
        out.square().sum().backward()
        for p in model.parameters():
            p.grad = None
        return out.detach()

    step(c, xd)
    base = _settled()
    out = c(xd)  # the forward keeps what the backward needs
    assert torch.neuron.memory_allocated() > base[0] + out.numel() * 4
    del out
    assert _settled() == base  # the graph's saved intermediates die with its output
    for _ in range(15):
        got = step(c, xd)
    torch.testing.assert_close(got.cpu(), step(m, x), rtol=1e-5, atol=1e-5)
    del got
    assert _settled() == base
