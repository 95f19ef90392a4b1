"""The neuron RNG state where PyTorch saves and restores a device's: activation checkpointing (its
recompute must draw the same dropout mask), fork_rng, get/set_rng_state with ops queued, a DataLoader
given a neuron generator, and the host paths a neuron generator drives."""
from __future__ import annotations

import pytest
import torch
import torch.utils.checkpoint as checkpoint
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

import torch_neuronx
from torch_neuronx.eager import fusion


@pytest.fixture(params=[True, False], ids=["fusion", "no_fusion"])
def fusion_mode(request):
    with fusion.setting(request.param):
        yield request.param


def _block(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.Dropout(0.5), torch.nn.GELU(), torch.nn.Linear(32, 16), torch.nn.Dropout(0.3),
    ).to(device)


def _grads(block, x, run):
    """Output and gradients (input, then parameters) of one forward/backward from seed 1."""
    x = x.detach().clone().requires_grad_(True)
    block.zero_grad()
    torch.manual_seed(1)
    y = run(block, x)
    (y * torch.arange(y.numel(), device=y.device).reshape(y.shape).sin()).sum().backward()
    return [y.detach().cpu(), x.grad.cpu()] + [p.grad.cpu() for p in block.parameters()]


PLAIN = lambda m, x: m(x)  # noqa: E731
WAYS = {
    "non_reentrant": lambda m, x: checkpoint.checkpoint(m, x, use_reentrant=False),
    "reentrant": lambda m, x: checkpoint.checkpoint(m, x, use_reentrant=True),
    "sequential": lambda m, x: checkpoint.checkpoint_sequential(m, 2, x, use_reentrant=False),
    "wrapper_non_reentrant": lambda m, x: checkpoint_wrapper(m, checkpoint_impl=CheckpointImpl.NO_REENTRANT)(x),
    "wrapper_reentrant": lambda m, x: checkpoint_wrapper(m, checkpoint_impl=CheckpointImpl.REENTRANT)(x),
}


@pytest.mark.parametrize("way", list(WAYS))
def test_checkpointed_dropout_gets_the_gradients_of_the_plain_block(fusion_mode, way):
    # the recompute must draw the forward's masks; the CPU's own checkpointing gives the plain block's
    # gradients exactly, so must the neuron device (a different mask differed by ~1 before the fix)
    x = torch.randn(8, 16)
    for device in ("cpu", "neuron"):
        block = _block(device)
        plain = _grads(block, x.to(device), PLAIN)
        checked = _grads(block, x.to(device), WAYS[way])
        for a, b in zip(plain, checked):
            torch.testing.assert_close(b, a, rtol=0, atol=0)


def test_checkpointed_block_without_dropout_matches_the_cpu(fusion_mode):
    cpu, dev = _block("cpu").eval(), _block("neuron").eval()
    x = torch.randn(8, 16)
    for a, b in zip(_grads(cpu, x, WAYS["non_reentrant"]), _grads(dev, x.to("neuron"), WAYS["non_reentrant"])):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_the_device_module_says_initialized_before_any_device_work():
    # torch.utils.checkpoint stashes a device's RNG state only when `_initialized` is set, and raises if
    # it turns True during a checkpointed forward: it must be True from import on
    assert torch.neuron._initialized is True


@pytest.mark.parametrize("reentrant", [False, True])
def test_compiled_checkpoint_recomputes_the_forwards_mask(reentrant):
    # in a compiled graph the partitioner moves the dropout's state from the forward executable to the
    # backward's (run_and_save_rng_state / run_with_rng_state). The mask shows in the output (x.sin() + 2
    # and w are never zero), so the gradient the forward's own mask implies is known exactly.
    w = torch.linspace(0.5, 1.5, 64, device="neuron")

    def body(x):
        return torch.nn.functional.dropout(x.sin() + 2, 0.5) * w

    step = torch.compile(lambda x: checkpoint.checkpoint(body, x, use_reentrant=reentrant), backend="neuron")
    torch._dynamo.reset()
    x = torch.randn(64, device="neuron", requires_grad=True)
    for _ in range(2):  # a second call: a new draw, its own mask, the same executables
        x.grad = None
        y = step(x)
        y.backward(torch.ones_like(y))
        kept = (y.detach().cpu() != 0).float()
        assert 0.2 < kept.mean() < 0.8
        expected = kept * 2 * x.detach().cpu().cos() * w.cpu()
        torch.testing.assert_close(x.grad.cpu(), expected, rtol=1e-6, atol=1e-6)


