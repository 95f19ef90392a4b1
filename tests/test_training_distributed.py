"""Training over the `neuron` process group in real torchrun launches, each job against the same job
on CPU tensors over Gloo (tests/dist_workers/training_*.py compute both and compare every step's
loss, gradients and the final parameters; a check reports "ok": True with its numbers, or the
assertion that failed with its traceback).

The default run is one launch of 2 ranks (training_default.py):
- DDP (training_ddp.py): buckets, AdamW, no_sync, find_unused_parameters, broadcast_buffers, the bf16
  compression hook;
- FSDP2 (training_fsdp.py): sharded parameters, reshard_after_forward, explicit prefetching with
  gradient accumulation, mixed precision, CPU offload, activation checkpointing, a distributed
  checkpoint, resumed on 1 rank (training_dcp.py).
Slow: the same launch under eager fusion; compiled steps under DDP and FSDP2 (training_compiled.py);
FSDP2 x tensor parallelism on a 2 x 2 mesh (training_fsdp_2d.py, 4 ranks); the checkpoint resumed in a
fresh launch of 4 ranks; a rank killed during a DDP or FSDP2 step (training_fault.py) and its
checkpoint resumed in a fresh launch.

The workers run with the CPU fallback as an error, and with eager ops one executable each
(TORCH_NEURONX_EAGER_FUSION=0) except where a test says otherwise: the jobs' executables are then
shared by every check through the disk cache, where fused runs (cut differently by each job's
collectives) would each compile anew (53 s against 93 s for the default launch). Eager fusion, as
users run, is tested in the slow tests (the default launch again, the killed-rank jobs).
"""
from __future__ import annotations

import pytest

from distributed_harness import launch

ENV = {"TORCH_NEURONX_CPU_FALLBACK": "error", "TORCH_NEURONX_EAGER_FUSION": "0"}
FUSED_ENV = {"TORCH_NEURONX_CPU_FALLBACK": "error"}  # eager fusion on, as users get it
RTOL = 1e-5


def ranks(results):
    return [r for r in results if r != "log"]


def reported(results, name) -> dict:
    """{rank: value} of `name`, every rank having reported it."""
    missing = [r for r in ranks(results) if name not in results[r]]
    assert not missing, f"ranks {missing} did not report {name!r}\n{results['log']}"
    return {r: results[r][name] for r in ranks(results)}


def passed(results, name) -> dict:
    """{rank: report} of a check that passed on every rank (else the ranks' errors)."""
    got = reported(results, name)
    failed = {r: v.get("error") for r, v in got.items() if not v.get("ok")}
    assert not failed, "\n".join(f"rank {r}: {e}" for r, e in failed.items())
    return got


def assert_losses_close(report, rtol=RTOL):
    got, want = report["losses"], report["reference_losses"]
    assert len(got) == len(want) and all(abs(g - w) <= rtol * abs(w) + 1e-6 for g, w in zip(got, want)), (got, want)


def assert_same_on_every_rank(reports: dict, key: str):
    values = {r: v[key] for r, v in reports.items()}
    assert len({repr(v) for v in values.values()}) == 1, values


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return tmp_path_factory.mktemp("fsdp_checkpoints")


@pytest.fixture(scope="module")
def default(tmp_path_factory, checkpoints):
    return launch("training_default.py", nproc=2, args=[checkpoints], env=ENV, timeout=900,
                  tmp_path=tmp_path_factory.mktemp("training"))


@pytest.fixture(scope="module")
def ddp(default):  # the DDP and FSDP2 tests read the same launch
    return default


@pytest.fixture(scope="module")
def fsdp(default):
    return default


# ---- DDP --------------------------------------------------------------------------------------------
def test_ddp_transformer_in_several_buckets_trains_as_on_gloo(ddp):
    reports = passed(ddp, "ddp_buckets_adamw")
    for r in reports.values():
        assert len(r["bucket_sizes"]) >= 3, r["bucket_sizes"]
        assert_losses_close(r)
    assert_same_on_every_rank(reports, "losses")  # the mean over the ranks' batches


def test_ddp_no_sync_accumulates_locally_then_reduces(ddp):
    for r in passed(ddp, "ddp_no_sync").values():
        assert_losses_close(r)


def test_ddp_find_unused_parameters(ddp):
    for r in passed(ddp, "ddp_find_unused").values():
        assert_losses_close(r)


def test_ddp_broadcast_buffers_starts_every_forward_from_rank_0s(ddp):
    reports = passed(ddp, "ddp_broadcast_buffers")
    for r in reports.values():
        assert r["forward_start_stats"][0] == [1.0, 2.0]  # rank 0's running mean and variance
        assert_losses_close(r)
    assert_same_on_every_rank(reports, "forward_start_stats")


