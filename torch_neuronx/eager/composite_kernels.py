"""Eager kernels that are not one lowering: they call other ops, or return what an executable
cannot (a Python bool, an int choice)."""
from __future__ import annotations

import torch

aten = torch.ops.aten


def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """BatchNorm's eager op writes its running stats although its schema does not say so; the
    `_legit` ops that say so carry the lowerings, so one executable updates them in place."""
    if running_mean is None or running_var is None:
        return aten._native_batch_norm_legit.no_stats(input, weight, bias, training, momentum, eps)
    if training:
        return aten._native_batch_norm_legit.default(input, weight, bias, running_mean, running_var, True, momentum, eps)
    return aten._native_batch_norm_legit_no_training.default(input, weight, bias, running_mean, running_var, momentum, eps)


def equal(self, other) -> bool:
    """torch.equal returns a Python bool: same shape, then one reduction on the device and a read."""
    if self.device != other.device:
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, "
            f"{self.device} and {other.device}! (when checking argument other in aten.equal.default)"
        )
    if self.shape != other.shape:
        return False
    return bool(aten.eq.Tensor(self, other).all().item())


def fused_sdp_choice(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
    # the same choice as csrc/attention.cpp's dispatch stub, for callers of the op itself
    backend = torch.nn.attention.SDPBackend
    return int((backend.MATH if dropout_p > 0 else backend.OVERRIDEABLE).value)


_SHARES_IMPL = {"cpu", "neuron"}


def has_compatible_shallow_copy_type(self, other) -> bool:
    """Whether `self.data = other` may swap `other`'s storage into `self`: a strided CPU tensor and a
    neuron tensor can, as CPU and CUDA tensors can (both are plain TensorImpls), which PyTorch's
    fixed list of dense backends leaves PrivateUse1 out of (pytorch#196975). So diffusers' group
    offloading (`param.data = param.data.to(device)`) works, and `Module.to("neuron")` keeps its
    Parameter objects, as on CUDA."""
    if self.layout != torch.strided or other.layout != torch.strided:
        return self.layout == other.layout and self.device.type == other.device.type
    return self.device.type == other.device.type or {self.device.type, other.device.type} <= _SHARES_IMPL