def test_fork_rng_restores_the_neuron_generator(fusion_mode):
    x = torch.ones(256, device="neuron")
    torch.manual_seed(5)
    with torch.random.fork_rng(device_type="neuron"):
        inside = torch.nn.functional.dropout(x, 0.5).cpu()
        torch.nn.functional.dropout(x, 0.5)
    after = torch.nn.functional.dropout(x, 0.5).cpu()
    torch.testing.assert_close(after, inside, rtol=0, atol=0)


def test_get_and_set_rng_state_with_ops_queued(fusion_mode):
    x = torch.ones(64, device="neuron")
    state = torch.neuron.get_rng_state()
    first = [torch.rand(64, device="neuron") * x + 1, torch.nn.functional.dropout(x, 0.5), torch.randn(3, device="neuron")]
    torch.neuron.set_rng_state(state)
    again = [torch.rand(64, device="neuron") * x + 1, torch.nn.functional.dropout(x, 0.5), torch.randn(3, device="neuron")]
    for a, b in zip(first, again):
        torch.testing.assert_close(b.cpu(), a.cpu(), rtol=0, atol=0)
    assert not torch.equal(first[0].cpu(), torch.rand(64, device="neuron").cpu() + 1)


def test_dataloader_shuffles_with_a_neuron_generator():
    # DataLoader draws its base seed into a 0-dim CPU tensor and RandomSampler a permutation, both with
    # the generator given: a neuron generator's numbers, reproducible from its seed
    data = torch.utils.data.TensorDataset(torch.arange(20.0))

    def order(seed):
        gen = torch.Generator(device="neuron").manual_seed(seed)
        return [int(v) for batch in torch.utils.data.DataLoader(data, batch_size=4, shuffle=True, generator=gen)
                for v in batch[0]]

    first, again, other = order(0), order(0), order(1)
    assert sorted(first) == list(range(20))
    assert first == again and first != other


def test_a_cpu_tensor_filled_by_a_neuron_generator_follows_its_seed():
    gen = torch.Generator(device="neuron")
    gen.manual_seed(3)
    on_device = torch.empty((), dtype=torch.int64, device="neuron").random_(generator=gen).cpu()
    gen.manual_seed(3)
    on_cpu = torch.empty((), dtype=torch.int64).random_(generator=gen)
    assert on_cpu.device.type == "cpu" and int(on_cpu) == int(on_device)
    assert gen.get_offset() == 1  # one draw, as on the device


@pytest.mark.parametrize("device", ["cpu", "neuron"])
def test_randperm_out_forms(device):
    gen = torch.Generator(device="neuron").manual_seed(0)
    expected = torch.randperm(10, generator=gen, device="neuron").cpu()
    gen.manual_seed(0)
    out = torch.empty(0, dtype=torch.int32, device=device)
    torch.randperm(10, generator=gen, out=out)
    assert out.dtype == torch.int32 and out.device.type == device
    torch.testing.assert_close(out.cpu(), expected.to(torch.int32), rtol=0, atol=0)
    torch.manual_seed(4)
    plain = torch.empty(0, dtype=torch.int64, device="neuron")
    torch.randperm(12, out=plain)
    assert sorted(plain.cpu().tolist()) == list(range(12))


def test_a_cpu_tensor_moved_to_neuron_stays_resizable():
    # Tensor.numpy() marks a storage non-resizable for good; a copy to the device must not
    t = torch.arange(6.0)
    t.to("neuron")
    t.resize_(12)
    assert t.shape == (12,)


@pytest.mark.cpu_fallback
def test_an_op_run_on_the_host_draws_from_the_neuron_generator():
    # poisson has no lowering: on the host it must still follow the neuron generator's seed and
    # advance it, not take the CPU's unrelated default generator
    rates = torch.full((64,), 4.0, device="neuron")
    gen = torch.Generator(device="neuron")
    gen.manual_seed(11)
    a = torch.poisson(rates, generator=gen).cpu()
    b = torch.poisson(rates, generator=gen).cpu()
    gen.manual_seed(11)
    torch.manual_seed(999)  # the CPU's default generator must not matter
    a_again = torch.poisson(rates, generator=gen).cpu()
    torch.testing.assert_close(a_again, a, rtol=0, atol=0)
    assert not torch.equal(a, b)
    assert "aten.poisson.default" in str(torch_neuronx.get_fallback_ops())
