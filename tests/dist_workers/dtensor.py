"""DeviceMesh and DTensor on a 1-D neuron mesh of every rank (run with 2), each result compared with
torch on the CPU computing on the full tensors.

The mesh comes first, before any process group: DeviceMesh initializes the default group itself.
Every rank seeds alike, so every rank holds the same full CPU tensors to distribute and compare with.
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel, RowwiseParallel, SequenceParallel,
)

from distributed_harness import report
from dtensor_support import MLP, check, close, comms, expect_comms, fallbacks, tensor_parallel

RANK = int(os.environ["RANK"])
WS = int(os.environ["WORLD_SIZE"])
NEURON0 = torch.device("neuron", 0)

# ---- the mesh initializes the process group ----------------------------------------------------
report("initialized_before_mesh", dist.is_initialized())
mesh = init_device_mesh("neuron", (WS,))
# no backend named: c10d takes the one registered for the accelerator it detects
report("backend_config", str(dist.get_backend_config()))
report("group_type", type(mesh.get_group()).__name__)
report("current_device", torch.neuron.current_device())
report("device_name", torch.neuron.get_device_name())
report("mesh", {"ranks": mesh.mesh.tolist(), "local_rank": mesh.get_local_rank(), "size": mesh.size(),
                "device_type": mesh.device_type, "group_ranks": dist.get_process_group_ranks(mesh.get_group())})
listed = DeviceMesh("neuron", list(range(WS)))
report("listed_mesh", {"ranks": listed.mesh.tolist(), "local_rank": listed.get_local_rank(),
                       "same_group": listed.get_group().group_name == mesh.get_group().group_name})

torch.manual_seed(0)
X = torch.randn(6, 8)
ODD = torch.randn(5, 7)  # neither dim divisible by 2
W = torch.randn(8, 4)


# ---- distribute_tensor, to_local, full_tensor ----------------------------------------------------
def shard_replicate():
    for full in (X, ODD, torch.arange(35).view(5, 7), ODD > 0):
        for placement in (Shard(0), Shard(1), Replicate()):
            d = distribute_tensor(full, mesh, [placement])  # a CPU tensor goes to the mesh's device
            local = d.to_local()
            assert local.device == NEURON0, f"{placement}: local tensor on {local.device}"
            want = full if placement.is_replicate() else torch.tensor_split(full, WS, placement.dim)[RANK]
            close(local, want, f"{placement} local of {list(full.shape)}")
            close(d.full_tensor(), full, f"{placement} full_tensor of {list(full.shape)}")
            assert d.shape == full.shape and d.placements == (placement,), (d.shape, d.placements)


check("distribute_shard_replicate", shard_replicate)


def from_local():
    local = X * (RANK + 1)
    d = DTensor.from_local(local.to("neuron"), mesh, [Replicate()], run_check=False)
    close(d.to_local(), local, "Replicate run_check=False keeps each rank's own")
    # run_check broadcasts the first rank's tensor over a Replicate dim
    d = DTensor.from_local(local.to("neuron"), mesh, [Replicate()], run_check=True)
    close(d.to_local(), X, "Replicate run_check=True")
    chunk = torch.tensor_split(ODD, WS, 0)[RANK]
    d = DTensor.from_local(chunk.to("neuron"), mesh, [Shard(0)], run_check=True, shape=ODD.shape,
                           stride=ODD.stride())
    close(d.full_tensor(), ODD, "uneven Shard(0) from_local")
    d = DTensor.from_local(chunk.to("neuron"), mesh, [Shard(0)], run_check=False, shape=ODD.shape,
                           stride=ODD.stride())
    close(d.full_tensor(), ODD, "uneven Shard(0) from_local run_check=False")


check("from_local", from_local)


# ---- redistribute: every pair, even and uneven, and the collective each uses ------------------------------------------------
def partials(full, reduce_op):
    """A Partial DTensor of the ranks' parts of `full`, and what the parts reduce to on the CPU: for a
    sum rank r holds (r + 1) / n of it (n = 1 + ... + WS), for an average 2(r + 1) / (WS + 1) of it."""
    scales = [(r + 1) / (WS * (WS + 1) / 2) if reduce_op == "sum" else 2 * (r + 1) / (WS + 1) for r in range(WS)]
    parts = [(full * s).to(full.dtype) for s in scales]
    total = sum(p.float() for p in parts)
    want = (total if reduce_op == "sum" else total / WS).to(full.dtype)
    return DTensor.from_local(parts[RANK].to("neuron"), mesh, [Partial(reduce_op)], run_check=False), want


PAIRS = [  # (from, to, the collective DTensor should use)
    (Shard(0), Replicate(), "all_gather_into_tensor"),
    (Shard(1), Replicate(), "all_gather_into_tensor"),
    (Replicate(), Shard(0), None),  # a local slice
    (Replicate(), Shard(1), None),
    (Shard(0), Shard(1), "shard_dim_alltoall"),  # all_to_all_single off the CPU
    (Shard(1), Shard(0), "shard_dim_alltoall"),
]


def redistribute_pairs(dtype):
    def run():
        for full in (X.to(dtype), ODD.to(dtype)):
            for src, dst, collective in PAIRS:
                d = distribute_tensor(full, mesh, [src])
                out, counts = comms(lambda: d.redistribute(mesh, [dst]))
                what = f"{src}->{dst} of {list(full.shape)} {dtype}"
                assert out.placements == (dst,), f"{what}: placements {out.placements}"
                want = full if dst.is_replicate() else torch.tensor_split(full, WS, dst.dim)[RANK]
                close(out.to_local(), want, what)
                close(out.full_tensor(), full, what + " full_tensor")
                if collective:
                    expect_comms(counts, collective)
            for reduce_op in ("sum", "avg"):
                for dst, collective in ((Replicate(), "all_reduce"), (Shard(0), "reduce_scatter_tensor"),
                                        (Shard(1), "reduce_scatter_tensor")):
                    d, want = partials(full, reduce_op)
                    what = f"Partial({reduce_op})->{dst} of {list(full.shape)} {dtype}"
                    out, counts = comms(lambda: d.redistribute(mesh, [dst]))
                    local_want = want if dst.is_replicate() else torch.tensor_split(want, WS, dst.dim)[RANK]
                    close(out.to_local(), local_want, what)
                    close(out.full_tensor(), want, what + " full_tensor")
                    expect_comms(counts, collective)
    return run


check("redistribute_float32", redistribute_pairs(torch.float32))
check("redistribute_bfloat16", redistribute_pairs(torch.bfloat16))


# ---- DTensor ops against the CPU on the full tensors ----------------------------------------------
def ops(dtype):
    def run():
        x, odd, w = X.to(dtype), ODD.to(dtype), W.to(dtype)
        dx0 = distribute_tensor(x, mesh, [Shard(0)])
        dx1 = distribute_tensor(x, mesh, [Shard(1)])
        dw = distribute_tensor(w, mesh, [Replicate()])
        dw0 = distribute_tensor(w, mesh, [Shard(0)])
        dodd = distribute_tensor(odd, mesh, [Shard(0)])
        # a Partial product: each rank rounds its part to bfloat16 before the sum, a rounding more than
        # the CPU's, so the error is an ulp of the parts (as large as the whole), not of a sum that cancels
        part_tol = dict(rtol=1.6e-2, atol=2 ** -7 * float((x @ w).abs().max())) if dtype == torch.bfloat16 else {}
        cases = {
            "matmul Shard(0) x Replicate": (lambda: dx0 @ dw, x @ w),
            "matmul Shard(1) x Shard(0) (a Partial)": (lambda: dx1 @ dw0, x @ w, part_tol),
            "mm Replicate x Shard(1)": (lambda: torch.mm(distribute_tensor(x, mesh, [Replicate()]),
                                                         distribute_tensor(w, mesh, [Shard(1)])), x @ w),
            "add Shard + Shard": (lambda: dx0 + dx0 * 2, x + x * 2),
            "mul Shard(0) * Shard(1)": (lambda: dx0 * dx1, x * x),
            "gelu": (lambda: F.gelu(dx1), F.gelu(x)),
            "exp uneven": (lambda: dodd.exp(), odd.exp()),
            "sum": (lambda: dx0.sum(), x.sum()),
            "sum dim 0 (sharded)": (lambda: dx0.sum(0), x.sum(0)),
            "sum dim 1": (lambda: dx0.sum(1), x.sum(1)),
            "sum uneven": (lambda: dodd.sum(), odd.sum()),
            "mean uneven dim 0": (lambda: dodd.mean(0), odd.mean(0)),
            "softmax dim 1": (lambda: dx0.softmax(1), x.softmax(1)),
            "softmax dim 0 (sharded)": (lambda: dx0.softmax(0), x.softmax(0)),
            "softmax uneven": (lambda: F.softmax(dodd, dim=-1), F.softmax(odd, dim=-1)),
        }
        for what, (fn, want, *tol) in cases.items():
            out = fn()
            assert isinstance(out, DTensor), f"{what}: a {type(out).__name__}"
            close(out.full_tensor(), want, f"{what} {dtype}", **(tol[0] if tol else {}))
    return run


check("ops_float32", ops(torch.float32))
check("ops_bfloat16", ops(torch.bfloat16))


# ---- tensor parallelism on modules, against the CPU model ------------------------------------------
class Attention(nn.Module):
    """Multi-head self-attention; the head count is read off the projections, so a rank holding a
    column shard of q/k/v computes its own heads."""

    def __init__(self, dim=8, head_dim=2):
        super().__init__()
        self.head_dim = head_dim
        self.norm = nn.LayerNorm(dim)
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)

    def forward(self, x):
        h = self.norm(x)
        b, s = h.shape[:2]
        q, k, v = (p(h).view(b, s, -1, self.head_dim).transpose(1, 2) for p in (self.q, self.k, self.v))
        scores = (q @ k.transpose(-1, -2)) / self.head_dim ** 0.5
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, -1)
        return x + self.o(out)


MLP_TP = {"w1": ColwiseParallel(), "w2": RowwiseParallel()}
MLP_SP = {
    "norm": SequenceParallel(),
    "w1": ColwiseParallel(input_layouts=Shard(1)),
    "w2": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
}
ATTN_TP = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(), "o": RowwiseParallel()}

ATTN_SP = {
    "norm": SequenceParallel(),
    **{p: ColwiseParallel(input_layouts=Shard(1)) for p in "qkv"},
    "o": RowwiseParallel(output_layouts=Shard(1)),
}
torch.manual_seed(1)
INPUT = torch.randn(2, 4, 8)
check("tp_mlp", tensor_parallel(MLP, mesh, MLP_TP, INPUT, False))
check("sp_mlp", tensor_parallel(MLP, mesh, MLP_SP, INPUT, True))
check("tp_attention", tensor_parallel(Attention, mesh, ATTN_TP, INPUT, False))
check("sp_attention", tensor_parallel(Attention, mesh, ATTN_SP, INPUT, True))

fallbacks()
dist.barrier()
dist.destroy_process_group()
