"""Tiny StableDiffusionXLPipeline and PixArtAlphaPipeline built offline, from code.

Every component has the real architecture and random (seeded) weights, at a small size (the sizes of
diffusers' own pipeline tests, a little larger where those are degenerate):

SDXL (diffusers.StableDiffusionXLPipeline)
- unet: UNet2DConditionModel with SDXL's ``text_time`` addition embeddings (block_out_channels (32, 64),
  a cross-attention level with 2 transformer layers, linear projections, cross_attention_dim 64 = the
  two text encoders' widths)
- vae: AutoencoderKL, 4 levels (8x spatial compression like the real one), 4 latent channels
- text_encoder: CLIPTextModel; text_encoder_2: CLIPTextModelWithProjection (width 32, 5 layers)
- tokenizer, tokenizer_2: CLIPTokenizer with a byte-level BPE (CLIP's ``</w>`` word ends) trained in memory
- scheduler: EulerDiscreteScheduler (SDXL's settings)

PixArt-alpha (diffusers.PixArtAlphaPipeline)
- transformer: PixArtTransformer2DModel (2 blocks of 3 heads of 8, adaLN-single, patch 2, learned sigma)
- vae: AutoencoderKL as above
- text_encoder: T5EncoderModel (T5 v1.1's gated GELU, width 32, 2 layers)
- tokenizer: T5Tokenizer (transformers' tokenizers-backed one) over a Unigram vocabulary trained in memory
- scheduler: DPMSolverMultistepScheduler (PixArt-alpha's)

    from tiny_pipelines import build_sdxl, save_sdxl, load_sdxl
    pipe = load_sdxl(save_sdxl("/tmp/sdxl"))        # or build_sdxl()
    pipe.to("neuron")
    image = pipe(prompt="a cat", height=64, width=64, num_inference_steps=2).images[0]

At 64x64 the latents are 8x8. Nothing is downloaded: no Hub access is needed (or attempted) to build,
save or load them.
"""
from __future__ import annotations

import functools
import os

import torch

from flux2_klein import CORPUS as FLUX2_CORPUS, finish, load_pretrained

# The few sentences the tokenizers' vocabularies are learned from: the FLUX.2 tokenizer's prompts (not
# its chat markers) and one more.
CORPUS = [*FLUX2_CORPUS[:6], "a small cactus wearing a straw hat and neon sunglasses in the sahara desert"]

CLIP_MERGES = 200
CLIP_MAX_LENGTH = 77
T5_VOCAB = 200


def build_clip_tokenizer():
    """A CLIPTokenizer whose byte-level BPE (CLIP's normalizer, pre-tokenizer and ``</w>`` word ends) is
    trained in memory. Every byte, alone and as a word end, is in the vocabulary (no unknown tokens)."""
    import json

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import CLIPTokenizer

    bpe = Tokenizer(models.BPE(end_of_word_suffix="</w>"))
    bpe.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Whitespace(), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    trainer = trainers.BpeTrainer(
        vocab_size=2 * len(alphabet) + CLIP_MERGES, initial_alphabet=alphabet, end_of_word_suffix="</w>",
        show_progress=False, special_tokens=[],
    )
    bpe.train_from_iterator(CORPUS, trainer=trainer)
    model = json.loads(bpe.to_str())["model"]
    learned = sorted(model["vocab"], key=model["vocab"].get)
    tokens = ["<|startoftext|>", "<|endoftext|>"] + alphabet + [c + "</w>" for c in alphabet]
    seen = set(tokens)
    tokens += [t for t in learned if t not in seen]
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=CLIP_MAX_LENGTH)


def build_t5_tokenizer():
    """A T5Tokenizer over a Unigram vocabulary trained in memory (T5's layout: <pad>=0, </s>=1, <unk>=2)."""
    from transformers import T5Tokenizer

    return T5Tokenizer(vocab=list(_t5_vocab()), extra_ids=0, model_max_length=512)


