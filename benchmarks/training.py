"""A training step of diffusers' FLUX.2 transformer: torch's CPU against neuron, each side in a process of its own.

    PYTHONPATH=. python benchmarks/training.py [--width small|real] [--blocks D S] [--resolution PX]
                                               [--text-tokens T] [--train full|lora] [--dtype f32|bf16]
                                               [--steps N] [--sides ...] [--ranks 1 2]

One step: zero_grad, forward (the flow-matching loss diffusers' FLUX.2 LoRA script takes: the MSE between the
model's velocity and noise - latents), backward, AdamW step. `--train full` trains every parameter in
`--dtype` (float32 by default: AdamW on bf16 parameters is not how anyone trains); `--train lora` trains a
peft LoRA adapter (rank 16 on the attention projections, as diffusers' script adds it) on a frozen base held in
`--dtype` (bf16 by default, the script's `--mixed_precision bf16` with the base cast to bf16), the LoRA weights in
float32 under `torch.autocast(dtype=bfloat16)`.

`--width small` (default): the FLUX.2-klein architecture cut to hidden 512 (4 heads x 128), joint attention 1024,
which trains in seconds; `--width real`: FLUX.2-klein-4B's own width (flux_real.py's KLEIN_4B, hidden 3072),
for `--train lora` (AdamW state for the full 4B width does not fit here).

Sides, one rank: torch eager (CPU), Inductor (`torch.compile` of the whole step, CPU), neuron eager, neuron
compiled (`torch.compile(step, backend="neuron")`: forward, backward and the optimizer step as graphs). With
`--ranks 2` also, under torchrun on 2 processes: DDP and FSDP2 (`fully_shard` of each block and the model)
with torch on the CPU over Gloo against the same on neuron over the `neuron` process group (eager). torchrun
sets OMP_NUM_THREADS=1 per process for both, as it does for every user.

Columns: steady (median seconds of one step over --steps, after two warm steps), vs eager / vs Inductor (that over
the torch CPU side's of the same ranks), first (the first step: empty executable / Inductor cache), loss diff
(the largest relative difference of any step's loss from the torch CPU side's of the same ranks, over all
--steps + 3 steps: the loss curve; `--steps 17` makes it 20), Trn2 est s (a neuron side's step as estimated on one Trn2
core: `torch_neuronx.metrics.estimate_summary()`, a roofline lower bound, docs/targets.md) and coll share (the
collectives' part of that estimate). Run it alone; the load average is printed with the table.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from child_process import child_env, last_json, run_child, run_json_child

HERE = os.path.dirname(os.path.abspath(__file__))
ONE_RANK = ("torch eager", "Inductor", "neuron eager", "neuron compiled")
TWO_RANKS = ("torch DDP", "neuron DDP", "torch FSDP2", "neuron FSDP2")
SMALL = dict(num_attention_heads=4, joint_attention_dim=1024)


def model_config(width, double, single):
    from flux_real import config

    cfg = config(double, single)
    return dict(cfg, **SMALL) if width == "small" else cfg


def build(spec, device):
    import torch
    from flux_real import _fill

    from diffusers import Flux2Transformer2DModel

    dtype = getattr(torch, spec["dtype"])
    with torch.device("meta"):
        model = Flux2Transformer2DModel(**model_config(spec["width"], *spec["blocks"]))
    model = _fill(model.to(dtype=dtype).to_empty(device=device))
    if spec["train"] == "lora":
        from peft import LoraConfig

        model.requires_grad_(False)
        model.add_adapter(LoraConfig(r=16, lora_alpha=16, init_lora_weights="gaussian",
                                     target_modules=["to_k", "to_q", "to_v", "to_out.0"]))
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.float()  # the script keeps the trained LoRA weights in float32
    return model.train()


def batch(spec, device):
    """A fixed batch: latents, text states, their ids, and the noise/timestep of flow matching."""
    import torch
    from flux_real import inputs

    dtype = getattr(torch, spec["dtype"])
    x = inputs(spec["resolution"], spec["text_tokens"], dtype, "cpu")
    if spec["width"] == "small":
        x["encoder_hidden_states"] = x["encoder_hidden_states"][..., :SMALL["joint_attention_dim"]].contiguous()
    g = torch.Generator().manual_seed(2)
    latents = x.pop("hidden_states")
    noise = torch.randn(latents.shape, generator=g).to(dtype)
    sigma = torch.tensor([0.7])
    x["timestep"] = sigma.to(dtype)
    noisy = ((1 - sigma) * latents.float() + sigma * noise.float()).to(dtype)
    target = (noise.float() - latents.float())
    moved = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in x.items()}
    return noisy.to(device), target.to(device), moved


def make_step(model, spec, device):
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=1e-2)
    noisy, target, x = batch(spec, device)
    lora = spec["train"] == "lora"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=lora):
            pred = model(hidden_states=noisy, **x)[0]
        loss = torch.nn.functional.mse_loss(pred.float(), target)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def _estimate():
    """(seconds, of which collectives) of everything launched so far, as estimated on one Trn2 core."""
    from torch_neuronx import metrics

    summary = metrics.estimate_summary()
    return summary["seconds"], summary["collectives_s"]


def _wait(device):
    import torch

    if device == "neuron":
        torch.neuron.synchronize()


def child(spec):
    import torch

    side = spec["side"]
    device = "neuron" if side.startswith("neuron") else "cpu"
    distributed = side.endswith(("DDP", "FSDP2"))
    rank = 0
    if distributed:
        import torch.distributed as dist

        dist.init_process_group("neuron" if device == "neuron" else "gloo")
        rank = dist.get_rank()
        if device == "neuron":
            torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
    model = build(spec, device)
    if side.endswith("DDP"):
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model)
    elif side.endswith("FSDP2"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device, (dist.get_world_size(),))
        for block in list(model.transformer_blocks) + list(model.single_transformer_blocks):
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    step = make_step(model, spec, device)
    if side == "Inductor":
        step = torch.compile(step, backend="inductor")
    elif side == "neuron compiled":
        step = torch.compile(step, backend="neuron")
    _wait(device)
    start = time.perf_counter()
    losses = [float(step())]
    first = time.perf_counter() - start
    for _ in range(2):  # the second step is the first with AdamW's state: new programs; the third is steady
        losses.append(float(step()))  # each step reads its loss, as the timed ones do (where the host waits shapes eager's runs)
    times = []
    estimate = _estimate() if device == "neuron" else None
    for _ in range(spec["steps"]):
        start = time.perf_counter()
        loss = step()
        losses.append(float(loss))  # reading the loss waits for the step, as a training loop's log does
        times.append(time.perf_counter() - start)
    res = {"side": side, "first_s": first, "steady_s": statistics.median(times), "best_s": min(times),
           "losses": losses, "rank": rank}
    if estimate is not None:  # one step on the target, the collectives' share of it
        after = _estimate()
        res["est_s"] = (after[0] - estimate[0]) / spec["steps"]
        res["est_collectives_s"] = (after[1] - estimate[1]) / spec["steps"]
    if distributed:
        dist.destroy_process_group()
    return res


def run_side(spec, side):
    spec = dict(spec, side=side)
    if side in ONE_RANK:
        return run_json_child(__file__, spec, label=side, autoload=side.startswith("neuron"), timeout=7200)
    # two ranks under torchrun; rank 0's line is the figure (both ranks step in lockstep)
    import tempfile

    env = child_env({"TORCH_NEURONX_NEFF_CACHE_DIR": tempfile.mkdtemp(prefix="training-neff-")},
                    unset=("OMP_WAIT_POLICY",), root_on_path=True)
    env["PYTHONPATH"] = os.pathsep.join([HERE, env["PYTHONPATH"]])
    if not side.startswith("neuron"):
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    p = run_child(["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", os.path.abspath(__file__),
                   "--child", json.dumps(spec)], label=side, env=env, timeout=7200)
    results = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    return next(r for r in results if r["rank"] == 0)


def _load():
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", choices=("small", "real"), default="small")
    ap.add_argument("--blocks", type=int, nargs=2, default=(1, 2), metavar=("DOUBLE", "SINGLE"))
    ap.add_argument("--resolution", type=int, default=256)
    ap.add_argument("--text-tokens", type=int, default=64)
    ap.add_argument("--train", choices=("full", "lora"), default="full")
    ap.add_argument("--dtype", choices=("f32", "bf16"), default=None,
                    help="the base model's dtype (default: f32 for --train full, bf16 for --train lora)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--ranks", type=int, nargs="+", choices=(1, 2), default=(1, 2))
    ap.add_argument("--sides", nargs="+", choices=ONE_RANK + TWO_RANKS, default=None)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        sys.stdout.flush()  # one write of the whole line: two ranks share the pipe
        os.write(1, (json.dumps(child(json.loads(args.child))) + "\n").encode())
        return
    dtype = {"f32": "float32", "bf16": "bfloat16"}[args.dtype or ("f32" if args.train == "full" else "bf16")]
    spec = {"width": args.width, "blocks": list(args.blocks), "resolution": args.resolution,
            "text_tokens": args.text_tokens, "train": args.train, "dtype": dtype, "steps": args.steps}
    sides = args.sides or [s for s in ONE_RANK if 1 in args.ranks] + [s for s in TWO_RANKS if 2 in args.ranks]
    print(f"training step of FLUX.2 ({args.width} width, blocks {args.blocks[0]}+{args.blocks[1]}, "
          f"{args.resolution}px, {args.text_tokens} text tokens), {args.train} training, base {dtype}; "
          f"load average at start {_load()}", flush=True)
    rows = {}
    for side in sides:
        rows[side] = run_side(spec, side)
        print(f"  {side}: {rows[side]['steady_s']:.3f} s/step", file=sys.stderr, flush=True)
    base = {1: rows.get("torch eager"), 2: None}
    print(f"\n{'side':<18}{'ranks':>6}{'steady s':>10}{'vs eager':>10}{'vs Inductor':>12}{'first s':>10}{'loss diff':>11}"
          f"{'Trn2 est s':>12}{'coll share':>12}")
    for side, r in rows.items():
        ranks = 1 if side in ONE_RANK else 2
        ref = base[1] if ranks == 1 else rows.get("torch " + side.split()[-1])
        ind = rows.get("Inductor") if ranks == 1 else None
        vs = f"{r['steady_s'] / ref['steady_s']:.2f}x" if ref else "-"
        vi = f"{r['steady_s'] / ind['steady_s']:.2f}x" if ind else "-"
        diff = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(r["losses"], ref["losses"])) if ref else float("nan")
        est = f"{r['est_s']:.4f}" if "est_s" in r else "-"
        share = f"{r['est_collectives_s'] / r['est_s']:.0%}" if r.get("est_s") else "-"
        print(f"{side:<18}{ranks:>6}{r['steady_s']:>10.3f}{vs:>10}{vi:>12}{r['first_s']:>10.1f}{diff:>11.1e}"
              f"{est:>12}{share:>12}")
    print(f"\n(ratios: the side's seconds over torch's CPU side of the same ranks; below 1 is faster than torch) "
          f"load average at end {_load()}")


if __name__ == "__main__":
    main()
