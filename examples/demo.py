"""Demo: diffusers' FLUX.2-klein pipeline on the `neuron` device, as diffusers' AWS Trainium page runs it,
checked against the CPU.

    bash scripts/demo.sh          (sets up what is missing, then runs this)
    python examples/demo.py [--dtype bfloat16|float32] [--height 128 --width 128] [--steps 4]
                            [--seed 0] [--output PATH] [--ops]

Builds a tiny diffusers.Flux2KleinPipeline offline with the real architectures and random weights
(examples/flux2_klein.py: Flux2Transformer2DModel, AutoencoderKLFlux2, a Qwen3 text encoder, a Qwen2
tokenizer trained in memory), writes it with save_pretrained and loads it back with
Flux2KleinPipeline.from_pretrained(folder, dtype=torch.bfloat16) as the page does (--dtype float32
for float32). Then, with one CPU generator seed for all of them:

1. the CPU:      the loaded pipeline as it is, the reference;
2. eager:        pipe.to("neuron"); pipe(prompt=..., height=..., width=..., num_inference_steps=4)
                 (each op compiles the first time it runs);
3. compiled:     pipe.transformer.compile(backend="neuron", fullgraph=True, dynamic=False), the
                 page's warmup call (compiles the transformer's graph), then the real call.

diffusers' progress bar shows the denoising steps of every call, a line per phase says what it did
and how long it took, and a report ends the run: per mode the first and the warm call, what was
compiled and what came from the disk cache (TORCH_NEURONX_NEFF_CACHE_DIR: a second run of the demo
loads instead of compiling), the ops that fell back to the CPU (none expected), the largest difference
from the CPU's image, and where the image was saved. --ops adds the per-op table. Exits 1 if neuron
does not match the CPU or anything fell back.

Sizes: the default 128x128 takes ~35 s on 2 cores with a cold disk cache; the page's 1024x1024
(--height 1024 --width 1024) ~3.5 minutes (measured 2026-12-02 on a busy 2-core machine: CPU 20 s a
call, eager first call 50 s of which 33 s compiling and warm 24 s, compiled warmup 42 s and warm 22 s).
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is built here: never reach for the Hub
import argparse
import sys
import tempfile
import time

import numpy as np
import torch

import torch_neuronx
from torch_neuronx import metrics

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flux2_klein import build_pipeline, load_pipeline  # noqa: E402
from page_args import PAGE_PROMPT  # noqa: E402

# Largest relative difference ||neuron - cpu|| / ||cpu|| allowed on the image, per dtype. bfloat16:
# both sides round each op to bfloat16 (the transformer is bit-exact), but the random-weight VAE
# amplifies one-step differences of its convolutions; measured ~8e-3, what bfloat16 itself costs the
# CPU against float32.
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


def plural(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


class Estimate:
    """What the executables launched between two points would take on the target (metrics.estimate_summary:
    TORCH_NEURONX_TARGET, else one Trn2 logical core)."""

    def __init__(self):
        self.start = metrics.estimate_summary()

    def since(self) -> str:
        now = metrics.estimate_summary()
        seconds = now["seconds"] - self.start["seconds"]
        executables = now["executables_s"] - self.start["executables_s"]
        compute = now["compute_bound_s"] - self.start["compute_bound_s"]
        share = compute / executables * 100 if executables else 0.0
        return f"estimated on {now['target']}: {seconds:.3f} s per image, {share:.0f}% compute-bound"


class Counts:
    """What became an executable between two points (`metrics.executable_counts`)."""

    def __init__(self):
        self.start = metrics.executable_counts()

    def since(self) -> dict:
        now = metrics.executable_counts()
        return {k: now[k] - self.start[k] for k in now}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", choices=sorted(REL_TOL), default="bfloat16")
    ap.add_argument("--height", type=int, default=128)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default=os.path.join(tempfile.gettempdir(), "flux2-klein-neuron.png"))
    ap.add_argument("--ops", action="store_true", help="also print what ran, per op")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    start = time.perf_counter()

    import diffusers
    import transformers

    # the loading bars and the "guidance_scale is ignored for distilled models" notes; the denoising
    # steps keep their progress bar
    diffusers.utils.logging.set_verbosity_error()
    diffusers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    from torch_neuronx import cache

    log(f"neuron: {torch.neuron.device_count()} devices ({torch.neuron.get_device_name(0)}); "
        f"disk cache: {cache.directory() if cache.disk_enabled() else 'off'}; "
        f"OMP_WAIT_POLICY: {os.environ.get('OMP_WAIT_POLICY', 'unset (torch default)')}")
    log("[build] a tiny Flux2KleinPipeline, real architectures, random weights (seeded) ...")
    built, secs = timed(build_pipeline)
    for name in ("transformer", "vae", "text_encoder"):
        module = getattr(built, name)
        log(f"  {name:12s} {type(module).__name__:26s} {sum(p.numel() for p in module.parameters()) / 1e6:.2f} M parameters")
    log(f"  tokenizer    {type(built.tokenizer).__name__:26s} {len(built.tokenizer)} tokens; built in {secs:.1f} s")

    with tempfile.TemporaryDirectory(prefix="flux2-klein-") as folder:
        built.save_pretrained(folder)
        del built

        def load():
            return load_pipeline(folder, dtype)

        (cpu_pipe, pipe), secs = timed(lambda: (load(), load()))
        log(f"[load] save_pretrained to {folder}, Flux2KleinPipeline.from_pretrained(folder, "
            f"dtype=torch.{args.dtype}) twice (one for the CPU, one for neuron): {secs:.1f} s")

    def run(p, label, prompt=PAGE_PROMPT):
        # the page's call, plus the seed and float output for the comparison
        p.set_progress_bar_config(desc=f"  {label}", leave=True)
        return p(
            prompt=prompt, height=args.height, width=args.width, num_inference_steps=args.steps,
            generator=torch.Generator().manual_seed(args.seed), output_type="np",
        ).images

    size = f"{args.height}x{args.width}, {args.steps} steps, {args.dtype}"
    modes = {}

    log(f"\n[cpu] the reference: {size}")
    want, first = timed(lambda: run(cpu_pipe, "cpu, first call"))
    _, warm = timed(lambda: run(cpu_pipe, "cpu, warm call"))
    modes["cpu"] = {"first": first, "warm": warm}

    log(f'\n[eager] pipe.to("neuron"), then the same call: ops queue and each run of them compiles the first time')
    torch_neuronx.clear_op_tracking()
    _, secs = timed(lambda: pipe.to("neuron"))
    log(f"  moved to neuron in {secs:.2f} s")
    counts = Counts()
    got, first = timed(lambda: run(pipe, "eager, first call"))
    c = counts.since()
    log(f"  first call {first:.2f} s: {c['runs_compiled']} fused runs and {c['ops_compiled']} ops compiled "
        f"({c['runs_compile_s'] + c['ops_compile_s']:.2f} s of it), {c['runs_loaded']} runs and {c['ops_loaded']} ops "
        f"loaded from the disk cache")
    counts, estimate = Counts(), Estimate()
    got, warm = timed(lambda: run(pipe, "eager, warm call"))
    c2 = counts.since()
    modes["eager"] = {"first": first, "warm": warm, "counts": c, "diff": compare(got, want),
                      "estimate": estimate.since()}
    log(f"  warm call {warm:.2f} s ({c2['runs_compiled'] + c2['ops_compiled']} compiled); {modes['eager']['estimate']}")

    log('\n[compiled] pipe.transformer.compile(backend="neuron", fullgraph=True, dynamic=False)')
    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    pipe.transformer.compile(backend="neuron", fullgraph=True, dynamic=False)
    counts = Counts()
    _, first = timed(lambda: run(pipe, "compiled, warmup call", "warmup"))
    c = counts.since()
    how = (f"compiled in {c['graphs_compile_s']:.2f} s (lowering {c['graphs_lower_s']:.2f} s, XLA "
           f"{c['graphs_compile_s'] - c['graphs_lower_s']:.2f} s)" if c["graphs_compiled"] else "loaded from the disk cache")
    log(f"  warmup call {first:.2f} s: the transformer's graph {how}; the rest is Dynamo and AOTAutograd "
        f"tracing it and the run")
    counts, estimate = Counts(), Estimate()
    got, warm = timed(lambda: run(pipe, "compiled, warm call"))
    modes["compiled"] = {"first": first, "warm": warm, "counts": c, "diff": compare(got, want),
                         "estimate": estimate.since()}
    log(f"  warm call {warm:.2f} s (graphs compiled: {counts.since()['graphs_compiled']}; recompiles: "
        f"{torch.neuron.get_dynamo_metrics()['recompiles'] or 'none'}); {modes['compiled']['estimate']}")

    pipe.numpy_to_pil(got)[0].save(args.output)
    fallbacks = torch_neuronx.get_fallback_ops()
    if args.ops:
        log("\nwhat ran on neuron, per op (in compiled mode the text encoder and the VAE run eagerly):")
        log(metrics.report())

    log(f"\nreport: {size}, the same CPU generator seed ({args.seed}) for every mode")
    log(f"  {'mode':9s} {'first call':>10s} {'warm call':>10s}  {'compiled':32s} "
        f"{'from disk cache':26s} {'max |diff|':>10s} {'relative':>9s}")
    for mode, r in modes.items():
        cells = "-", "-", "", ""
        if "counts" in r:
            c = r["counts"]
            graphs = mode == "compiled"
            compiled = ", ".join([plural(c["runs_compiled"], "run"), plural(c["ops_compiled"], "op")]
                                 + ([plural(c["graphs_compiled"], "graph")] if graphs else []))
            loaded = ", ".join([plural(c["runs_loaded"], "run"), plural(c["ops_loaded"], "op")]
                               + ([plural(c["graphs_loaded"], "graph")] if graphs else []))
            cells = compiled, loaded, f"{r['diff'][0]:.2e}", f"{r['diff'][1]:.2e}"
        log(f"  {mode:9s} {r['first']:9.2f}s {r['warm']:9.2f}s  {cells[0]:32s} {cells[1]:26s} "
            f"{cells[2]:>10s} {cells[3]:>9s}")
    for mode, r in modes.items():
        if "estimate" in r:
            log(f"  {mode}: {r['estimate']} (a roofline lower bound, docs/targets.md)")
    log(f"  fallback ops: {fallbacks if fallbacks else 'none'}")
    log(f"  image (compiled, neuron) saved to {args.output}")
    log(f"  the demo took {time.perf_counter() - start:.0f} s")

    tol = REL_TOL[args.dtype]
    ok = not fallbacks and all(r["diff"][1] <= tol for r in modes.values() if "diff" in r)
    log(f"\nRESULT: {'neuron matches the CPU' if ok else 'MISMATCH'} (relative tolerance {tol:g} in {args.dtype})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
