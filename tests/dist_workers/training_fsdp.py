"""2 ranks (run by training_default.py): FSDP2 (`fully_shard`) training on `init_device_mesh("neuron", (2,))`,
each job compared with the same job on CPU tensors over a Gloo mesh of the same ranks (the reference).
`main(folder)`: the checks, the last one saving a distributed checkpoint in `folder` that
training_dcp.py resumes.

Checks: the parameters are DTensor Shard(0) shards on neuron; AdamW steps with reshard_after_forward
True and False; explicit prefetching with gradient accumulation (set_requires_gradient_sync);
MixedPrecisionPolicy(bf16 params, f32 reduction) against the same policy on Gloo; CPUOffloadPolicy
(shards and optimizer on the host, compute on neuron); activation checkpointing (checkpoint_wrapper
around blocks with dropout) against the same run without it; a torch.distributed.checkpoint save of
the sharded model and optimizer mid-run. Compiled steps: training_compiled.py.
"""
import copy
import pathlib

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper, checkpoint_wrapper
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Shard

from training_support import (
    Net, assert_close, batch, build, check, gloo_world, global_batch, init, loss_fn, max_diff, mean_over_ranks,
    params, record_step, same_run,
)

RANK, WORLD = init()
MESH = init_device_mesh("neuron", (WORLD,))
GLOO = gloo_world()
CPU_MESH = DeviceMesh.from_group(GLOO, "cpu")  # the reference: the same ranks, CPU tensors, Gloo
NEURON = torch.device("neuron", 0)
JOBS = {"neuron": (NEURON, MESH, None), "cpu": (torch.device("cpu"), CPU_MESH, GLOO)}


def shard(job, model, wrap=None, **fsdp):
    """A copy of `model` on `job`'s device, each block then the whole model sharded over its mesh;
    `wrap(block)` first, if given (activation checkpointing)."""
    device, mesh, _ = JOBS[job]
    module = copy.deepcopy(model)
    if "offload_policy" not in fsdp:
        module.to(device)
    for i, block in enumerate(module.blocks):
        module.blocks[i] = fully_shard(wrap(block) if wrap else block, mesh=mesh, **fsdp)
    return fully_shard(module, mesh=mesh, **fsdp)


def train(job, model, steps=3, *, seed=None, on_forward=None, wrap=None, **fsdp):
    """Train a sharded copy of `model` on `job`; the record. `seed`: the device generator is seeded
    before each step (dropout)."""
    device, _, group = JOBS[job]
    module = shard(job, model, wrap, **fsdp)
    optim = torch.optim.AdamW(module.parameters(), lr=1e-2, weight_decay=0.01, foreach=False)
    record = {"losses": [], "grads": [], "module": module}
    for step in range(steps):
        if seed is not None:
            torch.manual_seed(seed + 1000 * step + RANK)
        x, y = batch(step, RANK)
        out = module(x.to(device))
        if on_forward is not None:
            on_forward(module)
        loss = loss_fn(out, y.to(device))
        loss.backward()
        record_step(record, loss, module, optim, group)
    record["params"] = params(module)
    return record


def both(model, **kw):
    return train("neuron", model, **kw), train("cpu", model, **kw)


# ---- the sharded parameters --------------------------------------------------------------------
def sharded():
    model = build(Net)
    module = shard("neuron", model)
    seen = []
    for (name, p), (_, full) in zip(module.named_parameters(), model.named_parameters()):
        assert isinstance(p, DTensor), f"{name}: {type(p).__name__}"
        local = p.to_local()
        assert p.placements == (Shard(0),) and p.device_mesh == MESH, f"{name}: {p.placements} on {p.device_mesh}"
        assert local.device == NEURON, f"{name}: local shard on {local.device}"
        assert_close(local.cpu(), torch.tensor_split(full.detach(), WORLD)[RANK], f"{name}: local shard")
        seen.append([name, list(local.shape)])
    return {"local_shards": seen}


# ---- forward, backward and AdamW steps, against CPU + Gloo --------------------------------------------------
def reshard(after_forward):
    def run():
        states = []

        def state(module):  # after the forward: resharded (DTensor parameters) or kept unsharded
            states.append(isinstance(module.blocks[0].q.weight, DTensor))

        got, want = both(build(Net), reshard_after_forward=after_forward, on_forward=state)
        assert set(states) == {after_forward}, f"the blocks' parameters after the forward sharded: {states}"
        return same_run(got, want, f"FSDP2 reshard_after_forward={after_forward}")
    return run


