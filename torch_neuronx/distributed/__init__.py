"""torch.distributed on neuron: the c10d backend `neuron` (a Python process group over Gloo).

`register()` runs at autoload: `init_process_group("neuron")`, `init_process_group()` with neuron
as the accelerator, and `"cpu:gloo,neuron:neuron"` all create a `ProcessGroupNeuron`. DeviceMesh,
DTensor and the functional collectives reach it through c10d like any other backend.
"""
from __future__ import annotations

BACKEND = "neuron"


def _create(options, backend_options=None):
    """c10d's creator (extended API): one process group per `new_group`/`init_process_group`."""
    from ..runtime import devices
    from .process_group import ProcessGroupNeuron

    # the group's device is chosen now (as NCCL binds a group to a device): DeviceMesh then keeps
    # this process's core instead of picking one by LOCAL_RANK
    devices.jax_devices()
    return ProcessGroupNeuron(
        options.store, options.group_rank, options.group_size, options.timeout,
        global_ranks=options.global_ranks_in_group, group_id=options.group_id,
    )


def register() -> None:
    import torch.distributed as dist

    if not dist.is_available() or BACKEND in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["neuron"])


__all__ = ["BACKEND", "register"]
