"""What the DTensor workers share: `check(name, fn)` runs one comparison and reports its outcome,
`close(got, want)` compares a neuron result with torch's on the CPU, `comms` counts DTensor's
collectives, `tensor_parallel` checks a parallelized module against the CPU model, `fallbacks()`
reports ops that ran on the host instead of a lowering."""
from __future__ import annotations

import copy
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_neuronx
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import parallelize_module

from distributed_harness import report

# torch.testing's defaults, but a float32 sum over ranks or a matrix product adds in another order
# than the CPU does (the tensors here hold a few dozen terms of magnitude <= 10)
_TOLERANCE = {torch.float32: dict(rtol=1e-5, atol=1e-5)}


def close(got: torch.Tensor, want: torch.Tensor, what: str = "", **tolerance) -> None:
    """`got`, a neuron tensor, equals `want` (the CPU's result) within `want`'s dtype tolerance, or
    the `rtol`/`atol` given."""
    assert got.device.type == "neuron", f"{what}: result on {got.device}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    torch.testing.assert_close(got.cpu(), want, msg=lambda m: f"{what}: {m}", **(tolerance or _TOLERANCE.get(want.dtype, {})))


def check(name: str, fn) -> None:
    """Report "ok" under `name` if `fn()` returns, else the error and where it was raised."""
    try:
        fn()
    except Exception as e:  # the report carries it to the test, which fails with it
        where = traceback.format_exc(limit=-3)
        report(name, f"{type(e).__name__}: {e}\n{where}")
    else:
        report(name, "ok")


def fallbacks() -> None:
    report("fallback_ops", sorted(torch_neuronx.get_fallback_ops()))


def comms(fn):
    """(fn's result, {collective name: count}) for the collectives DTensor issued while running it."""
    with CommDebugMode() as mode:
        out = fn()
    return out, {str(k).rsplit(".", 1)[-1]: v for k, v in mode.get_comm_counts().items()}


def expect_comms(counts: dict, *names: str) -> None:
    assert all(counts.get(n, 0) >= 1 for n in names), f"expected collectives {names}, DTensor issued {counts}"


class MLP(nn.Module):
    def __init__(self, dim=8, hidden=16):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.w1 = nn.Linear(dim, hidden)
        self.w2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.w2(F.relu(self.w1(self.norm(x))))


def tensor_parallel(build, mesh, plan: dict, x: torch.Tensor, shard_input: bool):
    """A check: `build()`'s model parallelized over 1-D `mesh` by `plan`, fed `x` (each rank its
    sequence shard, dim 1, if `shard_input`), gives the CPU model's output and, for the loss
    sum(out^2), its gradients (full tensors of the sharded ones)."""
    what = f"{build.__name__} {', '.join(f'{m}: {type(s).__name__}' for m, s in plan.items())}"

    def run():
        torch.manual_seed(1)
        cpu_model = build()
        tp_model = parallelize_module(copy.deepcopy(cpu_model).to("neuron"), mesh, plan)
        for name in (f"{m}.{p}" for m in plan for p in ("weight", "bias")):
            assert isinstance(tp_model.get_parameter(name), DTensor), f"{what}: {name} is not a DTensor"
        want = cpu_model(x)
        want.square().sum().backward()
        rank, size = mesh.get_local_rank(), mesh.size()
        out = tp_model((torch.tensor_split(x, size, 1)[rank] if shard_input else x).to("neuron"))
        if isinstance(out, DTensor):
            full = out.full_tensor()
        elif shard_input:  # a local sequence shard
            full = DTensor.from_local(out, mesh, [Shard(1)]).full_tensor()
        else:
            full = out
        close(full, want.detach(), f"{what}: forward")
        # a replicated output is the whole loss on every rank; sequence shards' losses add up to it
        (out.to_local() if isinstance(out, DTensor) else out).square().sum().backward()
        for name, p in cpu_model.named_parameters():
            grad = tp_model.get_parameter(name).grad
            assert grad is not None, f"{what}: no gradient for {name}"
            close(grad.full_tensor() if isinstance(grad, DTensor) else grad, p.grad, f"{what}: grad of {name}")
    return run
