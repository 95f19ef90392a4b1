"""2 ranks (run by training_default.py): DistributedDataParallel training over the `neuron` process group, each job compared with the
same job on CPU tensors over a Gloo group of the same ranks (the reference).

Checks: a transformer model in several all-reduce buckets with AdamW; no_sync() gradient accumulation
(the gradients after the local backward are the rank's own; gradients as views of the buckets); find_unused_parameters with a parameter
the forward never uses; broadcast_buffers (each forward starts from rank 0's BatchNorm statistics);
the bf16 compression comm hook against the same hook on Gloo. Every step's loss, gradients (after
DDP's all-reduce) and the final parameters are compared. Compiled steps: training_compiled.py.
"""
import copy

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from training_support import (
    DIM, MLP, Net, assert_close, batch, build, check, full, gloo_world, grads, init, loss_fn, max_diff, params,
    record_step, same_run,
)

RANK, WORLD = init()
GLOO = gloo_world()  # the reference: the same ranks, CPU tensors, Gloo
NEURON = torch.device("neuron", 0)
JOBS = {"neuron": (NEURON, None), "cpu": (torch.device("cpu"), GLOO)}  # device, DDP's process group


def train(job, model, steps=3, *, opt="adamw", ddp=None, hook=None, micro=1, seq=6, rows=2, on_ddp=None):
    """Train `model` (a fresh copy) wrapped in DDP on `job`'s device and group; the record."""
    device, group = JOBS[job]
    module = copy.deepcopy(model).to(device)
    wrapped = DDP(module, process_group=group, **(ddp or {}))
    if hook is not None:
        wrapped.register_comm_hook(group, hook)
    if on_ddp is not None:
        on_ddp(wrapped)
    if opt == "adamw":
        optim = torch.optim.AdamW(module.parameters(), lr=1e-2, weight_decay=0.01, foreach=False)
    else:
        optim = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9, foreach=False)
    record = {"losses": [], "grads": [], "local_grads": []}
    for step in range(steps):
        for m in range(micro):
            x, y = batch(step * micro + m, RANK, rows, seq)
            if m < micro - 1:
                with wrapped.no_sync():  # accumulate locally: no all-reduce
                    loss = loss_fn(wrapped(x.to(device)), y.to(device))
                    loss.backward()
                record["local_grads"].append(grads(module))
            else:
                loss = loss_fn(wrapped(x.to(device)), y.to(device))
                loss.backward()
        record_step(record, loss, module, optim, group)
    record["params"] = params(module)
    record["buffers"] = [full(b) for b in module.buffers()]
    record["ddp"] = wrapped
    return record


def both(model, **kw):
    return train("neuron", model, **kw), train("cpu", model, **kw)


# ---- a transformer in several buckets, AdamW -------------------------------------------------------
def buckets_adamw():
    model = build(Net)
    # 0.004 MB buckets: the model's 11 KB of parameters go in several all-reduces
    got, want = both(model, ddp=dict(bucket_cap_mb=0.004))
    # DDP starts with one bucket and rebuilds them, by the cap, in the order the gradients came
    data = got["ddp"]._get_ddp_logging_data()
    sizes = [int(s) for s in str(data.get("rebuilt_bucket_sizes", "")).split(",") if s.strip()]
    assert len(sizes) >= 3, f"expected several buckets, DDP made {sizes} ({data})"
    return {**same_run(got, want, "DDP AdamW"), "bucket_sizes": sizes}


# ---- no_sync gradient accumulation ---------------------------------------------------------------------
def no_sync():
    model = build(MLP)
    # gradient_as_bucket_view: the gradients are views of DDP's bucket buffers, which the all-reduce
    # writes in place
    got, want = both(model, opt="sgd", micro=2, steps=2, seq=None, rows=4,
                     ddp=dict(bucket_cap_mb=0.002, gradient_as_bucket_view=True))
    same_run(got, want, "DDP no_sync SGD")
    # the gradients after the no_sync backward are this rank's alone: the first micro-batch's
    # gradients of a plain (undistributed) copy of the model, on neuron
    plain = copy.deepcopy(model).to(NEURON)
    x, y = batch(0, RANK, 4, None)
    loss_fn(plain(x.to(NEURON)), y.to(NEURON)).backward()
    assert_close(got["local_grads"][0], grads(plain), "DDP no_sync: local gradients")
    # ... and differ between the ranks (so no all-reduce ran); after the synced backward they agree
    first = got["local_grads"][0][0].reshape(-1)
    everyone = [torch.empty_like(first) for _ in range(WORLD)]
    dist.all_gather(everyone, first, group=GLOO)
    assert not torch.equal(everyone[0], everyone[1]), "the no_sync gradients agree across ranks"
    synced = got["grads"][0][0].reshape(-1)
    dist.all_gather(everyone, synced, group=GLOO)
    assert torch.equal(everyone[0], everyone[1]), "the synced gradients differ across ranks"
    return {"losses": got["losses"], "reference_losses": want["losses"]}


