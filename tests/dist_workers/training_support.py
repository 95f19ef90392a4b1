"""What the training workers share: the models (classes defined here, outside torch, so that Dynamo
compiles their forward frames), each rank's batches, `check(name, fn)` reporting a check's outcome
with its numbers, and comparisons of a neuron run's record with the CPU + Gloo run's.

A run's record: the loss of every step (the mean over all ranks' batches), every step's gradients
after the collectives (full tensors: a DTensor's `full_tensor()`), and the final parameters.
"""
from __future__ import annotations

import datetime
import functools
import math
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch_neuronx
from torch.distributed.tensor import DTensor

from distributed_harness import report

DIM, HEADS, HIDDEN, CLASSES, SEQ = 16, 2, 32, 5, 6
# float32 across devices: XLA's CPU backend and torch's kernels add in other orders (a step's
# gradients differ by a few units in the last place; AdamW divides by sqrt(v), which keeps it so)
RTOL, ATOL = 1e-5, 1e-6


class Block(nn.Module):
    """A pre-norm transformer block: causal attention (separate q/k/v, so column-parallel shards hold
    whole heads) and a GELU MLP, with dropout on both residual branches."""

    def __init__(self, dim=DIM, heads=HEADS, hidden=HIDDEN, dropout=0.0):
        super().__init__()
        self.head_dim = dim // heads
        self.norm1 = nn.LayerNorm(dim)
        # no q/k/v biases: a key bias has no gradient at all (softmax ignores a constant per query),
        # and AdamW would turn its rounding noise into whole steps
        self.q, self.k, self.v = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        b, s, _ = x.shape
        h = self.norm1(x)
        # -1 heads: a tensor-parallel shard holds its share of the heads
        q, k, v = (t(h).view(b, s, -1, self.head_dim).transpose(1, 2) for t in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, s, -1)))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.norm2(x)))))


class Net(nn.Module):
    """Input projection, `depth` blocks, a norm and a classifier per token."""

    def __init__(self, depth=2, dropout=0.0, dim=DIM, hidden=HIDDEN):
        super().__init__()
        self.inp = nn.Linear(dim, dim)
        self.blocks = nn.ModuleList(Block(dim, HEADS, hidden, dropout) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


class MLP(nn.Module):
    def __init__(self, dim=DIM, hidden=HIDDEN, wide=None):
        super().__init__()
        self.fc1 = nn.Linear(dim, wide or hidden)
        self.fc2 = nn.Linear(wide or hidden, wide or hidden)
        self.fc3 = nn.Linear(wide or hidden, CLASSES)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def init(timeout: float = 120.0) -> tuple[int, int]:
    """The default process group, backend neuron (once per process; every worker of a launch shares
    it): (rank, world size)."""
    if not dist.is_initialized():
        dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=timeout))
    return dist.get_rank(), dist.get_world_size()


@functools.cache
def gloo_world():
    """A Gloo group of every rank: the CPU reference jobs' (made once, by every rank alike)."""
    return dist.new_group(backend="gloo")


def finish() -> None:
    """The end of a launch: the ops that fell back to the host (none expected), then the group."""
    fallbacks()
    dist.barrier()
    dist.destroy_process_group()


def build(cls, seed=0, **kw):
    """The same initial weights on every rank and for every device."""
    torch.manual_seed(seed)
    return cls(**kw)


def batch(step: int, rank: int, rows: int = 2, seq: int | None = SEQ, dim: int = DIM, seed: int = 0):
    """Rank `rank`'s batch of step `step` on the CPU: (inputs, class targets)."""
    g = torch.Generator().manual_seed(10_000 * seed + 100 * step + rank)
    shape = (rows, seq) if seq else (rows,)
    return torch.randn(*shape, dim, generator=g), torch.randint(0, CLASSES, shape, generator=g)


def global_batch(step: int, world: int, rank: int, rows: int, seed: int = 0):
    """This rank's rows of a global batch that is the same whatever the number of ranks."""
    x, y = batch(step, 0, rows, seed=seed)
    return torch.tensor_split(x, world)[rank], torch.tensor_split(y, world)[rank]


def loss_fn(out, y):
    return F.cross_entropy(out.reshape(-1, CLASSES), y.reshape(-1))


def mean_over_ranks(value: torch.Tensor, group=None) -> float:
    """The mean of a scalar over the group's ranks (each rank's loss of its own batch), on the CPU."""
    t = value.detach().float().cpu().reshape(1)
    dist.all_reduce(t, group=group)
    return float(t) / dist.get_world_size(group)


def record_step(record: dict, loss, module, optim, group=None) -> None:
    """A step's loss (the ranks' mean) and gradients into `record`, then the optimizer's step."""
    record["losses"].append(mean_over_ranks(loss, group))
    record["grads"].append(grads(module))
    optim.step()
    optim.zero_grad()


def full(t):
    if t is None:
        return None
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().cpu().clone()


def grads(model) -> list:
    return [full(p.grad) for p in model.parameters()]


def params(model) -> list:
    return [full(p) for p in model.parameters()]


def assert_close(got, want, what, rtol=RTOL, atol=ATOL):
    """Lists (of lists) of CPU tensors (or None) equal within the tolerance; the message names the
    element that differs."""
    if isinstance(want, (list, tuple)):
        assert len(got) == len(want), f"{what}: {len(got)} entries, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_close(g, w, f"{what}[{i}]", rtol, atol)
        return
    if want is None or got is None:
        assert got is None and want is None, f"{what}: {got is None=} {want is None=}"
        return
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def max_diff(got, want) -> float:
    """The largest absolute difference between two records' tensors (lists of lists)."""
    if isinstance(want, (list, tuple)):
        return max((max_diff(g, w) for g, w in zip(got, want)), default=0.0)
    if want is None:
        return 0.0
    return float((got.double() - want.double()).abs().max()) if want.numel() else 0.0


def same_run(got: dict, want: dict, what: str, rtol=RTOL, atol=ATOL) -> dict:
    """A neuron run's record equals the reference run's: losses, every step's gradients, the final
    parameters. Returns the largest differences."""
    assert_close(torch.tensor(got["losses"]), torch.tensor(want["losses"]), f"{what}: losses", rtol, atol)
    assert_close(got["grads"], want["grads"], f"{what}: gradients", rtol, atol)
    assert_close(got["params"], want["params"], f"{what}: parameters", rtol, atol)
    return {"losses": got["losses"], "reference_losses": want["losses"],
            "grad_diff": max_diff(got["grads"], want["grads"]), "param_diff": max_diff(got["params"], want["params"])}


def check(name: str, fn) -> None:
    """Run one check; report {"ok": True, **what fn returned} or {"ok": False, "error": ...}, with
    the seconds it took."""
    start = time.perf_counter()
    try:
        info = fn() or {}
    except Exception as e:  # carried to the test, which fails with it
        report(name, {"ok": False, "error": f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-4)}",
                      "seconds": time.perf_counter() - start})
    else:
        report(name, {"ok": True, **info, "seconds": time.perf_counter() - start})


def fallbacks() -> None:
    report("fallback_ops", sorted(torch_neuronx.get_fallback_ops()))


def finite(xs) -> bool:
    return all(math.isfinite(x) for x in xs)
