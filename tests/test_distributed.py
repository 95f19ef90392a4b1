"""The neuron process group's collectives on 2 ranks, each against the same collective of a plain
Gloo group on CPU copies of the inputs (or, where Gloo cannot give one, a reference computed by
hand from every rank's inputs). tests/dist_workers/collectives.py runs every check in one torchrun
launch; each test here reads its checks from both ranks' reports.

Moves and integer reductions must be bit-exact; float reductions within the dtype's tolerance.
Reductions that make no sense for a dtype must raise on neuron as on Gloo and CUDA: a RuntimeError
(not a lost-rank DistBackendError) naming the op and the dtype.
"""
from __future__ import annotations

import pytest
import torch

from distributed_harness import launch

RANKS = (0, 1)
DTYPES = ["float32", "bfloat16", "float16", "float64", "int8", "uint8", "int16", "int32", "int64", "bool", "uint16",
          "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "complex64"]
OPS = ["SUM", "AVG", "MIN", "MAX", "PRODUCT", "BAND", "BOR", "BXOR"]
BITWISE = ("BAND", "BOR", "BXOR")
# float reductions: torch.testing's defaults per dtype; float8: one ulp (the reference rounds from
# float64, neuron from float32: a tie may round the other way)
TOL = {"float32": (1.3e-6, 1e-5), "complex64": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7), "bfloat16": (1.6e-2, 1e-5),
       "float16": (1e-3, 1e-5), "float8_e4m3fn": (2 ** -3, 1e-5), "float8_e5m2": (2 ** -2, 1e-5)}


def is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat", "complex"))


def invalid(op: str, dtype: str) -> bool:
    """A reduction that must raise: bitwise ops on floats, order and products on complex (torch's
    own rule), AVG on bool."""
    if dtype.startswith("complex"):
        return op not in ("SUM", "AVG")
    if is_float(dtype):
        return op in BITWISE
    return dtype == "bool" and op == "AVG"


def reduce_cases():
    """The (dtype, op) pairs the worker runs reduce_scatter and reduce with."""
    cases = [(d, "SUM") for d in DTYPES]
    cases += [(d, op) for d in ("float32", "bfloat16", "int16", "uint64", "float8_e4m3fn")
              for op in ("AVG", "MAX", "MIN", "PRODUCT")]
    cases += [("int32", "BXOR"), ("uint16", "BXOR")]
    cases += [("float32", "BAND"), ("bfloat16", "BOR"), ("complex64", "MAX"), ("complex64", "PRODUCT"), ("bool", "AVG")]
    return cases


@pytest.fixture(scope="module")
def checks(tmp_path_factory):
    """{rank: {check name: {"kind", "got", "want"}}} from one launch of the worker."""
    results = launch("collectives.py", timeout=240, tmp_path=tmp_path_factory.mktemp("collectives"))
    merged = {}
    for rank in RANKS:
        assert results[rank].get("done"), f"rank {rank} did not finish\n{results['log']}"
        merged[rank] = {}
        for key, value in results[rank].items():
            if key.startswith("checks/"):
                merged[rank].update(value)
        merged[rank]["subgroup/backends"] = results[rank]["subgroup/backends"]
        merged[rank]["host_bytes_read"] = results[rank][f"host_bytes_read/{rank}"]
    return merged


# -- comparing reports ---------------------------------------------------------------------------
def is_error(x) -> bool:
    return isinstance(x, dict) and "error" in x


def leaves(x):
    if isinstance(x, list):
        for v in x:
            yield from leaves(v)
    else:
        yield x


def assert_same(got, want, exact: bool, where: str) -> None:
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got} vs {want}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, exact, f"{where}[{i}]")
        return
    assert (got["dtype"], got["shape"]) == (want["dtype"], want["shape"]), where
    dtype = want["dtype"]
    if exact or not is_float(dtype):
        assert got["values"] == want["values"], f"{where}: {got['values']} != {want['values']}"
        return
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(torch.tensor(got["values"], dtype=torch.float64),
                               torch.tensor(want["values"], dtype=torch.float64), rtol=rtol, atol=atol, msg=where)


def verify(checks, name: str, device: str = "neuron") -> None:
    """Both ranks: the reference ran, neuron did not raise, the results agree, and are on `device`."""
    for rank in RANKS:
        rec = checks[rank][name]
        got, want = rec["got"], rec["want"]
        where = f"{name} on rank {rank}"
        assert not is_error(want), f"{where}: the reference failed: {want}"
        assert not is_error(got), f"{where}: neuron raised {got['type']}: {got['error']}"
        assert rec["kind"] in ("move", "reduce"), where
        assert_same(got, want, rec["kind"] == "move", where)
        assert {leaf["device"] for leaf in leaves(got)} <= {device}, where


