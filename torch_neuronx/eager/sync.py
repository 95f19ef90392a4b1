"""Waiting for the device: dispatch is asynchronous, host reads and `synchronize()` wait."""
from __future__ import annotations

from ..runtime import storage


def synchronize(device: int | None = None) -> None:
    storage.sync()
    for buf in list(storage.BUFFERS.values()):
        if device is not None:
            try:
                (dev,) = buf.devices()
            except ValueError:
                dev = None
            if dev is not None and _index_of(dev) != device:
                continue
        buf.block_until_ready()


def _index_of(jax_dev) -> int:
    from ..runtime import devices

    for i, d in enumerate(devices.jax_devices()):
        if d == jax_dev:
            return i
    return -1
