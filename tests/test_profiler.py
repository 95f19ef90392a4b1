"""torch.profiler on neuron: ProfilerActivity.PrivateUse1 records each launch (eager ops, compiled
graphs, transfers) with its launch-to-ready device time, linked to the CPU op or range that made it,
and the CPU timeline carries ranges for compiles, executable cache lookups and loads, and transfers
(runtime/profiling.py, csrc/profiler.cpp)."""
import json

import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from torch_neuronx import cache
from torch_neuronx.compile import graph
from torch_neuronx.eager import executor
from torch_neuronx.runtime import profiling

# per-op launches, compiles and disk loads: each op its own launch (a profile turns fusion off too)
pytestmark = pytest.mark.usefixtures("no_fusion")

BOTH = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
# Device records use the system clock, CPU events torch's approximate clock converted to it
SKEW_US = 500


def _mlp(widths):
    torch.manual_seed(0)
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.GELU()]
    return torch.nn.Sequential(*layers[:-1])


def _device_events(prof):
    return [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]


def _cpu(prof, prefix):
    return [e for e in prof.events() if e.device_type == DeviceType.CPU and e.name.startswith(prefix)]


def _within(inner, outer, slack=0.0):
    return (outer.time_range.start - slack <= inner.time_range.start
            and inner.time_range.end <= outer.time_range.end + slack)


def _trace(prof, tmp_path):
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())["traceEvents"]