def verify_error(checks, name: str, op: str, dtype: str) -> None:
    """Both ranks: neuron raised where the reference does, an error of the reference's kind that
    names the op (and, where neuron itself refuses the op, the dtype), not a lost-rank failure."""
    for rank in RANKS:
        rec = checks[rank][name]
        got, want = rec["got"], rec["want"]
        where = f"{name} on rank {rank}"
        assert rec["kind"] == "error", where
        assert is_error(want), f"{where}: the reference did not raise"
        assert is_error(got), f"{where}: neuron did not raise (got {got})"
        assert want["type"] in got["mro"], f"{where}: {got['type']} is not a {want['type']}"
        assert "DistBackendError" not in got["mro"], f"{where}: a usage error reported as a failure: {got['error']}"
        assert op in got["error"], f"{where}: {got['error']}"
        if want["type"] == "ValueError":  # torch's own complex check, before any backend
            assert got["error"] == want["error"], where
        else:
            assert f"torch.{dtype}" in got["error"], f"{where}: {got['error']}"


# -- reductions -----------------------------------------------------------------------------------
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_reduce(checks, dtype, op):
    name = f"all_reduce/{op}/{dtype}"
    if invalid(op, dtype):
        verify_error(checks, name, op, dtype)
    else:
        verify(checks, name)


@pytest.mark.parametrize("form", ["reduce_scatter_tensor", "reduce_scatter_tensor/stacked", "reduce_scatter",
                                  "reduce/root0", "reduce/root1"])
@pytest.mark.parametrize("dtype,op", reduce_cases())
def test_reduce_family(checks, form, dtype, op):
    name = f"{form}/{op}/{dtype}"
    if invalid(op, dtype):
        verify_error(checks, name, op, dtype)
    else:
        verify(checks, name)