# ---- explicit prefetching, asynchronous unshard, accumulation without reduce-scatter -----------------------------
def prefetch_and_accumulate():
    """Block 0's forward prefetches block 1's all-gather and block 1's backward block 0's (on FSDP's
    all-gather streams, neuron streams of their own), the root is unsharded ahead with async_op=True,
    and two micro-batches a step accumulate with the first one's gradient sync off (no reduce-scatter
    until the second)."""
    def run_job(job):
        device, _, group = JOBS[job]
        module = shard(job, build(Net))
        module.blocks[0].set_modules_to_forward_prefetch([module.blocks[1]])
        module.blocks[1].set_modules_to_backward_prefetch([module.blocks[0]])
        optim = torch.optim.AdamW(module.parameters(), lr=1e-2, weight_decay=0.01, foreach=False)
        record = {"losses": [], "grads": []}
        for step in range(2):
            for micro in range(2):
                module.set_requires_gradient_sync(micro == 1)
                module.unshard(async_op=True)
                x, y = batch(2 * step + micro, RANK)
                loss = loss_fn(module(x.to(device)), y.to(device))
                loss.backward()
            record_step(record, loss, module, optim, group)
        record["params"] = params(module)
        # FSDP2's communication streams, made through the device module (torch.neuron.Stream)
        ctx = module._get_fsdp_state()._comm_ctx
        record["streams"] = {n: getattr(ctx, n) for n in ("all_gather_copy_in_stream", "all_gather_stream",
                                                           "reduce_scatter_stream")}
        return record

    got = run_job("neuron")
    streams = got["streams"]
    for name, stream in streams.items():
        assert isinstance(stream, torch.neuron.Stream) and stream.device.type == "neuron", f"{name}: {stream!r}"
    ids = {s.stream_id for s in streams.values()} | {torch.neuron.current_stream().stream_id}
    assert len(ids) == len(streams) + 1, f"FSDP2's streams are not streams of their own: {streams}"
    return {**same_run(got, run_job("cpu"), "FSDP2 prefetch + accumulation"),
            "streams": {n: f"{type(s).__module__}.{type(s).__name__} {s.stream_id}" for n, s in streams.items()}}


# ---- mixed precision --------------------------------------------------------------------------------------
def mixed_precision():
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    dtypes = set()

    def seen(module):
        dtypes.add(str(module.blocks[0].q.weight.dtype))

    model = build(Net)
    got, want = both(model, mp_policy=policy, reshard_after_forward=False, on_forward=seen)
    exact = train("cpu", model)  # the policy's own error: bf16 against float32, on the CPU
    assert dtypes == {"torch.bfloat16"}, f"unsharded parameters in the forward: {dtypes}"
    for step in got["grads"]:
        assert all(g.dtype == torch.float32 for g in step), "gradients not reduced to float32"
    diffs = {"grad_diff": max_diff(got["grads"], want["grads"]), "param_diff": max_diff(got["params"], want["params"]),
             "loss_diff": max_diff(torch.tensor(got["losses"]), torch.tensor(want["losses"]))}
    policy_error = {"grad_diff": max_diff(want["grads"], exact["grads"]),
                    "param_diff": max_diff(want["params"], exact["params"]),
                    "loss_diff": max_diff(torch.tensor(want["losses"]), torch.tensor(exact["losses"]))}
    # the policy's tolerance on CPU + Gloo: how far its run lands from the float32 run. Neuron's run
    # under the policy lands as close (bfloat16 rounds differently where the float32 values differ
    # in their last bit: a margin of a quarter)
    neuron_error = {"grad_diff": max_diff(got["grads"], exact["grads"]),
                    "param_diff": max_diff(got["params"], exact["params"]),
                    "loss_diff": max_diff(torch.tensor(got["losses"]), torch.tensor(exact["losses"]))}
    for k in policy_error:
        assert neuron_error[k] <= 1.25 * policy_error[k], (
            f"bf16 policy: neuron's {k} from the float32 run {neuron_error[k]:.3g}, the CPU's {policy_error[k]:.3g}")
        assert diffs[k] <= 2 * policy_error[k], (
            f"bf16 policy: neuron's {k} from the CPU's under the policy {diffs[k]:.3g}, the policy's own {policy_error[k]:.3g}")
    return {"losses": got["losses"], "reference_losses": want["losses"], "float32_losses": exact["losses"],
            "neuron_vs_cpu": diffs, "cpu_bf16_vs_float32": policy_error, "neuron_bf16_vs_cpu_float32": neuron_error,
            "param_dtype_in_forward": sorted(dtypes)}


