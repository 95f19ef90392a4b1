"""The Hugging Face stack on neuron, each result compared with the CPU: transformers `generate()`
(greedy, dynamic and static KV caches), accelerate (`Accelerator()`'s device, a prepared training
step, `from_pretrained(device_map="auto", max_memory=...)` placing layers on neuron and the CPU), and
safetensors loading straight onto neuron (`load_file(device="neuron")`, `safe_open`)."""
from __future__ import annotations

import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402

from helpers import run_python  # noqa: E402
from torch_neuronx import metrics  # noqa: E402

transformers.logging.set_verbosity_error()


def _causal_lm_folder(path, config_cls, model_cls, layers=2):
    """A small causal LM (random weights, the real architecture) saved to `path` for from_pretrained."""
    torch.manual_seed(0)
    cfg = config_cls(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, bos_token_id=1, eos_token_id=None, pad_token_id=0,
    )
    model = model_cls(cfg).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    model.save_pretrained(path)
    return str(path)


def _llama_folder(path, layers=2):
    return _causal_lm_folder(path, LlamaConfig, LlamaForCausalLM, layers)


@pytest.fixture(scope="module")
def llama_path(tmp_path_factory):
    return _llama_folder(tmp_path_factory.mktemp("llama"))


def _prompt(n=6):
    return torch.randint(2, 128, (1, n), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_generate_greedy_matches_cpu(llama_path, cache):
    kw = {"max_new_tokens": 6, "do_sample": False}
    if cache == "static":
        kw["cache_implementation"] = "static"
    ids = _prompt()
    cpu = AutoModelForCausalLM.from_pretrained(llama_path).eval()
    dev = AutoModelForCausalLM.from_pretrained(llama_path).eval().to("neuron")
    with torch.no_grad():
        expected = cpu.generate(ids, **kw)
        metrics.clear_op_tracking()
        got = dev.generate(ids.to("neuron"), **kw)
    # the host waits once per token (the stopping check) and twice while setting up, as on the CPU
    assert metrics.host_reads()["reads"] <= kw["max_new_tokens"] + 2
    assert metrics.get_fallback_ops() == {}
    assert got.device.type == "neuron"
    assert torch.equal(got.cpu(), expected)


def test_host_reads_count_item_and_cpu():
    x = torch.arange(6, device="neuron", dtype=torch.float32)
    metrics.clear_op_tracking()
    assert x.sum().item() == torch.arange(6, dtype=torch.float32).sum().item()
    assert torch.equal(x.cpu(), torch.arange(6, dtype=torch.float32))
    assert metrics.host_reads() == {"reads": 2, "bytes": 4 + 24}


def test_accelerator_picks_neuron():
    from accelerate import Accelerator

    acc = Accelerator()
    assert acc.device.type == "neuron"
    assert torch.zeros(2, device=acc.device).device == torch.device("neuron", torch.neuron.current_device())


def test_accelerator_prepared_training_step_matches_cpu():
    from accelerate import Accelerator

    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x, y = torch.randn(5, 8), torch.randn(5, 4)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    model.load_state_dict(ref.state_dict())
    acc = Accelerator()
    # the optimizer is made before the model moves, as accelerate's examples do: moving keeps each
    # Parameter object (accelerate re-points an optimizer's parameters only for XLA)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = acc.prepare(model, opt)
    assert opt.param_groups[0]["params"][0] is next(model.parameters())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for m, o, dx, dy, backward in ((ref, ref_opt, x, y, lambda l: l.backward()),
                                   (model, opt, x.to(acc.device), y.to(acc.device), acc.backward)):
        loss = torch.nn.functional.mse_loss(m(dx), dy)
        backward(loss)
        o.step()
    assert next(model.parameters()).device.type == "neuron"
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)


def _logits(model, ids):
    with torch.no_grad():
        return model(ids.to(model.device)).logits.cpu()


def _layer_bytes(path):
    model = AutoModelForCausalLM.from_pretrained(path)
    return sum(p.numel() * p.element_size() for p in model.model.layers[0].parameters())


def test_device_map_auto_all_on_neuron(llama_path):
    ids = _prompt()
    expected = _logits(AutoModelForCausalLM.from_pretrained(llama_path).eval(), ids)
    model = AutoModelForCausalLM.from_pretrained(llama_path, device_map="auto", max_memory={0: "1GB", "cpu": "1GB"})
    assert {p.device for p in model.parameters()} == {torch.device("neuron", 0)}
    torch.testing.assert_close(_logits(model, ids), expected, rtol=1e-5, atol=1e-5)


