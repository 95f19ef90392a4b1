"""A tiny FLUX.2-klein pipeline (diffusers.Flux2KleinPipeline) built offline, from code.

Every component has the real architecture and random (seeded) weights, at a small size:

- transformer: Flux2Transformer2DModel (2 double-stream + 3 single-stream blocks, 2 heads of 32)
- vae: AutoencoderKLFlux2 (4 levels, so 8x spatial compression like the real one; 8 latent channels)
- text_encoder: Qwen3ForCausalLM (28 layers of width 32, so the pipeline's default
  ``text_encoder_out_layers=(9, 18, 27)`` works unchanged, as for FLUX.2-klein-4B)
- tokenizer: Qwen2TokenizerFast with a byte-level BPE trained in memory on a few sentences, Qwen's
  special tokens and a Qwen3-style chat template (``enable_thinking=False`` supported)
- scheduler: FlowMatchEulerDiscreteScheduler (FLUX.2's settings)

    from flux2_klein import build_pipeline, save_pipeline
    pipe = build_pipeline()                # or Flux2KleinPipeline.from_pretrained(save_pipeline(path))
    pipe.to("neuron")
    image = pipe(prompt="a golden retriever surfing a wave", height=128, width=128,
                 num_inference_steps=4).images[0]

Nothing is downloaded: no Hub access is needed (or attempted) to build, save or load it.
"""
from __future__ import annotations

import os

import torch

# Qwen3's chat template, reduced to what a text-to-image prompt needs (no tools, no reasoning
# history): the pipeline calls apply_chat_template(messages, add_generation_prompt=True,
# enable_thinking=False), which must end with the empty think block, as Qwen3's template does.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

# The few sentences the tokenizer's BPE merges are learned from.
CORPUS = [
    "a golden retriever surfing a wave, photorealistic",
    "a cat holding a sign that says hello world",
    "an astronaut riding a horse on the moon, digital art",
    "a watercolor painting of a lighthouse at sunset",
    "a bowl of ramen on a wooden table, studio lighting",
    "the quick brown fox jumps over the lazy dog",
    "user assistant system think",
]

TOKENIZER_MERGES = 200


def build_tokenizer():
    """A Qwen2TokenizerFast whose byte-level BPE (Qwen's pre-tokenizer) is trained in memory."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=len(alphabet) + TOKENIZER_MERGES, initial_alphabet=alphabet, show_progress=False,
        special_tokens=[],
    )
    bpe.train_from_iterator(CORPUS, trainer=trainer)
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tok = Qwen2TokenizerFast(vocab=model["vocab"], merges=merges, errors="replace", model_max_length=512)
    # <|endoftext|> is already the unk/eos/pad token; the chat markers are the rest of Qwen's specials.
    tok.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[1:]})
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_pipeline(dtype: torch.dtype = torch.float32, seed: int = 0):
    """The tiny Flux2KleinPipeline on the CPU, weights drawn from `seed` (same seed, same weights)."""
    from diffusers import (
        AutoencoderKLFlux2,
        FlowMatchEulerDiscreteScheduler,
        Flux2KleinPipeline,
        Flux2Transformer2DModel,
    )
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = build_tokenizer()

    torch.manual_seed(seed)
    text_hidden = 32
    text_encoder = Qwen3ForCausalLM(
        Qwen3Config(
            vocab_size=len(tokenizer), hidden_size=text_hidden, intermediate_size=64, num_hidden_layers=28,
            num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=512,
            rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
            bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        )
    ).eval()

    torch.manual_seed(seed + 1)
    latent_channels = 8
    vae = AutoencoderKLFlux2(
        block_out_channels=(16, 32, 32, 32), layers_per_block=1, latent_channels=latent_channels,
        norm_num_groups=8, sample_size=128,
    ).eval()
    # The real VAE ships the running statistics of its latent batch norm; give the random one some.
    n_bn = vae.bn.running_mean.numel()
    vae.bn.running_mean.copy_(0.1 * torch.randn(n_bn))
    vae.bn.running_var.copy_(1.0 + 0.1 * torch.rand(n_bn))

    torch.manual_seed(seed + 2)
    transformer = Flux2Transformer2DModel(
        patch_size=1, in_channels=4 * latent_channels, num_layers=2, num_single_layers=3,
        attention_head_dim=32, num_attention_heads=2, joint_attention_dim=3 * text_hidden,
        timestep_guidance_channels=64, mlp_ratio=3.0, axes_dims_rope=(8, 8, 8, 8), rope_theta=2000,
        guidance_embeds=False,
    ).eval()

    scheduler = FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
        base_image_seq_len=256, max_image_seq_len=4096, time_shift_type="exponential",
    )

    pipe = Flux2KleinPipeline(
        scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer,
        is_distilled=True,  # as FLUX.2-klein-4B: step-distilled, no classifier-free guidance
    )
    return finish(pipe, dtype)


def finish(pipe, dtype: torch.dtype):
    """A built pipeline as the builders return it: quiet (no progress bar), in `dtype`."""
    pipe.set_progress_bar_config(disable=True)
    if dtype != torch.float32:
        pipe.to(dtype=dtype)
    return pipe


def save_pipeline(path: str | os.PathLike, dtype: torch.dtype = torch.float32, seed: int = 0) -> str:
    """Builds the pipeline and writes it with save_pretrained (a folder from_pretrained loads)."""
    build_pipeline(dtype, seed).save_pretrained(path)
    return str(path)


def load_pretrained(pipeline_class, path: str | os.PathLike, dtype: torch.dtype = torch.float32):
    """`pipeline_class.from_pretrained` of a local folder (never the Hub), without a progress bar."""
    pipe = pipeline_class.from_pretrained(path, dtype=dtype, local_files_only=True)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def load_pipeline(path: str | os.PathLike, dtype: torch.dtype = torch.float32):
    """Flux2KleinPipeline.from_pretrained of a local folder written by save_pipeline."""
    from diffusers import Flux2KleinPipeline

    return load_pretrained(Flux2KleinPipeline, path, dtype)