# ---- find_unused_parameters ------------------------------------------------------------------------
class WithUnused(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = MLP()
        self.unused = nn.Linear(DIM, DIM)  # never called in forward

    def forward(self, x):
        return self.used(x)


def unused():
    model = build(WithUnused)
    got, want = both(model, steps=2, seq=None, rows=4, ddp=dict(find_unused_parameters=True))
    names = [n for n, _ in model.named_parameters()]
    for step in got["grads"]:
        for n, g in zip(names, step):
            assert (g is None) == n.startswith("unused"), f"{n}: gradient {'missing' if g is None else 'present'}"
    return same_run(got, want, "DDP find_unused_parameters")


# ---- broadcast_buffers: every forward starts from rank 0's BatchNorm statistics --------------------
class WithNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(DIM, 8)
        self.bn = nn.BatchNorm1d(8)
        self.fc2 = nn.Linear(8, 5)

    def forward(self, x):
        return self.fc2(F.relu(self.bn(self.fc1(x))))


def broadcast_buffers():
    model = build(WithNorm)
    seen = {}

    def diverge(wrapped):
        # after DDP's construction (which broadcasts once): each rank's own statistics
        bn = wrapped.module.bn
        with torch.no_grad():
            bn.running_mean.fill_(float(RANK + 1))
            bn.running_var.fill_(float(RANK + 2))
        bn.register_forward_pre_hook(
            lambda m, args: seen.setdefault(str(m.running_mean.device.type), []).append(
                [float(m.running_mean[0]), float(m.running_var[0])]))

    # SGD: the bias before a BatchNorm has no gradient (the norm removes it), and AdamW would turn its
    # rounding noise into whole steps
    got, want = both(model, opt="sgd", steps=2, seq=None, rows=4, ddp=dict(broadcast_buffers=True),
                     on_ddp=diverge)
    # each forward began with rank 0's statistics: 1 and 2 at the first, then rank 0's updated ones
    for device, starts in seen.items():
        assert starts[0] == [1.0, 2.0], f"{device}: the first forward started from {starts[0]}, not rank 0's"
    rank0 = [torch.tensor(seen["neuron"]) for _ in range(WORLD)]
    dist.all_gather(rank0, torch.tensor(seen["neuron"]), group=GLOO)
    assert torch.equal(rank0[0], rank0[1]), f"ranks started their forwards from different statistics: {rank0}"
    assert_close(got["buffers"], want["buffers"], "DDP broadcast_buffers: final buffers")
    return {**same_run(got, want, "DDP broadcast_buffers"), "forward_start_stats": seen["neuron"]}


# ---- the bf16 compression comm hook, against the same hook on Gloo --------------------------------
def bf16_compress(state, bucket):
    """PyTorch's bf16_compress_hook under another name: DDP refuses the hook by its name unless torch
    was built with CUDA and NCCL or XPU (Gloo on the CPU included); its computation needs neither."""
    return default_hooks.bf16_compress_hook(state, bucket)


def bf16_hook():
    model = build(MLP)
    refusals = {}
    for job in JOBS:
        device, group = JOBS[job]
        try:
            DDP(copy.deepcopy(model).to(device), process_group=group).register_comm_hook(
                group, default_hooks.bf16_compress_hook)
        except TypeError as e:
            refusals[job] = str(e)
    kw = dict(opt="sgd", steps=2, seq=None, rows=4)
    got, want = both(model, hook=bf16_compress, **kw)
    # both sides round the same way; a gradient that lands on a bfloat16 rounding boundary may round
    # the other way where the neuron and CPU gradients differ in their last float32 bit
    out = same_run(got, want, "DDP bf16_compress_hook", rtol=1e-2, atol=1e-4)
    equal = sum(int(torch.equal(g, w)) for sg, sw in zip(got["grads"], want["grads"]) for g, w in zip(sg, sw))
    plain = train("neuron", model, **kw)  # the hook changed something: float32 all-reduce differs
    return {**out, "refusals": refusals, "equal_grad_tensors": equal, "grad_tensors": sum(len(s) for s in got["grads"]),
            "diff_from_fp32_allreduce": max_diff(got["grads"], plain["grads"])}


def main():
    check("ddp_buckets_adamw", buckets_adamw)
    check("ddp_no_sync", no_sync)
    check("ddp_find_unused", unused)
    check("ddp_broadcast_buffers", broadcast_buffers)
    check("ddp_bf16_hook", bf16_hook)
