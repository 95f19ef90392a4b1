"""Pinned host memory while neuron is present (the PrivateUse1 host allocator), non_blocking copies,
and `cpu_tensor.data = neuron_tensor` (what diffusers' and accelerate's offloading do)."""
import torch


def test_pin_memory_and_is_pinned():
    t = torch.randn(100)
    p = t.pin_memory()
    assert p.is_pinned() and not t.is_pinned()
    assert torch.equal(p, t)
    e = torch.empty(7, 3, pin_memory=True)
    assert e.is_pinned()
    assert p[10:].is_pinned()  # a view inside a pinned block
    assert p.data_ptr() % 64 == 0  # aligned as XLA's CPU client takes host memory


def test_empty_host_cache_and_reuse():
    p = torch.ones(1 << 16).pin_memory()
    ptr = p.data_ptr()
    del p
    q = torch.zeros(1 << 16).pin_memory()  # the freed block of the same size class comes back
    assert q.data_ptr() == ptr and q.sum().item() == 0
    del q
    torch.accelerator.empty_host_cache()
    r = torch.ones(5).pin_memory()
    assert r.is_pinned() and r.sum().item() == 5


def test_non_blocking_copies_from_pinned_memory():
    src = torch.randn(1000, 33)
    pinned = src.pin_memory()
    dev = pinned.to("neuron", non_blocking=True)
    torch.neuron.current_stream().synchronize()
    assert torch.equal(dev.cpu(), src)
    pinned.fill_(7.0)  # after the copy completed: the device tensor must not change
    assert torch.equal(dev.cpu(), src)
    back = torch.empty(1000, 33, pin_memory=True)
    back.copy_(dev, non_blocking=True)
    torch.neuron.synchronize()
    assert torch.equal(back, src)
    half = pinned[:, 1:].to("neuron", dtype=torch.bfloat16, non_blocking=True)  # a strided view, converted
    assert torch.equal(half.cpu(), pinned[:, 1:].to(torch.bfloat16))


def test_dataloader_pin_memory():
    ds = torch.utils.data.TensorDataset(torch.arange(12.0).reshape(6, 2))
    batches = list(torch.utils.data.DataLoader(ds, batch_size=3, pin_memory=True))
    assert all(b[0].is_pinned() for b in batches)
    moved = [b[0].to("neuron", non_blocking=True) for b in batches]
    assert torch.equal(torch.cat([m.cpu() for m in moved]), torch.arange(12.0).reshape(6, 2))


def test_data_assignment_between_cpu_and_neuron():
    layer = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    ref = layer(x)
    weight, bias = layer.weight.data.clone(), layer.bias.data.clone()
    layer.weight.data = layer.weight.data.to("neuron")  # pytorch issue 196975 without the override
    layer.bias.data = layer.bias.data.to("neuron")
    assert layer.weight.device.type == "neuron" and isinstance(layer.weight, torch.nn.Parameter)
    out = layer(x.to("neuron"))
    torch.testing.assert_close(out.cpu(), ref)
    out.sum().backward()
    assert layer.weight.grad.device.type == "neuron"
    torch.testing.assert_close(layer.weight.grad.cpu(), x.sum(0).expand(3, 4))
    layer.weight.data = weight  # and back
    assert layer.weight.device.type == "cpu" and torch.equal(layer.weight, weight)
    cpu = torch.zeros(3)
    cpu.data = torch.ones(3)  # CPU to CPU is PyTorch's own rule, unchanged
    assert cpu.sum().item() == 3
    del bias
