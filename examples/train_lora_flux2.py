"""LoRA fine-tuning of FLUX.2-klein on one neuron core, the way diffusers' DreamBooth LoRA script
(examples/dreambooth/train_dreambooth_lora_flux2_klein.py) trains it, on the tiny pipeline of
flux2_klein.py (real architectures, random weights; nothing is downloaded):

    python examples/train_lora_flux2.py [--device neuron] [--steps 4] [--output lora-out]

What it does, in the script's order: the frozen transformer cast to the mixed-precision dtype
(bfloat16), a peft LoRA adapter added (rank 4 on the attention projections, the script's default
targets), AdamW over the LoRA parameters only, bfloat16 autocast, the rectified-flow loss on
VAE-encoded images (the script's --cache_latents path) and prompt embeddings computed once; then the
adapter saved with `get_peft_model_state_dict` + `Flux2KleinPipeline.save_lora_weights`, loaded back
with `pipe.load_lora_weights(folder)`, and an image made with and without it.

The test (tests/test_lora_training.py) and the accelerate worker
(tests/dist_workers/lora_training_accelerate.py) import the pieces below.
"""
from __future__ import annotations

import argparse
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flux2_klein import build_pipeline  # noqa: E402

# The script's default targets: the double-stream blocks' attention projections, the single-stream
# blocks' fused qkv+mlp projection and their attention output.
TARGET_MODULES = ["to_k", "to_q", "to_v", "to_out.0", "to_qkv_mlp_proj",
                  *[f"single_transformer_blocks.{i}.attn.to_out" for i in range(3)]]
PROMPTS = ["a photo of sks dog", "a photo of sks dog on the beach"]
IMAGE_SIZE = 128  # the VAE's 8x: 16x16 latents, patchified to 8x8 = 64 image tokens
MAX_SEQUENCE_LENGTH = 16  # the script's --max_sequence_length (512 by default), small here


def pipeline():
    """The tiny FLUX.2-klein (float32, on the CPU), quiet."""
    import diffusers
    import transformers

    diffusers.utils.logging.set_verbosity_error()
    transformers.utils.logging.set_verbosity_error()
    return build_pipeline()


def training_data(pipe, items: int, seed: int = 0) -> list[dict]:
    """`items` training samples, all on the CPU in float32: each an image's latent (VAE mode, patchified,
    normalized with the VAE's batch-norm statistics, as the script does), its prompt's embedding and
    text ids, and the sample's noise and timestep draw `u`. The noise and `u` are drawn here, from one
    seeded CPU generator, rather than on the device in the loop (the script's randn_like): then every
    device and every split of the batches across ranks sees the same draws."""
    from diffusers.training_utils import compute_density_for_timestep_sampling

    g = torch.Generator().manual_seed(seed)
    vae = pipe.vae
    images = torch.rand(len(PROMPTS), 3, IMAGE_SIZE, IMAGE_SIZE, generator=g) * 2 - 1
    with torch.no_grad():
        latents = vae.encode(images).latent_dist.mode()
        latents = pipe._patchify_latents(latents)
        bn_mean = vae.bn.running_mean.view(1, -1, 1, 1)
        bn_std = torch.sqrt(vae.bn.running_var.view(1, -1, 1, 1) + vae.config.batch_norm_eps)
        latents = (latents - bn_mean) / bn_std
        embeds, text_ids = pipe.encode_prompt(PROMPTS, device="cpu", max_sequence_length=MAX_SEQUENCE_LENGTH)
    data = []
    for i in range(items):
        k = i % len(PROMPTS)
        data.append(dict(
            latents=latents[k], prompt_embeds=embeds[k], text_ids=text_ids[k],
            noise=torch.randn(latents[k].shape, generator=g),
            u=compute_density_for_timestep_sampling("none", batch_size=1, generator=g)[0],
        ))
    return data


def collate(samples: list[dict]) -> dict:
    return {k: torch.stack([s[k] for s in samples]) for k in samples[0]}


def add_lora(transformer, rank: int = 4, seed: int = 0):
    """The frozen transformer with the script's LoRA adapter (gaussian A, zero B), drawn on the CPU from
    `seed` so that every device starts from the same weights. Only the LoRA parameters train."""
    from peft import LoraConfig

    transformer.requires_grad_(False)
    torch.manual_seed(seed)
    transformer.add_adapter(LoraConfig(r=rank, lora_alpha=rank, lora_dropout=0.0, init_lora_weights="gaussian",
                                       target_modules=TARGET_MODULES))
    return transformer


def lora_model(pipe, weight_dtype: torch.dtype, seed: int = 0):
    """A copy of the pipeline's transformer in `weight_dtype` (the script casts the frozen model to the
    mixed-precision dtype before adding the adapter, so the adapter takes that dtype too) with LoRA."""
    return add_lora(copy.deepcopy(pipe.transformer).to(weight_dtype), seed=seed)


