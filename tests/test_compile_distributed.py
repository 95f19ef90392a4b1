"""Collectives in torch.compile(backend="neuron") graphs: the graph is cut at its collectives, each
segment between them is its own executable, and the collectives run through the process group.

Two ranks under torchrun (one launch, tests/dist_workers/compiled_collectives.py): each functional
collective, an in-place dist.all_reduce, a parallelize_module'd MLP and the tiny FLUX.2 transformer
made tensor-parallel by diffusers, compiled whole, each against eager and the CPU. In this process,
on a one-rank group: where the cut puts each node (an input's write after every read of it), that a
segment repeated in a graph compiles once, and that an executable never holds a collective."""
from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

import torch_neuronx
import torch_neuronx.compile
from distributed_harness import launch
from torch_neuronx.compile import NEFFCompilationError
from torch_neuronx.compile.graph import GraphProgram
from torch_neuronx.compile.split import SplitProgram, program_for

c10d = torch.ops._c10d_functional


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    # the two ranks share an executable cache folder of their own: of two ranks reaching a segment,
    # one compiles it and the other loads it, so the counts below are exact
    folder = tmp_path_factory.mktemp("dist")
    return launch("compiled_collectives.py", nproc=2, timeout=400, tmp_path=folder,
                  env={"TORCH_NEURONX_NEFF_CACHE_DIR": str(folder / "neff_cache")})


def both(ranks, name):
    """The check's report from each rank (a check that raised reports its error)."""
    out = []
    for r in (0, 1):
        rep = ranks[r].get(name)
        assert rep is not None, f"rank {r} reported nothing for {name}\n{ranks['log']}"
        assert "error" not in rep, f"rank {r}: {name}: {rep['error']}\n{ranks['log']}"
        out.append(rep)
    return out


def assert_matches(rep, *fields):
    for field in fields:
        assert rep[field] is None, f"{field}: {rep[field]}"


COLLECTIVES = {  # check -> (collectives in its graph, segments it is cut into)
    "all_reduce": (2, 2),  # x*2 and sin(x) before both collectives, their sum after
    "all_reduce_avg": (1, 1),  # the input goes straight to the collective
    "all_gather_dim0": (1, 2),
    "all_gather_dim1": (1, 2),  # the gather is on dim 0, then a chunk and cat in the segment after
    "reduce_scatter_dim0": (1, 2),
    "reduce_scatter_dim1": (1, 2),
    "all_to_all_even": (1, 2),
    "all_to_all_uneven": (1, 2),
    "in_place_all_reduce": (1, 2),
}


@pytest.mark.parametrize("name", sorted(COLLECTIVES))
def test_functional_collective_in_a_compiled_graph(ranks, name):
    collectives, segments = COLLECTIVES[name]
    for rep in both(ranks, name):
        assert rep["device"] == "neuron:0"
        assert_matches(rep, "vs_cpu", "vs_eager", "eager_vs_cpu", "again_vs_cpu")
        (split,) = rep["splits"].values()
        assert (split["collectives"], split["segments"]) == (collectives, segments), split
        assert rep["compiled_again"] == 0  # the second call reuses every segment's executable
    if name == "all_to_all_uneven":  # rank 0 receives 1 + 2 rows, rank 1 3 + 2
        assert [ranks[r][name]["shape"] for r in (0, 1)] == [[3, 3], [5, 3]]


def test_an_input_written_by_the_graph_is_read_before_the_write(ranks):
    for rep in both(ranks, "mutated_input"):
        assert_matches(rep, "vs_cpu", "input_vs_cpu")


def test_repeated_segments_compile_once_across_both_ranks(ranks):
    reps = both(ranks, "repeated")
    for rep in reps:
        assert_matches(rep, "vs_cpu", "vs_eager", "again_vs_cpu")
        (split,) = rep["splits"].values()
        assert (split["segments"], split["collectives"]) == (4, 3)
        assert rep["reused"] == 1  # the middle two segments are one graph: one executable
    # 3 distinct segments, each compiled by one rank and loaded by the other
    assert sum(r["compiled"] for r in reps) == 3
    assert [r["compiled"] + r["loaded"] for r in reps] == [3, 3]


def test_parallelized_mlp_forward_and_backward_match_the_cpu(ranks):
    for rep in both(ranks, "mlp"):
        assert (rep["param_type"], rep["local_shape"], rep["param_device"]) == ("DTensor", [16, 8], "neuron:0")
        assert_matches(rep, "vs_cpu", "again_vs_cpu", "x_grad_vs_cpu", "up_grad_vs_cpu", "down_grad_vs_cpu",
                       "down_bias_grad_vs_cpu")
        kinds = {s["kind"]: s for s in rep["splits"].values()}
        assert kinds["forward"]["collectives"] == 1  # Rowwise's all-reduce
        assert kinds["backward"]["collectives"] == 1  # Colwise's all-reduce of the input's gradient