def test_ddp_bf16_compress_hook_as_on_gloo(ddp):
    for r in passed(ddp, "ddp_bf16_hook").values():
        # PyTorch refuses the hook by name unless built with CUDA+NCCL or XPU, on Gloo as here
        for job in ("neuron", "cpu"):
            assert "BF16 all reduce communication hook required CUDA" in r["refusals"][job], r["refusals"]
        assert r["diff_from_fp32_allreduce"] > 0  # the hook rounded the gradients to bfloat16
        assert_losses_close(r)


# ---- FSDP2 ------------------------------------------------------------------------------------------
def test_fsdp_parameters_are_dtensor_shards_on_neuron(fsdp):
    reports = passed(fsdp, "fsdp_sharded_parameters")
    shards = {r: dict(v["local_shards"]) for r, v in reports.items()}
    assert shards[0]["head.weight"] == [3, 16] and shards[1]["head.weight"] == [2, 16]  # 5 rows, uneven
    assert shards[0]["blocks.0.fc2.weight"] == shards[1]["blocks.0.fc2.weight"] == [8, 32]


@pytest.mark.parametrize("check", ["fsdp_reshard_after_forward", "fsdp_no_reshard_after_forward",
                                   "fsdp_prefetch_and_accumulation"])
def test_fsdp_trains_as_on_gloo(fsdp, check):
    reports = passed(fsdp, check)
    for r in reports.values():
        assert_losses_close(r)
    assert_same_on_every_rank(reports, "losses")


def test_fsdp_communicates_on_neuron_streams_of_its_own(fsdp):
    for r in passed(fsdp, "fsdp_prefetch_and_accumulation").values():
        assert set(r["streams"]) == {"all_gather_copy_in_stream", "all_gather_stream", "reduce_scatter_stream"}
        assert all(s.startswith("torch_neuronx.device.Stream") for s in r["streams"].values()), r["streams"]


def test_fsdp_mixed_precision_within_the_policys_own_error(fsdp):
    for r in passed(fsdp, "fsdp_mixed_precision").values():
        assert r["param_dtype_in_forward"] == ["torch.bfloat16"]
        assert_losses_close(r, rtol=1e-2)  # bfloat16 compute
        assert r["cpu_bf16_vs_float32"]["grad_diff"] > 0  # the policy changes the numbers


def test_fsdp_cpu_offload(fsdp):
    for r in passed(fsdp, "fsdp_cpu_offload").values():
        assert r["shard_device"] == "cpu" and r["compute"] == "neuron:0"
        assert_losses_close(r)


def test_fsdp_activation_checkpointing_recomputes_the_same_dropout(fsdp):
    for r in passed(fsdp, "fsdp_activation_checkpointing").values():
        assert r["wrapper"] == ["FSDPCheckpointWrapper"] * 2
        assert r["grad_diff_without_rng_stash"] > 1e-4
        assert_losses_close(r)


def test_distributed_checkpoint_of_2_ranks_resumes_on_1(fsdp):
    saved = passed(fsdp, "fsdp_dcp_save")
    for r in saved.values():
        assert ".metadata" in r["files"] and len(r["files"]) == 3  # one file per rank
    # rank 0 alone, on a group of its own, loads both ranks' shards and trains on the whole batch
    r = fsdp[0]["dcp_resume_on_one_rank"]
    assert r.get("ok"), r.get("error")
    assert r["world"] == 1 and r["reference"].startswith("saved by")
    assert r["uninterrupted_losses"] == saved[0]["losses"]
    assert_losses_close({"losses": r["losses"], "reference_losses": saved[0]["losses"][2:]})
    assert r["param_diff"] < 1e-5


def test_no_cpu_fallback(default):
    assert set(map(tuple, reported(default, "fallback_ops").values())) == {()}


# ---- slow: compiled steps, a 2-D mesh, 2 -> 4 ranks, killed ranks, eager fusion ----------------------
@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return launch("training_compiled.py", nproc=2, env=ENV, timeout=900, tmp_path=tmp_path_factory.mktemp("compiled"))


@pytest.mark.slow
def test_compiled_ddp_ddp_optimizer_cuts_the_forward_at_buckets(compiled):
    for r in passed(compiled, "ddp_compiled_ddp_optimizer").values():
        assert len([g for g in r["graph_runs"] if g.endswith("_forward")]) >= 3
        assert r["split_graphs"] == {}  # DDP's all-reduces run from its hooks, between graphs
        assert r["grad_diff"] <= 1e-6


