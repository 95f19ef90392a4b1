"""FLUX.2-klein-4B's whole pipeline at its real size, as the page runs it: torch on the CPU against the neuron
device, each side in a process of its own.

    PYTHONPATH=. python benchmarks/flux_pipeline_real.py [--resolution 1024] [--steps 4] [--rounds 1]
                                                        [--text-layers 36] [--blocks 5 20] [--sides ...]
                                                        [--timeout SECONDS]

The pipeline is diffusers' `Flux2KleinPipeline` (is_distilled=True, as FLUX.2-klein-4B: no classifier-free
guidance), assembled from its parts at their real configurations, in bfloat16 (the page's dtype):
  transformer   `Flux2Transformer2DModel(**KLEIN_4B)`: benchmarks/flux_real.py's configuration, from diffusers'
                scripts/convert_flux2_to_diffusers.py ("klein-4b": 5 double + 20 single blocks, hidden 3072 =
                24 heads x 128, MLP x3, joint attention dim 7680 = 3 x the text encoder's 2560, 128 input
                channels); `--blocks D S` cuts its depth
  text_encoder  transformers' `Qwen3ForCausalLM` with Qwen/Qwen3-4B's config.json (`QWEN3_4B` below: hidden
                2560, 36 layers, 32 heads, 8 KV heads, head_dim 128, MLP 9728, vocab 151936, rope theta 1e6,
                RMSNorm eps 1e-6, 40960 positions, tied embeddings); `--text-layers N` cuts its depth. The
                pipeline runs it on `max_sequence_length` = 512 tokens (the prompt padded) and stacks the hidden
                states after layers 9, 18 and 27 (`text_encoder_out_layers`, pipeline_flux2_klein.py); with fewer
                than 28 layers they are scaled down to the depth (printed). Its vocabulary stays 151936 (the
                embedding and the tied LM head, whose 512 x 151936 logits the pipeline computes and discards).
  vae           `AutoencoderKLFlux2()`: its default configuration is FLUX.2's VAE (diffusers'
                autoencoder_kl_flux2.py: channels 128/256/512/512, 2 layers per block, 32 latent channels,
                2x2 patches: the transformer's 128 input channels); the pipeline runs its decoder only
  tokenizer     examples/flux2_klein.py's `build_tokenizer()` (Qwen2TokenizerFast with Qwen3's chat template,
                trained offline on a few sentences: a tiny vocabulary whose ids are valid ids of the real one)
  scheduler     FlowMatchEulerDiscreteScheduler with FLUX.2's settings, as examples/flux2_klein.py builds it
One call per image, as the page's: `pipe(prompt=PAGE_PROMPT, height=R, width=R, num_inference_steps=S,
generator=torch.Generator().manual_seed(0), output_type="np")` (examples/page_args.py's prompt).

Weights: each model is built on the meta device in bfloat16 and materialized where the side runs (`to_empty`,
then flux_real.py's `_fill`: every parameter from its own seeded CPU generator, one at a time), so every process
holds the same weights and a neuron side never holds a CPU copy of a model. The convolutions (the VAE's) are
drawn again from the same generators with their true fan-in, in x kh x kw (`_fill` takes a weight's shape[1],
a Linear's fan-in); the VAE's latent batch-norm statistics are seeded like examples/flux2_klein.py's; the
text encoder's rotary frequencies (non-persistent buffers `to_empty` leaves empty) are computed again.

Sides, one process each (`--sides`, default all six):
  torch               torch eager on the CPU, torch's default threading, the backend autoload off
  neuron-eager        `pipe.to("neuron")` (the page's eager mode)
  neuron-compiled     the page's compiled mode: `pipe.to("neuron")` then `pipe.transformer.compile(backend=
                      "neuron", fullgraph=True, dynamic=False)`; the text encoder and the VAE run eagerly
  neuron-blocks       `pipe.to("neuron")` then `pipe.transformer.compile_repeated_blocks(backend="neuron",
                      fullgraph=True, dynamic=False)` (the page's advice for repeated blocks); the rest eager
  neuron-compiled-vae neuron-compiled, and the VAE's decoder compiled the same way (the compiled mode issue 42
                      names: transformer and VAE decoder compiled)
  neuron-offload      the models materialized on the CPU, then `pipe.enable_model_cpu_offload(device="neuron")`
                      (diffusers' model offload through accelerate's hooks: each model moves to the device for
                      its call and back to the CPU after); eager
Each neuron side starts on an empty executable cache.

Columns, per side:
  first s        the first image (the models already materialized): every compile of the side is in it
  steady s       the median of `--rounds` images after the first;  vs torch: that / torch's steady s
  text s, denoise s, VAE s
                 the steady image split (the round nearest the median): `pipe.encode_prompt` (tokenizer, the
                 text encoder, the stacking), the transformer's calls summed (one a step), `pipe.vae.decode`;
                 each timed to its end (`torch.neuron.synchronize()` there on neuron sides, so a part's time is
                 its own). The rest of steady s is the scheduler, latents' preparation and the postprocessing
  peak RSS GB    the process's peak resident memory over its whole life (ru_maxrss: models, compiles, images)
  device peak GB torch.neuron.max_memory_allocated() over the process's life (neuron sides)
  max diff       max |image - torch's image| (the images are in [0, 1], so this is also relative to their range);
  rel diff       ||image - torch's image|| / ||torch's image|| (Frobenius), both as output_type="np" returns them
  GFLOP/s        the image's FLOPs / steady s: the FLOPs torch computes (torch's FlopCounterMode on meta tensors:
                 matmuls, attention and convolutions of the text encoder's forward with its LM head, the
                 transformer's `--steps` forwards, the VAE decode). A neuron side computes fewer where results
                 die unread (the queue never computes them: the logits, and the text encoder's layers after the
                 last one the pipeline stacks where no run boundary falls among them), so its figure is the
                 rate torch would need to match it
  GEMM share     GFLOP/s / the CPU's bf16 GEMM rate (one 1152x3072 @ 3072x9216 bf16 linear in torch, best of 5,
                 measured in the torch side's process before its models are built)
  Trn2 est s     the steady image's executables as estimated on one Trn2 core (`torch_neuronx.metrics.
                 estimate_summary()["seconds"]` taken before and after the steady images, over --rounds): the
                 roofline lower bound of docs/targets.md; it is kept for every launch without
                 TORCH_NEURONX_ESTIMATE=1, which would also time (and so wait for) each launch, so it is not set

The load average at the start and the end, the CPU's name and whether it has AVX-512 BF16 are printed with the
table, and the configuration (resolution, steps, depths, parameters of each part).

How long: the real size is ~185 TFLOP an image (the transformer ~170 of it: 4 steps of ~43 TFLOP on 4096 image +
512 text tokens; the text encoder ~4; the VAE decoder at 1024x1024 ~10), and each side makes 1 + --rounds images
on the CPU: by those FLOPs (not measured), tens of minutes an image a side on a small machine and hours for the
whole run, ~17 GB of weights a process. The smoke run `--resolution 256 --steps 1 --text-layers 2 --blocks 1 1`
took 2.7 minutes for the four sides on 2 cores.
Run it alone: two processes timing at once on a small machine ruin both figures.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from child_process import run_json_child
from flux_real import KLEIN_4B, _cpu_name, _fill, _max_rss
from flux_real import build as build_transformer

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")

# Qwen/Qwen3-4B's config.json (the text encoder of FLUX.2-klein-4B)
QWEN3_4B = dict(
    vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
    num_key_value_heads=8, head_dim=128, hidden_act="silu", max_position_embeddings=40960, rope_theta=1_000_000.0,
    rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False,
)
OUT_LAYERS = (9, 18, 27)  # Flux2KleinPipeline's text_encoder_out_layers default
SIDES = ("torch", "neuron-eager", "neuron-compiled", "neuron-compiled-vae", "neuron-blocks", "neuron-offload")


def out_layers(text_layers):
    """The hidden states the pipeline stacks: the real (9, 18, 27), scaled to a cut text encoder."""
    if text_layers > max(OUT_LAYERS):
        return OUT_LAYERS
    return tuple(min(text_layers, max(1, round(k * text_layers / QWEN3_4B["num_hidden_layers"]))) for k in OUT_LAYERS)


# ------------------------------------------------------------------------------------------- the models


def _check_buffers(model, handled):
    """Every buffer `to_empty` left uninitialized has been written (a new one in a later version fails here)."""
    left = {name for name, _ in model.named_buffers()} - set(handled)
    if left:
        raise RuntimeError(f"{type(model).__name__}: buffers left uninitialized by to_empty: {sorted(left)}")


def _redraw_convs(model, seed=0):
    """Convolution weights drawn again, from the generator `_fill` used for them, with PyTorch's default bound
    1/sqrt(in x kh x kw) (`_fill` takes shape[1], a Linear's fan-in)."""
    import hashlib
    import math

    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".weight") and p.dim() > 2:
                g = torch.Generator().manual_seed(seed + int(hashlib.sha256(name.encode()).hexdigest()[:8], 16))
                bound = 1.0 / math.sqrt(math.prod(p.shape[1:]))
                p.copy_(torch.empty(p.shape, dtype=torch.float32).uniform_(-bound, bound, generator=g).to(p.dtype))


