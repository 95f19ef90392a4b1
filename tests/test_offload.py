"""CPU offload onto neuron: accelerate's hooks (diffusers' enable_model_cpu_offload and
enable_sequential_cpu_offload of the tiny FLUX.2-klein pipeline, 64x64, 2 steps) and diffusers' group
offloading, each against the CPU; and `cpu_param.data = neuron_tensor`, which group offloading and
Module.to rely on.

Metric: the pipeline's image vs the CPU pipeline's (same seed): max |diff| <= 1e-4 (as in
test_pipeline.py); a module's output vs the CPU module's: allclose at 1e-5."""
import os
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from flux2_klein import build_pipeline  # noqa: E402

pytest.importorskip("diffusers")

CALL = dict(prompt="a golden retriever surfing a wave, photorealistic", height=64, width=64, num_inference_steps=2)


def run(pipe):
    return pipe(**CALL, generator=torch.Generator().manual_seed(0), output_type="np").images


@pytest.fixture(scope="module")
def reference():
    import diffusers

    diffusers.utils.logging.set_verbosity_error()
    return run(build_pipeline())


@pytest.mark.parametrize("offload", ["model", "sequential"])
def test_pipeline_offload_matches_cpu(reference, offload):
    pipe = build_pipeline()
    getattr(pipe, f"enable_{offload}_cpu_offload")(device="neuron")
    seen = []  # where a transformer Linear ran (the hooks moved its weight there, and away after)
    inner = next(m for m in pipe.transformer.modules() if isinstance(m, torch.nn.Linear))
    inner.register_forward_hook(lambda m, args, out: seen.append(out.device.type))
    for _ in range(2):  # the second call runs with the hooks' state after a whole call
        got = run(pipe)
        assert got.shape == reference.shape
        assert np.abs(got.astype(np.float64) - reference).max() <= 1e-4
    assert seen and set(seen) == {"neuron"}, seen
    # offloaded again after the call: the weights are back on the CPU (sequential: on meta, with
    # their CPU copy in the hook's weights map)
    if offload == "model":
        assert all(p.device.type == "cpu" for p in pipe.transformer.parameters())


def test_param_data_swaps_between_cpu_and_neuron():
    p = torch.nn.Parameter(torch.randn(4, 3))
    want = p.detach().clone()
    p.data = p.data.to("neuron")
    assert p.device.type == "neuron" and isinstance(p, torch.nn.Parameter) and p.requires_grad
    torch.testing.assert_close((p * 2).detach().cpu(), want * 2)
    p.data = p.data.cpu()
    assert p.device.type == "cpu"
    torch.testing.assert_close(p.detach(), want)
    # Module.to keeps the Parameter objects (what an optimizer made before the move holds), as on CUDA
    m = torch.nn.Linear(3, 2)
    weight, x = m.weight, torch.randn(5, 3)
    want = m(x)
    m.to("neuron")
    assert m.weight is weight and weight.device.type == "neuron"
    torch.testing.assert_close(m(x.to("neuron")).cpu(), want)
    # a meta tensor stays incompatible, as on CUDA
    assert not torch._has_compatible_shallow_copy_type(torch.empty(2, device="meta"), torch.empty(2, device="neuron"))


@pytest.mark.parametrize("offload_type", ["block_level", "leaf_level"])
def test_group_offload_matches_cpu(offload_type):
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(0)
    model = Flux2Transformer2DModel(
        patch_size=1, in_channels=8, num_layers=1, num_single_layers=2, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=16, timestep_guidance_channels=32, axes_dims_rope=(4, 4, 4, 4),
    ).eval()
    g = torch.Generator().manual_seed(1)
    img_ids = torch.zeros(4, 4)
    img_ids[:, 1], img_ids[:, 2] = torch.arange(4) // 2, torch.arange(4) % 2
    inputs = dict(
        hidden_states=torch.randn(1, 4, 8, generator=g), encoder_hidden_states=torch.randn(1, 3, 16, generator=g),
        timestep=torch.tensor([0.5]), guidance=torch.tensor([3.5]), img_ids=img_ids, txt_ids=torch.zeros(3, 4),
        return_dict=False,
    )
    with torch.no_grad():
        want = model(**inputs)[0]
        model.enable_group_offload("neuron", offload_type=offload_type, num_blocks_per_group=1)
        on = {k: v.to("neuron") if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        for _ in range(2):
            got = model(**on)[0]
            assert got.device.type == "neuron"
            torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    assert all(p.device.type == "cpu" for p in model.parameters())  # offloaded again after the call