@pytest.mark.slow
def test_compiled_ddp_without_optimize_ddp_is_one_graph(compiled):
    for r in passed(compiled, "ddp_compiled_no_optimize_ddp").values():
        assert len(r["graph_runs"]) == 2 and r["split_graphs"] == {}


@pytest.mark.slow
def test_compiled_ddp_python_reducer_puts_the_all_reduces_in_the_backward_graph(compiled):
    for r in passed(compiled, "ddp_compiled_python_reducer").values():
        (split,) = r["split_graphs"].values()
        assert split["collectives"] >= 1 and split["segments"] == split["collectives"] + 1


@pytest.mark.slow
def test_compiled_fsdp(compiled):
    for r in passed(compiled, "fsdp_compiled").values():
        assert r["split_graphs"] == {}  # FSDP2's hooks run outside the graphs
        assert_losses_close(r)


@pytest.mark.slow
def test_compiled_no_cpu_fallback(compiled):
    assert set(map(tuple, reported(compiled, "fallback_ops").values())) == {()}


@pytest.mark.slow
def test_fsdp_over_dp_and_tensor_parallel_over_tp_on_4_ranks(tmp_path):
    results = launch("training_fsdp_2d.py", nproc=4, env=ENV, timeout=900, tmp_path=tmp_path)
    reports = passed(results, "fsdp_tp_2d")
    assert sorted(tuple(r["coordinate"]) for r in reports.values()) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for r in reports.values():
        assert_losses_close(r)
    assert set(map(tuple, reported(results, "fallback_ops").values())) == {()}


@pytest.mark.slow
def test_distributed_checkpoint_of_2_ranks_resumes_on_4(fsdp, checkpoints, tmp_path):
    saved = passed(fsdp, "fsdp_dcp_save")
    results = launch("training_dcp.py", nproc=4, args=[checkpoints, 2, 4], env=ENV, timeout=900, tmp_path=tmp_path)
    for r in passed(results, "dcp_resume").values():
        assert r["world"] == 4 and r["uninterrupted_losses"] == saved[0]["losses"]


@pytest.mark.slow
@pytest.mark.parametrize("mode, collectives", [
    ("ddp", ["all_reduce"]),
    ("fsdp", ["reduce_scatter_tensor", "all_gather_into_tensor"]),
])
def test_a_rank_killed_during_a_step_fails_the_survivor_and_its_checkpoint_resumes(tmp_path, mode, collectives):
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    # eager fusion on here: the survivor's backward is cut into fused runs by the collectives
    r = launch("training_fault.py", args=[mode, folder], torchrun=False, expect_failure=True, env=FUSED_ENV,
               timeout=600, tmp_path=tmp_path)
    assert r[0]["saved"] == r[1]["saved"] == 2 and r[1]["killed_in"] == "backward"
    assert "error" not in r[1]  # rank 1 died before reporting one
    err = r[0]["error"]
    assert err is not None and err["type"] == "DistBackendError", (err, r["log"])
    assert err["phase"] == "backward"  # the step's own collectives failed, not a later one
    assert any(c in err["message"] for c in collectives), err["message"]
    assert "rank 1 did not answer" in err["message"] and "lost" in err["message"]
    assert r[0]["seconds"] < r[0]["timeout"]
    # a fresh launch resumes the checkpoint written before the kill, as the uninterrupted job trains
    resumed = launch("training_dcp.py", nproc=2, args=[folder, 2, 4], env=ENV, timeout=600, tmp_path=tmp_path)
    for rep in passed(resumed, "dcp_resume").values():
        assert rep["reference"].startswith("trained here")
        assert rep["uninterrupted_losses"][:2] == pytest.approx(r[0]["losses"], rel=RTOL)


@pytest.mark.slow
def test_the_default_jobs_under_eager_fusion(tmp_path):
    """The default launch with eager fusion on, as users run: queued ops run as fused executables, cut
    wherever a collective stages its tensors on the host."""
    (tmp_path / "checkpoint").mkdir()
    results = launch("training_default.py", nproc=2, args=[tmp_path / "checkpoint"], env=FUSED_ENV, timeout=900,
                     tmp_path=tmp_path)
    checks = {r: {k: v for k, v in results[r].items() if isinstance(v, dict) and "ok" in v} for r in ranks(results)}
    failed = [f"rank {r} {k}: {v.get('error')}" for r, c in checks.items() for k, v in c.items() if not v["ok"]]
    assert not failed, "\n".join(failed)
    # DDP's 5 checks, FSDP2's 8, and rank 0's resume on a group of its own
    assert len(checks[0]) == 14 and set(checks[0]) - set(checks[1]) == {"dcp_resume_on_one_rank"}, checks
    assert set(map(tuple, reported(results, "fallback_ops").values())) == {()}