# ---- CPU offload --------------------------------------------------------------------------------------
def offload():
    model = build(Net)
    devices = {}

    def seen(module):
        devices["shard"] = str(module.blocks[0].q.weight.to_local().device)

    outputs = []
    hook = model.head.register_forward_hook(lambda m, a, out: outputs.append(str(out.device)))
    got = train("neuron", model, offload_policy=CPUOffloadPolicy(), on_forward=seen)
    hook.remove()
    want = train("cpu", model)  # the same math, without offloading
    assert devices["shard"] == "cpu", f"offloaded shards on {devices['shard']}"
    assert set(outputs) == {"neuron:0"}, f"the forward ran on {outputs}"
    return {**same_run(got, want, "FSDP2 CPUOffloadPolicy"), "shard_device": devices["shard"], "compute": outputs[0]}


# ---- activation checkpointing with dropout --------------------------------------------------------------
def activation_checkpointing():
    model = build(Net, dropout=0.2)
    plain = train("neuron", model, seed=7)
    ckpt = train("neuron", model, seed=7, wrap=checkpoint_wrapper)
    wrapped = [type(b).__name__ for b in ckpt["module"].blocks]  # FSDP's subclass of the wrapper
    assert all(isinstance(b, CheckpointWrapper) for b in ckpt["module"].blocks), wrapped
    # the same masks: equal within float32 rounding (eager fusion groups the recomputed forward's ops
    # into other runs than the first forward's); other masks move the gradients by > 1e-4 (below)
    out = same_run(ckpt, plain, "FSDP2 + checkpoint_wrapper (dropout)")
    # without the RNG stash the recompute draws other masks: other gradients (the check has teeth)
    fresh = train("neuron", model, steps=1, seed=7, wrap=lambda b: checkpoint_wrapper(b, preserve_rng_state=False))
    differs = max_diff(fresh["grads"][0], plain["grads"][0])
    assert differs > 1e-4, f"gradients without the RNG stash match ({differs}): the dropout masks do not matter"
    return {**out, "wrapper": wrapped, "grad_diff_without_rng_stash": differs}


# ---- a distributed checkpoint mid-run (resumed by training_dcp.py on another number of ranks) ----------------
def checkpoint_save(folder: pathlib.Path, steps=4, save_at=2, rows=4):
    def run():
        module = shard("neuron", build(Net))
        optim = torch.optim.AdamW(module.parameters(), lr=1e-2, weight_decay=0.01, foreach=False)
        losses = []
        for step in range(steps):
            if step == save_at:
                model_sd, optim_sd = get_state_dict(module, optim)
                dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=folder / f"step{save_at}")
            x, y = global_batch(step, WORLD, RANK, rows)
            loss = loss_fn(module(x.to(NEURON)), y.to(NEURON))
            loss.backward()
            losses.append(mean_over_ranks(loss))
            optim.step()
            optim.zero_grad()
        final = params(module)
        if RANK == 0:
            torch.save({"losses": losses, "params": final}, folder / "uninterrupted.pt")
        files = sorted(p.name for p in (folder / f"step{save_at}").iterdir())
        return {"losses": losses, "files": files}
    return run


def main(folder: pathlib.Path):
    check("fsdp_sharded_parameters", sharded)
    check("fsdp_reshard_after_forward", reshard(True))
    check("fsdp_no_reshard_after_forward", reshard(False))
    check("fsdp_prefetch_and_accumulation", prefetch_and_accumulate)
    check("fsdp_mixed_precision", mixed_precision)
    check("fsdp_cpu_offload", offload)
    check("fsdp_activation_checkpointing", activation_checkpointing)
    check("fsdp_dcp_save", checkpoint_save(folder))
