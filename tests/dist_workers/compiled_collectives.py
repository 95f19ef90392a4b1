"""2 ranks: collectives inside torch.compile(backend="neuron") graphs, against eager and the CPU.

Every rank builds every rank's inputs (seeded by rank), so it computes on the CPU what each collective
must give. Reports, per rank and check: whether the compiled result matches the CPU's and eager's
(None, else assert_close's message), the largest difference, how many segments the graph was cut
into, how many executables were compiled and reused, and the first call's seconds. Checks: each
functional collective (all_reduce sum/max/avg, all_gather_tensor and reduce_scatter_tensor on dims 0
and 1, all_to_all_single even and uneven), an in-place dist.all_reduce of an input, a loop whose
segments repeat, a parallelize_module'd MLP (Colwise then Rowwise, forward and backward), and the
tiny FLUX.2 transformer made tensor-parallel by diffusers and compiled whole."""
import copy
import os
import time
import traceback

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

from distributed_harness import report
from torch_neuronx import metrics

dist.init_process_group("neuron")
rank, world = dist.get_rank(), dist.get_world_size()
group = dist.group.WORLD


def inputs_of(r, *shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1000 * seed + r))


def mismatch(got, want, atol, rtol):
    """None when close, else assert_close's message (the largest difference too)."""
    try:
        torch.testing.assert_close(got.cpu(), want, atol=atol, rtol=rtol)
    except AssertionError as e:
        return str(e)
    return None


def max_diff(got, want) -> float:
    return float((got.cpu().double() - want.double()).abs().max()) if want.numel() else 0.0


class Counts:
    """What compiled mode did during a check: segments of the graphs split, executables compiled and
    reused (across the two ranks' shared disk cache: one rank compiles a segment, the other loads it)."""

    def __init__(self):
        self.before = metrics.get_dynamo_metrics()

    def done(self) -> dict:
        after = metrics.get_dynamo_metrics()
        new_splits = {k: v for k, v in after["split_graphs"].items() if k not in self.before["split_graphs"]}
        reused = sum(after["reused"].values()) - sum(self.before["reused"].values())
        loaded = sum(after["loaded_from_disk"].values()) - sum(self.before["loaded_from_disk"].values())
        return {
            "splits": new_splits,
            "compiled": after["graphs_compiled"] - self.before["graphs_compiled"],
            "reused": reused,
            "loaded": loaded,
        }


def check(name, fn, make_inputs, cpu_reference, atol=1e-6, rtol=1e-6):
    """Compile `fn`, call it on this rank's inputs; compare with eager `fn` and with the CPU reference
    (computed from every rank's inputs); call it again (no new compile)."""
    counts = Counts()
    mine = make_inputs(rank)
    want = cpu_reference([make_inputs(r) for r in range(world)])
    eager = fn(*[a.to("neuron") for a in mine])
    compiled = torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False)
    start = time.perf_counter()
    got = compiled(*[a.to("neuron") for a in mine])
    first_s = time.perf_counter() - start
    stats = counts.done()
    again = compiled(*[a.to("neuron") for a in mine])
    compiled_again = metrics.get_dynamo_metrics()["graphs_compiled"] - counts.before["graphs_compiled"] - stats["compiled"]
    report(name, {
        "device": str(got.device), "shape": list(got.shape),
        "vs_cpu": mismatch(got, want, atol, rtol), "vs_eager": mismatch(got, eager.cpu(), atol, rtol),
        "eager_vs_cpu": mismatch(eager, want, atol, rtol), "again_vs_cpu": mismatch(again, want, atol, rtol),
        "max_diff_cpu": max_diff(got, want), "first_call_s": first_s, "compiled_again": compiled_again, **stats,
    })


def run(name, body):
    try:
        body()
    except Exception as e:
        traceback.print_exc()
        report(name, {"error": f"{type(e).__name__}: {e}"})


# ---- functional collectives, one graph each


def all_reduces(x):
    # two collectives of two reduce ops on values computed in the graph, used together after
    return fc.all_reduce(x * 2, "sum", group) + fc.all_reduce(x.sin(), "max", group)


run("all_reduce", lambda: check(
    "all_reduce", all_reduces, lambda r: [inputs_of(r, 4, 6)],
    lambda xs: sum(x[0] * 2 for x in xs) + torch.stack([x[0].sin() for x in xs]).amax(0)))

