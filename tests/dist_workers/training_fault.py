"""2 plain processes (no torchrun, which would stop the survivor): a training job loses rank 1, killed
with SIGKILL in the middle of a step's backward, while rank 0 waits in that step's collectives.

argv: "ddp" or "fsdp", a folder. Both ranks train two steps, save a torch.distributed.checkpoint of
the sharded model and optimizer (`<folder>/step2`, what training_dcp.py resumes in a fresh launch),
then start the third step; rank 1 dies when the backward reaches the first layer (DDP: after the later
buckets' all-reduces started; FSDP2: before the first block's all-gather and reduce-scatter). Rank 0
reports the error it got and how long it took, within the group's 20 s timeout.
"""
import datetime
import os
import pathlib
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

from distributed_harness import report
from training_support import Net, build, global_batch, loss_fn, mean_over_ranks

MODE, FOLDER = sys.argv[1], pathlib.Path(sys.argv[2])
TIMEOUT = 20.0
ROWS, SAVE_AT = 4, 2
dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=TIMEOUT))
RANK, WORLD = dist.get_rank(), dist.get_world_size()
NEURON = torch.device("neuron", 0)

module = build(Net).to(NEURON)
if MODE == "ddp":
    model = DDP(module, bucket_cap_mb=0.004)  # several buckets: some all-reduces done, one waiting
else:
    mesh = init_device_mesh("neuron", (WORLD,))
    for block in module.blocks:
        fully_shard(block, mesh=mesh)
    model = fully_shard(module, mesh=mesh)
optim = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01, foreach=False)


def die(grad):
    report("killed_in", "backward")
    os.kill(os.getpid(), signal.SIGKILL)


def arm(module, args, out):
    out.register_hook(die)


losses = []
for step in range(SAVE_AT + 1):
    if step == SAVE_AT:
        model_sd, optim_sd = get_state_dict(model, optim)
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=FOLDER / f"step{SAVE_AT}")
        report("saved", SAVE_AT)
        if RANK == 1:  # the input projection's output gradient comes last in the backward
            module.inp.register_forward_hook(arm)
    x, y = global_batch(step, WORLD, RANK, ROWS)
    loss = loss_fn(model(x.to(NEURON)), y.to(NEURON))
    start = time.monotonic()
    phase = "backward"
    try:
        loss.backward()
        if step == SAVE_AT:
            report("error", None)
        phase = "the loss's all_reduce"
        losses.append(mean_over_ranks(loss))
        phase = "the optimizer step"
        optim.step()
        optim.zero_grad()
    except Exception as e:
        report("error", {"type": type(e).__name__, "message": str(e), "phase": phase})
        report("seconds", time.monotonic() - start)
        break
    report("losses", losses)
report("timeout", TIMEOUT)
os._exit(0)  # the group cannot be destroyed cleanly with a rank gone
