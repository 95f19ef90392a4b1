"""diffusers' tensor parallelism, eager and compiled, on 2 ranks of the c10d backend `neuron` (one launch of
tests/dist_workers/tensor_parallel.py under torchrun; each rank owns one core).

The tiny FLUX.2-klein of examples/flux2_klein.py, written with save_pretrained; on each rank, as diffusers'
AWS Trainium page says: `init_process_group(backend="neuron")`, `DeviceMesh("neuron", ranks)`,
`TensorParallelConfig(mesh=mesh)`.

- The Flux2Transformer2DModel, sharded by its `_tp_plan` through both of diffusers' entry points
  (`from_pretrained(..., parallel_config=...)`, which streams each rank's slice off disk, and
  `enable_parallelism(config=...)` on the model in memory, then `.to(device)`), against the same
  transformer on the CPU on the same inputs: float32 at torch.testing.assert_close's float32 defaults
  (measured max |diff| ~6e-7 of max |out| ~1.8); bfloat16 within 2 bfloat16 steps of the output's scale
  (TP adds one rounding: each rank's partial sum of a rowwise layer is rounded to bfloat16 before the
  all-reduce; measured 1 step, 7.8e-3 at ~1.8).
- The whole pipeline with that transformer and its other components on the rank's device, against the
  same pipeline on the CPU (image in [0, 1], same CPU generator): float32 within test_pipeline.py's bounds
  (max |diff| <= 1e-4, relative <= 1e-5; measured 2.5e-6 and 5e-7); bfloat16 within about twice what
  bfloat16 itself costs on the CPU (the CPU's bfloat16 image is 0.028 max / 0.0072 relative from its
  float32 one; one core on neuron in bfloat16 is 0.027 / 0.0077 from the CPU's bfloat16; measured TP
  0.031 / 0.0076). Then the same pipeline with its transformer compiled (`backend="neuron",
  fullgraph=True, dynamic=False`, as the page compiles it), within the same bounds.
- examples/tensor_parallel_neuron.py, the page's example, run first in the same launch on every rank
  (64x64, 2 steps, seed 0; tests/test_examples.py runs the page's other two examples): it says it ran
  over 2 NeuronCores, rank 0's output.png holds its image, and that image is the pipeline whose
  bfloat16 check is above (8-bit, as the example makes it), then compiled; within REL_TOL of the
  CPU's bfloat16 image as tests/test_examples.py bounds its examples. (It had a torchrun launch of its
  own in tests/test_examples.py, which loaded, compiled and ran the same bfloat16 pipeline again.)
Every rank gives the same outputs, bit for bit; each forward runs one all-reduce per rowwise layer on
the neuron process group and nothing else; no op falls back to the CPU. The launch takes ~35 s with
the executable cache cold, ~15 s warm.
"""
import os
import sys

import pytest
import torch

import accelerate  # noqa: F401  (diffusers' tensor-parallel from_pretrained needs it: low_cpu_mem_usage)
from distributed_harness import launch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from flux2_klein import save_pipeline  # noqa: E402

RANKS = 2
DTYPES = ("float32", "bfloat16")
PATHS = ("from_pretrained", "enable_parallelism")
# Flux2Transformer2DModel's rowwise layers (each ends in an all-reduce of the ranks' partial sums): per
# double-stream block attn.to_out.0, attn.to_add_out, ff.linear_out, ff_context.linear_out; per
# single-stream block attn.to_out. The tiny model has 2 and 3 of them.
ALL_REDUCES = 2 * 4 + 3 * 1
BF16_STEPS = 2
PIPELINE_BOUNDS = {"float32": (1e-4, 1e-5), "bfloat16": (0.0625, 0.016)}
REL_TOL = 2e-2  # tests/test_examples.py's bound for the examples' images against the CPU's


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    import diffusers
    import transformers

    diffusers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    folder = save_pipeline(tmp_path_factory.mktemp("flux2-klein-tp"))
    png = tmp_path_factory.mktemp("tp-example") / "output.png"
    out = launch("tensor_parallel.py", nproc=RANKS, args=[folder, str(png)], timeout=400,
                 tmp_path=tmp_path_factory.mktemp("tp-launch"))
    assert sorted(k for k in out if k != "log") == list(range(RANKS)), out["log"]
    return out


def test_each_rank_owns_one_core(results):
    for rank in range(RANKS):
        assert results[rank]["device"] == [0, 1]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_transformer_matches_cpu(results, dtype, path):
    for rank in range(RANKS):
        r = results[rank][f"transformer/{dtype}/{path}"]
        assert r["weight_type"] == "DTensor" and r["local_device"] == "neuron:0"
        assert r["local_shape"] == [r["global_shape"][0] // RANKS, r["global_shape"][1]]
        assert r["out_device"] == "neuron:0"
        assert r["collectives"] == {"allreduce": ALL_REDUCES}, r["collectives"]
        got = torch.tensor(r["out"])
        want = torch.tensor(results[rank][f"transformer/{dtype}/cpu"])
        assert got.shape == want.shape == (1, 16, 32)
        if dtype == "float32":
            torch.testing.assert_close(got, want)
        else:
            step = 2.0 ** -7 * want.abs().max()  # bfloat16's step at the output's largest magnitude
            assert (got - want).abs().max() <= BF16_STEPS * step, (got - want).abs().max()
        assert r["out"] == results[0][f"transformer/{dtype}/{path}"]["out"]  # every rank, bit for bit


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_pipeline_matches_cpu(results, dtype, mode):
    # compiled: the tensor-parallel transformer under torch.compile(backend="neuron", fullgraph=True)
    key = f"pipeline/{dtype}" + ("/compiled" if mode == "compiled" else "")
    max_abs_tol, rel_tol = PIPELINE_BOUNDS[dtype]
    for rank in range(RANKS):
        r = results[rank][key]
        assert r["shape"] == [1, 64, 64, 3]
        assert r["devices"] == ["neuron:0"]
        assert r["max_abs"] <= max_abs_tol and r["rel"] <= rel_tol, r
        assert r["digest"] == results[0][key]["digest"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_compiled_transformer_graphs_are_cut_at_each_all_reduce(results, dtype):
    graphs = results[0][f"pipeline/{dtype}/compiled/graphs"]
    assert graphs, "the compiled transformer ran no graph with collectives"
    assert sum(g["collectives"] for g in graphs.values()) >= ALL_REDUCES, graphs


def test_the_page_example_under_torchrun_matches_cpu(results):
    assert "tensor parallel over 2 NeuronCores" in results[0]["example"]["stdout"]
    assert results[0]["example"]["output"].endswith("output.png") and results[0]["example/png_is_the_image"]
    for rank in range(RANKS):
        r = results[rank]["pipeline/bfloat16"]  # the example's image against the CPU's bfloat16 one
        assert r["shape"] == [1, 64, 64, 3] and r["rel"] <= REL_TOL, r
        assert r["digest"] == results[0]["pipeline/bfloat16"]["digest"]
        assert results[rank]["example"]["output"] is None or rank == 0


def test_no_cpu_fallback(results):
    for rank in range(RANKS):
        assert results[rank]["fallbacks"] == {}
