"""Storages own their device buffers: freeing the tensor frees the buffer and the accounting."""
import gc

import torch

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
    assert 0 not in storage.BUFFERS
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