def test_device_map_auto_splits_neuron_and_cpu(tmp_path):
    path = _llama_folder(tmp_path, layers=4)
    ids = _prompt()
    expected = _logits(AutoModelForCausalLM.from_pretrained(path).eval(), ids)
    # room for about two decoder layers on neuron: the rest is offloaded to the CPU
    budget = 3 * _layer_bytes(path)
    model = AutoModelForCausalLM.from_pretrained(path, device_map="auto", max_memory={0: budget, "cpu": "1GB"})
    placed = set(model.hf_device_map.values())
    assert placed == {0, "cpu"}, model.hf_device_map
    assert model.hf_device_map["model.layers.0"] == 0 and model.hf_device_map["model.layers.3"] == "cpu"
    on_neuron = [n for n, p in model.named_parameters() if p.device.type == "neuron"]
    assert any(n.startswith("model.layers.0.") for n in on_neuron)
    torch.testing.assert_close(_logits(model, ids), expected, rtol=1e-5, atol=1e-5)


def test_device_map_auto_within_mem_get_info(llama_path):
    """A budget taken from torch.neuron.mem_get_info: what lands on neuron fits in it, and the whole
    model lands there when it fits (everything goes to the CPU while the device reports no memory)."""
    free, total = torch.neuron.mem_get_info(0)
    assert 0 <= free <= total
    assert total == torch.neuron.get_device_properties(0).total_memory
    ids = _prompt()
    expected = _logits(AutoModelForCausalLM.from_pretrained(llama_path).eval(), ids)
    model = AutoModelForCausalLM.from_pretrained(llama_path, device_map="auto", max_memory={0: free, "cpu": "1GB"})
    on_neuron = sum(p.numel() * p.element_size() for p in model.parameters() if p.device.type == "neuron")
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    assert on_neuron <= free
    if free > 4 * size:
        assert on_neuron == size
    torch.testing.assert_close(_logits(model, ids), expected, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def tensors_file(tmp_path_factory):
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    tensors = {
        "w": torch.randn(3, 4, generator=g), "i": torch.arange(7), "h": torch.randn(2, 5, generator=g).bfloat16(),
        "m": torch.tensor([True, False, True]),
    }
    path = os.path.join(tmp_path_factory.mktemp("st"), "t.safetensors")
    save_file(tensors, path)
    return path, tensors


@pytest.mark.parametrize("device", ["neuron", "neuron:1", torch.device("neuron", 0)])
def test_safetensors_load_file_onto_neuron(tensors_file, device):
    from safetensors.torch import load_file

    path, tensors = tensors_file
    loaded = load_file(path, device=device)
    want = torch.device(device)
    want = want if want.index is not None else torch.device("neuron", torch.neuron.current_device())
    assert set(loaded) == set(tensors)
    for name, t in loaded.items():
        assert t.device == want and t.dtype == tensors[name].dtype
        assert torch.equal(t.cpu(), tensors[name])


def test_safetensors_safe_open_onto_neuron(tensors_file):
    from safetensors import safe_open

    path, tensors = tensors_file
    with safe_open(path, framework="pt", device="neuron") as f:
        assert sorted(f.keys()) == sorted(tensors)
        w = f.get_tensor("w")
        part = f.get_slice("w")[1:, :3]
    assert w.device.type == "neuron" and part.device.type == "neuron"
    assert torch.equal(w.cpu(), tensors["w"])
    assert torch.equal(part.cpu(), tensors["w"][1:, :3])
    with safe_open(path, framework="pt", device="cpu") as f:  # other devices as safetensors has them
        assert f.get_tensor("i").device.type == "cpu"


def test_safetensors_imported_before_torch(tensors_file):
    """safetensors imported first (before torch autoloads this package) still takes device="neuron"."""
    path, tensors = tensors_file
    code = (
        "import safetensors, sys\n"
        "import torch\n"
        "from safetensors.torch import load_file\n"
        f"t = load_file({path!r}, device='neuron')\n"
        "print(t['w'].device, t['w'].cpu().sum().item())\n"
    )
    out = run_python(code, timeout=120)
    assert out.returncode == 0, out.stderr
    device, total = out.stdout.split()
    assert device == "neuron:0"
    assert float(total) == pytest.approx(tensors["w"].sum().item(), rel=1e-6)


def _qwen2_folder(path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return _causal_lm_folder(path, Qwen2Config, Qwen2ForCausalLM)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_generate_padded_batch_matches_cpu(tmp_path, arch, cache):
    """A left-padded batch of two prompts (the attention mask reaches attention), greedy, vs the CPU."""
    path = _llama_folder(tmp_path) if arch == "llama" else _qwen2_folder(tmp_path)
    ids = torch.randint(2, 128, (2, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, :3] = 0
    ids[1, :3] = 0
    kw = {"max_new_tokens": 8, "do_sample": False}
    if cache == "static":
        kw["cache_implementation"] = "static"
    cpu = AutoModelForCausalLM.from_pretrained(path).eval()
    dev = AutoModelForCausalLM.from_pretrained(path).eval().to("neuron")
    with torch.no_grad():
        expected = cpu.generate(ids, attention_mask=mask, **kw)
        got = dev.generate(ids.to("neuron"), attention_mask=mask.to("neuron"), **kw)
    assert torch.equal(got.cpu(), expected)
