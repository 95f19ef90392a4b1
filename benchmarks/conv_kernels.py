"""Which convolution kernel is the fast one on this CPU, per dtype and shape: torch's CPU convolution
(oneDNN) vs neuron with the kernel runtime/native_kernels.py chooses vs neuron with XLA's own
(`TORCH_NEURONX_NATIVE_KERNELS=off`), each in a process of its own, torch under its default threading.

The shapes are a VAE decoder's 3x3 convolutions from 64 to 512 channels, a small one and a 1x1 one (a
matrix product). Per row: the best of several calls (ms), GFLOP/s, and which kernel neuron ran.

    PYTHONPATH=. python benchmarks/conv_kernels.py [--dtypes float32 bfloat16]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from child_process import run_json_child  # noqa: E402
from flux_pipeline_real import _avx512_bf16  # noqa: E402
from flux_real import _cpu_name  # noqa: E402

# (input shape, weight shape): padding keeps the spatial size
SHAPES = (
    ((1, 16, 32, 32), (16, 16, 3, 3)),
    ((4, 32, 64, 64), (64, 32, 1, 1)),
    ((1, 64, 64, 64), (64, 64, 3, 3)),
    ((1, 128, 128, 128), (128, 128, 3, 3)),
    ((1, 512, 128, 128), (512, 512, 3, 3)),
    ((1, 256, 256, 256), (256, 256, 3, 3)),
    ((1, 128, 512, 512), (128, 128, 3, 3)),
)
SIDES = {"torch": {}, "neuron": {}, "neuron-xla": {"TORCH_NEURONX_NATIVE_KERNELS": "off"}}


def child(spec):
    import torch
    import torch.nn.functional as F

    torch.set_grad_enabled(False)
    device = "cpu" if spec["side"] == "torch" else "neuron"
    if device == "neuron":
        from torch_neuronx import metrics
    rows = []
    for dtype_name in spec["dtypes"]:
        dtype = getattr(torch, dtype_name)
        for xs, ws in SHAPES:
            g = torch.Generator().manual_seed(0)
            x = torch.randn(xs, generator=g).to(dtype).to(device)
            w = (0.02 * torch.randn(ws, generator=g)).to(dtype).to(device)
            b = torch.zeros(ws[0], dtype=dtype, device=device)

            def call():
                y = F.conv2d(x, w, b, padding=ws[2] // 2)
                if device == "neuron":
                    torch.neuron.synchronize()
                return y

            before = metrics.native_kernel_calls()["convolution"] if device == "neuron" else 0
            call()
            native = device == "neuron" and metrics.native_kernel_calls()["convolution"] > before
            best = float("inf")
            for _ in range(20 if x.numel() < 2**20 else 3):
                t = time.perf_counter()
                call()
                best = min(best, time.perf_counter() - t)
            rows.append(dict(dtype=dtype_name, x=xs, w=ws, s=best, native=native))
    return dict(rows=rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    load_start = os.getloadavg()
    results = {}
    for side, settings in SIDES.items():
        print(f"... {side}", file=sys.stderr, flush=True)
        results[side] = run_json_child(__file__, dict(side=side, dtypes=args.dtypes), label=side,
                                       autoload=side != "torch", settings=settings, timeout=3600)["rows"]
    print(f"conv2d, padding keeps the size; best of several calls; {_cpu_name()}, {os.cpu_count()} CPUs "
          f"(AVX-512 BF16 {'yes' if _avx512_bf16() else 'no'}); load average {load_start[0]:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end\n")
    print("| dtype | input | weight | torch ms | neuron ms | neuron kernel | XLA's ms | neuron vs torch | neuron vs XLA's |")
    print("|---|---|---|---|---|---|---|---|---|")
    for t, n, xla in zip(results["torch"], results["neuron"], results["neuron-xla"]):
        flops = 2 * t["x"][0] * t["x"][2] * t["x"][3] * t["w"][0] * t["w"][1] * t["w"][2] * t["w"][3]
        kernel = "torch's (oneDNN)" if n["native"] else "XLA's"
        print(f"| {t['dtype']} | {tuple(t['x'])} | {tuple(t['w'])} | {t['s'] * 1e3:.2f} ({flops / t['s'] / 1e9:.0f} GFLOP/s) | "
              f"{n['s'] * 1e3:.2f} ({flops / n['s'] / 1e9:.0f}) | {kernel} | {xla['s'] * 1e3:.2f} ({flops / xla['s'] / 1e9:.0f}) | "
              f"{n['s'] / t['s']:.2f}x | {n['s'] / xla['s']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
