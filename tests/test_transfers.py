"""Transfers, factories, host reads and dtypes, each against the CPU."""
import pytest
import torch

import torch_neuronx

DTYPES = [
    torch.float32,
    torch.bfloat16,
    torch.float16,
    torch.float64,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
]


def _sample(dtype, shape=(3, 5)):
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, generator=g)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 100).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_roundtrip_is_exact(dtype):
    x = _sample(dtype)
    d = x.to("neuron")
    assert d.device.type == "neuron" and d.dtype == dtype
    assert torch.equal(d.cpu(), x)


def test_int64_and_float64_are_not_downcast():
    big = torch.tensor([2**62 + 1, -(2**62) - 3], dtype=torch.int64)
    assert torch.equal((big.to("neuron") + 2).cpu(), big + 2)
    precise = torch.tensor([1.0 + 2**-40], dtype=torch.float64)
    assert torch.equal((precise.to("neuron") * 3).cpu(), precise * 3)


@pytest.mark.parametrize("src,dst", [(torch.float32, torch.bfloat16), (torch.float32, torch.int32),
                                     (torch.bfloat16, torch.float32), (torch.int64, torch.float16),
                                     (torch.float32, torch.bool), (torch.bool, torch.float32),
                                     (torch.float64, torch.float32), (torch.float32, torch.uint8)])
def test_to_dtype_on_device(src, dst, track):
    x = _sample(src)
    if dst == torch.uint8:
        x = x.abs()
    got = x.to("neuron").to(dst)
    assert got.device.type == "neuron" and got.dtype == dst
    assert torch.equal(got.cpu(), x.to(dst))
    assert not torch_neuronx.get_fallback_ops()


def test_between_devices_and_non_blocking():
    x = torch.randn(4, 4)
    a = x.to("neuron:0")
    b = a.to("neuron:1", non_blocking=True)
    assert b.device == torch.device("neuron", 1)
    assert torch.equal(b.cpu(), x)
    c = b.t().to("neuron:0")
    assert torch.equal(c.cpu(), x.t())
    h = a.to("cpu", non_blocking=True)
    torch.neuron.synchronize()
    assert torch.equal(h, x)


def test_host_data_is_copied_not_aliased():
    x = torch.ones(4)
    d = x.to("neuron")
    x.fill_(5)
    assert d.cpu().tolist() == [1.0] * 4


def test_item_tolist_and_print():
    d = torch.tensor([[1.5, -2.0], [3.0, 4.25]], device="neuron")
    assert d[1, 1].item() == 4.25
    assert d.tolist() == [[1.5, -2.0], [3.0, 4.25]]
    text = str(d)
    assert "device='neuron:0'" in text and "4.2500" in text
    assert str(torch.arange(3, device="neuron")) == "tensor([0, 1, 2], device='neuron:0')"


def test_transposed_copy_to_cpu_keeps_strides_like_cuda():
    x = torch.randn(3, 4)
    h = x.to("neuron").t().cpu()
    assert torch.equal(h, x.t())