run("all_reduce_avg", lambda: check(
    "all_reduce_avg", lambda x: fc.all_reduce(x, "avg", group).exp(), lambda r: [inputs_of(r, 5)],
    lambda xs: (sum(x[0] for x in xs) / world).exp()))

for dim in (0, 1):
    run(f"all_gather_dim{dim}", lambda dim=dim: check(
        f"all_gather_dim{dim}", lambda x: fc.all_gather_tensor(x + 1, dim, group) * 3,
        lambda r: [inputs_of(r, 2, 3, seed=1)],
        lambda xs: torch.cat([x[0] + 1 for x in xs], dim) * 3))
    run(f"reduce_scatter_dim{dim}", lambda dim=dim: check(
        f"reduce_scatter_dim{dim}", lambda x: fc.reduce_scatter_tensor(x.cos(), "sum", dim, group) - 1,
        lambda r: [inputs_of(r, 4, 6, seed=2)],
        lambda xs: sum(x[0].cos() for x in xs).chunk(world, dim)[rank] - 1))

run("all_to_all_even", lambda: check(
    "all_to_all_even", lambda x: fc.all_to_all_single(x * x, None, None, group).sum(-1),
    lambda r: [inputs_of(r, 4, 3, seed=3)],
    lambda xs: torch.cat([(x[0] * x[0]).chunk(world)[rank] for x in xs]).sum(-1)))

# uneven: rank r sends in_splits[r][d] rows to rank d
IN_SPLITS = [[1, 3], [2, 2]]
OUT_SPLITS = [[IN_SPLITS[s][rank] for s in range(world)] for rank in range(world)]
run("all_to_all_uneven", lambda: check(
    "all_to_all_uneven", lambda x: fc.all_to_all_single(x + 2, OUT_SPLITS[rank], IN_SPLITS[rank], group) * 2,
    lambda r: [inputs_of(r, 4, 3, seed=4)],
    lambda xs: torch.cat([(x[0] + 2).split(IN_SPLITS[s])[rank] for s, x in enumerate(xs)]) * 2))


def in_place(x):
    # Dynamo turns the in-place collective into a functional one and a copy back into the input
    y = x.clone()
    dist.all_reduce(y)
    x.mul_(2)
    return y + x


run("in_place_all_reduce", lambda: check(
    "in_place_all_reduce", in_place, lambda r: [inputs_of(r, 3, 3, seed=5)],
    lambda xs: sum(x[0] for x in xs) + xs[rank][0] * 2))


def mutated_input():
    """An input the graph writes (AOTAutograd's copy_ into it), read again after a collective."""
    def fn(x):
        s = fc.all_reduce(x, "sum", group)
        x.add_(1)
        return s * x

    mine = inputs_of(rank, 4, seed=6)
    want_x = mine + 1
    want = sum(inputs_of(r, 4, seed=6) for r in range(world)) * want_x
    x = mine.to("neuron")
    got = torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False)(x)
    report("mutated_input", {"vs_cpu": mismatch(got, want, 1e-6, 1e-6), "input_vs_cpu": mismatch(x, want_x, 1e-6, 1e-6)})


run("mutated_input", mutated_input)


def repeated(x, w):
    # three identical segments between all-reduces: one executable
    for _ in range(3):
        x = fc.all_reduce((x * w).tanh(), "sum", group) / world
    return x


def repeated_reference(xs):
    # step 1: each rank's own x; afterwards every rank holds the same x
    x = torch.stack([(a[0] * a[1]).tanh() for a in xs]).sum(0) / world
    for _ in range(2):
        x = torch.stack([(x * a[1]).tanh() for a in xs]).sum(0) / world
    return x


run("repeated", lambda: check(
    "repeated", repeated, lambda r: [inputs_of(r, 8, seed=7), inputs_of(r, 8, seed=8)], repeated_reference))


# ---- DTensor: a parallelize_module'd MLP