@functools.cache
def _t5_vocab() -> tuple:
    """The Unigram vocabulary, trained once a process: the trainer breaks ties between equal scores
    differently from one training to the next, so each build of a process gives the same tokenizer."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    unigram = Tokenizer(models.Unigram())
    unigram.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")]
    )
    trainer = trainers.UnigramTrainer(
        vocab_size=T5_VOCAB, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>", show_progress=False,
        initial_alphabet=list("abcdefghijklmnopqrstuvwxyz0123456789,.'!?-"),
    )
    unigram.train_from_iterator(CORPUS, trainer=trainer)
    vocab = tuple(tuple(v) for v in json.loads(unigram.to_str())["model"]["vocab"])
    assert [v[0] for v in vocab[:3]] == ["<pad>", "</s>", "<unk>"], vocab[:3]
    return vocab


def build_vae(seed: int):
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    return AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(16, 32, 32, 32),
        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
        layers_per_block=1, norm_num_groups=8, sample_size=64,
    ).eval()


def build_sdxl(dtype: torch.dtype = torch.float32, seed: int = 0):
    """The tiny StableDiffusionXLPipeline on the CPU, weights drawn from `seed`."""
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    tokenizer, tokenizer_2 = build_clip_tokenizer(), build_clip_tokenizer()
    width, projection = 32, 32

    def text_config():
        return CLIPTextConfig(
            vocab_size=len(tokenizer), hidden_size=width, intermediate_size=37, num_hidden_layers=5,
            num_attention_heads=4, max_position_embeddings=CLIP_MAX_LENGTH, hidden_act="gelu",
            layer_norm_eps=1e-5, projection_dim=projection, bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        )

    torch.manual_seed(seed)
    text_encoder = CLIPTextModel(text_config()).eval()
    torch.manual_seed(seed + 1)
    text_encoder_2 = CLIPTextModelWithProjection(text_config()).eval()

    vae = build_vae(seed + 2)

    torch.manual_seed(seed + 3)
    time_embed = 8
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, block_out_channels=(32, 64), layers_per_block=2,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(2, 4), use_linear_projection=True, transformer_layers_per_block=(1, 2),
        cross_attention_dim=2 * width, norm_num_groups=8,
        addition_embed_type="text_time", addition_time_embed_dim=time_embed,
        projection_class_embeddings_input_dim=6 * time_embed + projection,  # 6 time ids + the pooled text
    ).eval()

    scheduler = EulerDiscreteScheduler(
        num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
        steps_offset=1, timestep_spacing="leading", prediction_type="epsilon", interpolation_type="linear",
    )
    pipe = StableDiffusionXLPipeline(
        vae=vae, text_encoder=text_encoder, text_encoder_2=text_encoder_2, tokenizer=tokenizer,
        tokenizer_2=tokenizer_2, unet=unet, scheduler=scheduler,
    )
    return finish(pipe, dtype)


def build_pixart(dtype: torch.dtype = torch.float32, seed: int = 0):
    """The tiny PixArtAlphaPipeline on the CPU, weights drawn from `seed`."""
    from diffusers import DPMSolverMultistepScheduler, PixArtAlphaPipeline, PixArtTransformer2DModel
    from transformers import T5Config, T5EncoderModel

    tokenizer = build_t5_tokenizer()
    width = 32

    torch.manual_seed(seed)
    text_encoder = T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer), d_model=width, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
            relative_attention_num_buckets=8, relative_attention_max_distance=32, feed_forward_proj="gated-gelu",
            dropout_rate=0.0, layer_norm_epsilon=1e-6, is_encoder_decoder=False, use_cache=False,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=0,
        )
    ).eval()

    vae = build_vae(seed + 1)

    torch.manual_seed(seed + 2)
    transformer = PixArtTransformer2DModel(
        sample_size=8, num_layers=2, patch_size=2, attention_head_dim=8, num_attention_heads=3,
        caption_channels=width, in_channels=4, out_channels=8, cross_attention_dim=24, attention_bias=True,
        activation_fn="gelu-approximate", num_embeds_ada_norm=1000, norm_type="ada_norm_single",
        norm_elementwise_affine=False, norm_eps=1e-6,
    ).eval()

    scheduler = DPMSolverMultistepScheduler(
        num_train_timesteps=1000, beta_start=0.0001, beta_end=0.02, beta_schedule="linear",
        solver_order=2, prediction_type="epsilon", algorithm_type="dpmsolver++", solver_type="midpoint",
        lower_order_final=True, timestep_spacing="linspace",
    )
    pipe = PixArtAlphaPipeline(
        tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, transformer=transformer, scheduler=scheduler,
    )
    return finish(pipe, dtype)


def save_sdxl(path: str | os.PathLike, dtype: torch.dtype = torch.float32, seed: int = 0) -> str:
    """Builds the SDXL pipeline and writes it with save_pretrained (a folder from_pretrained loads)."""
    build_sdxl(dtype, seed).save_pretrained(path)
    return str(path)


def save_pixart(path: str | os.PathLike, dtype: torch.dtype = torch.float32, seed: int = 0) -> str:
    """Builds the PixArt-alpha pipeline and writes it with save_pretrained."""
    build_pixart(dtype, seed).save_pretrained(path)
    return str(path)


def load_sdxl(path: str | os.PathLike, dtype: torch.dtype = torch.float32):
    """StableDiffusionXLPipeline.from_pretrained of a local folder written by save_sdxl."""
    from diffusers import StableDiffusionXLPipeline

    return load_pretrained(StableDiffusionXLPipeline, path, dtype)


def load_pixart(path: str | os.PathLike, dtype: torch.dtype = torch.float32):
    """PixArtAlphaPipeline.from_pretrained of a local folder written by save_pixart."""
    from diffusers import PixArtAlphaPipeline

    return load_pretrained(PixArtAlphaPipeline, path, dtype)
