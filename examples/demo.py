"""Demo: a FLUX.2-klein text-to-image pipeline (diffusers) on the `neuron` device, checked against the CPU.

    bash scripts/demo.sh          (sets up what is missing, then runs this)
    python examples/demo.py [--height 128 --width 128 --steps 4 --dtype float32 --output out.png]

Builds a tiny diffusers.Flux2KleinPipeline offline with real architectures and random weights
(examples/flux2_klein.py: Flux2Transformer2DModel, AutoencoderKLFlux2, a Qwen3 text encoder and an
in-memory Qwen2 tokenizer), saves it with save_pretrained and loads it back with
Flux2KleinPipeline.from_pretrained(local folder), then runs the two examples of diffusers' "AWS
Trainium" page as written, at a small size and with a fixed generator seed:

1. eager:    pipe.to("neuron"); pipe(prompt=..., height=..., width=..., num_inference_steps=4)
2. compiled: pipe.transformer.compile(backend="neuron", fullgraph=True, dynamic=False), a warmup
             call, then the real call

and the same pipeline on the CPU. Prints the image differences neuron vs CPU, the times (a first
call compiles: each op in eager mode, the transformer's graph in compiled mode; later calls reuse
the executables), what was compiled, and the ops that fell back to the CPU (there should be none).
Saves the image to a PNG. Exits 1 if neuron does not match the CPU or anything fell back.
"""
from __future__ import annotations

import os

# torch's OpenMP threads spin while idle and starve XLA's CPU threads on a small machine (and the
# other way round): a 64x64 CPU matmul goes from 10 µs to 5 ms right after a device op. Passive
# waiting must be chosen before torch loads OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is built here: never reach for the Hub
import argparse
import sys
import tempfile
import time

import numpy as np
import torch

import torch_neuronx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flux2_klein import build_pipeline, load_pipeline  # noqa: E402

PROMPT = "a golden retriever surfing a wave, photorealistic"
# Largest relative difference ||neuron - cpu|| / ||cpu|| allowed on the image, per dtype (bfloat16:
# both sides compute in bfloat16, and 4 steps plus the VAE add up its rounding differently).
REL_TOL = {"float32": 1e-5, "bfloat16": 3e-2}


def log(msg: str = "") -> None:
    print(msg, flush=True)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def compare(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    got, want = got.astype(np.float64), want.astype(np.float64)
    return float(np.abs(got - want).max()), float(np.linalg.norm(got - want) / np.linalg.norm(want))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--height", type=int, default=128)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=sorted(REL_TOL), default="float32")
    ap.add_argument("--output", default=os.path.join(tempfile.gettempdir(), "flux2-klein-neuron.png"))
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)

    import diffusers
    import transformers

    # Quiet: no loading progress bars, no "guidance_scale is ignored for distilled models" notes.
    diffusers.utils.logging.set_verbosity_error()
    diffusers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    log(f"neuron devices: {torch.neuron.device_count()} ({torch.neuron.get_device_name(0)})")
    log("building a tiny Flux2KleinPipeline (random weights, seeded) ...")
    built, secs = timed(lambda: build_pipeline(dtype))
    for name in ("transformer", "vae", "text_encoder"):
        module = getattr(built, name)
        log(f"  {name:12s} {type(module).__name__:26s} {sum(p.numel() for p in module.parameters()) / 1e6:.2f} M parameters")
    log(f"  tokenizer    {type(built.tokenizer).__name__:26s} {len(built.tokenizer)} tokens; built in {secs:.1f} s")

    with tempfile.TemporaryDirectory(prefix="flux2-klein-") as folder:
        built.save_pretrained(folder)
        del built
        log(f"saved with save_pretrained to {folder}; loading it back with Flux2KleinPipeline.from_pretrained")
        pipe = load_pipeline(folder, dtype)  # the one that goes to neuron
        cpu_pipe = load_pipeline(folder, dtype)  # the reference

    def run(p, prompt=PROMPT):
        # The documentation's call, plus a fixed seed and float output for the comparison.
        return p(
            prompt=prompt, height=args.height, width=args.width, num_inference_steps=args.steps,
            generator=torch.Generator().manual_seed(args.seed), output_type="np",
        ).images

    size = f"{args.height}x{args.width}, {args.steps} steps, {args.dtype}"
    log(f"\n[cpu] {size}")
    want, t_first = timed(lambda: run(cpu_pipe))
    _, t_later = timed(lambda: run(cpu_pipe))
    log(f"  first call {t_first:.2f} s, later call {t_later:.2f} s")

    results = {}
    log(f"\n[neuron eager] pipe.to('neuron'); pipe(prompt=..., height={args.height}, width={args.width}, "
        f"num_inference_steps={args.steps})")
    torch_neuronx.clear_op_tracking()
    pipe.to("neuron")
    got, t_first = timed(lambda: run(pipe))
    n_first = torch_neuronx.metrics.cache_stats()["misses"]
    _, t_later = timed(lambda: run(pipe))
    got, t_third = timed(lambda: run(pipe))
    results["eager"] = compare(got, want)
    log(f"  first call {t_first:.2f} s (compiled {n_first} op executables), later calls {t_later:.2f} s, "
        f"{t_third:.2f} s (compiled {torch_neuronx.metrics.cache_stats()['misses'] - n_first} more)")
    log("  vs cpu: max |diff| {:.2e}, relative {:.2e}".format(*results["eager"]))

    log('\n[neuron compiled] pipe.transformer.compile(backend="neuron", fullgraph=True, dynamic=False)')
    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    pipe.transformer.compile(backend="neuron", fullgraph=True, dynamic=False)
    _, t_warm = timed(lambda: run(pipe, "warmup"))
    log(f"  warmup call {t_warm:.2f} s (traces and compiles the transformer)")
    got, t_real = timed(lambda: run(pipe))
    _, t_again = timed(lambda: run(pipe))
    results["compiled"] = compare(got, want)
    log(f"  real call {t_real:.2f} s, again {t_again:.2f} s")
    log("  vs cpu: max |diff| {:.2e}, relative {:.2e}".format(*results["compiled"]))
    metrics = torch.neuron.get_dynamo_metrics()
    log(f"  graphs compiled: {metrics['graphs_compiled']} in {metrics['compile_time_s']:.2f} s, "
        f"recompiles: {metrics['recompiles'] or 'none'}, executions: {metrics['executions']}")
    for g in metrics["graphs"]:
        log(f"    {g['graph']}: {g['kind']}, {g['nodes']} nodes, {g['compile_s']:.2f} s, "
            f"fallback ops: {g['fallback_ops'] or 'none'}")

    pipe.numpy_to_pil(got)[0].save(args.output)
    log(f"\nimage (compiled, neuron) saved to {args.output}")

    log("\nops run on neuron (eager dispatch; in compiled mode the text encoder and VAE run eagerly):")
    log(torch_neuronx.metrics.report())
    fallbacks = torch_neuronx.get_fallback_ops()
    log(f"\nfallback ops: {fallbacks if fallbacks else 'none'}")

    tol = REL_TOL[args.dtype]
    ok = not fallbacks and all(r[1] <= tol for r in results.values())
    summary = ", ".join(f"{k}: relative {v[1]:.1e}" for k, v in results.items())
    log(f"\nRESULT: {'neuron matches the CPU' if ok else 'MISMATCH'} ({summary}; tolerance {tol:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