def test_tensor_parallel_flux2_transformer_compiled_whole_matches_the_cpu(ranks):
    reps = both(ranks, "flux2")
    for rep in reps:
        assert (rep["sharded_type"], rep["local_shape"]) == ("DTensor", [32, 64])  # 64 q rows, half each
        assert rep["out_device"] == "neuron:0" and rep["out_shape"] == [1, 64, 32]
        assert_matches(rep, "vs_cpu", "again_vs_cpu")
        (split,) = rep["splits"].values()  # fullgraph=True: one graph
        # 2 double-stream blocks x 4 row-wise projections + 3 single-stream blocks x 1
        assert (split["collectives"], split["segments"]) == (11, 12)
        assert rep["reused"] >= 2  # the blocks repeat: their segments share executables
        assert rep["compiled_again"] == 0
    assert reps[0]["reused"] == reps[1]["reused"]
    distinct = 12 - reps[0]["reused"]
    assert sum(r["compiled"] for r in reps) == distinct  # one rank compiles a segment, the other loads it
    assert [r["compiled"] + r["loaded"] for r in reps] == [distinct, distinct]


# ---- in this process, on a one-rank group


@pytest.fixture(scope="module")
def one_rank():
    dist.init_process_group("neuron", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60))
    yield dist.group.WORLD.group_name
    dist.destroy_process_group()


@pytest.fixture
def fresh(memory_only_cache):
    torch._dynamo.reset()
    torch_neuronx.compile.clear_cache()
    torch.neuron.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()


def _fx(fn, *args):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn, tracing_mode="fake")(*args)


def test_the_cut_and_what_each_segment_holds(one_rank, fresh):
    def fn(x, w):
        a = (x * w).tanh()
        b = c10d.wait_tensor(c10d.all_reduce(a, "sum", one_rank))
        c = (b * w).tanh() + x  # reads x after the collective: x's write must come later
        d = c10d.wait_tensor(c10d.all_reduce(c, "sum", one_rank))
        torch.ops.aten.copy_.default(x, a)  # an input mutation (AOTAutograd leaves them as copy_)
        return d * 2

    x = torch.randn(6)
    w = torch.randn(6)
    gm = _fx(fn, x.to("neuron"), w.to("neuron"))
    program = program_for(gm, "cut", "inference")
    assert isinstance(program, SplitProgram) and program.collectives == 2
    kinds = [what for what, _ in program.steps]
    assert kinds == ["segment", "host", "host", "segment", "host", "host", "segment"]
    first, middle, last = program.segments
    assert {n.target for n in last.gm.graph.nodes if n.op == "call_function"} == {torch.ops.aten.mul.Tensor,
                                                                               torch.ops.aten.copy_.default}
    # nodes are named afresh in each segment: equal computations have equal code
    assert [n.name for n in first.gm.graph.nodes if n.op != "call_function"] == ["arg0", "arg1", "output"]
    assert [n.name for n in middle.gm.graph.nodes if n.op == "placeholder"] == ["arg0", "arg1", "arg2"]
    xn, wn = x.to("neuron"), w.to("neuron")
    (got,) = program(xn, wn)
    a = (x * w).tanh()
    torch.testing.assert_close(got.cpu(), (((a * w).tanh() + x) * 2), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(xn.cpu(), a)  # written, after the read
    assert all(isinstance(s.program, GraphProgram) for s in program.segments)
    assert "split graph cut (inference): 3 segments, 2 collectives" in torch_neuronx.metrics.report()


def test_a_graph_without_collectives_is_one_program(fresh):
    gm = _fx(lambda x: x.exp() + 1, torch.randn(3).to("neuron"))
    assert isinstance(program_for(gm, "plain", "inference"), GraphProgram)


def test_an_executable_never_holds_a_collective(one_rank, fresh):
    gm = _fx(lambda x: c10d.wait_tensor(c10d.all_reduce(x + 1, "sum", one_rank)), torch.randn(3).to("neuron"))
    with pytest.raises(NEFFCompilationError, match=r"_c10d_functional.all_reduce.default \(node 'all_reduce'\) is a "
                                                   r"collective"):
        GraphProgram(gm, "whole", "inference")(torch.randn(3).to("neuron"))


def test_compiled_functional_collectives_on_one_rank_match_the_cpu(one_rank, fresh):
    def fn(x):
        y = fc.all_reduce(x.sin(), "sum", one_rank)
        g = fc.all_gather_tensor(y * 2, 1, one_rank)
        s = fc.reduce_scatter_tensor(g, "sum", 0, one_rank)
        return fc.all_to_all_single(s, None, None, one_rank) - 1

    x = torch.randn(4, 3)
    got = torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False)(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), x.sin() * 2 - 1)
    (split,) = torch.neuron.get_dynamo_metrics()["split_graphs"].values()
    assert split["collectives"] == 4
