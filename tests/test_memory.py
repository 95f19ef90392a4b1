"""Storages own their device buffers: freeing the tensor frees the buffer and the accounting."""
import gc
import os

import torch

from helpers import run_python
from torch_neuronx.runtime import storage


def test_thousand_tensors_return_to_baseline():
    gc.collect()
    torch.neuron.empty_cache()
    base = torch.neuron.memory_allocated()
    base_buffers = storage.live_buffers()
    ts = [torch.full((64,), float(i), device="neuron") for i in range(1000)]
    assert torch.neuron.memory_allocated() == base + 1000 * 64 * 4
    assert storage.live_buffers() >= base_buffers + 1000
    assert ts[999][0].item() == 999.0
    del ts
    gc.collect()
    assert torch.neuron.memory_allocated() == base
    assert storage.live_buffers() == base_buffers


def test_views_keep_the_storage_alive():
    base = torch.neuron.memory_allocated()
    t = torch.arange(10.0, device="neuron")
    v = t[2:5]
    del t
    gc.collect()
    assert torch.neuron.memory_allocated() == base + 40
    assert v.cpu().tolist() == [2.0, 3.0, 4.0]
    del v
    gc.collect()
    assert torch.neuron.memory_allocated() == base


def test_peak_and_stats():
    torch.neuron.reset_peak_memory_stats()
    base = torch.neuron.memory_allocated()
    t = torch.empty(1024, device="neuron")
    del t
    stats = torch.neuron.memory_stats()
    assert stats["allocated_bytes.all.peak"] >= base + 4096
    assert torch.neuron.max_memory_allocated() >= base + 4096
    assert stats["allocated_bytes.all.current"] == base


def test_device_one_is_accounted_separately():
    base0 = torch.neuron.memory_allocated(0)
    base1 = torch.neuron.memory_allocated(1)
    t = torch.ones(256, device="neuron:1")
    assert torch.neuron.memory_allocated(1) == base1 + 1024
    assert torch.neuron.memory_allocated(0) == base0
    del t


def test_resize_keeps_contents():
    t = torch.arange(4.0, device="neuron")
    t.resize_(8)
    assert t.shape == (8,)
    assert t[:4].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    t.resize_(2)
    assert t.cpu().tolist() == [0.0, 1.0]


def test_empty_storages_hold_no_buffer():
    # an in-place update of an empty tensor must not leave a buffer that a later empty tensor of
    # another dtype would read (all empty storages share the null key)
    rank = torch.linalg.matrix_rank(torch.randn(0, 5, 5).to("neuron"))
    assert rank.dtype == torch.int64 and rank.shape == (0,)
    assert storage.buffer(0) is None
    x = torch.empty(1, 0, 3).to("neuron")
    y = torch.special.bessel_j0(x)
    assert y.dtype == torch.float32 and y.cpu().shape == (1, 0, 3)


def test_empty_cache_runs_no_garbage_collection():
    """As CUDA's: accelerate calls empty_cache after placing each tensor (set_module_tensor_to_device),
    and a gc.collect() there cost ~0.5 s a call in a process with diffusers loaded (12 s to load the
    tiny FLUX.2 transformer tensor-parallel). Automatic collection is off here, so any run is its own."""
    runs = []

    def seen(phase, info):
        runs.append(phase)

    enabled = gc.isenabled()
    gc.disable()
    gc.callbacks.append(seen)
    try:
        t = torch.ones(16, device="neuron")
        del t
        torch.neuron.empty_cache()
    finally:
        gc.callbacks.remove(seen)
        if enabled:
            gc.enable()
    assert runs == []


