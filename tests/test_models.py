"""Real architectures end to end in eager mode: a FLUX.2 transformer (diffusers) and a Qwen3 text
encoder (transformers), small configs with random weights, on neuron vs the CPU, with no CPU fallback.

Metric: relative error ||neuron - cpu|| / ||cpu|| (Frobenius) of the output; float32 must agree to
1e-5, bfloat16 (both sides computing in bfloat16) to 2e-2."""
import copy

import pytest
import torch

import torch_neuronx

REL_TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.float(), want.float()
    return ((got - want).norm() / want.norm()).item()


def _to(d, device):
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in d.items()}


def flux2_transformer():
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(0)
    return Flux2Transformer2DModel(
        patch_size=1, in_channels=16, num_layers=2, num_single_layers=4, attention_head_dim=32,
        num_attention_heads=4, joint_attention_dim=64, timestep_guidance_channels=64, axes_dims_rope=(8, 8, 8, 8),
    ).eval()


def flux2_inputs(dtype, n=64, t=16):
    g = torch.Generator().manual_seed(1)
    img_ids = torch.zeros(n, 4)
    img_ids[:, 1], img_ids[:, 2] = torch.arange(n) // 8, torch.arange(n) % 8
    txt_ids = torch.zeros(t, 4)
    txt_ids[:, 3] = torch.arange(t)
    return dict(
        hidden_states=torch.randn(1, n, 16, generator=g).to(dtype),
        encoder_hidden_states=torch.randn(1, t, 64, generator=g).to(dtype),
        timestep=torch.tensor([0.5], dtype=dtype), guidance=torch.tensor([3.5], dtype=dtype),
        img_ids=img_ids, txt_ids=txt_ids, return_dict=False,
    )


def qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128)
    return Qwen3ForCausalLM(cfg).eval()


def qwen3_inputs():
    g = torch.Generator().manual_seed(2)
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, :3] = 0  # left padding, as a batch of prompts has
    return dict(input_ids=torch.randint(0, 256, (2, 12), generator=g), attention_mask=mask, output_hidden_states=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_flux2_transformer_matches_cpu(dtype):
    model = flux2_transformer().to(dtype)
    inputs = flux2_inputs(dtype)
    with torch.no_grad():
        want = model(**inputs)[0]
        dev = copy.deepcopy(model).to("neuron")
        torch_neuronx.clear_op_tracking()
        got = dev(**_to(inputs, "neuron"))[0]
    assert got.device.type == "neuron" and got.dtype == dtype and got.shape == want.shape
    assert torch_neuronx.get_fallback_ops() == {}
    assert "aten._scaled_dot_product_fused_attention_overrideable.default" in torch_neuronx.get_executed_ops()
    assert rel_err(got.cpu(), want) < REL_TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_qwen3_text_encoder_matches_cpu(dtype):
    model = qwen3().to(dtype)
    inputs = qwen3_inputs()
    with torch.no_grad():
        want = model(**inputs)
        dev = copy.deepcopy(model).to("neuron")
        torch_neuronx.clear_op_tracking()
        got = dev(**_to(inputs, "neuron"))
    assert torch_neuronx.get_fallback_ops() == {}
    # FLUX.2-klein's pipeline feeds it the hidden states of intermediate layers, so check those too
    assert len(got.hidden_states) == len(want.hidden_states) == 3
    for g, w in zip(got.hidden_states, want.hidden_states):
        assert rel_err(g.cpu(), w) < REL_TOL[dtype]
    assert rel_err(got.logits.cpu(), want.logits) < REL_TOL[dtype]
    assert "aten._scaled_dot_product_fused_attention_overrideable.default" in torch_neuronx.get_executed_ops()


def flux2_vae():
    """FLUX.2's VAE (`AutoencoderKLFlux2`: its default is the real configuration) cut narrow: four up blocks,
    the mid block's attention, group norms, SiLU, nearest upsampling, the latent batch norm."""
    from diffusers import AutoencoderKLFlux2

    torch.manual_seed(0)
    vae = AutoencoderKLFlux2(block_out_channels=(16, 32, 32, 32), layers_per_block=1, latent_channels=8,
                             norm_num_groups=8).eval()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # running statistics as a trained model ships them
        vae.bn.running_mean.copy_(0.1 * torch.randn(vae.bn.running_mean.shape, generator=g))
        vae.bn.running_var.copy_(1.0 + 0.1 * torch.rand(vae.bn.running_var.shape, generator=g))
    return vae


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_flux2_vae_decode_matches_cpu(dtype, compiled):
    """The pipeline's VAE decode (its convolutions take torch's CPU kernel where runtime/native_kernels.py
    chooses it) in eager mode and with the decoder compiled as the page compiles it."""
    vae = flux2_vae()
    z = torch.randn(1, 8, 16, 16, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        exact = vae.decode(z).sample
        vae, z = vae.to(dtype), z.to(dtype)
        want = vae.decode(z).sample
        dev = copy.deepcopy(vae).to("neuron")
        if compiled:
            dev.decoder.compile(backend="neuron", fullgraph=True, dynamic=False)
        torch_neuronx.clear_op_tracking()
        got = dev.decode(z.to("neuron")).sample
    assert got.device.type == "neuron" and got.dtype == dtype and got.shape == want.shape == (1, 3, 128, 128)
    assert torch_neuronx.get_fallback_ops() == {}
    if dtype == torch.float32:
        assert rel_err(got.cpu(), want) < REL_TOL[dtype]
    else:  # 30-odd bf16 layers: the CPU's own bf16 decode is 2.4% from float32's; neuron's as close as it
        assert rel_err(got.cpu().float(), exact) < 1.1 * rel_err(want.float(), exact)


def test_from_pretrained_of_a_local_folder(tmp_path):
    """The real loading path: save_pretrained to a folder this test writes, from_pretrained, .to("neuron")."""
    from diffusers import Flux2Transformer2DModel

    model = flux2_transformer()
    model.save_pretrained(tmp_path / "transformer")
    loaded = Flux2Transformer2DModel.from_pretrained(tmp_path / "transformer").to("neuron")
    inputs = flux2_inputs(torch.float32)
    with torch.no_grad():
        want = model(**inputs)[0]
        got = loaded(**_to(inputs, "neuron"))[0]
    assert rel_err(got.cpu(), want) < REL_TOL[torch.float32]