def build_text_encoder(layers, dtype, device, tokenizer):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(**dict(QWEN3_4B, num_hidden_layers=layers), bos_token_id=None,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    with torch.device("meta"):  # parameters in dtype, the rotary frequencies in float32 (as from_pretrained)
        model = Qwen3ForCausalLM._from_config(cfg, dtype=dtype)
    model = model.to_empty(device=device)
    model.tie_weights()  # to_empty gives each module its own tensor: the LM head is the embedding again
    if model.lm_head.weight is not model.model.embed_tokens.weight:
        model.lm_head.weight = model.model.embed_tokens.weight
    _fill(model)
    rotary = model.model.rotary_emb
    if rotary.rope_type != "default":
        raise RuntimeError(f"rope type {rotary.rope_type}: only the default is recomputed here")
    inv_freq, _ = type(rotary).compute_default_rope_parameters(cfg)
    with torch.no_grad():
        rotary.inv_freq.copy_(inv_freq)
        rotary.original_inv_freq.copy_(inv_freq)
    _check_buffers(model, {"model.rotary_emb.inv_freq", "model.rotary_emb.original_inv_freq"})
    return model.eval()


def build_vae(dtype, device):
    import torch
    from diffusers import AutoencoderKLFlux2

    with torch.device("meta"):
        vae = AutoencoderKLFlux2()  # the default configuration is FLUX.2's VAE
    vae = vae.to(dtype=dtype).to_empty(device=device)
    _fill(vae)
    _redraw_convs(vae)
    # the real VAE ships its latent batch norm's running statistics; these are seeded as examples/flux2_klein.py's
    g = torch.Generator().manual_seed(1)
    n = vae.bn.running_mean.numel()
    with torch.no_grad():
        vae.bn.running_mean.copy_((0.1 * torch.randn(n, generator=g)).to(vae.bn.running_mean.dtype))
        vae.bn.running_var.copy_((1.0 + 0.1 * torch.rand(n, generator=g)).to(vae.bn.running_var.dtype))
        vae.bn.num_batches_tracked.copy_(torch.zeros((), dtype=vae.bn.num_batches_tracked.dtype))
    _check_buffers(vae, {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"})
    return vae.eval()


def build_scheduler():
    from diffusers import FlowMatchEulerDiscreteScheduler

    # examples/flux2_klein.py's (FLUX.2's settings)
    return FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
        base_image_seq_len=256, max_image_seq_len=4096, time_shift_type="exponential",
    )


def _params(model):
    return sum(p.numel() for p in model.parameters())  # parameters() counts a tied one once


def build_pipeline(spec, dtype, device):
    from diffusers import Flux2KleinPipeline
    from flux2_klein import build_tokenizer

    tokenizer = build_tokenizer()
    text_encoder = build_text_encoder(spec["text_layers"], dtype, device, tokenizer)
    transformer = build_transformer(spec["double"], spec["single"], dtype, device)
    vae = build_vae(dtype, device)
    pipe = Flux2KleinPipeline(scheduler=build_scheduler(), vae=vae, text_encoder=text_encoder, tokenizer=tokenizer,
                              transformer=transformer, is_distilled=True)
    pipe.set_progress_bar_config(disable=True)
    params = {"text_encoder": _params(text_encoder), "transformer": _params(transformer), "vae": _params(vae),
              "vae_decoder": _params(vae.decoder) + _params(vae.post_quant_conv)}
    return pipe, params


def image_flops(spec):
    """(text encoder, transformer per step, VAE decode) FLOPs as torch's FlopCounterMode counts them, on meta
    tensors (no weights): what torch computes for one image."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from flux2_klein import build_tokenizer
    from flux_real import flops as transformer_flops

    tokenizer = build_tokenizer()
    counts = []
    with torch.device("meta"):
        from transformers import Qwen3Config, Qwen3ForCausalLM

        cfg = Qwen3Config(**dict(QWEN3_4B, num_hidden_layers=spec["text_layers"]), bos_token_id=None,
                          eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        text = Qwen3ForCausalLM._from_config(cfg, dtype=torch.bfloat16).eval()
        from diffusers import AutoencoderKLFlux2

        vae = AutoencoderKLFlux2().to(torch.bfloat16).eval()

    def text_forward():  # the model's layers, norm and LM head on meta hidden states: transformers' mask
        # preparation reads values, which meta tensors cannot give; the products and attention are the same
        inner = text.model
        h = torch.zeros(1, 512, cfg.hidden_size, dtype=torch.bfloat16, device="meta")
        rope = inner.rotary_emb(h, torch.arange(512, device="meta")[None])
        for layer in inner.layers:
            h = layer(h, attention_mask=None, position_embeddings=rope)
            h = h[0] if isinstance(h, tuple) else h
        return text.lm_head(inner.norm(h))

    latents = torch.zeros(1, vae.config.latent_channels, spec["resolution"] // 8, spec["resolution"] // 8,
                          dtype=torch.bfloat16, device="meta")
    for fn in (text_forward,
               lambda: vae.decode(latents)):
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            fn()
        counts.append(counter.get_total_flops())
    return counts[0], transformer_flops(spec["double"], spec["single"], spec["resolution"], 512), counts[1]


def gemm_rate():
    """The CPU's bf16 GEMM rate in torch (FLOP/s): one 1152x3072 @ 3072x9216 linear, best of 5."""
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(1152, 3072, generator=g).to(torch.bfloat16)
    w = torch.randn(9216, 3072, generator=g).to(torch.bfloat16)
    best = float("inf")
    with torch.no_grad():
        for _ in range(6):
            start = time.perf_counter()
            torch.nn.functional.linear(x, w)
            best = min(best, time.perf_counter() - start)
    return 2 * 1152 * 3072 * 9216 / best


# ---------------------------------------------------------------------------------------------- child


def _time_parts(pipe, parts, sync):
    """Times the three parts of each image into `parts` (seconds, summed): each wrapper waits for its part's
    results at its end. The transformer's class gets a timed __call__ (outside what Dynamo traces, so it
    times compiled and eager calls alike); encode_prompt and vae.decode are wrapped on their instances."""
    import functools

    def timed(fn, key):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            sync()
            parts[key] += time.perf_counter() - start
            return out
        return wrapper

    pipe.encode_prompt = timed(pipe.encode_prompt, "text")
    pipe.vae.decode = timed(pipe.vae.decode, "vae")
    base = type(pipe.transformer)
    pipe.transformer.__class__ = type(base.__name__, (base,), {
        "__call__": timed(base.__call__, "denoise"), "__module__": base.__module__})


def child(spec):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    import torch

    sys.path.insert(0, EXAMPLES)
    from page_args import PAGE_PROMPT
    from pipeline import _quiet

    _quiet()
    side = spec["side"]
    device = "cpu" if side == "torch" else "neuron"
    torch.set_grad_enabled(False)
    if device == "neuron":
        import torch_neuronx  # noqa: F401  (the autoload did this already; explicit for readers)
        from torch_neuronx import metrics

        def sync():
            torch.neuron.synchronize()
    else:
        def sync():
            pass

    res = {"side": side, "threads": torch.get_num_threads()}
    if side == "torch":
        res["gemm_rate"] = gemm_rate()
    offload = side == "neuron-offload"
    start = time.perf_counter()
    pipe, res["params"] = build_pipeline(spec, torch.bfloat16, "cpu" if offload else device)
    sync()
    res["build_s"] = time.perf_counter() - start
    if offload:
        pipe.enable_model_cpu_offload(device="neuron")  # the models stay on the CPU between their calls
    elif device == "neuron":
        pipe.to("neuron")  # the page's line; the models are there already
    compile_args = dict(backend="neuron", fullgraph=True, dynamic=False)
    if side in ("neuron-compiled", "neuron-compiled-vae"):
        pipe.transformer.compile(**compile_args)  # the page's compiled mode
        if side == "neuron-compiled-vae":
            pipe.vae.decoder.compile(**compile_args)
    elif side == "neuron-blocks":
        pipe.transformer.compile_repeated_blocks(**compile_args)
    parts = {"text": 0.0, "denoise": 0.0, "vae": 0.0}
    _time_parts(pipe, parts, sync)

    def image():
        for k in parts:
            parts[k] = 0.0
        start = time.perf_counter()
        out = pipe(prompt=PAGE_PROMPT, height=spec["resolution"], width=spec["resolution"],
                   num_inference_steps=spec["steps"], generator=torch.Generator().manual_seed(0), output_type="np",
                   text_encoder_out_layers=tuple(spec["out_layers"])).images  # numpy: on the host, waited for
        return out, time.perf_counter() - start, dict(parts)

    img, res["first_s"], res["first_parts"] = image()
    if device == "neuron":
        est, misses = metrics.estimate_summary()["seconds"], metrics.cache_stats()["misses"]
    rounds = []
    for _ in range(spec["rounds"]):
        img, seconds, p = image()
        rounds.append((seconds, p))
    times = [s for s, _ in rounds]
    res["steady_s"] = statistics.median(times)
    res["all_s"] = times
    res["parts"] = min(rounds, key=lambda r: abs(r[0] - res["steady_s"]))[1]
    if device == "neuron":
        res["est_s"] = (metrics.estimate_summary()["seconds"] - est) / len(rounds)
        res["steady_compiles"] = metrics.cache_stats()["misses"] - misses
        res["fallbacks"] = dict(torch_neuronx.get_fallback_ops())
        res["device_peak"] = torch.neuron.max_memory_allocated()
    np.save(spec["image"], np.asarray(img, dtype=np.float32))
    res["image_shape"] = list(img.shape)
    res["peak_rss"] = _max_rss()
    return res


# --------------------------------------------------------------------------------------------- parent


def _avx512_bf16():
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and "avx512_bf16" in line.split() for line in f)
    except OSError:
        return False


def _diff(path, ref_path):
    import numpy as np

    out, ref = np.load(path).astype(np.float64), np.load(ref_path).astype(np.float64)
    if out.shape != ref.shape:
        return float("nan"), float("nan")
    return float(np.abs(out - ref).max()), float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--resolution", type=int, default=1024, help="a square image's side in pixels (multiple of 16)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=1, help="images after the first (steady s is their median)")
    ap.add_argument("--text-layers", type=int, default=QWEN3_4B["num_hidden_layers"],
                    help="the text encoder's depth (default the real 36)")
    ap.add_argument("--blocks", type=int, nargs=2, default=(KLEIN_4B["num_layers"], KLEIN_4B["num_single_layers"]),
                    metavar=("DOUBLE", "SINGLE"), help="the transformer's depth (default the real 5 20)")
    ap.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    ap.add_argument("--timeout", type=float, default=6 * 3600, help="seconds allowed to one side's process")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.resolution % 16:
        raise SystemExit("--resolution must be a multiple of 16")
    if args.rounds < 1 or args.steps < 1 or args.text_layers < 1:
        raise SystemExit("--rounds, --steps and --text-layers must be at least 1")
    sides = [s for s in SIDES if s in args.sides]  # torch first: its image is the reference
    started = time.perf_counter()
    load_start = os.getloadavg()
    sys.path.insert(0, EXAMPLES)
    flops = image_flops(dict(text_layers=args.text_layers, double=args.blocks[0], single=args.blocks[1],
                             resolution=args.resolution))
    work = tempfile.mkdtemp(prefix="flux_pipeline_real-")
    results, failed = {}, {}
    try:
        for side in sides:
            spec = dict(side=side, resolution=args.resolution, steps=args.steps, rounds=args.rounds,
                        text_layers=args.text_layers, out_layers=list(out_layers(args.text_layers)),
                        double=args.blocks[0], single=args.blocks[1], image=os.path.join(work, f"{side}.npy"))
            print(f"... {side}", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            try:
                r = run_json_child(__file__, spec, label=side, autoload=side != "torch", timeout=args.timeout,
                                   settings={"HF_HUB_OFFLINE": "1"})
            except (SystemExit, subprocess.TimeoutExpired) as e:  # the others still run
                failed[side] = str(e)
                print(f"    failed: {e}", file=sys.stderr, flush=True)
                continue
            r["image"], r["wall_s"] = spec["image"], time.perf_counter() - t0
            results[side] = r
            print(f"    first {r['first_s']:.1f} s, steady {r['steady_s']:.1f} s (text {r['parts']['text']:.1f}, "
                  f"denoise {r['parts']['denoise']:.1f}, VAE {r['parts']['vae']:.1f}); build {r['build_s']:.1f} s; "
                  f"{r['wall_s']:.0f} s in all", file=sys.stderr, flush=True)
        report(args, sides, results, failed, flops, load_start, time.perf_counter() - started)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


def report(args, sides, results, failed, flops, load_start, elapsed):
    import platform

    ref = results.get("torch")
    double, single = args.blocks
    text_flops, step_flops, vae_flops = flops
    total = text_flops + args.steps * step_flops + vae_flops
    rate = ref.get("gemm_rate") if ref else None
    print(f"FLUX.2-klein-4B pipeline (Flux2KleinPipeline, bfloat16, random seeded weights), {args.resolution}x"
          f"{args.resolution}, {args.steps} steps, {(args.resolution // 16) ** 2} image + 512 text tokens; "
          f"steady = median of {args.rounds} image(s) after the first")
    if results:
        p = next(iter(results.values()))["params"]
        print(f"text encoder Qwen3-4B: {args.text_layers} of 36 layers (hidden states {out_layers(args.text_layers)}), "
              f"{p['text_encoder'] / 1e9:.2f} B parameters; transformer: {double} double + {single} single blocks "
              f"(real 5 + 20), {p['transformer'] / 1e9:.2f} B; VAE {p['vae'] / 1e9:.3f} B "
              f"(decoder {p['vae_decoder'] / 1e9:.3f} B)")
    print(f"FLOPs an image (FlopCounterMode): text encoder {text_flops / 1e12:.2f} T, transformer {step_flops / 1e12:.2f} T "
          f"a step x {args.steps}, VAE decode {vae_flops / 1e12:.2f} T: {total / 1e12:.1f} TFLOP; the CPU's bf16 GEMM "
          f"rate (torch) " + (f"{rate / 1e9:.0f} GFLOP/s" if rate else "not measured (no torch side)"))
    print(f"{platform.machine()}, {os.cpu_count()} CPUs ({_cpu_name()}; AVX-512 BF16 "
          f"{'yes' if _avx512_bf16() else 'no'}); load average {load_start[0]:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end")
    print()
    head = ("| side | first s | steady s | vs torch | text s | denoise s | VAE s | GFLOP/s | GEMM share | peak RSS GB | "
            "device peak GB | max diff | rel diff | Trn2 est s |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for side in sides:
        r = results.get(side)
        if r is None:
            print(f"| {side} | failed |" + " |" * (head.count("|") - 3))
            continue
        vs = f"{r['steady_s'] / ref['steady_s']:.2f}x" if ref else ""
        dev = f"{r['device_peak'] / 1e9:.2f}" if "device_peak" in r else ""
        est = f"{r['est_s']:.3f}" if "est_s" in r else ""
        diffs = " | "
        if ref and side != "torch":
            err, rel = _diff(r["image"], ref["image"])
            diffs = f"{err:.3g} | {rel:.2e}"
        q = r["parts"]
        achieved = total / r["steady_s"]
        share = f"{achieved / rate:.0%}" if rate else ""
        print(f"| {side} | {r['first_s']:.1f} | {r['steady_s']:.2f} | {vs} | {q['text']:.2f} | {q['denoise']:.2f} | "
              f"{q['vae']:.2f} | {achieved / 1e9:.0f} | {share} | {r['peak_rss'] / 1e9:.2f} | {dev} | {diffs} | {est} |")
    notes = []
    for side, r in results.items():
        if r.get("fallbacks"):
            notes.append(f"{side}: CPU fallbacks {r['fallbacks']}")
        if r.get("steady_compiles"):
            notes.append(f"{side}: {r['steady_compiles']} executable cache misses (compiles) in the steady images")
    for side, why in failed.items():
        notes.append(f"{side} failed: {why}")
    if notes:
        print("\n" + "\n".join(notes))
    threads = ", ".join(f"{s} {r['threads']}" for s, r in results.items())
    print(f"\n(torch threads: {threads}; {elapsed:.0f} s in all)")


if __name__ == "__main__":
    sys.exit(main())
