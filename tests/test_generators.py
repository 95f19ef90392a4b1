"""A neuron Generator drawing into CPU tensors (eager/host_draws.py), and the wrong generator refused.

PyTorch dispatches a random op on the Generator's device too, so `torch.randn(..., device="cpu",
generator=torch.Generator("neuron"))` reaches neuron's kernel: the numbers are the neuron generator's
(the same as drawn on neuron from the same state), the tensor is the CPU one, the generator advances."""
import pytest
import torch


def neuron_gen(seed):
    return torch.Generator("neuron").manual_seed(seed)


def test_randn_on_the_cpu_from_a_neuron_generator_draws_its_numbers():
    g = neuron_gen(5)
    on_cpu = torch.randn(3, 7, generator=g, dtype=torch.bfloat16)
    assert on_cpu.device.type == "cpu" and on_cpu.dtype == torch.bfloat16
    second = torch.randn(3, 7, generator=g, dtype=torch.bfloat16)
    g = neuron_gen(5)
    on_neuron = torch.randn(3, 7, generator=g, device="neuron", dtype=torch.bfloat16)
    assert torch.equal(on_cpu, on_neuron.cpu())
    assert torch.equal(second, torch.randn(3, 7, generator=g, device="neuron", dtype=torch.bfloat16).cpu())
    assert not torch.equal(on_cpu, second)  # the generator advanced


@pytest.mark.parametrize("draw", [
    lambda t, g: t.uniform_(-2, 3, generator=g),
    lambda t, g: t.normal_(1.0, 0.5, generator=g),
    lambda t, g: t.bernoulli_(0.3, generator=g),
    lambda t, g: t.exponential_(2.0, generator=g),
], ids=["uniform_", "normal_", "bernoulli_", "exponential_"])
def test_in_place_draws_into_a_cpu_view(draw):
    base = torch.zeros(4, 6)
    view = base[:, 1:4]  # a strided view: only its elements change
    out = draw(view, neuron_gen(11))
    assert out is view
    want = draw(torch.zeros(4, 6, device="neuron")[:, 1:4], neuron_gen(11)).cpu()
    assert torch.equal(view, want)
    assert torch.equal(base[:, 0], torch.zeros(4)) and torch.equal(base[:, 4:], torch.zeros(4, 2))


def test_out_of_place_draw_from_cpu_probabilities():
    p = torch.linspace(0, 1, 50)
    got = torch.bernoulli(p, generator=neuron_gen(2))
    assert got.device.type == "cpu"
    assert torch.equal(got, torch.bernoulli(p.to("neuron"), generator=neuron_gen(2)).cpu())
    assert got[0] == 0 and got[-1] == 1


def test_a_cpu_generator_for_a_neuron_tensor_is_refused_as_cuda_refuses_it():
    with pytest.raises(RuntimeError, match="Expected a 'neuron' device type for generator but found 'cpu'"):
        torch.randn(3, generator=torch.Generator().manual_seed(0), device="neuron")


def test_a_neuron_generator_with_a_mix_of_devices_is_still_a_device_mismatch():
    with pytest.raises(RuntimeError, match="two devices"):
        torch.normal(torch.zeros(3), torch.ones(3, device="neuron"), generator=neuron_gen(0))
