"""FLUX.2-klein-4B's transformer at its real width: torch's CPU against neuron, each side in a process of its own.

    PYTHONPATH=. python benchmarks/flux_real.py [--blocks D S] [--resolution PX] [--text-tokens T]
                                               [--dtype bf16|f32|both] [--sides ...] [--rounds N] [--torch-rounds N]
                                               [--policy default|both] [--loading]

The model is diffusers' `Flux2Transformer2DModel` with FLUX.2-klein-4B's configuration (`KLEIN_4B` below, from
diffusers' `scripts/convert_flux2_to_diffusers.py`, model type "klein-4b": patch 1, 128 input channels,
24 heads x 128 = hidden 3072, MLP ratio 3, joint attention dim 7680 (the Qwen3-4B text encoder's 3 x 2560
hidden states), timestep channels 256, rope axes 32 x 4 with theta 2000, eps 1e-6, no guidance embedding; 5 double
+ 20 single blocks), cut to `--blocks D S` (default 1 double + 2 single; `--blocks 5 20` is the real depth).
Inputs: a `--resolution` square image (default 512: FLUX.2's VAE downsamples 8x and the pipeline packs 2x2
latents, so (512 / 16)^2 = 1024 image tokens) and `--text-tokens` (default 128) text tokens.

Weights: built on the meta device, materialized where the side runs (`to_empty`), and every parameter filled
from its own seeded CPU generator (PyTorch's default Linear bounds, 1/sqrt(fan_in); norm weights 1), so every
process holds the same weights and none ever holds a second copy of the model on the host.

Rows, per dtype and side (torch CPU eager, Inductor CPU, neuron eager, neuron compiled =
`torch.compile(backend="neuron", fullgraph=True, dynamic=False)`, and with `--sides` also neuron repeated
blocks = diffusers' `compile_repeated_blocks(backend="neuron", ...)`, the blocks compiled and the rest
eager):
  steady       median seconds of one forward (waiting for its result) over --rounds, after one warm call
  vs eager     that / torch CPU eager's median;  vs Inductor: that / Inductor's
  GFLOP/s      matmul and attention FLOPs of one forward (counted by torch's FlopCounterMode) / steady
  first        the first forward in the process (Inductor: empty cache; neuron: empty executable cache)
  steady RSS   the process's peak resident memory during the steady calls (VmHWM after a reset)
  peak RSS     the process's peak resident memory over its whole life (model build and first call included)
  device peak  torch.neuron.max_memory_allocated() during the steady calls (neuron sides)
  max/rel diff the output against torch CPU eager's: max |out - cpu| and that / max |cpu|

torch's side runs under torch's default threading with the autoload off (no neuron in the process); neuron
sides under the default threading, and with `--policy both` also under OMP_WAIT_POLICY=PASSIVE (printed as
its own rows; ratios are always against torch under the default). `--loading` adds the loading rows: a
folder written by `save_pretrained` in the dtype, loaded by `from_pretrained(..., torch_dtype=dtype)` then
`.to(device)`, and by `from_pretrained(..., device_map=device)`, each with its peak RSS above the process's
baseline as a multiple of the weights' size.

Run it alone: two processes timing at once on a small machine ruin both figures. The load average at the
start and the end is printed with the table.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from child_process import child_env, run_child as run_python_child, run_json_child

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# diffusers scripts/convert_flux2_to_diffusers.py, get_flux2_transformer_config("klein-4b")["diffusers_config"]
KLEIN_4B = dict(
    patch_size=1, in_channels=128, num_layers=5, num_single_layers=20, attention_head_dim=128,
    num_attention_heads=24, joint_attention_dim=7680, timestep_guidance_channels=256, mlp_ratio=3.0,
    axes_dims_rope=(32, 32, 32, 32), rope_theta=2000, eps=1e-6, guidance_embeds=False,
)
SIDES = ("torch eager", "Inductor", "neuron eager", "neuron compiled", "neuron repeated blocks")
DTYPES = {"bf16": "bfloat16", "f32": "float32"}


# ------------------------------------------------------------------------------------------- the model


def config(double, single):
    return dict(KLEIN_4B, num_layers=double, num_single_layers=single)


def _fill(model, seed=0):
    """Every parameter from its own CPU generator (seeded by its name), written into it where it lives: one
    parameter at a time on the host, never the model."""
    import hashlib

    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            g = torch.Generator().manual_seed(seed + int(hashlib.sha256(name.encode()).hexdigest()[:8], 16))
            if name.endswith(".weight") and p.dim() >= 2:
                bound = 1.0 / (p.shape[1] ** 0.5)
                host = torch.empty(p.shape, dtype=torch.float32).uniform_(-bound, bound, generator=g)
            elif name.endswith(".bias"):
                host = torch.empty(p.shape, dtype=torch.float32).uniform_(-0.02, 0.02, generator=g)
            else:  # norm scales
                host = torch.ones(p.shape, dtype=torch.float32)
            p.copy_(host.to(p.dtype))
        for b in model.buffers():  # none in this model today; kept exact if one appears
            if b.is_meta:
                raise RuntimeError("a buffer was left on the meta device")
    return model


def build(double, single, dtype, device):
    """The transformer on `device` in `dtype`, built on meta and materialized there."""
    import torch
    from diffusers import Flux2Transformer2DModel

    with torch.device("meta"):
        model = Flux2Transformer2DModel(**config(double, single))
    model = model.to(dtype=dtype).to_empty(device=device)
    # to_empty leaves non-persistent buffers (rope tables are computed per call here) uninitialized; this
    # model registers none, which the check in _fill keeps honest
    return _fill(model).eval()


def inputs(resolution, text_tokens, dtype, device):
    import torch

    side = resolution // 16
    n = side * side
    g = torch.Generator().manual_seed(1)
    img_ids = torch.zeros(n, 4)
    img_ids[:, 1], img_ids[:, 2] = torch.arange(n) // side, torch.arange(n) % side
    txt_ids = torch.zeros(text_tokens, 4)
    txt_ids[:, 3] = torch.arange(text_tokens)
    x = dict(
        hidden_states=torch.randn(1, n, KLEIN_4B["in_channels"], generator=g).to(dtype),
        encoder_hidden_states=torch.randn(1, text_tokens, KLEIN_4B["joint_attention_dim"], generator=g).to(dtype),
        timestep=torch.tensor([0.5]).to(dtype), img_ids=img_ids, txt_ids=txt_ids, return_dict=False,
    )
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in x.items()}


def flops(double, single, resolution, text_tokens):
    """FLOPs of one forward as torch's FlopCounterMode counts them (matmuls and attention), on meta tensors."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from diffusers import Flux2Transformer2DModel

    with torch.device("meta"):
        model = Flux2Transformer2DModel(**config(double, single)).eval()
    x = inputs(resolution, text_tokens, torch.float32, "meta")
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(**x)
    return counter.get_total_flops()


