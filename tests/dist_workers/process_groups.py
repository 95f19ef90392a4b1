"""2 ranks: how a neuron process group comes to be and goes away, and what bad calls get.

Reports, per rank: the core this process owns, each way of creating the group (backend="neuron",
no backend with neuron as the accelerator, "cpu:gloo,neuron:neuron", a second init after destroy,
device_id=neuron:0),
a collective on neuron and on CPU tensors in each, mismatched shapes and dtypes across ranks, and a
collective one rank never joins (the group's timeout)."""
import datetime
import os
import time

import torch
import torch.distributed as dist

from distributed_harness import report
from torch_neuronx.runtime import devices

rank = int(os.environ["RANK"])
report("core", {"current_device": torch.neuron.current_device(), "device_count": torch.neuron.device_count(),
                "jax_device_id": devices.jax_device(0).id, "local_rank": int(os.environ["LOCAL_RANK"])})
torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))  # as a CUDA script does: names this process's core
report("set_device_local_rank", torch.neuron.current_device())


def sums(tag):
    """all_reduce of a neuron and a CPU tensor: both must give 0 + 1 = 1 per element... times 3."""
    x = torch.full((3,), float(rank + 1), device="neuron")
    dist.all_reduce(x)
    c = torch.full((2,), rank + 1, dtype=torch.int64)
    dist.all_reduce(c)
    report(tag, {"backend": dist.get_backend(), "neuron": x.cpu().tolist(), "cpu": c.tolist(),
                 "device": str(x.device)})


for tag, backend in (("neuron", "neuron"), ("default", None), ("mixed", "cpu:gloo,neuron:neuron"),
                     ("again", "neuron"), ("bound", "neuron")):
    if backend is None:
        dist.init_process_group()
    elif tag == "bound":  # bound to this process's core, and a subgroup made under it
        dist.init_process_group(backend, device_id=torch.device("neuron:0"))
        sub = dist.new_group([0, 1])
        z = torch.ones(2, device="neuron")
        dist.all_reduce(z, group=sub)
        report("bound_subgroup", z.cpu().tolist())
    else:
        dist.init_process_group(backend)
    sums(tag)
    dist.destroy_process_group()

dist.init_process_group("neuron")


def error_of(fn):
    try:
        fn()
    except Exception as e:
        return {"type": type(e).__name__, "message": str(e)}
    return None


# ranks disagree: a different shape, then a different dtype; the group must still work after
report("shape_mismatch", error_of(lambda: dist.all_reduce(torch.ones(4 + rank, device="neuron"))))
report("dtype_mismatch", error_of(lambda: dist.all_reduce(
    torch.ones(4, device="neuron", dtype=torch.float32 if rank == 0 else torch.int32))))
report("uneven_splits", error_of(lambda: dist.all_to_all_single(
    torch.empty(4, device="neuron"), torch.ones(4, device="neuron"),
    output_split_sizes=[2, 2], input_split_sizes=[1, 3] if rank == 0 else [2, 2])))
y = torch.ones(2, device="neuron")
dist.all_reduce(y)
report("after_mismatch", y.cpu().tolist())

# a collective rank 1 never joins: rank 0 fails within the group's timeout, naming rank 1
short = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=3))
if rank == 0:
    start = time.monotonic()
    report("timeout", error_of(lambda: dist.all_reduce(torch.ones(2, device="neuron"), group=short)))
    report("timeout_seconds", time.monotonic() - start)
else:
    time.sleep(12)
report("done", True)
os._exit(0)  # the short group is broken on rank 0; skip destroying it