def mlp():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.Linear(8, 32)
            self.down = torch.nn.Linear(32, 8)

        def forward(self, x):
            return self.down(torch.nn.functional.gelu(self.up(x)))

    torch.manual_seed(0)
    cpu = MLP()
    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(9), requires_grad=True)
    want = cpu(x)
    want.square().sum().backward()
    mesh = init_device_mesh("neuron", (world,))
    tp = parallelize_module(copy.deepcopy(cpu).to("neuron"), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    counts = Counts()
    compiled = torch.compile(tp, backend="neuron", fullgraph=True, dynamic=False)
    xd = x.detach().to("neuron").requires_grad_()
    start = time.perf_counter()
    got = compiled(xd)
    got.square().sum().backward()
    first_s = time.perf_counter() - start
    stats = counts.done()
    with torch.no_grad():
        again = compiled(x.detach().to("neuron"))
    report("mlp", {
        "param_type": type(tp.up.weight).__name__, "local_shape": list(tp.up.weight.to_local().shape),
        "param_device": str(tp.up.weight.device), "out_type": type(got).__name__,
        "vs_cpu": mismatch(got, want.detach(), 1e-6, 1e-5), "again_vs_cpu": mismatch(again, want.detach(), 1e-6, 1e-5),
        "max_diff_cpu": max_diff(got.detach(), want.detach()),
        "x_grad_vs_cpu": mismatch(xd.grad, x.grad, 1e-6, 1e-5),
        "up_grad_vs_cpu": mismatch(tp.up.weight.grad.full_tensor(), cpu.up.weight.grad, 1e-6, 1e-5),
        "down_grad_vs_cpu": mismatch(tp.down.weight.grad.full_tensor(), cpu.down.weight.grad, 1e-6, 1e-5),
        "down_bias_grad_vs_cpu": mismatch(tp.down.bias.grad.full_tensor(), cpu.down.bias.grad, 1e-6, 1e-5),
        "first_call_s": first_s, **stats,
    })


run("mlp", mlp)


# ---- the tiny FLUX.2 transformer, tensor-parallel through diffusers, compiled whole


def flux2():
    from diffusers import Flux2Transformer2DModel, TensorParallelConfig
    from torch.distributed.device_mesh import init_device_mesh

    torch.manual_seed(2)  # examples/flux2_klein.py build_pipeline's transformer
    cpu = Flux2Transformer2DModel(
        patch_size=1, in_channels=32, num_layers=2, num_single_layers=3, attention_head_dim=32,
        num_attention_heads=2, joint_attention_dim=96, timestep_guidance_channels=64, mlp_ratio=3.0,
        axes_dims_rope=(8, 8, 8, 8), rope_theta=2000, guidance_embeds=False,
    ).eval()
    n, t = 64, 16
    g = torch.Generator().manual_seed(1)
    img_ids = torch.zeros(n, 4)
    img_ids[:, 1], img_ids[:, 2] = torch.arange(n) // 8, torch.arange(n) % 8
    txt_ids = torch.zeros(t, 4)
    txt_ids[:, 3] = torch.arange(t)
    inputs = dict(hidden_states=torch.randn(1, n, 32, generator=g), encoder_hidden_states=torch.randn(1, t, 96, generator=g),
                  timestep=torch.tensor([0.5]), img_ids=img_ids, txt_ids=txt_ids, return_dict=False)
    with torch.no_grad():
        want = cpu(**inputs)[0]
    mesh = init_device_mesh("neuron", (world,))
    tp = copy.deepcopy(cpu)
    tp.enable_parallelism(config=TensorParallelConfig(mesh=mesh))  # shards on the CPU, places shards on neuron
    tp.to("neuron")
    tp.compile(backend="neuron", fullgraph=True, dynamic=False)
    on_device = {k: (v.to("neuron") if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    counts = Counts()
    start = time.perf_counter()
    with torch.no_grad():
        got = tp(**on_device)[0]
    first_s = time.perf_counter() - start
    stats = counts.done()
    start = time.perf_counter()
    with torch.no_grad():
        again = tp(**on_device)[0]
    again_s = time.perf_counter() - start
    sharded = tp.transformer_blocks[0].attn.to_q.weight
    report("flux2", {
        "sharded_type": type(sharded).__name__, "local_shape": list(sharded.to_local().shape),
        "out_device": str(got.device), "out_shape": list(got.shape),
        "vs_cpu": mismatch(got, want, 1e-5, 1e-5), "again_vs_cpu": mismatch(again, want, 1e-5, 1e-5),
        "max_diff_cpu": max_diff(got, want), "max_abs_cpu": float(want.abs().max()),
        "first_call_s": first_s, "again_s": again_s,
        "compiled_again": metrics.get_dynamo_metrics()["graphs_compiled"] - counts.before["graphs_compiled"] - stats["compiled"],
        **stats,
    })
    if rank == 0:
        print(metrics.report(), flush=True)


run("flux2", flux2)

dist.destroy_process_group()
