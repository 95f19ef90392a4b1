"""The small FLUX.2 transformer the benchmarks measure (random weights) and its inputs."""
from __future__ import annotations

import torch


def build(double, single):
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(0)
    return Flux2Transformer2DModel(
        patch_size=1, in_channels=32, num_layers=double, num_single_layers=single, attention_head_dim=64,
        num_attention_heads=4, joint_attention_dim=128, timestep_guidance_channels=64,
        axes_dims_rope=(16, 16, 16, 16),
    ).eval()


def inputs(n, t):
    g = torch.Generator().manual_seed(1)
    side = int(n ** 0.5)
    img_ids = torch.zeros(n, 4)
    img_ids[:, 1], img_ids[:, 2] = torch.arange(n) // side, torch.arange(n) % side
    txt_ids = torch.zeros(t, 4)
    txt_ids[:, 3] = torch.arange(t)
    return dict(
        hidden_states=torch.randn(1, n, 32, generator=g), encoder_hidden_states=torch.randn(1, t, 128, generator=g),
        timestep=torch.tensor([0.5]), guidance=torch.tensor([3.5]), img_ids=img_ids, txt_ids=txt_ids,
        return_dict=False,
    )
