"""FLUX.2's VAE decode alone at the page's size: torch CPU eager vs neuron eager vs neuron with the decoder
compiled (as the page compiles it), bf16, each side in a process of its own.

The VAE is diffusers' `AutoencoderKLFlux2` in its default (real) configuration with seeded random weights
(flux_pipeline_real.build_vae), decoding one latent of the image's size. Per side: the first decode
(compiles included), the median of `--rounds` decodes after it, the system CPU time and minor page faults
of a steady decode (the memory a decode touches for the first time: the kernel clears each new page, which
costs ~2.3 s a GB on the VM these figures come from), peak RSS, and the decode's difference from torch's.
The pipeline's VAE split (flux_pipeline_real.py) moves with the memory the rest of the pipeline holds; this
is the decode on its own.

    PYTHONPATH=. python benchmarks/vae_decode.py [--resolution 1024] [--rounds 2] [--sides ...]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from child_process import run_json_child  # noqa: E402
from flux_pipeline_real import _avx512_bf16  # noqa: E402
from flux_real import _cpu_name  # noqa: E402

SIDES = ("torch", "neuron-eager", "neuron-compiled")


def child(spec):
    import numpy as np
    import torch

    from flux_pipeline_real import build_vae

    torch.set_grad_enabled(False)
    side = spec["side"]
    device = "cpu" if side == "torch" else "neuron"
    vae = build_vae(torch.bfloat16, device)
    if side == "neuron-compiled":
        vae.decoder.compile(backend="neuron", fullgraph=True, dynamic=False)
    side_px = spec["resolution"] // 8
    z = torch.randn(1, vae.config.latent_channels, side_px, side_px, generator=torch.Generator().manual_seed(0))
    z = z.to(torch.bfloat16).to(device)

    def decode():
        y = vae.decode(z).sample
        if device == "neuron":
            torch.neuron.synchronize()
        return y

    t = time.perf_counter()
    y = decode()
    first = time.perf_counter() - t
    times, sys_s, faults = [], [], []
    for _ in range(spec["rounds"]):
        del y
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t = time.perf_counter()
        y = decode()
        times.append(time.perf_counter() - t)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        sys_s.append(r1.ru_stime - r0.ru_stime)
        faults.append(r1.ru_minflt - r0.ru_minflt)
    np.save(spec["image"], y.float().cpu().numpy())
    return dict(first_s=first, steady_s=statistics.median(times), sys_s=statistics.median(sys_s),
                faults=int(statistics.median(faults)), threads=torch.get_num_threads(),
                peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--resolution", type=int, default=1024, help="the image's side in pixels (multiple of 8)")
    ap.add_argument("--rounds", type=int, default=2, help="decodes after the first (steady s is their median)")
    ap.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.resolution % 8 or args.rounds < 1:
        raise SystemExit("--resolution must be a multiple of 8 and --rounds at least 1")
    import numpy as np

    sides = [s for s in SIDES if s in args.sides]  # torch first: its decode is the reference
    load_start = os.getloadavg()
    work = tempfile.mkdtemp(prefix="vae_decode-")
    results = {}
    try:
        for side in sides:
            spec = dict(side=side, resolution=args.resolution, rounds=args.rounds,
                        image=os.path.join(work, f"{side}.npy"))
            print(f"... {side}", file=sys.stderr, flush=True)
            results[side] = run_json_child(__file__, spec, label=side, autoload=side != "torch", timeout=3600,
                                           settings={"HF_HUB_OFFLINE": "1"})
        ref = np.load(os.path.join(work, "torch.npy")) if "torch" in results else None
        print(f"FLUX.2 VAE decode (AutoencoderKLFlux2 default config, bf16), {args.resolution}x{args.resolution}; "
              f"steady = median of {args.rounds} decodes after the first")
        print(f"{_cpu_name()}, {os.cpu_count()} CPUs (AVX-512 BF16 {'yes' if _avx512_bf16() else 'no'}); load average {load_start[0]:.2f} at the start, "
              f"{os.getloadavg()[0]:.2f} at the end\n")
        print("| side | first s | steady s | vs torch | system s | page faults | peak RSS GB | rel diff |")
        print("|---|---|---|---|---|---|---|---|")
        for side, r in results.items():
            vs = f"{r['steady_s'] / results['torch']['steady_s']:.2f}x" if "torch" in results else ""
            diff = ""
            if ref is not None and side != "torch":
                got = np.load(os.path.join(work, f"{side}.npy"))
                diff = f"{np.linalg.norm(got - ref) / np.linalg.norm(ref):.2e}"
            print(f"| {side} | {r['first_s']:.2f} | {r['steady_s']:.2f} | {vs} | {r['sys_s']:.2f} | "
                  f"{r['faults'] / 1e6:.2f} M | {r['peak_rss_gb']:.2f} | {diff} |")
        print("\n(torch threads: " + ", ".join(f"{s} {r['threads']}" for s, r in results.items()) + ")")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