# ---------------------------------------------------------------------------------------------- child


def _rss():
    """(current, peak) resident bytes of this process."""
    cur = peak = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                cur = int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024
    return cur, peak


def _reset_peak_rss():
    with open("/proc/self/clear_refs", "w") as f:  # "5": reset the peak resident set size to the current one
        f.write("5")


def _wait(out):
    import torch

    if out.device.type == "neuron":
        torch.neuron.synchronize()


def child(spec):
    import torch

    dtype = getattr(torch, spec["dtype"])
    side = spec["side"]
    device = "neuron" if side.startswith("neuron") else "cpu"
    res = {"side": side, "dtype": spec["dtype"], "policy": os.environ.get("OMP_WAIT_POLICY") or "default"}
    torch.set_grad_enabled(False)
    if device == "neuron":
        import torch_neuronx  # noqa: F401  (the autoload did this already; explicit for readers)
    res["baseline_rss"] = _rss()[0]
    start = time.perf_counter()
    model = build(spec["double"], spec["single"], dtype, device)
    x = inputs(spec["resolution"], spec["text_tokens"], dtype, device)
    if device == "neuron":
        torch.neuron.synchronize()
    res["build_s"] = time.perf_counter() - start
    res["weights_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
    if side == "Inductor":
        fn = torch.compile(model, backend="inductor")
    elif side == "neuron compiled":
        fn = torch.compile(model, backend="neuron", fullgraph=True, dynamic=False)
    elif side == "neuron repeated blocks":  # diffusers' regional compilation: each block class compiled once
        model.compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)
        fn = model
    else:
        fn = model

    def call():
        out = fn(**x)[0]
        _wait(out)
        return out

    if spec["rounds"] == 0:  # torch eager only (main() checks): its one forward compiles nothing, so it is the figure
        _reset_peak_rss()
    start = time.perf_counter()
    out = call()
    res["first_s"] = time.perf_counter() - start
    times = [res["first_s"]]
    if spec["rounds"]:
        call()  # one warm call
        if device == "neuron":
            torch.neuron.reset_peak_memory_stats()
        _reset_peak_rss()
        times = []
    native = _native_seconds(device)
    for _ in range(spec["rounds"]):
        start = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - start)
    res["native_s"] = (_native_seconds(device) - native) / max(spec["rounds"], 1)
    res["steady_s"] = statistics.median(times)
    res["best_s"] = min(times)
    res["steady_rss"] = _rss()[1]
    if device == "neuron":
        res["device_peak"] = torch.neuron.max_memory_allocated()
        res["device_capacity"] = torch.neuron.get_device_properties(0).total_memory
    torch.save(out.cpu(), spec["out"])
    res["peak_rss"] = _max_rss()
    return res


