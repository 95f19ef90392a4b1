"""2 ranks: compiled training steps under DDP and FSDP2 on neuron, `torch.compile(model, backend="neuron")`
with the backward through AOTAutograd, each against the same eager job on neuron (which the other
workers compare with the CPU). The optimizer step stays eager.

Reports which graphs ran and how the collectives cut them:
- DDP, optimize_ddp=True (DDPOptimizer): the forward is cut at the bucket boundaries into graphs of
  their own; DDP's all-reduces run from its autograd hooks, outside every graph;
- DDP, optimize_ddp=False: one forward and one backward graph, the all-reduces outside;
- DDP, optimize_ddp="python_reducer" with compiled autograd: the all-reduces are traced into the
  backward graph as functional collectives, and torch_neuronx.compile.split cuts that graph at each
  (segments and collectives in get_dynamo_metrics()["split_graphs"]);
- FSDP2: its hooks are Dynamo-disabled, so each sharded block's forward is a graph (one graph serves
  both blocks) and the all-gathers and reduce-scatters run between graphs; the root's own layers
  (input projection, final norm, head) run eagerly here.
"""
import copy

import torch
import torch._dynamo
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo import compiled_autograd
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP
from torch_neuronx import metrics

from training_support import DIM, Net, batch, build, check, finish, grads, init, loss_fn, mean_over_ranks, params, same_run

RANK, WORLD = init()
NEURON = torch.device("neuron", 0)
MESH = init_device_mesh("neuron", (WORLD,))


class Wide(nn.Module):
    """Three 1 MB layers: with 1 MB buckets (DDPOptimizer refuses a bucket cap under its first
    bucket's 1 MB), DDP and DDPOptimizer put them in separate buckets."""

    def __init__(self, width=512, depth=3):
        super().__init__()
        self.inp = nn.Linear(DIM, width)
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.head = nn.Linear(width, 5)

    def forward(self, x):
        x = F.relu(self.inp(x))
        for layer in self.layers:
            x = F.relu(layer(x))
        return self.head(x)


def train(model, wrap, *, compiled=False, backward_compiled=False, steps=2, seq=None, rows=4):
    """`wrap(copy of model on neuron)` trained with SGD; its forward compiled if `compiled`, its
    backward through compiled autograd if `backward_compiled`."""
    module = copy.deepcopy(model).to(NEURON)
    wrapped = wrap(module)
    forward = torch.compile(wrapped, backend="neuron") if compiled else wrapped
    optim = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9, foreach=False)
    record = {"losses": [], "grads": []}
    for step in range(steps):
        x, y = batch(step, RANK, rows, seq)
        loss = loss_fn(forward(x.to(NEURON)), y.to(NEURON))
        if backward_compiled:
            with compiled_autograd._enable(torch.compile(backend="neuron")):
                loss.backward()
        else:
            loss.backward()
        record["losses"].append(mean_over_ranks(loss))
        record["grads"].append(grads(module))
        optim.step()
        optim.zero_grad()
    record["params"] = params(module)
    return record


def against_eager(model, wrap, what, config=None, backward_compiled=False, **kw):
    """The compiled job (wrapped under `config`: DDP picks its reducer as it is made) against the
    eager one; the graphs that ran (one rank compiles a graph, the other loads it from the shared
    disk cache: counted by what ran) and the splits."""
    eager = train(model, wrap, **kw)
    torch._dynamo.reset()
    metrics.reset_dynamo_metrics()
    with torch._dynamo.config.patch(**(config or {})):
        got = train(model, wrap, compiled=True, backward_compiled=backward_compiled, **kw)
    dm = metrics.get_dynamo_metrics()
    ran = dict(sorted(dm["executions"].items()))
    assert ran, f"{what}: no compiled graph ran"
    return {**same_run(got, eager, what), "graph_runs": ran, "split_graphs": dm["split_graphs"]}


def ddp(optimize_ddp, backward_compiled=False):
    def run():
        out = against_eager(build(Wide), lambda m: DDP(m, bucket_cap_mb=1), f"DDP optimize_ddp={optimize_ddp}",
                            config={"optimize_ddp": optimize_ddp}, backward_compiled=backward_compiled)
        forwards = [g for g in out["graph_runs"] if g.endswith("_forward")]
        if optimize_ddp is True:  # cut at the bucket boundaries: one graph per bucket at least
            assert len(forwards) >= 3, f"DDPOptimizer made {forwards}"
        if optimize_ddp is False:
            assert len(forwards) == 1, f"expected one forward graph, got {forwards}"
        if backward_compiled:  # the python reducer's all-reduces, in the compiled backward, cut it
            splits = [s for s in out["split_graphs"].values() if s["collectives"]]
            assert splits, f"no compiled graph held a collective: {out['split_graphs']}"
        else:
            assert not out["split_graphs"], f"collectives inside graphs: {out['split_graphs']}"
        return out
    return run


check("ddp_compiled_ddp_optimizer", ddp(True))
check("ddp_compiled_no_optimize_ddp", ddp(False))
check("ddp_compiled_python_reducer", ddp("python_reducer", backward_compiled=True))


def fsdp():
    def shard(module):
        for block in module.blocks:
            fully_shard(block, mesh=MESH)
        return fully_shard(module, mesh=MESH)

    out = against_eager(build(Net), shard, "compiled FSDP2", steps=3, seq=6, rows=2)
    assert not out["split_graphs"], f"collectives inside graphs: {out['split_graphs']}"
    return out


check("fsdp_compiled", fsdp)
finish()