def flow_matching_loss(transformer, batch: dict, scheduler, device, dtype) -> torch.Tensor:
    """The script's training loss for one batch: noise mixed in at the sampled sigma
    (x_t = (1 - sigma) x_0 + sigma noise), the transformer's prediction of the velocity noise - x_0,
    a mean squared error weighted by compute_loss_weighting_for_sd3 ("none": uniform) in float32."""
    from diffusers import Flux2KleinPipeline
    from diffusers.training_utils import compute_loss_weighting_for_sd3

    x0 = batch["latents"].to(device, dtype)
    noise = batch["noise"].to(device, dtype)
    # the sampled training timestep, and its sigma from the scheduler's training schedule (a CPU table:
    # the index is read back, as the script's own lookup does with .item())
    index = (batch["u"].cpu() * scheduler.config.num_train_timesteps).long()
    timesteps = scheduler.timesteps[index].to(device)
    sigmas = scheduler.sigmas[index].to(device, dtype).view(-1, 1, 1, 1)
    noisy = (1.0 - sigmas) * x0 + sigmas * noise

    latent_ids = Flux2KleinPipeline._prepare_latent_ids(x0).to(device)
    packed = Flux2KleinPipeline._pack_latents(noisy)
    pred = transformer(
        hidden_states=packed, timestep=timesteps / 1000, guidance=None,
        encoder_hidden_states=batch["prompt_embeds"].to(device, dtype), txt_ids=batch["text_ids"].to(device),
        img_ids=latent_ids, return_dict=False,
    )[0]
    pred = Flux2KleinPipeline._unpack_latents_with_ids(pred[:, : packed.size(1)], latent_ids)

    weighting = compute_loss_weighting_for_sd3("none", sigmas=sigmas).float()
    err = (pred.float() - (noise - x0).float()) ** 2
    return (weighting * err).reshape(x0.shape[0], -1).mean(dim=1).mean()


def optimizer_for(transformer, lr: float):
    """The script's AdamW (its default betas, weight decay and eps) over the trainable parameters."""
    params = [p for p in transformer.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), weight_decay=1e-4, eps=1e-8)


def train(transformer, data: list[dict], scheduler, device, *, steps: int, batch_size: int, lr: float = 1e-3,
          autocast: bool = True, max_grad_norm: float = 1.0) -> list[float]:
    """The single-core loop: `steps` optimizer steps over consecutive batches of `data`, the forward and
    loss under bfloat16 autocast of `device`'s type (accelerate's mixed_precision="bf16" autocasts the
    forward only; the loss is float32 either way), the gradient norm clipped as the script does.
    Returns each step's loss."""
    device = torch.device(device)
    transformer.to(device).train()
    dtype = next(transformer.parameters()).dtype
    optimizer = optimizer_for(transformer, lr)
    losses = []
    for step in range(steps):
        batch = collate(data[step * batch_size:(step + 1) * batch_size])
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            loss = flow_matching_loss(transformer, batch, scheduler, device, dtype)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(transformer.parameters(), max_grad_norm)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def training_scheduler(pipe):
    """The script's `noise_scheduler_copy`: the pipeline's scheduler as loaded, its training schedule."""
    return copy.deepcopy(pipe.scheduler)


def lora_state(transformer) -> dict[str, torch.Tensor]:
    """The adapter's weights as the script saves them (peft's state dict), on the CPU."""
    from peft.utils import get_peft_model_state_dict

    # a copy: on the CPU the state dict's tensors are the live parameters, which training updates in place
    return {k: v.detach().to("cpu", copy=True) for k, v in get_peft_model_state_dict(transformer).items()}


def save_adapter(transformer, folder: str) -> str:
    """The script's final save: the adapter's state dict and its LoRA config (metadata) written with
    Flux2KleinPipeline.save_lora_weights (pytorch_lora_weights.safetensors)."""
    from diffusers import Flux2KleinPipeline
    from diffusers.training_utils import _collate_lora_metadata

    Flux2KleinPipeline.save_lora_weights(
        save_directory=folder, transformer_lora_layers=lora_state(transformer),
        **_collate_lora_metadata({"transformer": transformer}),
    )
    return folder


def generate(pipe, seed: int = 0, size: int = 64, steps: int = 2, output_type: str = "np"):
    """A small image as numpy (values in [0, 1]; or the denoised latents with output_type="latent"),
    from a seeded CPU generator."""
    images = pipe(prompt=PROMPTS[0], height=size, width=size, num_inference_steps=steps,
                  generator=torch.Generator().manual_seed(seed), output_type=output_type).images
    return images.float().cpu().numpy() if torch.is_tensor(images) else images


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="neuron")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--output", default="lora-flux2-klein")
    args = ap.parse_args()

    pipe = pipeline()
    data = training_data(pipe, args.steps * args.batch_size)
    transformer = lora_model(pipe, torch.bfloat16)
    trainable = sum(p.numel() for p in transformer.parameters() if p.requires_grad)
    print(f"training {trainable} LoRA parameters on {args.device} for {args.steps} steps")
    losses = train(transformer, data, training_scheduler(pipe), args.device, steps=args.steps,
                   batch_size=args.batch_size, lr=args.lr)
    for step, loss in enumerate(losses):
        print(f"step {step}: loss {loss:.6f}")
    save_adapter(transformer, args.output)
    print(f"adapter saved to {args.output}")

    pipe.to(args.device)
    before = generate(pipe)
    pipe.load_lora_weights(args.output)
    after = generate(pipe)
    print(f"image with the adapter vs without: max |diff| {abs(after - before).max():.3e}")


if __name__ == "__main__":
    main()