def test_int_avg_wraps_then_truncates(checks):
    """Integer AVG is CUDA's: the sum wraps in the dtype, then divides toward zero. int16 and uint8
    sums here wrap; uint64 sums pass 2**63, where a signed division would go negative."""
    for rank in RANKS:
        for dtype in ("int16", "uint8", "uint64"):
            total = checks[rank][f"all_reduce/SUM/{dtype}"]["got"]["values"]
            avg = checks[rank][f"all_reduce/AVG/{dtype}"]["got"]["values"]
            assert avg == [int(v / 2) if dtype == "int16" else v // 2 for v in total], dtype
        assert any(v < 0 for v in checks[rank]["all_reduce/SUM/int16"]["got"]["values"])
        assert all(v > 2 ** 63 for v in checks[rank]["all_reduce/SUM/uint64"]["got"]["values"])


def test_uint64_order(checks):
    """MIN/MAX on uint64 order values past 2**63 above small ones (Gloo has no uint64)."""
    for rank in RANKS:
        lo = checks[rank]["all_reduce/MIN/uint64"]["got"]["values"]
        hi = checks[rank]["all_reduce/MAX/uint64"]["got"]["values"]
        assert all(v < 2 ** 63 for v in lo) and all(v > 2 ** 63 for v in hi)


# -- moves ------------------------------------------------------------------------------------------
MOVES = ["broadcast/root0", "broadcast/root1", "all_gather", "all_gather_into_tensor", "all_gather_into_tensor/stacked",
         "all_to_all_single/even", "all_to_all_single/uneven", "all_to_all/even", "all_to_all/uneven",
         "gather/root0", "gather/root1", "scatter/root0", "scatter/root1", "send_recv", "isend_irecv"]
# 0-d and empty tensors: one dtype per staging path (direct, same-width view, widened, bool, float8)
SMALL = ["float32", "int16", "bfloat16", "uint16", "float8_e4m3fn", "bool"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("collective", MOVES)
def test_moves(checks, collective, dtype):
    verify(checks, f"{collective}/{dtype}")


@pytest.mark.parametrize("dtype", SMALL)
@pytest.mark.parametrize("form", ["zero_d", "empty"])
def test_zero_d_and_empty(checks, form, dtype):
    """0-d: all_reduce MAX, broadcast, all_gather; empty: all_reduce, broadcast, both all-gathers."""
    verify(checks, f"{form}/{dtype}")


def test_uneven_all_to_all_moves_different_sizes(checks):
    """The uneven forms really are uneven: rank r receives r + j + 1 rows from rank j."""
    for rank in RANKS:
        outs = checks[rank]["all_to_all/uneven/float32"]["got"]
        assert [o["shape"][0] for o in outs] == [j + rank + 1 for j in RANKS]
        single = checks[rank]["all_to_all_single/uneven/float32"]["got"]
        assert single["shape"][0] == sum(j + rank + 1 for j in RANKS)


@pytest.mark.parametrize("name", ["batch_isend_irecv/float32", "recv_anysource/float32", "barrier"])
def test_point_to_point_and_barrier(checks, name):
    verify(checks, name)


def test_recv_anysource_names_the_sender(checks):
    assert checks[1]["recv_anysource/float32"]["got"][1]["values"] == [0]


def test_barrier_work(checks):
    """dist.barrier returns None; its async work waits and completes."""
    for rank in RANKS:
        assert checks[rank]["barrier"]["got"][1]["values"] == [True, True, True]


# -- coalesced, async, subgroups, functional ----------------------------------------------------------
@pytest.mark.parametrize("name", ["all_reduce_coalesced/SUM/float32", "coalescing_manager/all_reduce/float32",
                                  "coalescing_manager/all_reduce_avg/bfloat16",
                                  "coalescing_manager/all_gather_into_tensor/float32",
                                  "coalescing_manager/reduce_scatter_tensor/float32", "functional/coalesced/float32"])
def test_coalesced(checks, name):
    verify(checks, name)


@pytest.mark.parametrize("name", ["async", "async/hand"])
def test_async(checks, name):
    """wait(), get_future().then() (a device op in the callback), a future's value (the outputs, as
    Gloo gives them), is_completed/is_success/done."""
    verify(checks, name)
    for rank in RANKS:
        assert checks[rank][name]["got"][-1]["values"] == [True] * 4


def test_stream_order(checks):
    """Collectives in flight on the device buffers themselves: an op issued before reads the old
    values, one issued after (before wait) waits and sees the result, a write after a gather's
    input is not gathered, AVG's division lands before a later read."""
    verify(checks, "stream_order")


def test_collectives_copy_nothing_to_the_host(checks):
    """On the CPU platform Gloo reads and writes the device buffers: all_reduce, broadcast,
    all_gather_into_tensor and reduce_scatter_tensor of whole tensors read no byte to the host."""
    verify(checks, "no_copies")
    for rank in RANKS:
        assert checks[rank]["host_bytes_read"] == 0, f"rank {rank}: {checks[rank]['host_bytes_read']} bytes"


@pytest.mark.parametrize("name", ["subgroup", "subgroup/gloo"])
def test_subgroups(checks, name):
    """new_group([0, 1]) and single-rank groups [0], [1] (each rank in its own)."""
    verify(checks, name)


def test_subgroup_backends(checks):
    for rank in RANKS:
        assert checks[rank]["subgroup/backends"] == ["neuron", "neuron", "gloo"]


@pytest.mark.parametrize("name", ["functional/float32", "functional/bfloat16", "functional/int64",
                                  "functional/hand/float32", "functional/hand/int16", "functional/hand/uint32",
                                  "functional/hand/float8_e5m2"])
def test_functional(checks, name):
    """torch.distributed._functional_collectives and torch.ops._c10d_functional (+ wait_tensor)."""
    verify(checks, name)


# -- views, CPU tensors --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "int16", "bfloat16", "uint64"])
def test_views(checks, dtype):
    """Strided and offset views as inputs and outputs: an in-place collective writes only the view
    (the whole base tensors are compared)."""
    verify(checks, f"views/{dtype}")
    for rank in RANKS:
        b1 = checks[rank][f"views/{dtype}"]["got"][0]
        assert b1["shape"] == [4, 6]


def test_cpu_tensors_in_the_neuron_group(checks):
    """CPU tensors in the neuron group: Gloo's own dtypes directly, AVG, int16 and a
    non-contiguous view (which Gloo itself refuses) staged."""
    verify(checks, "cpu_tensors", device="cpu")
    verify(checks, "cpu_tensors/gloo", device="cpu")


def test_every_check_was_asserted(checks):
    """The worker ran no check that no test here reads (a new check needs a test)."""
    read = {f"all_reduce/{op}/{d}" for d in DTYPES for op in OPS}
    read |= {f"{form}/{op}/{d}" for d, op in reduce_cases() for form in
             ("reduce_scatter_tensor", "reduce_scatter_tensor/stacked", "reduce_scatter", "reduce/root0", "reduce/root1")}
    read |= {f"{m}/{d}" for m in MOVES for d in DTYPES}
    read |= {f"{form}/{d}" for form in ("zero_d", "empty") for d in SMALL}
    read |= {"batch_isend_irecv/float32", "recv_anysource/float32", "barrier", "all_reduce_coalesced/SUM/float32",
             "coalescing_manager/all_reduce/float32", "coalescing_manager/all_reduce_avg/bfloat16",
             "coalescing_manager/all_gather_into_tensor/float32", "coalescing_manager/reduce_scatter_tensor/float32",
             "functional/coalesced/float32", "async", "async/hand", "subgroup", "subgroup/gloo", "subgroup/backends",
             "functional/float32", "functional/bfloat16", "functional/int64", "functional/hand/float32",
             "functional/hand/int16", "functional/hand/uint32", "functional/hand/float8_e5m2", "cpu_tensors",
             "cpu_tensors/gloo", "stream_order", "no_copies", "host_bytes_read"}
    read |= {f"views/{d}" for d in ("float32", "int16", "bfloat16", "uint64")}
    for rank in RANKS:
        assert set(checks[rank]) == read
