"""FLUX.2-klein-4B's transformer on a Trainium core, estimated: its real configuration, at the page's size.

    PYTHONPATH=. python benchmarks/estimate_flux.py [--resolution 1024] [--text-tokens 512] [--steps 4]
                                                   [--dtype bf16|f32] [--target trn2] [--lnc 2]

The whole 4B transformer (5 double + 20 single blocks) is more than this machine runs in reasonable time,
and the estimate needs the compiled programs, not the weights' values. So the real configuration
(benchmarks/flux_real.py's KLEIN_4B, real width) is compiled whole (`torch.compile(backend="neuron",
fullgraph=True, dynamic=False)`, what the page's compiled example does) three times: with no blocks, one
double block, one single block; each is called once to compile and once to count its launch. The
forward's estimate is then no-blocks + 5 x (one double - no blocks) + 20 x (one single - no blocks),
and the same sum for its FLOPs and bytes, beside torch's FlopCounterMode count of the real depth (on the
meta device). Per image: --steps forwards (the text encoder and the VAE are not counted).

Prints one table; every figure is an estimate on the target (TORCH_NEURONX_TARGET, --target), a roofline
lower bound with the assumptions of docs/targets.md. One process; it compiles and runs ~10 GFLOP-per-
token programs on the CPU: minutes.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--resolution", type=int, default=1024)
    ap.add_argument("--text-tokens", type=int, default=512, help="the pipeline's max_sequence_length (512)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--dtype", choices=("bf16", "f32"), default="bf16")
    ap.add_argument("--target", choices=("trn1", "trn2", "trn3"), default=None)
    ap.add_argument("--lnc", type=int, default=None)
    args = ap.parse_args()
    if args.target:
        os.environ["TORCH_NEURONX_TARGET"] = args.target
    if args.lnc:
        os.environ["NEURON_LOGICAL_NC_CONFIG"] = str(args.lnc)

    import torch

    import torch_neuronx  # noqa: F401
    from flux_real import KLEIN_4B, build, flops, inputs
    from torch_neuronx import metrics

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    torch.set_grad_enabled(False)
    parts = {}
    start = time.perf_counter()
    for name, (double, single) in (("no blocks", (0, 0)), ("one double block", (1, 0)), ("one single block", (0, 1))):
        torch._dynamo.reset()
        model = build(double, single, dtype, "neuron")
        x = inputs(args.resolution, args.text_tokens, dtype, "neuron")
        fn = torch.compile(model, backend="neuron", fullgraph=True, dynamic=False)
        fn(**x)[0].cpu()  # compiles
        metrics.clear_op_tracking()
        fn(**x)[0].cpu()
        s = metrics.estimate_summary()
        parts[name] = s
        print(f"... {name}: est {s['seconds'] * 1e3:.2f} ms, {s['flops'] / 1e9:.1f} GFLOP, {s['bytes'] / 1e9:.2f} GB, "
              f"{s['compute_bound_share'] * 100:.0f}% compute-bound", file=sys.stderr, flush=True)
        del model, fn, x

    base, double, single = parts["no blocks"], parts["one double block"], parts["one single block"]
    n_double, n_single = KLEIN_4B["num_layers"], KLEIN_4B["num_single_layers"]

    def whole(field):
        return base[field] + n_double * (double[field] - base[field]) + n_single * (single[field] - base[field])

    seconds, total_flops, nbytes = whole("seconds"), whole("flops"), whole("bytes")
    compute = whole("compute_bound_s")
    counted = flops(n_double, n_single, args.resolution, args.text_tokens)
    tokens = (args.resolution // 16) ** 2
    print(f"FLUX.2-klein-4B transformer, real configuration ({n_double} double + {n_single} single blocks, hidden 3072), "
          f"{args.dtype}, {args.resolution}x{args.resolution} ({tokens} image tokens) + {args.text_tokens} text tokens; "
          f"estimated on {base['target']} (a roofline lower bound: docs/targets.md); load average "
          f"{os.getloadavg()[0]:.2f}; {time.perf_counter() - start:.0f} s to measure")
    print()
    print("| part | est ms | GFLOP (cost analysis) | GB accessed | compute-bound |")
    print("|---|---|---|---|---|")
    for name, s in parts.items():
        print(f"| {name} (compiled whole, measured) | {s['seconds'] * 1e3:.2f} | {s['flops'] / 1e9:.1f} | "
              f"{s['bytes'] / 1e9:.2f} | {s['compute_bound_share'] * 100:.0f}% |")
    print(f"| the whole transformer, one forward (sum) | {seconds * 1e3:.1f} | {total_flops / 1e9:.0f} | {nbytes / 1e9:.2f} | "
          f"{compute / max(seconds, 1e-30) * 100:.0f}% |")
    print(f"| per image ({args.steps} steps, transformer only) | {seconds * args.steps * 1e3:.0f} | "
          f"{total_flops * args.steps / 1e9:.0f} | {nbytes * args.steps / 1e9:.2f} | |")
    print()
    print(f"torch's FlopCounterMode on the real depth (meta device): {counted / 1e9:.0f} GFLOP per forward; the cost "
          f"analysis: {total_flops / 1e9:.0f} GFLOP ({total_flops / counted:.3f}x; it also counts the elementwise work)")
    print(f"estimated on {base['target']}: {seconds * args.steps:.3f} s per image (transformer, {args.steps} steps), "
          f"{compute / max(seconds, 1e-30) * 100:.0f}% compute-bound")


if __name__ == "__main__":
    main()
