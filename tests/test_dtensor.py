"""DeviceMesh and DTensor on neuron, in real torchrun launches (tests/dist_workers/dtensor.py on 2
ranks, dtensor_2d.py on 4): meshes and their groups, placements, redistribution, DTensor ops and
tensor parallelism, every value compared in the workers with torch on the CPU. One launch per mesh
serves all of its tests; a check reports "ok" or the assertion that failed, with its traceback."""
import pytest

from distributed_harness import launch

# the workers run with the CPU fallback as an error, as the in-process tests do
ENV = {"TORCH_NEURONX_CPU_FALLBACK": "error"}


@pytest.fixture(scope="module")
def one_d():
    return launch("dtensor.py", nproc=2, env=ENV)


@pytest.fixture(scope="module")
def two_d():
    return launch("dtensor_2d.py", nproc=4, env=ENV)


def reported(results, name):
    """{rank: value} of `name`, every rank having reported it."""
    missing = [r for r in results if r != "log" and name not in results[r]]
    assert not missing, f"ranks {missing} did not report {name!r}\n{results['log']}"
    return {r: v[name] for r, v in results.items() if r != "log"}


def assert_ok(results, name):
    failed = {r: v for r, v in reported(results, name).items() if v != "ok"}
    assert not failed, "\n".join(f"rank {r}: {v}" for r, v in failed.items())


# ---- meshes -----------------------------------------------------------------------------------
def test_mesh_initializes_the_process_group(one_d):
    """init_device_mesh before init_process_group: c10d picks the neuron backend for the detected
    accelerator, and each rank keeps its own core (its neuron:0) rather than one by LOCAL_RANK."""
    assert set(reported(one_d, "initialized_before_mesh").values()) == {False}
    assert set(reported(one_d, "backend_config").values()) == {"neuron:neuron"}
    assert set(reported(one_d, "group_type").values()) == {"ProcessGroupNeuron"}
    assert set(reported(one_d, "current_device").values()) == {0}
    for rank, name in reported(one_d, "device_name").items():
        assert f"(cpu:{rank}," in name, (rank, name)


def test_mesh_1d(one_d):
    for rank, mesh in reported(one_d, "mesh").items():
        assert mesh == {"ranks": [0, 1], "local_rank": rank, "size": 2, "device_type": "neuron",
                        "group_ranks": [0, 1]}
    for rank, listed in reported(one_d, "listed_mesh").items():
        assert listed == {"ranks": [0, 1], "local_rank": rank, "same_group": True}


def test_mesh_after_init_process_group(two_d):
    assert set(reported(two_d, "backend").values()) == {"neuron"}
    assert set(reported(two_d, "current_device").values()) == {0}
    for rank, name in reported(two_d, "device_name").items():
        assert f"(cpu:{rank}," in name, (rank, name)
    for rank, flat in reported(two_d, "flat_mesh").items():
        assert flat == {"ranks": [0, 1, 2, 3], "local_rank": rank, "group_type": "ProcessGroupNeuron"}


def test_mesh_2d_slicing_and_groups(two_d):
    for rank, m in reported(two_d, "mesh_2d").items():
        dp, tp = divmod(rank, 2)
        tp_ranks, dp_ranks = [2 * dp, 2 * dp + 1], [tp, tp + 2]
        assert m == {
            "ranks": [[0, 1], [2, 3]], "coordinate": [dp, tp], "local_rank_dp": dp, "local_rank_tp": tp,
            "tp_ranks": tp_ranks, "dp_ranks": dp_ranks, "tp_names": ["tp"],
            "tp_group_ranks": tp_ranks, "dp_group_ranks": dp_ranks, "tp_group_type": "ProcessGroupNeuron",
            "tp_group_is_mesh_group": True,
        }, rank


# ---- DTensor on a 1-D mesh --------------------------------------------------------------------
@pytest.mark.parametrize("check", [
    "distribute_shard_replicate", "from_local", "redistribute_float32", "redistribute_bfloat16",
    "ops_float32", "ops_bfloat16",
])
def test_dtensor_1d(one_d, check):
    assert_ok(one_d, check)


@pytest.mark.parametrize("check", ["tp_mlp", "sp_mlp", "tp_attention", "sp_attention"])
def test_parallelize_module(one_d, check):
    assert_ok(one_d, check)


# ---- DTensor on a 2-D mesh --------------------------------------------------------------------
@pytest.mark.parametrize("check", ["placements_2d", "redistribute_2d", "uneven_empty", "matmul_2d", "tp_mlp_2d"])
def test_dtensor_2d(two_d, check):
    assert_ok(two_d, check)


def test_no_cpu_fallback(one_d, two_d):
    for results in (one_d, two_d):
        assert set(map(tuple, reported(results, "fallback_ops").values())) == {()}
