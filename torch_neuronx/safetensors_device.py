"""`safetensors.safe_open(..., device="neuron")` and `safetensors.torch.load_file(..., device="neuron")`.

safetensors parses the device name itself (in Rust) and knows only a fixed list of names, so "neuron"
is refused before torch sees it. It also takes a bare index, which it hands to torch's `Tensor.to(i)`,
and torch resolves a bare index on the current accelerator: neuron. So `safe_open` is wrapped to
spell a neuron device ("neuron", "neuron:1", torch.device("neuron", 1)) as its index; every other
device goes through unchanged. The wrapper is installed when `safetensors` finishes importing (or now,
if it already has), before `safetensors.torch` and transformers take the name from it.
"""
from __future__ import annotations

import functools
import sys

import torch

from .import_hooks import after_import

_MODULE = "safetensors"


def _neuron_index(device):
    """The index of a neuron device spelled as a string or torch.device, else None."""
    if isinstance(device, str) and device.split(":")[0] != "neuron":
        return None
    if not isinstance(device, (str, torch.device)):
        return None
    device = torch.device(device)
    if device.type != "neuron":
        return None
    return device.index if device.index is not None else torch.neuron.current_device()


def _wrap(open_fn):
    @functools.wraps(open_fn)
    def safe_open(filename, framework, device="cpu", *args, **kwargs):
        index = _neuron_index(device)
        if index is not None:
            accelerator = torch.accelerator.current_accelerator()
            if accelerator is None or accelerator.type != "neuron":
                raise RuntimeError(f"safe_open: device {device} needs neuron as torch's current accelerator")
            device = index  # torch moves each tensor with .to(index): the current accelerator's device
        return open_fn(filename, framework, device, *args, **kwargs)

    safe_open.__wrapped_by_neuron__ = True
    return safe_open


def _patch(module) -> None:
    current = getattr(module, "safe_open", None)
    if current is None or getattr(current, "__wrapped_by_neuron__", False):
        return
    module.safe_open = _wrap(current)
    torch_module = sys.modules.get(f"{_MODULE}.torch")
    if torch_module is not None and getattr(torch_module, "safe_open", None) is current:
        torch_module.safe_open = module.safe_open


def install() -> None:
    after_import(_MODULE, _patch)
