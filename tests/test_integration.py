"""PyTorch machinery around the device: autocast, serialization, deepcopy, state dicts."""
import copy
import io

import torch
import torch.nn.functional as F


def test_autocast_runs_matmuls_in_bfloat16_and_sensitive_ops_in_float32():
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8)
    dlin, dx = copy.deepcopy(lin).to("neuron"), x.to("neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        y = dlin(dx)
        e = torch.exp(y)
    assert y.dtype == torch.bfloat16 and e.dtype == torch.float32
    want = F.linear(x.bfloat16(), lin.weight.bfloat16(), lin.bias.bfloat16())
    # both sides round one float32-accumulated product to bfloat16: measured identical (4 seeds)
    torch.testing.assert_close(y.cpu(), want)
    torch.testing.assert_close(e.cpu(), torch.exp(want.float()))
    assert torch.neuron.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]


def test_save_and_load_keep_views_and_devices():
    t = torch.arange(6.0).view(2, 3)
    d = t.to("neuron")
    buf = io.BytesIO()
    torch.save({"t": d, "col": d[:, 1]}, buf)
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")
    assert torch.equal(on_cpu["t"], t) and torch.equal(on_cpu["col"], t[:, 1])
    buf.seek(0)
    back = torch.load(buf)
    assert back["t"].device == torch.device("neuron", 0)
    back["t"][0, 1] = 100.0  # the view still shares the reloaded storage
    assert back["col"].cpu().tolist() == [100.0, 4.0]


def test_deepcopy_and_state_dict_roundtrip():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4)).to("neuron")
    c = copy.deepcopy(m)
    for a, b in zip(m.parameters(), c.parameters()):
        assert b.device.type == "neuron" and torch.equal(a.cpu(), b.cpu())
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    fresh.load_state_dict(m.state_dict())
    x = torch.randn(2, 4)
    torch.testing.assert_close(fresh(x), m(x.to("neuron")).cpu())
