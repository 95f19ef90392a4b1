"""The FLUX.2 transformers the benchmarks measure (random weights) and their inputs.

`build(double, single)` is the ~15 M-parameter model of `benchmarks/compile.py --model small`;
`build_tiny()` the tiny one the tests use (tests/test_models.py: 2 double + 4 single blocks, head
size 32, 16 input channels); `inputs(n, t, channels, text_dim)` n image and t text tokens for either.
"""
from __future__ import annotations

import torch

SMALL = dict(in_channels=32, attention_head_dim=64, joint_attention_dim=128, axes_dims_rope=(16, 16, 16, 16))
TINY = dict(in_channels=16, attention_head_dim=32, joint_attention_dim=64, axes_dims_rope=(8, 8, 8, 8))


def build(double, single, config=SMALL):
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(0)
    return Flux2Transformer2DModel(
        patch_size=1, num_layers=double, num_single_layers=single, num_attention_heads=4,
        timestep_guidance_channels=64, **config,
    ).eval()


def build_tiny():
    return build(2, 4, TINY)


def inputs_tiny(n=256, t=32):
    """The tiny model's inputs: 256 image and 32 text tokens by default (issue 14's figures)."""
    return inputs(n, t, TINY["in_channels"], TINY["joint_attention_dim"])


def inputs(n, t, channels=SMALL["in_channels"], text_dim=SMALL["joint_attention_dim"]):
    g = torch.Generator().manual_seed(1)
    side = int(n ** 0.5)
    img_ids = torch.zeros(n, 4)
    img_ids[:, 1], img_ids[:, 2] = torch.arange(n) // side, torch.arange(n) % side
    txt_ids = torch.zeros(t, 4)
    txt_ids[:, 3] = torch.arange(t)
    return dict(
        hidden_states=torch.randn(1, n, channels, generator=g),
        encoder_hidden_states=torch.randn(1, t, text_dim, generator=g),
        timestep=torch.tensor([0.5]), guidance=torch.tensor([3.5]), img_ids=img_ids, txt_ids=txt_ids,
        return_dict=False,
    )
