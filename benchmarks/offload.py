"""CPU offload of the tiny FLUX.2-klein pipeline on neuron, side by side with the CPU pipeline.

    PYTHONPATH=. python benchmarks/offload.py [--height 64 --width 64 --steps 2 --repeats 3] [--profile MODE]

Rows: the CPU pipeline (torch eager, no offload), the same pipeline with diffusers' offload hooks on
the CPU where accelerate runs them (the hooks' own cost: their moves are no-ops there), neuron with no offload, neuron with `enable_model_cpu_offload`,
neuron with `enable_sequential_cpu_offload`. Each pipeline is built from the same seed, called once
to warm up (neuron compiles its ops then), then the rows are called in turns, `--repeats` rounds
(the best call and the median are shown, the ratio is of the best);
every image is compared to the CPU pipeline's. `--profile MODE` prints cProfile's top functions
of one timed call of that row.

The ratios are against the CPU pipeline measured as its users run it, under torch's default
threading, in a second process (`cpu (default threads)`). The other rows run under the OpenMP wait
policy this process has; `--omp-passive` sets OMP_WAIT_POLICY=PASSIVE for them (which slows torch's
own CPU path about 2x here, and measured no faster for the neuron rows of this pipeline).
"""
from __future__ import annotations

import os
import sys

if "--omp-passive" in sys.argv:  # before torch loads OpenMP
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import argparse
import json
import statistics
import tempfile
import time

import numpy as np
import torch

import torch_neuronx
from child_process import child_env, run_child

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from flux2_klein import build_pipeline  # noqa: E402

PROMPT = "a golden retriever surfing a wave, photorealistic"

MODES = {
    "cpu": ("cpu", None),
    "cpu+model_offload": ("cpu", "model"),
    "cpu+sequential_offload": ("cpu", "sequential"),
    "neuron": ("neuron", None),
    "neuron+model_offload": ("neuron", "model"),
    "neuron+sequential_offload": ("neuron", "sequential"),
}


def prepare(device, offload):
    pipe = build_pipeline()
    if offload == "model":
        pipe.enable_model_cpu_offload(device=device)
    elif offload == "sequential":
        pipe.enable_sequential_cpu_offload(device=device)
    elif device != "cpu":
        pipe.to(device)
    return pipe


def call(pipe, args):
    return pipe(
        prompt=PROMPT, height=args.height, width=args.width, num_inference_steps=args.steps,
        generator=torch.Generator().manual_seed(0), output_type="np",
    ).images


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--height", type=int, default=64)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--profile", default=None, choices=sorted(MODES))
    ap.add_argument("--omp-passive", action="store_true", help="OMP_WAIT_POLICY=PASSIVE for the rows of this process")
    ap.add_argument("--cpu-baseline", default=None, help=argparse.SUPPRESS)  # a file for the child's result
    args = ap.parse_args()
    if args.cpu_baseline:
        return _cpu_baseline(args)

    import diffusers
    import transformers

    diffusers.utils.logging.set_verbosity_error()
    transformers.utils.logging.set_verbosity_error()

    # Built and warmed up first, then called in turns (one call of each row per round), so a load
    # change on a shared machine hits every row alike.
    pipes, firsts, times, images, notes = {}, {}, {}, {}, {}
    names = args.modes.split(",")
    for name in names:
        device, offload = MODES[name]
        try:
            pipe = prepare(device, offload)
            start = time.perf_counter()
            images[name] = call(pipe, args)
            firsts[name] = time.perf_counter() - start
        except Exception as e:  # accelerate's sequential hooks fail on the CPU (a tied weight's Parameter)
            notes[name] = f"not available: {type(e).__name__}: {str(e).splitlines()[0][:70]}"
            continue
        pipes[name] = pipe
        times[name] = []
    misses = {name: 0 for name in pipes}  # eager compiles during the timed calls (should be none)
    for _ in range(args.repeats):
        for name in pipes:
            before = torch_neuronx.metrics.cache_stats()["misses"]
            start = time.perf_counter()
            images[name] = call(pipes[name], args)
            times[name].append(time.perf_counter() - start)
            misses[name] += torch_neuronx.metrics.cache_stats()["misses"] - before
    if args.profile in pipes:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(call, pipes[args.profile], args)
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
    baseline = _run_cpu_baseline(args)
    want = images[names[0]]  # the first row (the CPU pipeline) is the reference
    rows = []
    for name in names:
        if name in notes:
            rows.append((name, None, None, None, None, notes[name]))
        else:
            diff = float(np.abs(images[name].astype(np.float64) - want).max())
            rows.append((name, firsts[name], min(times[name]), statistics.median(times[name]), diff, misses[name]))

    diff = float(np.abs(np.asarray(baseline["image"], np.float64) - want).max())
    rows.insert(0, ("cpu (default threads)", baseline["first"], baseline["best"], baseline["median"], diff, 0))
    base = baseline["best"]  # best of the rounds: the least disturbed call (the machine is shared);
    # the median beside it shows the spread
    size = f"{args.height}x{args.width}, {args.steps} steps, float32, best and median of {args.repeats} rounds"
    print(f"\nFLUX.2-klein (tiny) offload, {size}; torch threads {torch.get_num_threads()}; ratios against "
          "the CPU pipeline under torch's default threading; the other rows with OMP_WAIT_POLICY="
          f"{os.environ.get('OMP_WAIT_POLICY') or 'unset'}")
    print(f"{'mode':28s} {'first s':>8s} {'best s':>8s} {'median s':>8s} {'x cpu':>7s} {'max|img-cpu|':>13s} {'compiles':>9s}")
    ok = True
    for name, first, t, med, diff, note in rows:
        if t is None:
            print(f"{name:28s} {note}")
            continue
        ratio = t / base if base else float("nan")
        print(f"{name:28s} {first:8.3f} {t:8.3f} {med:8.3f} {ratio:7.2f} {diff:13.2e} {note:9d}")
        ok = ok and diff < 1e-4
    print("images match the CPU's" if ok else "IMAGES DIFFER FROM THE CPU'S")
    return 0 if ok else 1


def _cpu_baseline(args) -> int:
    """The CPU pipeline alone, in this process (torch's default threading): first, best and median
    call and the image, written as JSON to `args.cpu_baseline`."""
    import diffusers
    import transformers

    diffusers.utils.logging.set_verbosity_error()
    transformers.utils.logging.set_verbosity_error()
    pipe = prepare("cpu", None)
    start = time.perf_counter()
    image = call(pipe, args)
    first = time.perf_counter() - start
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        image = call(pipe, args)
        times.append(time.perf_counter() - start)
    with open(args.cpu_baseline, "w") as f:
        json.dump({"first": first, "best": min(times), "median": statistics.median(times),
                   "image": image.tolist()}, f)
    return 0


def _run_cpu_baseline(args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cpu.json")
        cmd = [os.path.abspath(__file__), "--height", str(args.height), "--width", str(args.width),
               "--steps", str(args.steps), "--repeats", str(args.repeats), "--cpu-baseline", out]
        run_child(cmd, label="--cpu-baseline", env=child_env(unset=("OMP_WAIT_POLICY",)), capture=False)
        with open(out) as f:
            return json.load(f)


if __name__ == "__main__":
    sys.exit(main())
