"""The command line of the page's examples (eager.py, compiled.py, tensor_parallel_neuron.py), and the
line each prints after the page's code: the time its images would take on a Trainium core.

    --model   a Hub id or a local folder; by default the tiny FLUX.2-klein of flux2_klein.py (real
              architectures, random weights), built offline and written with save_pretrained once,
              to a folder under the temporary directory named for the builder's source
    --prompt, --height, --width, --steps, --seed, --output   (the page's values by default)
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import tempfile

PAGE_PROMPT = "a golden retriever surfing a wave, photorealistic"


def parse(description: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None,
                    help="a Hub id or a local folder (default: the tiny FLUX.2-klein built offline)")
    ap.add_argument("--prompt", default=PAGE_PROMPT)
    ap.add_argument("--height", type=int, default=1024)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default="output.png")
    args = ap.parse_args()
    if args.model is None:
        args.model = tiny_model_folder()
    return args


def tiny_model_folder(root: str | None = None) -> str:
    """The tiny FLUX.2-klein, written with save_pretrained the first time it is asked for. The folder
    is named for the builder's source, so an edited builder writes a new one; it is written beside
    and renamed into place, so processes that build it at once (torchrun's ranks) each see it whole."""
    from flux2_klein import __file__ as builder, save_pipeline

    with open(builder, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    root = root or os.path.join(tempfile.gettempdir(), "torch-neuronx-examples")
    folder = os.path.join(root, f"flux2-klein-tiny-{digest}")
    if os.path.isdir(folder):
        return folder
    os.makedirs(root, exist_ok=True)
    partial = tempfile.mkdtemp(prefix=".partial-", dir=root)
    try:
        save_pipeline(partial)
        os.rename(partial, folder)
    except OSError:
        if not os.path.isdir(folder):  # not another process's folder winning the rename
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder


def estimate_line(images: int, rank: int | None = None) -> str:
    """What the executables launched so far would take on the target (TORCH_NEURONX_TARGET, else one
    Trn2 logical core), per image: "estimated on one Trn2 NeuronCore (LNC=2): N s per image, X%
    compute-bound" (a roofline lower bound: docs/targets.md); for a rank of a tensor-parallel run, its
    collectives' share too."""
    from torch_neuronx import metrics

    s = metrics.estimate_summary()
    who = f"rank {rank}: " if rank is not None else ""
    line = (f"{who}estimated on {s['target']}: {s['seconds'] / images:.3f} s per image, "
            f"{s['compute_bound_share'] * 100:.0f}% compute-bound")
    if rank is not None:
        line += f", collectives {s['collective_share'] * 100:.0f}% ({s['collectives_s'] / images * 1e3:.2f} ms)"
    return line
