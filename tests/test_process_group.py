"""The `neuron` process group's life and faults, in real multi-process runs (tests/dist_workers):
each way of creating it, a second init after destroy, the core each torchrun rank owns, two "nodes"
on loopback, ranks that disagree on shapes or dtypes, a collective one rank never joins, and a rank
killed mid-collective. Collectives themselves: test_distributed.py."""
from __future__ import annotations

import pytest

from distributed_harness import launch
from torch_neuronx.runtime import config


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    return launch("process_groups.py", timeout=240, tmp_path=tmp_path_factory.mktemp("groups"))


def test_each_rank_owns_the_core_of_its_local_rank(groups):
    for rank in (0, 1):
        core = groups[rank]["core"]
        assert core == {"current_device": 0, "device_count": 1, "jax_device_id": rank, "local_rank": rank}


def test_a_subgroup_of_a_group_bound_to_a_device_works(groups):
    assert groups[0]["bound_subgroup"] == groups[1]["bound_subgroup"] == [2.0, 2.0]


def test_set_device_of_the_local_rank_selects_the_processs_core(groups):
    assert groups[0]["set_device_local_rank"] == groups[1]["set_device_local_rank"] == 0


@pytest.mark.parametrize("how", ["neuron", "default", "mixed", "again", "bound"])
def test_every_way_of_making_the_group_reduces_neuron_and_cpu_tensors(groups, how):
    # backend="neuron"; no backend (neuron is the accelerator); "cpu:gloo,neuron:neuron"; init after
    # destroy; bound to a device with device_id=
    for rank in (0, 1):
        got = groups[rank][how]
        assert got["neuron"] == [3.0, 3.0, 3.0] and got["device"] == "neuron:0"
        assert got["cpu"] == [3, 3]
    assert groups[0]["neuron"]["backend"] == "neuron"
    assert groups[0]["mixed"]["backend"] == "cpu:gloo,neuron:neuron"


@pytest.mark.parametrize("case, words", [
    ("shape_mismatch", ["rank 0: all_reduce SUM float32[4]", "rank 1: all_reduce SUM float32[5]"]),
    ("dtype_mismatch", ["rank 0: all_reduce SUM float32[4]", "rank 1: all_reduce SUM int32[4]"]),
])
def test_ranks_that_disagree_get_an_error_naming_each_ranks_call(groups, case, words):
    for rank in (0, 1):
        err = groups[rank][case]
        assert err["type"] == "MismatchError"
        for w in words:
            assert w in err["message"]


def test_inconsistent_all_to_all_splits_are_named(groups):
    # rank 0 sends [1, 3], rank 1 [2, 2]; both expect [2, 2]
    assert "rank 0 sends 1 rows to rank 0, which expects 2" in groups[0]["uneven_splits"]["message"]
    assert "rank 0 sends 3 rows to rank 1, which expects 2" in groups[1]["uneven_splits"]["message"]


def test_the_group_still_works_after_a_mismatch(groups):
    assert groups[0]["after_mismatch"] == groups[1]["after_mismatch"] == [2.0, 2.0]


def test_a_collective_one_rank_never_joins_fails_within_the_groups_timeout(groups):
    err = groups[0]["timeout"]
    assert err["type"] == "DistBackendError"
    assert "all_reduce" in err["message"] and "rank 1 did not answer" in err["message"]
    assert groups[0]["timeout_seconds"] < 3.0 + 1.5  # the group's 3 s timeout, plus scheduling slack


def test_a_killed_rank_is_named_by_the_survivor_within_the_timeout(tmp_path):
    r = launch("lost_rank.py", torchrun=False, expect_failure=True, timeout=120, tmp_path=tmp_path)
    assert r[0]["first"] == r[1]["first"] == 2.0  # a normal all_reduce before the kill
    err = r[0]["error"]
    assert err is not None and err["type"] == "DistBackendError"
    assert "rank 1 did not answer" in err["message"] and "lost" in err["message"]
    assert r[0]["seconds"] < 30  # the group's timeout
    assert "error" not in r[1]  # rank 1 died before reporting


def test_two_nodes_on_loopback_meet_through_the_rendezvous(tmp_path):
    r = launch("two_nodes.py", nproc=1, nnodes=2, timeout=180, tmp_path=tmp_path)
    ranks = sorted(r[k]["result"]["rank"] for k in (0, 1))
    assert ranks == [0, 1]
    for k in (0, 1):
        got = r[k]["result"]
        assert got["world"] == 2 and got["local_rank"] == 0 and got["current_device"] == 0
        assert got["group_rank"] == got["rank"]  # one rank per node
        assert got["all_reduce"] == [0.0, 3.0, 6.0, 9.0]  # arange(4) * 1 + arange(4) * 2
        assert got["all_gather"] == [[0.0] * 4, [1.0] * 4]


@pytest.mark.parametrize("env, visible, count", [
    ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, [1], 2),
    ({"LOCAL_RANK": "5", "LOCAL_WORLD_SIZE": "8"}, [5], 8),  # the emulated chip grows to the launch
    ({"LOCAL_RANK": "1", "NEURON_RT_VISIBLE_CORES": "0-1"}, [0, 1], 2),  # an explicit choice wins
    ({"LOCAL_RANK": "0", "NEURON_RT_NUM_CORES": "4"}, [0], 4),
])
def test_visible_cores_default_to_the_launchers_local_rank(monkeypatch, env, visible, count):
    with monkeypatch.context() as m:  # restored before the suite's per-test device checks run
        for var in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES"):
            m.delenv(var, raising=False)
        for k, v in env.items():
            m.setenv(k, v)
        assert config.host_device_count() == count
        assert config.visible_cores(config.host_device_count()) == visible


def test_a_bad_local_rank_is_named(monkeypatch):
    with monkeypatch.context() as m:
        m.delenv("NEURON_RT_VISIBLE_CORES", raising=False)
        m.setenv("LOCAL_RANK", "x")
        with pytest.raises(ValueError, match="LOCAL_RANK='x'"):
            config.visible_cores(2)
