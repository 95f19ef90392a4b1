"""A Trainium target (TORCH_NEURONX_TARGET): TorchNeuron's 64-bit policy inside executables (int64 runs as
int32, float64 as float32; dtype conversions exact), no complex dtypes, each core's capacity as one
logical core of the chip, and TORCH_NEURONX_TARGET_CHECK=compare naming what the policy changed.

The target is a process-wide setting read when programs are traced, so target-mode cases run in child
processes (`helpers.run_python`); this process has none, and its cases check that nothing changes then.
Every value is compared with the CPU: computed exactly (no target), or in int32/float32, as the target
computes it."""
import json

import pytest
import torch

from helpers import run_python

GiB = 2**30


def _child(code: str, **env: str) -> dict:
    """Run `code` (which ends by printing one JSON line) in a fresh process with `env` set; that line."""
    r = run_python(code, **env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _trn2(code: str, **env: str) -> dict:
    return _child(code, TORCH_NEURONX_TARGET="trn2", **env)


# ---- the 64-bit policy, eager


INT64_OPS = """
import json, torch
a = torch.tensor([2**31 - 1, 5, -2**31], dtype=torch.int64, device="neuron")
i = torch.tensor([2**31 + 5, 7], dtype=torch.int64, device="neuron")
x = torch.tensor([1e8], dtype=torch.float64, device="neuron")
s = torch.tensor([1e8, 1.0, 1.0, 1.0], dtype=torch.float64, device="neuron")
out = {"add": (a + 1).cpu().tolist(), "mul": (a * 3).cpu().tolist(), "floordiv": (i // 2).cpu().tolist(),
       "sum": s.sum().cpu().item(), "plus_one": (x + 1).cpu().tolist(), "dtype": str((a + 1).dtype),
       "stored": i.cpu().tolist()}
print(json.dumps(out))
"""


def _int64_inputs():
    return (torch.tensor([2**31 - 1, 5, -2**31], dtype=torch.int64), torch.tensor([2**31 + 5, 7], dtype=torch.int64),
            torch.tensor([1e8], dtype=torch.float64), torch.tensor([1e8, 1.0, 1.0, 1.0], dtype=torch.float64))


def test_64_bit_values_compute_as_int32_and_float32_under_a_target():
    a, i, x, s = _int64_inputs()
    got = _trn2(INT64_OPS)
    # what TorchNeuron computes: the values narrowed, the op in 32 bits, the result widened to PyTorch's dtype
    assert got["add"] == (a.to(torch.int32) + 1).tolist() == [-2**31, 6, -2**31 + 1]
    assert got["mul"] == (a.to(torch.int32) * 3).tolist()
    assert got["floordiv"] == (i.to(torch.int32) // 2).tolist() == [-(2**30) + 2, 3]  # an index past 2**31 wraps
    assert got["sum"] == s.float().sum().item() == 1e8  # each 1.0 lost against 1e8 in float32
    assert got["plus_one"] == (x.float() + 1).double().tolist() == [1e8]
    assert got["dtype"] == "torch.int64"  # storages keep PyTorch's dtypes
    assert got["stored"] == i.tolist()  # a copy to the device is exact: only ops narrow


def test_64_bit_values_stay_exact_without_a_target():
    a, i, x, s = _int64_inputs()
    d = [t.to("neuron") for t in (a, i, x, s)]
    assert (d[0] + 1).cpu().tolist() == (a + 1).tolist() == [2**31, 6, -2**31 + 1]
    assert (d[0] * 3).cpu().tolist() == (a * 3).tolist()
    assert (d[1] // 2).cpu().tolist() == (i // 2).tolist() == [2**30 + 2, 3]
    assert d[3].sum().cpu().item() == s.sum().item() == 100000003.0
    assert (d[2] + 1).cpu().tolist() == (x + 1).tolist() == [100000001.0]


def test_one_launch_per_op_gives_the_targets_values_too():
    """Fusion off: each op's own executable, traced under the policy and stored in the disk cache."""
    a, i, x, s = _int64_inputs()
    got = _trn2(INT64_OPS, TORCH_NEURONX_EAGER_FUSION="0")
    assert got["add"] == (a.to(torch.int32) + 1).tolist()
    assert got["floordiv"] == (i.to(torch.int32) // 2).tolist()
    assert got["sum"] == s.float().sum().item()


def test_the_disk_cache_keeps_an_executable_per_target(tmp_path):
    """The same op in one cache folder: exact without a target, wrapped under trn2, exact again."""
    code = """
import json, torch
a = torch.tensor([2**31 - 1], dtype=torch.int64, device="neuron")
print(json.dumps((a + 1).cpu().tolist()))
"""
    env = {"TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path), "TORCH_NEURONX_EAGER_FUSION": "0"}
    exact = (torch.tensor([2**31 - 1]) + 1).tolist()
    narrowed = (torch.tensor([2**31 - 1], dtype=torch.int32) + 1).tolist()
    assert _child(code, **env) == exact
    assert _child(code, TORCH_NEURONX_TARGET="trn2", **env) == narrowed
    assert _child(code, **env) == exact


def test_dtype_conversions_are_exact_under_a_target():
    """TorchNeuron converts dtypes through the host: int64 -> float64 and back keep every bit."""
    got = _trn2("""
import json, torch
b = torch.tensor([2**40, 2**40 + 1], dtype=torch.int64, device="neuron")
f = torch.tensor([2.0**40 + 1.0, 0.1], dtype=torch.float64, device="neuron")
out = {"to_f64": b.to(torch.float64).cpu().tolist(), "to_i64": f.to(torch.int64).cpu().tolist(),
       "copy": torch.empty(2, dtype=torch.float64, device="neuron").copy_(b).cpu().tolist(),
       "f32": f.to(torch.float32).cpu().tolist()}
print(json.dumps(out))
""")
    b = torch.tensor([2**40, 2**40 + 1], dtype=torch.int64)
    f = torch.tensor([2.0**40 + 1.0, 0.1], dtype=torch.float64)
    assert got["to_f64"] == b.to(torch.float64).tolist() == [2.0**40, 2.0**40 + 1]  # float32 would drop the 1
    assert got["copy"] == b.to(torch.float64).tolist()
    assert got["to_i64"] == f.to(torch.int64).tolist() == [2**40 + 1, 0]
    assert got["f32"] == f.to(torch.float32).tolist()


# ---- compiled mode


COMPILED = """
import json, torch
def fn(a, i, s, t):
    t.add_(2**31)  # an input mutation: its storage gets the target's value
    return a + 1, i // 2, s.sum(), t.to(torch.float64)
c = torch.compile(fn, backend="neuron")
t = torch.tensor([7, 1], dtype=torch.int64, device="neuron")
a = torch.tensor([2**31 - 1, 5, -2**31], dtype=torch.int64, device="neuron")
i = torch.tensor([2**31 + 5, 7], dtype=torch.int64, device="neuron")
s = torch.tensor([1e8, 1.0, 1.0, 1.0], dtype=torch.float64, device="neuron")
r = c(a, i, s, t)
print(json.dumps({"add": r[0].cpu().tolist(), "floordiv": r[1].cpu().tolist(), "sum": r[2].cpu().item(),
                  "converted": r[3].cpu().tolist(), "mutated": t.cpu().tolist()}))
"""


def test_compiled_graphs_compute_64_bit_values_as_the_target_does():
    a, i, _x, s = _int64_inputs()
    t = torch.tensor([7, 1], dtype=torch.int32)
    got = _trn2(COMPILED)
    assert got["add"] == (a.to(torch.int32) + 1).tolist()
    assert got["floordiv"] == (i.to(torch.int32) // 2).tolist()
    assert got["sum"] == s.float().sum().item() == 1e8
    mutated = (t + torch.tensor(2**31, dtype=torch.int64).to(torch.int32)).tolist()  # 2**31 wraps to -2**31
    assert got["mutated"] == mutated == [7 - 2**31, 1 - 2**31]
    assert got["converted"] == [float(v) for v in mutated]  # the conversion after it is exact


def test_compiled_graphs_stay_exact_without_a_target():
    a, i, _x, s = _int64_inputs()

    def fn(a, i, s):
        return a + 1, i // 2, s.sum()

    got = torch.compile(fn, backend="neuron")(a.to("neuron"), i.to("neuron"), s.to("neuron"))
    want = fn(a, i, s)
    assert [g.cpu().tolist() for g in got] == [w.tolist() for w in want]


# ---- complex dtypes


def test_complex_is_refused_under_a_target_naming_the_op_and_dtype():
    got = _trn2("""
import json, torch
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = None
    except NotImplementedError as e:
        out[name] = str(e)
attempt("to", lambda: torch.randn(2, dtype=torch.complex64).to("neuron"))
attempt("copy", lambda: torch.empty(2, dtype=torch.complex64, device="neuron").copy_(torch.ones(2)))
attempt("factory", lambda: torch.zeros(2, dtype=torch.complex64, device="neuron").cpu())
x = torch.ones(2, device="neuron")
attempt("op", lambda: torch.polar(x, x).cpu())
attempt("scalar", lambda: (x * 1j).cpu())  # not a TypeError, which Tensor.__mul__ would turn into NotImplemented
attempt("compiled", lambda: torch.compile(lambda a: torch.polar(a, a).abs(), backend="neuron")(x).cpu())
out["real"] = (x * 2).cpu().tolist()  # the process goes on
print(json.dumps(out))
""")
    tail = "is not supported: TorchNeuron has no complex dtypes"
    assert got["to"] == f"neuron (trn2): aten._to_copy.default: complex64 {tail}"
    assert got["copy"] == f"neuron (trn2): aten.copy_.default: complex64 {tail}"
    assert got["factory"] == f"neuron (trn2): aten.zeros.default: complex64 {tail}"
    assert got["op"] == f"neuron (trn2): aten.polar.default: complex64 {tail}"
    assert got["scalar"] == f"neuron (trn2): aten.mul.Tensor: complex64 {tail}"  # the result, not the number
    assert got["compiled"].startswith(f"neuron (trn2): aten.polar.default: complex64 {tail} (graph "), got["compiled"]
    assert got["real"] == (torch.ones(2) * 2).tolist()


def test_complex_works_without_a_target():
    z = torch.randn(3, dtype=torch.complex64, generator=torch.Generator().manual_seed(0))
    x = torch.tensor([1.0, 2.0, 3.0])
    assert torch.equal(z.to("neuron").cpu(), z)
    torch.testing.assert_close(torch.polar(x.to("neuron"), x.to("neuron")).cpu(), torch.polar(x, x))
    torch.testing.assert_close((x.to("neuron") * 1j).cpu(), x * 1j)
    torch.testing.assert_close((z.to("neuron") * 2).cpu(), z * 2)


# ---- capacity and properties


CAPACITY = """
import json, torch
p = torch.neuron.get_device_properties(1)
out = {"total": p.total_memory, "target": p.target, "lnc": p.lnc, "name": p.name,
       "free": torch.neuron.mem_get_info(0)[1]}
try:
    a = torch.empty(p.total_memory - 2**20, dtype=torch.uint8, device="neuron")  # nothing written: no host memory
    torch.empty(2**21, dtype=torch.uint8, device="neuron")
    out["oom"] = None
except torch.OutOfMemoryError as e:
    out["oom"] = str(e)
print(json.dumps(out))
"""


@pytest.mark.parametrize("chip, lnc, gib", [("trn2", "2", 24), ("trn2", "1", 12), ("trn1", "", 16), ("trn3", "", 36)])
def test_each_core_is_one_logical_core_of_the_target(chip, lnc, gib):
    env = {"TORCH_NEURONX_TARGET": chip}
    if lnc:
        env["NEURON_LOGICAL_NC_CONFIG"] = lnc
    got = _child(CAPACITY, **env)
    want_lnc = int(lnc) if lnc else {"trn1": 1, "trn3": 2}[chip]
    assert got["total"] == got["free"] == gib * GiB
    assert (got["target"], got["lnc"]) == (chip, want_lnc)
    assert got["name"] == f"NeuronCore 1 ({chip} logical core, LNC={want_lnc}, on cpu:1)"
    assert got["oom"] is not None and f"total capacity of {gib}.00 GiB" in got["oom"], got["oom"]


def test_core_memory_wins_over_the_target():
    got = _trn2(CAPACITY, TORCH_NEURONX_CORE_MEMORY="64MiB")
    assert got["total"] == 64 * 2**20 and got["target"] == "trn2"


def test_properties_without_a_target():
    p = torch.neuron.get_device_properties(0)
    assert p.target is None and p.lnc is None
    assert p.name == torch.neuron.get_device_name(0) and "logical core" not in p.name


# ---- TORCH_NEURONX_TARGET_CHECK=compare


def test_compare_names_the_ops_whose_results_the_target_changed():
    got = _trn2("""
import json, warnings, torch
from torch_neuronx.runtime import fidelity
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    i = torch.tensor([2**31 + 5, 7], dtype=torch.int64, device="neuron")
    s = torch.tensor([1e8, 1.0, 1.0, 1.0], dtype=torch.float64, device="neuron")
    half, total = (i // 2).cpu().tolist(), s.sum().cpu().item()
    half = (i // 2).cpu().tolist()  # a second call: counted, not warned again
    f = torch.tensor([1.5, -2.0], device="neuron")
    n = torch.tensor([3, 4], dtype=torch.int32, device="neuron")
    k = torch.tensor([3, -4], dtype=torch.int64, device="neuron")
    same = ((f * 2 + 1).relu().cpu().tolist(), (n * n + 1).cpu().tolist(), (k + 1).cpu().tolist())
print(json.dumps({"half": half, "total": total, "same": same, "differences": fidelity.fidelity_differences(),
                  "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]}))
""", TORCH_NEURONX_TARGET_CHECK="compare")
    i = torch.tensor([2**31 + 5, 7], dtype=torch.int64)
    s = torch.tensor([1e8, 1.0, 1.0, 1.0], dtype=torch.float64)
    # the user gets the target's results
    assert got["half"] == (i.to(torch.int32) // 2).tolist()
    assert got["total"] == s.float().sum().item()
    by_name = {d["name"]: d for d in got["differences"]}
    assert set(by_name) == {"aten.floor_divide.default", "aten.sum.default"}, by_name
    div = by_name["aten.floor_divide.default"]
    assert (div["output"], div["kind"], div["calls"], div["count"]) == ("result 0", "integer", 2, 2)
    assert div["example"] == {"index": 0, "exact": (i // 2).tolist()[0], "target": (i.to(torch.int32) // 2).tolist()[0]}
    total = by_name["aten.sum.default"]
    assert (total["kind"], total["count"]) == ("float", 1)
    assert total["max_abs"] == s.sum().item() - s.float().sum().item() == 3.0
    assert total["max_rel"] == pytest.approx(3.0 / s.sum().item())
    # ops whose results the policy does not change (float32, int32, an int64 add in range) report nothing
    f, n, k = torch.tensor([1.5, -2.0]), torch.tensor([3, 4], dtype=torch.int32), torch.tensor([3, -4])
    assert got["same"] == [(f * 2 + 1).relu().tolist(), (n * n + 1).tolist(), (k + 1).tolist()]
    assert len(got["warnings"]) == 2, got["warnings"]  # once per op
    assert any(w.startswith("neuron (trn2): aten.floor_divide.default: result 0:") and
               f"exact {(i // 2).tolist()[0]}, trn2 {(i.to(torch.int32) // 2).tolist()[0]}" in w for w in got["warnings"])
    assert any(w.startswith("neuron (trn2): aten.sum.default: result 0:") and "max abs difference 3" in w
               for w in got["warnings"])


def test_compare_names_the_graph_whose_results_the_target_changed():
    got = _trn2("""
import json, torch
from torch_neuronx.runtime import fidelity
def changed(i, s):
    return i // 2, s.sum()
def unchanged(f, n):
    return f * 2 + 1, n * n
i = torch.tensor([2**31 + 5, 7], dtype=torch.int64, device="neuron")
s = torch.tensor([1e8, 1.0, 1.0, 1.0], dtype=torch.float64, device="neuron")
r = torch.compile(changed, backend="neuron")(i, s)
f = torch.tensor([1.5, -2.0], device="neuron")
n = torch.tensor([3, 4], dtype=torch.int32, device="neuron")
q = torch.compile(unchanged, backend="neuron")(f, n)
print(json.dumps({"half": r[0].cpu().tolist(), "total": r[1].cpu().item(), "same": [q[0].cpu().tolist(),
                  q[1].cpu().tolist()], "differences": fidelity.fidelity_differences()}))
""", TORCH_NEURONX_TARGET_CHECK="compare")
    i = torch.tensor([2**31 + 5, 7], dtype=torch.int64)
    s = torch.tensor([1e8, 1.0, 1.0, 1.0], dtype=torch.float64)
    assert got["half"] == (i.to(torch.int32) // 2).tolist()
    assert got["total"] == s.float().sum().item()
    f, n = torch.tensor([1.5, -2.0]), torch.tensor([3, 4], dtype=torch.int32)
    assert got["same"] == [(f * 2 + 1).tolist(), (n * n).tolist()]
    diffs = got["differences"]
    assert len({d["name"] for d in diffs}) == 1 and diffs[0]["name"].startswith("graph "), diffs
    assert sorted((d["output"], d["kind"]) for d in diffs) == [("output 0", "integer"), ("output 1", "float")]
    assert {d["output"]: d["max_abs"] for d in diffs}["output 1"] == s.sum().item() - s.float().sum().item()


def test_compare_without_a_target_is_refused_at_first_use():
    r = run_python("""
import torch
try:
    (torch.ones(2, device="neuron") + 1).cpu()
except ValueError as e:
    print(e)
""", TORCH_NEURONX_TARGET_CHECK="compare")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "TORCH_NEURONX_TARGET_CHECK=compare" in r.stdout and "TORCH_NEURONX_TARGET is not set" in r.stdout
