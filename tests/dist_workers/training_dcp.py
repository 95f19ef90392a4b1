"""Resume an FSDP2 job from a torch.distributed.checkpoint on another number of ranks.

`resume(folder, saved_at, steps, group)` loads `<folder>/step<saved_at>` into the job sharded over
`group` (every rank when None) and trains it to `steps`. The job (training_support.Net, AdamW, a global
batch of 4 rows split over the group's ranks) is the one training_fsdp.py and training_fault.py save.
The uninterrupted run to compare with is the saver's `uninterrupted.pt` when it wrote one (a job that
ran to the end), else the group trains it from scratch first. Its report: the resumed losses, the
uninterrupted ones and the final parameters' largest difference.

Run as a script (a fresh launch of however many ranks): argv is the folder, saved_at and steps.
"""
import pathlib
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

from training_support import Net, build, check, finish, global_batch, init, loss_fn, max_diff, mean_over_ranks, params

ROWS = 4
NEURON = torch.device("neuron", 0)


class Job:
    def __init__(self, group):
        self.group = group if group is not None else dist.group.WORLD
        self.rank, self.world = dist.get_rank(self.group), dist.get_world_size(self.group)
        mesh = DeviceMesh.from_group(self.group, "neuron")
        self.module = build(Net).to(NEURON)
        for block in self.module.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(self.module, mesh=mesh)
        self.optim = torch.optim.AdamW(self.module.parameters(), lr=1e-2, weight_decay=0.01, foreach=False)

    def train(self, steps):
        losses = []
        for step in steps:
            x, y = global_batch(step, self.world, self.rank, ROWS)
            loss = loss_fn(self.module(x.to(NEURON)), y.to(NEURON))
            loss.backward()
            losses.append(mean_over_ranks(loss, self.group))
            self.optim.step()
            self.optim.zero_grad()
        return losses


def uninterrupted(folder, steps, group):
    saved = folder / "uninterrupted.pt"
    if saved.exists():
        return torch.load(saved), "saved by the job that wrote the checkpoint"
    job = Job(group)
    return {"losses": job.train(range(steps)), "params": params(job.module)}, f"trained here on {job.world} ranks"


def resume(folder: pathlib.Path, saved_at: int, steps: int, group=None):
    def run():
        want, source = uninterrupted(folder, steps, group)
        job = Job(group)
        model_sd, optim_sd = get_state_dict(job.module, job.optim)
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, checkpoint_id=folder / f"step{saved_at}", process_group=job.group)
        set_state_dict(job.module, job.optim, model_state_dict=state["model"], optim_state_dict=state["optim"])
        losses = job.train(range(saved_at, steps))
        got = params(job.module)
        # a mean over 4 rows split over another number of ranks adds in another order
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(want["losses"][saved_at:]), rtol=1e-5, atol=1e-6)
        for i, (g, w) in enumerate(zip(got, want["params"])):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6, msg=lambda m: f"parameter {i}: {m}")
        return {"world": job.world, "losses": losses, "uninterrupted_losses": want["losses"], "reference": source,
                "param_diff": max_diff(got, want["params"])}
    return run


if __name__ == "__main__":
    init()
    check("dcp_resume", resume(pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
    finish()