def _native_seconds(device):
    """Seconds spent so far in torch's CPU kernels called from executables (neuron sides)."""
    if device != "neuron":
        return 0.0
    from torch_neuronx import metrics

    return sum(v["seconds"] for v in metrics.native_kernel_stats().values())


def _max_rss():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def loading_child(spec):
    """Peak RSS above the baseline while loading a saved folder to `device`, two ways."""
    import torch
    from diffusers import Flux2Transformer2DModel

    dtype = getattr(torch, spec["dtype"])
    device = spec["device"]
    torch.set_grad_enabled(False)
    if device == "neuron":
        torch.neuron.synchronize()  # the device started before the baseline: its runtime is not the model's
    base = _rss()[0]
    _reset_peak_rss()
    start = time.perf_counter()
    if spec["how"] == "to":
        model = Flux2Transformer2DModel.from_pretrained(spec["folder"], torch_dtype=dtype).to(device)
    else:
        model = Flux2Transformer2DModel.from_pretrained(spec["folder"], torch_dtype=dtype, device_map=device)
    if device == "neuron":
        torch.neuron.synchronize()
    seconds = time.perf_counter() - start
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    where = {p.device.type for p in model.parameters()}
    return {"how": spec["how"], "device": device, "seconds": seconds, "weights_bytes": weights,
            "peak_above": _rss()[1] - base, "after_above": _rss()[0] - base, "where": sorted(where)}


def save_child(spec):
    import torch

    dtype = getattr(torch, spec["dtype"])
    model = build(spec["double"], spec["single"], dtype, "cpu")
    model.save_pretrained(spec["folder"])
    return {"saved": spec["folder"]}


# --------------------------------------------------------------------------------------------- parent


def run_child(spec, policy=None, autoload=True, timeout=3600, core_memory=None):
    label = f"{spec.get('side') or spec.get('role')} {spec.get('dtype')} (OMP_WAIT_POLICY={policy or 'unset'})"
    return run_json_child(__file__, spec, label=label, autoload=autoload, timeout=timeout,
                          settings={"OMP_WAIT_POLICY": policy, "TORCH_NEURONX_CORE_MEMORY": core_memory})


def _diff(out_path, ref_path):
    import torch

    out, ref = torch.load(out_path).double(), torch.load(ref_path).double()
    err = (out - ref).abs().max().item()
    return err, err / max(ref.abs().max().item(), 1e-30)