def _run_with_capacity(capacity: str, code: str) -> str:
    """Run `code` in a fresh process whose cores have TORCH_NEURONX_CORE_MEMORY=capacity; its stdout."""
    r = run_python(code, TORCH_NEURONX_CORE_MEMORY=capacity)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_capacity_out_of_memory_and_recovery():
    out = _run_with_capacity("64MiB", """
import torch
MiB = 2**20
assert torch.neuron.get_device_properties(0).total_memory == 64 * MiB
assert torch.neuron.mem_get_info(0) == (64 * MiB, 64 * MiB)
a = torch.ones(40 * MiB // 4, device="neuron")
try:
    b = torch.ones(40 * MiB // 4, device="neuron")
except torch.OutOfMemoryError as e:
    msg = str(e)
else:
    raise SystemExit("no OutOfMemoryError past the capacity")
assert msg.startswith("aten.ones.default: neuron out of memory. Tried to allocate 40.00 MiB"), msg
assert "total capacity of 64.00 MiB of which 24.00 MiB is free" in msg, msg
assert "40.00 MiB is allocated by PyTorch" in msg, msg
assert torch.neuron.memory_stats()["num_ooms"] == 1
del a
b = torch.full((40 * MiB // 4,), 2.0, device="neuron")  # the process goes on working
assert b[:3].cpu().tolist() == [2.0, 2.0, 2.0]
print("ok")
""")
    assert out.strip() == "ok"


def test_accelerate_finds_a_batch_size_that_fits():
    """accelerate's find_executable_batch_size halves the batch on torch.OutOfMemoryError."""
    out = _run_with_capacity("32MiB", """
import torch
from accelerate.utils import find_executable_batch_size
w = torch.randn(1024, 1024).to("neuron")  # 4 MiB
tried = []
@find_executable_batch_size(starting_batch_size=64)
def step(batch_size):
    tried.append(batch_size)
    x = torch.randn(batch_size, 64, 1024).to("neuron")  # 256 KiB per sample
    return (x @ w).sum().item(), batch_size
total, used = step()
need = lambda b: 4 * 2**20 + 2 * b * 2**18  # w, x and x @ w
assert all(need(b) > 32 * 2**20 for b in tried[:-1]) and need(used) <= 32 * 2**20, tried
assert len(tried) > 1 and used == tried[-1]
print("ok")
""")
    assert out.strip() == "ok"


def test_a_platform_allocation_failure_is_out_of_memory():
    # a capacity far past the host's memory: XLA's own allocation fails (RESOURCE_EXHAUSTED)
    out = _run_with_capacity("64TiB", """
import torch
try:
    x = torch.ones(2**40, device="neuron")  # 4 TiB (kept: a result nobody holds is never computed)
    torch.neuron.synchronize()  # queued (eager fusion): the platform's allocation fails at its launch
except torch.OutOfMemoryError as e:
    assert str(e).startswith("aten.ones.default: neuron out of memory.") and "RESOURCE_EXHAUSTED" in str(e), str(e)
else:
    raise SystemExit("no OutOfMemoryError")
del x
assert torch.neuron.memory_stats()["num_ooms"] == 1
assert torch.neuron.memory_allocated() == 0
assert torch.arange(4.0, device="neuron").sum().item() == 6.0
print("ok")
""")
    assert out.strip() == "ok"


def test_capacity_setting_is_checked():
    r = run_python("import torch; torch.ones(1, device='neuron')", TORCH_NEURONX_CORE_MEMORY="lots")
    assert "TORCH_NEURONX_CORE_MEMORY='lots': expected a size" in r.stderr + r.stdout


def test_memory_stats_keys_and_summary():
    x = torch.ones(256, device="neuron")
    stats = torch.neuron.memory_stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                "active_bytes.all.current", "requested_bytes.all.current", "allocation.all.current",
                "num_ooms", "num_device_alloc"):
        assert key in stats, key
    assert stats["allocated_bytes.all.current"] == torch.neuron.memory_allocated() >= x.nbytes
    assert torch.neuron.memory_reserved() >= torch.neuron.memory_allocated()
    torch.neuron.reset_accumulated_memory_stats()
    assert torch.neuron.memory_stats()["allocated_bytes.all.allocated"] == 0
    summary = torch.neuron.memory_summary()
    assert "Allocated memory" in summary and "Reserved memory" in summary and "capacity" in summary
    del x