FACTORIES = {
    "empty_like_shape": lambda dev: torch.empty(2, 3, device=dev).shape,
    "zeros": lambda dev: torch.zeros(2, 3, device=dev),
    "ones": lambda dev: torch.ones(2, 3, dtype=torch.int32, device=dev),
    "full": lambda dev: torch.full((2, 3), 1.5, dtype=torch.bfloat16, device=dev),
    "arange": lambda dev: torch.arange(10, device=dev),
    "arange_float": lambda dev: torch.arange(0.5, 3.0, 0.25, device=dev),
    "linspace": lambda dev: torch.linspace(-1, 1, 7, device=dev),
    "eye": lambda dev: torch.eye(3, 4, device=dev),
    "zeros_like": lambda dev: torch.zeros_like(torch.ones(2, 2, device=dev)),
    "ones_like": lambda dev: torch.ones_like(torch.ones(2, 2, device=dev), dtype=torch.float16),
    "full_like": lambda dev: torch.full_like(torch.ones(2, 2, device=dev), 7),
    "tensor": lambda dev: torch.tensor([[1, 2], [3, 4]], device=dev),
    "scalar_tensor": lambda dev: torch.tensor(3.5, device=dev),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_factories_match_cpu(name):
    f = FACTORIES[name]
    got, want = f("neuron"), f("cpu")
    if isinstance(want, torch.Size):
        assert got == want
        return
    assert got.device.type == "neuron" and got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def _moments(t):
    t = t.float().cpu()
    return t.mean().item(), t.std().item()


def test_random_factories_are_reproducible_and_distributed(track):
    torch.manual_seed(123)
    a = torch.randn(20000, device="neuron")
    u = torch.rand(20000, device="neuron")
    r = torch.randint(0, 10, (20000,), device="neuron")
    torch.manual_seed(123)
    a2 = torch.randn(20000, device="neuron")
    assert torch.equal(a.cpu(), a2.cpu())
    m, s = _moments(a)
    assert abs(m) < 0.05 and abs(s - 1) < 0.05
    uc = u.cpu()
    assert 0 <= uc.min() and uc.max() < 1 and abs(uc.mean() - 0.5) < 0.02
    rc = r.cpu()
    assert r.dtype == torch.int64 and rc.min() == 0 and rc.max() == 9
    n = torch.empty(20000, device="neuron").normal_(2.0, 3.0)
    m, s = _moments(n)
    assert abs(m - 2) < 0.1 and abs(s - 3) < 0.1
    v = torch.empty(20000, device="neuron").uniform_(-2, -1)
    assert -2 <= v.cpu().min() and v.cpu().max() < -1
    assert not torch.equal(torch.randn(100, device="neuron").cpu(), torch.randn(100, device="neuron").cpu())
    assert {"aten.randn.default", "aten.rand.default", "aten.randint.low", "aten.normal_.default",
            "aten.uniform_.default"} <= set(track.get_executed_ops())


def test_generators():
    g = torch.Generator(device="neuron")
    g.manual_seed(7)
    x = torch.randn(8, device="neuron", generator=g)
    g.manual_seed(7)
    y = torch.randn(8, device="neuron", generator=g)
    assert torch.equal(x.cpu(), y.cpu())
    state = torch.neuron.get_rng_state()
    p = torch.rand(5, device="neuron")
    torch.neuron.set_rng_state(state)
    q = torch.rand(5, device="neuron")
    assert torch.equal(p.cpu(), q.cpu())
    torch.neuron.manual_seed(5)
    assert torch.neuron.initial_seed() == 5
    torch.manual_seed(11)
    assert torch.neuron.initial_seed() == 11
    assert torch.neuron.default_generators[1].initial_seed() == 11


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2], ids=str)
def test_float8_storage_and_casts(dtype):
    x = torch.tensor([1e6, -1e6, float("nan"), float("inf"), 3.3, -0.7, 1e-3, 240.0])
    want = x.to(dtype)  # e4m3fn saturates to +-448 on the CPU; XLA alone would give NaN
    got = x.to("neuron").to(dtype)
    assert got.dtype == dtype
    finite = ~x.isnan()  # NaN payload bits may differ; NaN-ness is checked below
    assert torch.equal(got.cpu().view(torch.uint8)[finite], want.view(torch.uint8)[finite])
    assert torch.equal(want.to("neuron").cpu().view(torch.uint8), want.view(torch.uint8))
    torch.testing.assert_close(got.float().cpu(), want.float(), equal_nan=True)
    b = x.bfloat16()
    assert torch.equal(b.to("neuron").to(dtype).cpu().view(torch.uint8)[finite], b.to(dtype).view(torch.uint8)[finite])


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64], ids=str)
def test_float_to_int_conversion_matches_cpu_out_of_range(dtype):
    x = torch.tensor([1e6, -1e6, float("nan"), float("inf"), -float("inf"), 3e9, 3.7, -0.7, -3.7])
    assert torch.equal(x.to("neuron").to(dtype).cpu(), x.to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64], ids=str)
def test_host_reads_copy_once_and_views_launch_nothing_on_the_cpu_platform(dtype):
    """A host read is one copy into memory the caller owns; on the CPU platform (the host sees the
    device buffer) a view, an element's `.item()` and a whole tensor are read there, with no launch."""
    from torch_neuronx import metrics
    from torch_neuronx.runtime import transfer

    x = _sample(dtype, (6, 8))
    d = x.to("neuron")
    views = [lambda t: t, lambda t: t[1:4, ::3], lambda t: t.t(), lambda t: t[2], lambda t: t[:, 5]]
    metrics.clear_op_tracking()
    for view in views:
        got = view(d).cpu()
        assert torch.equal(got, view(x))
        assert got.data_ptr() != 0 and got.untyped_storage().nbytes() == got.numel() * got.element_size()
    assert d[2, 3].item() == x[2, 3].item() and type(d[2, 3].item()) is type(x[2, 3].item())
    assert d[4:5, 7].item() == x[4:5, 7].item()
    if transfer.host_views_device():
        assert metrics.get_executed_ops() == {}, metrics.get_executed_ops()
    assert metrics.host_reads()["reads"] == len(views) + 3
    # the copy is the caller's: writing it never reaches the device buffer
    mine = d.cpu()
    mine.zero_()
    assert torch.equal(d.cpu(), x)
    if dtype.is_complex:  # a lazy conjugate is read through the device (one clone launch)
        assert torch.equal(d.conj()[1:3].cpu().resolve_conj(), x.conj()[1:3].resolve_conj())