def _gb(n):
    return n / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, nargs=2, default=(1, 2), metavar=("DOUBLE", "SINGLE"))
    ap.add_argument("--resolution", type=int, default=512)
    ap.add_argument("--text-tokens", type=int, default=128)
    ap.add_argument("--dtype", choices=("bf16", "f32", "both"), default="both")
    ap.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES[:4]))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--torch-rounds", type=int, default=None, metavar="N",
                    help="rounds of the torch sides (default --rounds); 0: torch eager's one forward is its figure "
                         "(it compiles nothing), for a CPU where torch's 16-bit kernels take minutes a forward")
    ap.add_argument("--policy", choices=("default", "both"), default="default",
                    help="neuron sides also under OMP_WAIT_POLICY=PASSIVE with 'both'")
    ap.add_argument("--core-memory", default=None, metavar="SIZE",
                    help="TORCH_NEURONX_CORE_MEMORY for the neuron sides, e.g. 24GiB (a Trn2 logical core's HBM)")
    ap.add_argument("--loading", action="store_true", help="add the loading rows (writes the model to a folder)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        spec = json.loads(args.child)
        role = spec.get("role", "side")
        fn = {"side": child, "load": loading_child, "save": save_child}[role]
        print(json.dumps(fn(spec)))
        return
    if args.resolution % 16:
        raise SystemExit("--resolution must be a multiple of 16")
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    if args.torch_rounds is None:
        args.torch_rounds = args.rounds
    if args.torch_rounds == 0 and "Inductor" in args.sides:
        raise SystemExit("--torch-rounds 0 times one forward: Inductor's first one compiles (give it 1 or more)")
    started = time.perf_counter()
    load_start = os.getloadavg()
    double, single = args.blocks
    dtypes = ["bf16", "f32"] if args.dtype == "both" else [args.dtype]
    policies = ["default", "PASSIVE"] if args.policy == "both" else ["default"]
    total_flops = flops(double, single, args.resolution, args.text_tokens)
    work = tempfile.mkdtemp(prefix="flux_real-out-")
    results, loads = {}, {}
    try:
        for dt in dtypes:
            for side in args.sides:
                for policy in (policies if side.startswith("neuron") else ["default"]):
                    out = os.path.join(work, f"{dt}-{side.replace(' ', '_')}-{policy}.pt")
                    spec = dict(side=side, dtype=DTYPES[dt], double=double, single=single,
                                resolution=args.resolution, text_tokens=args.text_tokens,
                                rounds=args.rounds if side.startswith("neuron") else args.torch_rounds,
                                out=out)
                    print(f"... {dt} {side} ({policy} threads)", file=sys.stderr, flush=True)
                    r = run_child(spec, policy=None if policy == "default" else policy,
                                  autoload=side.startswith("neuron"), core_memory=args.core_memory)
                    r["out"] = out
                    results[(dt, side, policy)] = r
                    print(f"    steady {r['steady_s']:.3f} s, first {r['first_s']:.1f} s, steady RSS "
                          f"{_gb(r['steady_rss']):.2f} GB", file=sys.stderr, flush=True)
            if args.loading:
                folder = os.path.join(work, f"model-{dt}")
                run_child(dict(role="save", dtype=DTYPES[dt], double=double, single=single, folder=folder),
                          autoload=False)
                for device in ("cpu", "neuron"):
                    for how in ("to", "device_map"):
                        print(f"... {dt} loading to {device} ({how})", file=sys.stderr, flush=True)
                        loads[(dt, device, how)] = run_child(
                            dict(role="load", dtype=DTYPES[dt], folder=folder, device=device, how=how),
                            autoload=device == "neuron")
        report(args, results, loads, total_flops, dtypes, policies, load_start, time.perf_counter() - started)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return "CPU"


def _cpu_kernels():
    """What decides the 16-bit products on this CPU: torch's CPU capability and oneDNN's 16-bit support."""
    code = ("import torch; print(torch.backends.cpu.get_cpu_capability(), "
            "torch.ops.mkldnn._is_mkldnn_bf16_supported(), torch.cpu._is_avx512_bf16_supported())")
    env = child_env({"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    cap, onednn_bf16, avx512_bf16 = run_python_child(["-c", code], label="CPU kernels", env=env).stdout.split()
    return f"torch's CPU capability {cap}, oneDNN bf16 kernels {onednn_bf16 == 'True'}, AVX-512 BF16 {avx512_bf16 == 'True'}"


def report(args, results, loads, total_flops, dtypes, policies, load_start, elapsed):
    import platform

    double, single = args.blocks
    n_img = (args.resolution // 16) ** 2
    any_r = next(iter(results.values()))
    params = any_r["weights_bytes"] / (2 if any_r["dtype"] == "bfloat16" else 4)
    print(f"FLUX.2-klein-4B transformer (hidden 3072 = 24 heads x 128, MLP x3, joint attention dim 7680), "
          f"{double} double + {single} single blocks, {params / 1e6:.0f} M parameters; {args.resolution}x"
          f"{args.resolution} ({n_img} image tokens) + {args.text_tokens} text tokens; "
          f"{total_flops / 1e9:.0f} GFLOP per forward")
    print(f"{platform.machine()}, {os.cpu_count()} CPUs ({_cpu_name()}; {_cpu_kernels()}); load average "
          f"{load_start[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end; steady = median of {args.rounds} "
          f"forwards after a warm one" + ("" if args.torch_rounds == args.rounds else
                                          f" ({args.torch_rounds} for torch" + (": its one forward" if not args.torch_rounds
                                                                                 else "") + ")"))
    print()
    head = (f"| dtype | side | steady s | vs torch eager | vs Inductor | GFLOP/s | first s | steady RSS GB | "
            f"peak RSS GB | device peak GB | max diff | rel diff |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for dt in dtypes:
        eager = results.get((dt, "torch eager", "default"))
        inductor = results.get((dt, "Inductor", "default"))
        for side in args.sides:
            for policy in (policies if side.startswith("neuron") else ["default"]):
                r = results[(dt, side, policy)]
                name = side if policy == "default" else f"{side} (PASSIVE)"
                ve = f"{r['steady_s'] / eager['steady_s']:.2f}x" if eager and side != "Inductor" else ""
                vi = f"{r['steady_s'] / inductor['steady_s']:.2f}x" if inductor and side != "torch eager" else ""
                if side == "torch eager":
                    ve = "1"
                if side == "Inductor":
                    vi = "1"
                dev = f"{_gb(r['device_peak']):.2f}" if "device_peak" in r else ""
                if eager:
                    err, rel = _diff(r["out"], eager["out"])
                    diffs = f"{err:.3g} | {rel:.2e}"
                else:
                    diffs = " | "
                print(f"| {dt} | {name} | {r['steady_s']:.3f} | {ve} | {vi} | "
                      f"{total_flops / r['steady_s'] / 1e9:.0f} | {r['first_s']:.1f} | {_gb(r['steady_rss']):.2f} | "
                      f"{_gb(r['peak_rss']):.2f} | {dev} | {diffs} |")
    native = [(k, r) for k, r in results.items() if r.get("native_s")]
    if native:
        print("time in torch's CPU kernels called from executables (matmuls, attention, convolutions), per "
              "forward: " + "; ".join(f"{dt} {side}{'' if p == 'default' else ' ' + p} {r['native_s']:.3f} s "
                                      f"({r['native_s'] / r['steady_s']:.0%})" for (dt, side, p), r in native))
    caps = {r["device_capacity"] for r in results.values() if "device_capacity" in r}
    if caps:
        print(f"(device peak: torch.neuron.max_memory_allocated() during the steady calls, of a core of "
              f"{', '.join(f'{c / 2**30:.1f} GiB' for c in sorted(caps))}: TORCH_NEURONX_CORE_MEMORY, else the platform's)")
    if loads:
        print()
        print("| dtype | load | device | seconds | weights GB | peak RSS above baseline GB | x weights | "
              "held after GB | parameters on |")
        print("|---|---|---|---|---|---|---|---|---|")
        for (dt, device, how), r in loads.items():
            load = "from_pretrained(dtype).to(device)" if how == "to" else "from_pretrained(device_map=device)"
            print(f"| {dt} | {load} | {device} | {r['seconds']:.1f} | {_gb(r['weights_bytes']):.2f} | "
                  f"{_gb(r['peak_above']):.2f} | {r['peak_above'] / r['weights_bytes']:.2f} | "
                  f"{_gb(r['after_above']):.2f} | {','.join(r['where'])} |")
    print(f"\n({elapsed:.0f} s in all)")


if __name__ == "__main__":
    main()
