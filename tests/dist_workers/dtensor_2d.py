"""DeviceMesh and DTensor on a 2-D neuron mesh ("dp", "tp") = (2, 2) (run with 4), after
init_process_group(backend="neuron"): mesh slicing and its groups, 2-D placements, uneven shards
down to empty ones, and tensor parallelism over the "tp" submesh with a batch per "dp" rank; each
result compared with torch on the CPU computing on the full tensors."""
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

from distributed_harness import report
from dtensor_support import MLP, check, close, comms, expect_comms, fallbacks, tensor_parallel

RANK = int(os.environ["RANK"])
WS = int(os.environ["WORLD_SIZE"])

dist.init_process_group(backend="neuron")
report("backend", str(dist.get_backend()))
report("current_device", torch.neuron.current_device())
report("device_name", torch.neuron.get_device_name())
flat = DeviceMesh("neuron", list(range(WS)))
report("flat_mesh", {"ranks": flat.mesh.tolist(), "local_rank": flat.get_local_rank(),
                     "group_type": type(flat.get_group()).__name__})

mesh = init_device_mesh("neuron", (2, 2), mesh_dim_names=("dp", "tp"))
tp, dp = mesh["tp"], mesh["dp"]
report("mesh_2d", {
    "ranks": mesh.mesh.tolist(), "coordinate": mesh.get_coordinate(),
    "local_rank_dp": mesh.get_local_rank("dp"), "local_rank_tp": mesh.get_local_rank("tp"),
    "tp_ranks": tp.mesh.tolist(), "dp_ranks": dp.mesh.tolist(), "tp_names": tp.mesh_dim_names,
    "tp_group_ranks": dist.get_process_group_ranks(mesh.get_group("tp")),
    "dp_group_ranks": dist.get_process_group_ranks(mesh.get_group(0)),
    "tp_group_type": type(tp.get_group()).__name__,
    "tp_group_is_mesh_group": tp.get_group().group_name == mesh.get_group("tp").group_name,
})
DP, TP = mesh.get_local_rank("dp"), mesh.get_local_rank("tp")

torch.manual_seed(0)
X = torch.randn(8, 6)
ODD = torch.randn(3, 5)  # 3 rows over 4 ranks: one rank's shard is empty


def local_of(full, placements, coordinate):
    """What the rank at `coordinate` holds of `full` under Shard/Replicate `placements`
    (torch.tensor_split's chunks, mesh dims in order)."""
    local = full
    for placement, c, n in zip(placements, coordinate, mesh.shape):
        if placement.is_shard():
            local = torch.tensor_split(local, n, placement.dim)[c]
    return local


def placements_2d():
    for full in (X, ODD, X.bfloat16()):
        for placements in ([Shard(0), Shard(1)], [Replicate(), Shard(0)], [Shard(0), Shard(0)],
                           [Shard(1), Replicate()]):
            d = distribute_tensor(full, mesh, placements)
            what = f"{placements} of {list(full.shape)} {full.dtype}"
            close(d.to_local(), local_of(full, placements, (DP, TP)), what)
            close(d.full_tensor(), full, what + " full_tensor")


check("placements_2d", placements_2d)


def redistribute_2d():
    for full in (X, X.bfloat16()):
        for src, dst in (
            ([Shard(0), Shard(1)], [Replicate(), Replicate()]),
            ([Shard(0), Shard(1)], [Shard(1), Shard(0)]),
            ([Replicate(), Replicate()], [Shard(0), Shard(1)]),
            ([Shard(0), Replicate()], [Replicate(), Shard(0)]),
        ):
            out = distribute_tensor(full, mesh, src).redistribute(mesh, dst)
            what = f"{src}->{dst} {full.dtype}"
            close(out.to_local(), local_of(full, dst, (DP, TP)), what)
            close(out.full_tensor(), full, what + " full_tensor")
        # a Partial over "tp" (each tp rank half) on a batch sharded over "dp"
        half = (local_of(full, [Shard(0), Replicate()], (DP, TP)) / 2).to(full.dtype)
        part = DTensor.from_local(half.to("neuron"), mesh, [Shard(0), Partial()])
        want = torch.tensor_split(full, 2, 0)[DP]
        out, counts = comms(lambda: part.redistribute(mesh, [Shard(0), Shard(1)]))
        close(out.to_local(), torch.tensor_split(want, 2, 1)[TP], f"[S(0), P]->[S(0), S(1)] {full.dtype}")
        expect_comms(counts, "reduce_scatter_tensor")
        out = part.redistribute(mesh, [Replicate(), Replicate()])
        close(out.to_local(), full, f"[S(0), P]->[R, R] {full.dtype}")
        # tp ranks hold 1 and 2 halves: their average is 3/4 of the batch
        avg = DTensor.from_local((half * (TP + 1)).to("neuron"), mesh, [Shard(0), Partial("avg")])
        close(avg.full_tensor(), (full.double() * 0.75).to(full.dtype), f"[S(0), P(avg)] {full.dtype}")


check("redistribute_2d", redistribute_2d)


def uneven_empty():
    """3 rows on 4 ranks: tensor_split's chunks are 1, 1, 1, 0 rows; the last rank holds nothing."""
    d = distribute_tensor(ODD, flat, [Shard(0)])
    close(d.to_local(), torch.tensor_split(ODD, WS, 0)[RANK], "Shard(0) local")
    for dst in ([Replicate()], [Shard(1)]):
        out = d.redistribute(flat, dst)
        close(out.full_tensor(), ODD, f"Shard(0)->{dst} of 3 rows on 4 ranks")
    close(d.sum(0).full_tensor(), ODD.sum(0), "sum over the sharded dim with an empty shard")
    close((d * 2 + 1).full_tensor(), ODD * 2 + 1, "elementwise with an empty shard")
    close(d.softmax(0).full_tensor(), ODD.softmax(0), "softmax over the sharded dim with an empty shard")


check("uneven_empty", uneven_empty)


def matmul_2d():
    w = torch.randn(6, 4)
    for dtype in (torch.float32, torch.bfloat16):
        dx = distribute_tensor(X.to(dtype), mesh, [Shard(0), Replicate()])
        dw = distribute_tensor(w.to(dtype), mesh, [Replicate(), Shard(1)])
        out = dx @ dw
        assert out.placements == (Shard(0), Shard(1)), out.placements
        close(out.full_tensor(), X.to(dtype) @ w.to(dtype), f"[S(0), R] @ [R, S(1)] {dtype}")


check("matmul_2d", matmul_2d)

# tensor parallelism over "tp", each "dp" rank its own batch
torch.manual_seed(2)
BATCHES = torch.randn(2, 2, 4, 8)
check("tp_mlp_2d", tensor_parallel(MLP, tp, {"w1": ColwiseParallel(), "w2": RowwiseParallel()}, BATCHES[DP], False))

fallbacks()
dist.barrier()
dist.destroy_process_group()