def _resident_bytes(kind):
    """The process's resident memory of one kind ("File": file mappings, "Anon": anonymous) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(f"Rss{kind}:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no Rss{kind} in /proc/self/status")


def test_a_model_moved_back_to_the_cpu_gives_its_device_memory_back():
    """What enable_model_cpu_offload does after each model: its device copy (host memory jax aliases on
    the CPU platform) is returned when the weights move back, not when Python's collector next runs
    (then a 4B text encoder held 8 GB twice, and the real-size offloaded pipeline ran out of memory)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 8192) for _ in range(4)])  # 4 x 64 MiB
    want = [p.detach().clone() for p in model.parameters()]
    enabled = gc.isenabled()
    gc.disable()
    try:
        model.to("neuron")
        torch.neuron.synchronize()
        on_device = _resident_bytes("Anon")
        model.to("cpu")
        grown = _resident_bytes("Anon") - on_device
    finally:
        if enabled:
            gc.enable()
    assert grown < 64 * 2**20, f"{grown / 2**20:.0f} MiB more after the move back (the weights are 256 MiB)"
    assert all(torch.equal(p, w) for p, w in zip(model.parameters(), want))


_HOST_CACHE_CHECKS = r"""
import resource, time
import torch
from torch_neuronx.runtime import host_memory, storage

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def anon():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("RssAnon:"))

# a 64 MiB result freed and made again reuses the same resident memory
x = torch.randn(4096, 4096, generator=torch.Generator().manual_seed(0))
xd = x.to("neuron")
for _ in range(2):  # the first round compiles and may find the cache empty
    before = faults()
    y = xd * 2 + 1
    torch.neuron.synchronize()
    made_again = faults() - before
    torch.testing.assert_close(y.cpu(), x * 2 + 1, rtol=0, atol=0)
    del y
    storage.apply_events()
print("faults", made_again)

# what was freed beyond the bound goes back as buffers are freed; empty_cache the rest
torch.neuron.empty_cache()
ones = torch.ones(2048, 8192, device="neuron")
ys = [ones + i for i in range(6)]  # 6 x 64 MiB
torch.neuron.synchronize()
assert [y[0, 0].item() for y in ys] == [1.0 + i for i in range(6)]
on_device = anon()
time.sleep(0.06)  # the cache is measured at most every 50 ms as buffers are freed
del ys
storage.apply_events()
print("kept", anon() - (on_device - 6 * 64 * 2**20))
torch.neuron.empty_cache()
print("cached", host_memory.cached_bytes())
"""


def _host_cache_run(bound):
    r = run_python(_HOST_CACHE_CHECKS, TORCH_NEURONX_HOST_CACHE=bound)
    assert r.returncode == 0, r.stderr[-3000:]
    return {k: int(v) for k, v in (line.split() for line in r.stdout.splitlines())}


def test_the_host_cache_reuses_freed_device_memory_within_its_bound():
    """On the CPU platform a device buffer is host memory. With TORCH_NEURONX_HOST_CACHE set, a 64 MiB
    result freed and made again reuses the same resident memory (without it, each such buffer is mapped
    afresh and the kernel clears its 16384 pages again on first touch); the cache is bounded (what was
    freed beyond it goes back as the storage layer frees buffers) and torch.neuron.empty_cache() gives
    back the rest."""
    roomy = _host_cache_run("1G")
    assert roomy["faults"] < 1024, f"{roomy['faults']} page faults making a 64 MiB result again"
    assert roomy["cached"] < 32 * 2**20
    tight = _host_cache_run("64M")
    assert tight["kept"] < 160 * 2**20, f"{tight['kept'] / 2**20:.0f} MiB of 384 MiB freed stayed resident"
    plain = _host_cache_run("0")  # the default: every buffer of 8 MiB and more is fresh memory
    assert plain["faults"] >= 16384 and plain["cached"] == 0


