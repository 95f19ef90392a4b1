"""Views share storage exactly as on the CPU; writes through any view are seen everywhere."""
import pytest
import torch

import torch_neuronx

VIEWS = {
    "slice_step": lambda t: t[1:5:2, ::3],
    "select": lambda t: t.select(1, 2),
    "narrow": lambda t: t.narrow(0, 1, 3),
    "transpose": lambda t: t.transpose(0, 1),
    "permute": lambda t: t.view(2, 3, 6).permute(2, 0, 1),
    "view": lambda t: t.view(3, 12),
    "reshape": lambda t: t.reshape(4, 9),
    "expand": lambda t: t[0:1].expand(5, 6),
    "unsqueeze": lambda t: t.unsqueeze(1),
    "squeeze": lambda t: t[0:1].squeeze(0),
    "chunk": lambda t: t.chunk(3, dim=1)[1],
    "split": lambda t: t.split([2, 4], dim=0)[1],
    "unbind": lambda t: t.unbind(1)[4],
    "diagonal": lambda t: t.diagonal(),
    "diagonal_offset": lambda t: t.diagonal(offset=2),
    "as_strided": lambda t: t.as_strided((3, 3), (7, 2), 1),
    "t": lambda t: t.t(),
    "unfold": lambda t: t[0].unfold(0, 2, 3),
    "unfold_overlapping": lambda t: t[0].unfold(0, 3, 2),
    "transpose_slice": lambda t: t.t()[1:4, ::2],
}


def _base():
    return torch.arange(36, dtype=torch.float32).reshape(6, 6)


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_view_reads_and_shares_storage(name):
    f = VIEWS[name]
    cpu = _base()
    dev = cpu.to("neuron")
    v_cpu, v_dev = f(cpu), f(dev)
    assert v_dev.untyped_storage().data_ptr() == dev.untyped_storage().data_ptr()
    assert v_dev.shape == v_cpu.shape
    assert v_dev.stride() == v_cpu.stride()
    assert v_dev.storage_offset() == v_cpu.storage_offset()
    torch.testing.assert_close(v_dev.cpu(), v_cpu, rtol=0, atol=0)


# writes through views whose elements alias each other have no defined result
WRITABLE = sorted(set(VIEWS) - {"expand", "unfold_overlapping"})


@pytest.mark.parametrize("name", WRITABLE)
def test_inplace_through_view_is_seen_by_base_and_other_views(name, track):
    f = VIEWS[name]
    cpu = _base()
    dev = cpu.to("neuron")
    other_cpu, other_dev = cpu[:, 1], dev[:, 1]
    f(cpu).mul_(-2).add_(0.5)
    f(dev).mul_(-2).add_(0.5)
    torch.testing.assert_close(dev.cpu(), cpu, rtol=0, atol=0)
    torch.testing.assert_close(other_dev.cpu(), other_cpu, rtol=0, atol=0)
    assert not torch_neuronx.get_fallback_ops()
    # one eager op is one device launch: the view is read and written inside mul_'s executable
    assert track.get_executed_ops()["aten.mul_.Tensor"] == 1


@pytest.mark.parametrize("name", WRITABLE)
def test_copy_into_view(name):
    f = VIEWS[name]
    cpu = _base()
    dev = cpu.to("neuron")
    src = torch.randn(f(cpu).shape)
    f(cpu).copy_(src)
    f(dev).copy_(src.to("neuron"))
    torch.testing.assert_close(dev.cpu(), cpu, rtol=0, atol=0)
    # and from the host directly into a device view
    dev2 = _base().to("neuron")
    f(dev2).copy_(src)
    torch.testing.assert_close(dev2.cpu(), cpu, rtol=0, atol=0)


def test_view_of_view_chain_and_contiguous():
    cpu = torch.arange(120.0).reshape(2, 3, 4, 5)
    dev = cpu.to("neuron")
    c = cpu.permute(3, 1, 0, 2)[1:, :, :, ::2].transpose(0, 2)
    d = dev.permute(3, 1, 0, 2)[1:, :, :, ::2].transpose(0, 2)
    torch.testing.assert_close(d.contiguous().cpu(), c.contiguous())
    assert d.contiguous().is_contiguous()
    d.zero_()
    c.zero_()
    torch.testing.assert_close(dev.cpu(), cpu)


def test_dtype_view_reinterprets_bits():
    cpu = torch.tensor([1.0, -2.0, 0.5])
    dev = cpu.to("neuron")
    torch.testing.assert_close(dev.view(torch.int32).cpu(), cpu.view(torch.int32))
    torch.testing.assert_close(dev.view(torch.uint8).cpu(), cpu.view(torch.uint8))
    torch.testing.assert_close(dev.view(torch.int16).cpu(), cpu.view(torch.int16))


def test_writes_to_expanded_view_raise_like_cpu():
    dev = torch.zeros(1, 4, device="neuron").expand(3, 4)
    with pytest.raises(RuntimeError, match="single memory location"):
        dev.add_(1)


def test_set_shares_storage():
    a = torch.arange(6.0, device="neuron")
    b = torch.empty(0, device="neuron")
    b.set_(a.untyped_storage(), 2, (2, 2), (2, 1))
    assert b.cpu().tolist() == [[2.0, 3.0], [4.0, 5.0]]
    b.fill_(7)
    assert a.cpu().tolist() == [0.0, 1.0, 7.0, 7.0, 7.0, 7.0]


def test_inplace_metadata_ops_stay_native():
    """unsqueeze_/t_/squeeze_/transpose_ change a tensor's shape, not its values."""
    cpu = torch.randn(6)
    dev = cpu.to("neuron")
    for f in (lambda t: t.unsqueeze_(1), lambda t: t.t_(), lambda t: t.squeeze_(), lambda t: t.unsqueeze_(0).transpose_(0, 1)):
        f(cpu)
        f(dev)
        assert dev.shape == cpu.shape and dev.stride() == cpu.stride()
        torch.testing.assert_close(dev.cpu(), cpu)
