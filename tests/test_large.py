"""Large tensors: transfers over 64 MB (host->device, device->host, neuron:0<->neuron:1) exact;
int64 values past the int32 range; a tensor of more than 2**31 elements (2 GiB of uint8: storage
offsets, indices and element counts past int32) without the device multiplying its memory; and
non-blocking copies to the host read without a synchronize."""
import pytest
import torch

import torch_neuronx

MB70 = 70 * 2**20


def _peak_rss() -> int:
    """This process's resident-set high-water mark (VmHWM), in bytes."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))


def _reset_peak_rss() -> int:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    return _peak_rss()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_transfers_over_64mb_are_exact(dtype):
    n = MB70 // torch.tensor([], dtype=dtype).element_size() + 3  # not a round size
    x = torch.randn(n).to(dtype)
    d0 = x.to("neuron")
    assert d0.device == torch.device("neuron", 0) and d0.dtype == dtype
    assert torch.equal(d0.cpu(), x)
    d1 = d0.to("neuron:1")
    assert d1.device == torch.device("neuron", 1)
    assert torch.equal(d1.cpu(), x)
    back = d1.to("neuron:0")
    assert torch.equal(back.cpu(), x)
    assert torch.neuron.memory_allocated(1) >= x.numel() * x.element_size()
    # strided views of a large tensor, in both directions
    rows = n // 1024
    m, md = x[: rows * 1024].view(rows, 1024), d0[: rows * 1024].view(rows, 1024)
    assert torch.equal(md.t().cpu(), m.t())
    assert torch.equal(md[:, 1::3].to("neuron:1").cpu(), m[:, 1::3])
    md2 = torch.empty(rows, 1024, dtype=dtype, device="neuron:1")
    md2.t().copy_(m.t())  # a host tensor written into a transposed device view
    assert torch.equal(md2.cpu(), m)


def test_int64_values_past_int32(track):
    lo = 2**31 - 5
    a = torch.arange(lo, lo + 12, dtype=torch.int64)
    ad = torch.arange(lo, lo + 12, device="neuron")
    assert ad.dtype == torch.int64
    assert torch.equal(ad.cpu(), a)
    big = torch.arange(2**33, 2**33 + 7, device="neuron")
    assert torch.equal(big.cpu(), torch.arange(2**33, 2**33 + 7))
    for fn in (lambda t: t * 3 + 2**33, lambda t: t // 7, lambda t: t % 1000, lambda t: t - 2**32,
               lambda t: t << 2, lambda t: t.cumsum(0), lambda t: t.flip(0).argmax().view(1),
               lambda t: (t > 2**31).to(torch.int64)):
        assert torch.equal(fn(ad).cpu(), fn(a))
    assert ad.sum().item() == a.sum().item() > 2**34
    assert ad.max().item() == a.max().item() > 2**31
    # index arithmetic with large int64 values, reduced into range, used as indices
    w = torch.randn(1000, 3)
    idx = (a * 7919) % 1000
    torch.testing.assert_close(w.to("neuron").index_select(0, (ad * 7919) % 1000).cpu(), w.index_select(0, idx))
    assert "aten.index_select.default" in track.get_executed_ops()


N_BIG = 2**31 + 4096  # elements (uint8): past int32, 2 GiB


def _build_big(device):
    """The same writes on the CPU and on the device, all at offsets around and past 2**31."""
    x = torch.zeros(N_BIG, dtype=torch.uint8, device=device)
    x[2**31 + 5: 2**31 + 9] = torch.tensor([1, 2, 3, 4], dtype=torch.uint8, device=device)
    x[N_BIG - 1] = 255
    x[2**31 - 1] = 77
    x[2**31:].view(-1, 1024)[1, ::128] += 9  # a strided view whose storage offset is past 2**31
    x[2**31 - 2**23::4096] = 3  # a stepped slice across the 2**31 boundary
    return x


def test_tensor_past_2_31_elements():
    """2**31 + 4096 uint8 elements: built, written, indexed and reduced on the device exactly as on
    the CPU; the device holds it once (no copy per write, no 8x int64 widening in a sum)."""
    nbytes = N_BIG
    before = _reset_peak_rss()
    xd = _build_big("neuron")
    assert xd.numel() == N_BIG and torch.neuron.memory_allocated() >= nbytes
    assert _peak_rss() - before < 1.5 * nbytes, "the device's in-place writes copied the storage"
    xc = _build_big("cpu")
    tail_d, tail_c = xd[2**31:], xc[2**31:]
    assert tail_d.storage_offset() == tail_c.storage_offset() == 2**31
    assert torch.equal(tail_d.cpu(), tail_c)
    assert torch.equal(xd[2**31 - 2**12: 2**31 + 2**12].cpu(), xc[2**31 - 2**12: 2**31 + 2**12])
    idx = torch.tensor([0, 2**31 - 1, 2**31 + 5, 2**31 + 8, N_BIG - 1, 2**31 + 1024 + 256,
                        2**31 - 2**23, 2**31, 2**31 - 4096], dtype=torch.int64)
    want = xc.index_select(0, idx)
    assert want.tolist() != [0] * len(idx)  # the probes hit written values
    assert torch.equal(xd.index_select(0, idx.to("neuron")).cpu(), want)
    assert torch.equal(torch.gather(xd, 0, idx.to("neuron")).cpu(), torch.gather(xc, 0, idx))
    assert torch.equal(xd[idx.to("neuron")].cpu(), xc[idx])
    # reductions over 2**31+ elements: the int64 count, and a sum over a view past the boundary
    before = _reset_peak_rss()
    assert torch.count_nonzero(xd).item() == torch.count_nonzero(xc).item()
    window = slice(2**31 - 2**24, N_BIG)
    assert xd[window].sum().item() == xc[window].sum().item()
    # count_nonzero makes one bool tensor (1x), as its decomposition says; nothing 8x
    assert _peak_rss() - before < 1.5 * nbytes
    ran = torch_neuronx.get_executed_ops()
    for op in ("aten.index_select.default", "aten.gather.default", "aten.sum.dim_IntList", "aten.copy_.default"):
        assert op in ran, ran


def _pending_chain(device="neuron"):
    x = torch.randn(256, 256)
    xd = x.to(device)
    return ((xd @ xd).tanh() @ xd).exp_(), ((x @ x).tanh() @ x).exp_()


def test_non_blocking_copy_to_host_is_complete_when_it_returns():
    """On CUDA, reading a non_blocking device->host copy before a synchronize is a race. Here the
    copy has landed when `to`/`copy_` returns (the rule: host copies always wait for their data),
    so reading it at once gives the right values, never stale memory."""
    yd, want = _pending_chain()
    h = yd.to("cpu", non_blocking=True)  # the chain is still running when this is called
    assert h.device.type == "cpu"
    torch.testing.assert_close(h, want, rtol=1e-4, atol=1e-4)
    dst = torch.full((256, 256), float("nan"))
    yd2, want2 = _pending_chain("neuron:1")
    dst.copy_(yd2, non_blocking=True)
    torch.testing.assert_close(dst, want2, rtol=1e-4, atol=1e-4)
    # a strided view, a bfloat16 one, and a large one
    v = yd.t()[::3].to("cpu", non_blocking=True)
    torch.testing.assert_close(v, want.t()[::3], rtol=1e-4, atol=1e-4)
    b = yd.to(torch.bfloat16).to("cpu", non_blocking=True)
    assert torch.equal(b, h.to(torch.bfloat16))
    big = torch.randn(MB70 // 4)
    bd = (big.to("neuron") * 2).to("cpu", non_blocking=True)
    assert torch.equal(bd, big * 2)


def test_non_blocking_copy_to_device_takes_the_values_at_the_call():
    """The host tensor may change right after a non_blocking host->device copy: the device keeps
    the values it had at the call (the copy is made before returning)."""
    x = torch.arange(1024.0)
    keep = x.clone()
    xd = x.to("neuron", non_blocking=True)
    x.zero_()
    assert torch.equal(xd.cpu(), keep)
    dst = torch.empty(1024, device="neuron:1")
    x.copy_(keep)
    dst.copy_(x, non_blocking=True)
    x.fill_(-1)
    assert torch.equal(dst.cpu(), keep)


def test_large_integer_sums_match_cpu(track):
    """Whole-tensor integer sums of more than 2**22 elements run in chunks (XLA's CPU backend
    would widen the whole input to int64 first): the same values, dtypes and shapes as the CPU's."""
    g = torch.Generator().manual_seed(0)
    base = torch.randint(-100, 100, (3, 2**21 + 7), generator=g)
    for dtype, fn in ((torch.bool, lambda t: t.sum()), (torch.int8, lambda t: t[:, 3:].sum((0, 1), keepdim=True)),
                      (torch.int32, lambda t: t.sum(dtype=torch.int32)), (torch.uint8, torch.count_nonzero)):
        x = base.to(dtype)
        want, got = fn(x), fn(x.to("neuron"))
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got.cpu(), want), dtype
    x = base > 0
    c = torch.compile(lambda t: t.sum() + 1, backend="neuron", fullgraph=True, dynamic=False)
    assert torch.equal(c(x.to("neuron")).cpu(), x.sum() + 1)
    assert "aten.sum.dim_IntList" in track.get_executed_ops()