def test_weights_loaded_from_a_file_mapping_are_not_resident_twice(tmp_path):
    """A safetensors load maps the file; moving its tensors to the device must not leave the file's pages
    resident beside the device copy (both host memory on the CPU platform)."""
    from safetensors.torch import load_file, save_file

    weights = {f"w{i}": torch.randn(1024, 1024, generator=torch.Generator().manual_seed(i)) for i in range(16)}
    save_file(weights, tmp_path / "w.safetensors")
    with open(tmp_path / "w.safetensors", "rb") as f:  # written back, as a model file on disk is: pages
        os.fsync(f.fileno())                            # still dirty in the page cache are kept resident
    loaded = load_file(tmp_path / "w.safetensors")  # tensors over the file's mapping (64 MiB)
    before = _resident_bytes("File")
    on_device = {k: v.to("neuron") for k, v in loaded.items()}
    grown = _resident_bytes("File") - before
    assert grown < 16 * 2**20, f"{grown / 2**20:.1f} MiB of the file stayed resident"
    for k, v in on_device.items():
        assert torch.equal(v.cpu(), weights[k])
    for k, v in loaded.items():  # the mapping still reads the file's values
        assert torch.equal(v, weights[k])


def test_an_executables_workspace_counts_in_the_peak():
    """XLA's temporaries of a launch (beside its arguments and results) count in the peak: a graph whose
    intermediates are large and whose result is a scalar raises the peak by at least one intermediate."""
    x = torch.randn(1024, 1024, device="neuron")
    f = torch.compile(lambda x: ((x @ x).sin() @ x).cos().sum(), backend="neuron")
    f(x).item()
    torch.neuron.reset_peak_memory_stats()
    allocated = torch.neuron.memory_allocated()
    got = f(x).item()
    assert torch.neuron.max_memory_allocated() - allocated >= 4 * 2**20  # one 1024x1024 float32 intermediate
    assert torch.neuron.memory_allocated() - allocated < 2**20
    xc = x.cpu()
    assert abs(got - ((xc @ xc).sin() @ xc).cos().sum().item()) < 1e-2 * max(1.0, abs(got))


def test_a_workspace_past_the_capacity_is_out_of_memory():
    out = _run_with_capacity("24MiB", """
import torch
MiB = 2**20
x = torch.randn(1024, 1024, device="neuron")  # 4 MiB; the graph's temporaries need more than the 20 left
f = torch.compile(lambda x: sum(((x @ x) * i).sin() @ x for i in range(1, 6)).cos().sum(), backend="neuron")
try:
    f(x).item()
except torch.OutOfMemoryError as e:
    msg = str(e)
else:
    raise SystemExit("no OutOfMemoryError for a workspace past the capacity")
assert msg.startswith("graph ") and "An executable needs a workspace of" in msg, msg
assert torch.neuron.memory_stats()["num_ooms"] == 1
print((x + 1).sum().item() != 0)  # the process goes on working
""")
    assert out.strip() == "True"


def test_cpu_schedules_for_memory_unless_xla_flags_say_otherwise():
    """On the CPU platform XLA schedules for memory, not concurrency (the default held every layer's float32
    operand copies of a bf16 model at once: 3.37 against 1.87 GB for FLUX.2-klein-4B's transformer at real
    width); a user's own XLA_FLAGS setting of it wins, and either is part of the executable key."""
    from torch_neuronx.cache import keys

    torch.ones(2, device="neuron").cpu()
    flag = "--xla_cpu_enable_concurrency_optimized_scheduler"
    assert f"{flag}=false" in os.environ["XLA_FLAGS"].split()
    assert f"{flag}=false" in keys.xla_flags()
    code = ("import os, torch; torch.ones(2, device='neuron').cpu(); "
            f"print([f for f in os.environ['XLA_FLAGS'].split() if f.startswith('{flag}')])")
    r = run_python(code, XLA_FLAGS=f"{flag}=true")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split("\n")[-2] == f"['{flag}=true']"
