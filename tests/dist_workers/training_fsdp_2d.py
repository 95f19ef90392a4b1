"""4 ranks: FSDP2 over "dp" and tensor parallelism over "tp" on init_device_mesh("neuron", (2, 2)),
against the same job on CPU tensors over a 2-D mesh of Gloo groups of the same ranks.

Each block is parallelized over "tp" (q/k/v and fc1 column-wise, proj and fc2 row-wise: whole heads
per rank) and then sharded over "dp"; the root's own layers are sharded over "dp" only. A batch per
"dp" rank, the same on both "tp" ranks. AdamW steps; every step's loss, gradients (full tensors) and
the final parameters compared.
"""
import copy

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from training_support import Net, batch, build, check, finish, init, loss_fn, params, record_step, same_run

RANK, WORLD = init(timeout=180)
assert WORLD == 4, "run with 4 ranks"
MESH = init_device_mesh("neuron", (2, 2), mesh_dim_names=("dp", "tp"))


def gloo_mesh():
    """The same 2-D layout over Gloo groups (every rank creates every group, in the same order)."""
    layout = torch.arange(WORLD).view(2, 2)
    mine = {}
    for dim, lines in (("dp", layout.t().tolist()), ("tp", layout.tolist())):
        for ranks in lines:
            group = dist.new_group(ranks, backend="gloo")
            if RANK in ranks:
                mine[dim] = group
    world = dist.new_group(backend="gloo")
    return DeviceMesh.from_group([mine["dp"], mine["tp"]], "cpu", mesh=layout, mesh_dim_names=("dp", "tp")), world


CPU_MESH, GLOO = gloo_mesh()
JOBS = {"neuron": (torch.device("neuron", 0), MESH, None), "cpu": (torch.device("cpu"), CPU_MESH, GLOO)}
PLAN = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(), "proj": RowwiseParallel(),
        "fc1": ColwiseParallel(), "fc2": RowwiseParallel()}


def train(job, model, steps=3):
    device, mesh, group = JOBS[job]
    module = copy.deepcopy(model).to(device)
    for block in module.blocks:
        parallelize_module(block, mesh["tp"], PLAN)
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(module, mesh=mesh["dp"])
    q = module.blocks[0].q.weight
    assert isinstance(q, DTensor), f"q.weight is a {type(q).__name__}"
    # rows split over "tp" (column-parallel), then that shard's rows over "dp": FSDP2 marks the dp
    # split strided (_StridedShard), the rows of each tp shard being interleaved in the full tensor
    assert getattr(q.placements[0], "dim", None) == 0 and q.placements[1] == Shard(0), f"q.weight placements {q.placements}"
    placements = [str(p) for p in q.placements]
    optim = torch.optim.AdamW(module.parameters(), lr=1e-2, weight_decay=0.01, foreach=False)
    record = {"losses": [], "grads": [], "placements": placements, "local_shape": list(q.to_local().shape)}
    dp = mesh.get_local_rank("dp")
    for step in range(steps):
        x, y = batch(step, dp)
        loss = loss_fn(module(x.to(device)), y.to(device))
        loss.backward()
        record_step(record, loss, module, optim, group)
    record["params"] = params(module)
    return record


def fsdp_tp():
    model = build(Net)
    got, want = train("neuron", model), train("cpu", model)
    assert got["local_shape"] == [4, 16], f"q.weight local shard {got['local_shape']} (16 x 16 over 2 x 2)"
    return {**same_run(got, want, "FSDP2 dp x TP tp"), "q_placements": got["placements"],
            "q_local_shape": got["local_shape"], "coordinate": MESH.get_coordinate()}


check("fsdp_tp_2d", fsdp_tp)
finish()