def test_eager_model(tmp_path):
    model = _mlp([7, 19, 3])  # widths no other test uses: its ops compile under the profiler
    x = torch.randn(6, 7)
    expected = model(x)
    model.to("neuron")
    with profile(activities=BOTH) as prof:
        got = model(x.to("neuron")).cpu()
    torch.testing.assert_close(got, expected)

    # each launch is a device event linked to the CPU op that launched it, inside its time
    kernels = [e for e in _device_events(prof) if e.name.startswith("aten.")]
    assert {"aten.addmm.default", "aten.gelu.default"} <= {k.name for k in kernels}
    cpu_ops = {e.id: e for e in prof.events() if e.device_type == DeviceType.CPU}
    for k in kernels:
        op = cpu_ops[k.id]  # a device event carries the correlation id of its CPU op
        assert op.name == "aten::" + k.name.split(".")[1]
        assert k.name in [kk.name for kk in op.kernels]
        assert k.time_range.elapsed_us() > 0 and _within(k, op, SKEW_US)
    addmm = [e for e in _cpu(prof, "aten::addmm") if e.kernels]
    assert len(addmm) == 2 and all(e.device_time_total > 0 for e in addmm)

    # each addmm's executable, compiled (or loaded from a warm cache), in a range inside the op that needed
    # it; every launch looked in the memory cache
    compiles = _cpu(prof, "neuron::compile_op aten.addmm.default")
    loads = [e for e in _cpu(prof, "neuron::cache_disk_load op") if any(_within(e, op) for op in addmm)]
    got = compiles or loads
    assert len(got) == 2 and all(c.time_range.elapsed_us() > 0 for c in got), (compiles, loads)
    assert all(any(_within(c, op) for op in addmm) for c in got)
    assert len(_cpu(prof, "neuron::cache_memory_lookup")) >= len(kernels)

    # the input's and the result's transfers: CPU ranges and device copies
    for name in ("neuron::host_to_device", "neuron::device_to_host"):
        (rng,) = _cpu(prof, name)
        (dev,) = [e for e in _device_events(prof) if e.name == name]
        assert _within(dev, rng, SKEW_US) and dev.time_range.elapsed_us() > 0

    events = _trace(prof, tmp_path)
    pids = {e["pid"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"
            and e["args"]["name"] == "neuron"}
    kernel_rows = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    assert {"aten.addmm.default", "aten.gelu.default"} <= {e["name"] for e in kernel_rows}
    assert all(e["pid"] in pids and e["dur"] > 0 for e in kernel_rows)
    assert {"neuron::host_to_device", "neuron::device_to_host"} <= {
        e["name"] for e in events if e.get("ph") == "X" and e.get("cat") == "gpu_memcpy"}
    annotations = {e["name"] for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"}
    assert got[0].name in annotations and "neuron::host_to_device" in annotations  # the compile (or load)
    assert any(e.get("ph") == "f" and e.get("cat") == "ac2g" for e in events)  # CPU -> device arrows


def test_disk_load_replaces_the_compile():
    if cache.executable_cache().disk is None:
        pytest.skip("the executable cache's disk layer is off")
    x = torch.randn(5, 11, 2)
    expected = torch.sinh(x)
    xn = x.to("neuron")
    torch.sinh(xn)  # compiled and stored on disk
    executor.clear_cache()
    with profile(activities=BOTH) as prof:
        got = torch.sinh(xn)
    torch.testing.assert_close(got.cpu(), expected)
    (op,) = _cpu(prof, "aten::sinh")
    (load,) = _cpu(prof, "neuron::cache_disk_load op")
    assert _within(load, op) and load.time_range.elapsed_us() > 0
    assert not _cpu(prof, "neuron::compile_op")
    assert [k.name for k in op.kernels] == ["aten.sinh.default"]


def test_compiled_model(tmp_path):
    model = _mlp([5, 23, 4])
    x = torch.randn(3, 5)
    expected = model(x)
    model.to("neuron")
    xn = x.to("neuron")
    compiled = torch.compile(model, backend="neuron")
    with profile(activities=BOTH) as prof:
        got = compiled(xn)
    torch.testing.assert_close(got.cpu(), expected)
    # the graph's executable compiled (or loaded from a warm cache) before its launch
    (launch,) = _cpu(prof, "neuron::graph ")
    name = launch.name.removeprefix("neuron::graph ")
    compiles = _cpu(prof, "neuron::compile_graph ")
    (got,) = compiles or _cpu(prof, "neuron::cache_disk_load graph")
    assert not compiles or got.name == f"neuron::compile_graph {name}"
    assert got.time_range.end <= launch.time_range.start
    (device,) = [e for e in _device_events(prof) if e.name == name]
    assert [k.name for k in launch.kernels] == [name] and _within(device, launch, SKEW_US)
    assert not [e for e in _device_events(prof) if e.name.startswith("aten.")]  # one launch: the graph

    # a new process (here: the memory cache forgotten) loads the graph's executable from disk
    if cache.executable_cache().disk is not None:
        graph.clear_cache()
        with profile(activities=BOTH) as again:
            got = compiled(xn)
        torch.testing.assert_close(got.cpu(), expected)
        assert _cpu(again, "neuron::cache_disk_load graph") and not _cpu(again, "neuron::compile_graph")

    events = _trace(prof, tmp_path)
    assert any(e.get("ph") == "X" and e.get("cat") == "kernel" and e["name"] == name for e in events)


def test_cpu_only_profile_has_ranges_and_no_device_rows():
    x = torch.randn(4, 3)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        assert profiling.active() and not profiling.device_recording()
        got = (x.to("neuron") * 3).cpu()
    torch.testing.assert_close(got, x * 3)
    assert _cpu(prof, "neuron::host_to_device") and _cpu(prof, "aten::mul")
    assert _device_events(prof) == []


def test_nothing_is_recorded_without_a_profiler():
    x = torch.randn(8)
    got = (x.to("neuron").exp() + 1).cpu()
    torch.testing.assert_close(got, x.exp() + 1)
    assert not torch.autograd._profiler_enabled()
    assert not profiling.active() and not profiling.device_recording()
    # no range is opened: the no-op context, the same object every time
    assert profiling.range("neuron::anything") is profiling.range("neuron::other")
    with profiling.moved("neuron::host_to_device", 0) as m:
        assert m.done(got) is got
    # and a profile started afterwards holds nothing from before it
    with profile(activities=BOTH) as prof:
        pass
    assert _device_events(prof) == [] and not _cpu(prof, "neuron::")


def test_each_device_has_its_rows(tmp_path):
    if torch.neuron.device_count() < 2:
        pytest.skip("one neuron device")
    a, b = torch.randn(4, 6), torch.randn(6, 4)
    with profile(activities=BOTH) as prof:
        on0 = a.to("neuron:0") @ b.to("neuron:0")
        on1 = a.to("neuron:1") @ b.to("neuron:1")
        moved = on1.to("neuron:0")
    torch.testing.assert_close(on0.cpu(), a @ b)
    torch.testing.assert_close(moved.cpu(), a @ b)
    events = _trace(prof, tmp_path)
    labels = {e["pid"]: e["args"]["labels"] for e in events if e.get("ph") == "M" and e["name"] == "process_labels"}
    rows = {(labels.get(e["pid"]), e["name"]) for e in events if e.get("cat") in ("kernel", "gpu_memcpy")}
    assert {("neuron:0", "aten.mm.default"), ("neuron:1", "aten.mm.default"),
            ("neuron:1", "neuron::host_to_device"), ("neuron:0", "neuron::device_to_device")} <= rows


def test_legacy_profiler_device_time():
    # torch.autograd.profiler without Kineto times the device through the ProfilerStubs
    x = torch.randn(9, 4)
    xn = x.to("neuron")
    torch.cos(xn)  # compiled outside the profile
    with torch.autograd.profiler.profile(use_device="neuron", use_kineto=False) as prof:
        got = torch.cos(xn)
        torch.neuron.synchronize()
    torch.testing.assert_close(got.cpu(), torch.cos(x))
    (op,) = [e for e in prof.function_events if e.name == "aten::cos"]
    assert 0 < op.device_time_total <= op.cpu_time_total + SKEW_US


def test_links_stay_right_across_scheduled_cycles():
    # a schedule starts a new Kineto session at each step, with the ProfilerStep range still open;
    # correlation ids restart with each session: every cycle's ops must keep their own launches
    from torch.profiler import schedule

    x = torch.randn(3, 3)
    xn = x.to("neuron")
    (torch.exp(xn) + 1).cpu()  # compiled outside the profile
    cycles = []

    def ready(prof):
        cycles.append({e.name: [k.name for k in e.kernels] for e in prof.events()
                       if e.device_type == DeviceType.CPU and e.name in ("aten::exp", "aten::add")})

    with profile(activities=BOTH, schedule=schedule(wait=0, warmup=1, active=1, repeat=3),
                 on_trace_ready=ready) as prof:
        for _ in range(6):
            got = torch.exp(xn) + 1
            prof.step()
    torch.testing.assert_close(got.cpu(), torch.exp(x) + 1)
    assert cycles == [{"aten::exp": ["aten.exp.default"], "aten::add": ["aten.add.Tensor"]}] * 3
