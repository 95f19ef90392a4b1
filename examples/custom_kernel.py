"""A custom kernel: FLUX.2's query/key RMSNorm as one fused op whose neuron implementation is a jax function.

    python examples/custom_kernel.py [--tokens 4096] [--heads 24] [--head-dim 128] [--repeat 5]

FLUX.2's attention (diffusers.models.transformers.transformer_flux2) normalizes every head of the query
and of the key with torch.nn.RMSNorm(head_dim, eps=1e-6) (`attn.norm_q`, `attn.norm_k`), on (batch,
tokens, heads, head_dim) tensors. Here both are one custom op, `flux2::qk_rms_norm`, registered with
torch_neuronx.nki_op as a TorchNeuron NKI kernel is (the decorated function is the jax kernel, `cpu=`
the CPU implementation: torch's rms_norm). The script

1. checks the op on neuron against the CPU, and the ATen path (the same module with the plain
   nn.RMSNorm) too, within bfloat16's tolerance;
2. times the module both ways on neuron, eagerly (each call queued into a fused run and run by the
   synchronize) and compiled (torch.compile(backend="neuron", fullgraph=True)): the median of --repeat
   calls after a warmup call, which compiles;
3. prints the table. Exits 1 on a mismatch or a CPU fallback.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import torch
from torch import Tensor, nn

import torch_neuronx
from torch_neuronx import metrics


def _qk_rms_norm_cpu(q, k, q_weight, k_weight, eps):
    dim = (q.shape[-1],)
    return nn.functional.rms_norm(q, dim, q_weight, eps), nn.functional.rms_norm(k, dim, k_weight, eps)


@torch_neuronx.nki_op("flux2::qk_rms_norm", mutates_args=(), cpu=_qk_rms_norm_cpu)
def qk_rms_norm(q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """RMSNorm over the last dim of q and of k, each with its own weight: torch's numerics (float32
    statistics and products, one rounding to the input's dtype at the end), both in one kernel."""

    def norm(x, weight):
        xf = x.astype(jnp.float32)
        inv = jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
        return (xf * inv * weight.astype(jnp.float32)).astype(x.dtype)

    return norm(q, q_weight), norm(k, k_weight)


class QKNorm(nn.Module):
    """What FLUX.2's attention does to its query and key after the projections, with its own modules."""

    def __init__(self, head_dim: int, eps: float = 1e-6, fused: bool = False):
        super().__init__()
        self.norm_q = nn.RMSNorm(head_dim, eps=eps)
        self.norm_k = nn.RMSNorm(head_dim, eps=eps)
        self.fused = fused

    def forward(self, query, key):
        if self.fused:
            return qk_rms_norm(query, key, self.norm_q.weight, self.norm_k.weight, self.norm_q.eps)
        return self.norm_q(query), self.norm_k(key)


def _time(fn, args, repeat: int) -> float:
    """The median seconds of `repeat` calls after a warmup call (which compiles what it needs), each
    call until its results exist."""

    def call():
        start = time.perf_counter()
        out = fn(*args)  # held through the synchronize: results nobody holds are never computed
        torch.neuron.synchronize()
        seconds = time.perf_counter() - start
        del out
        return seconds

    call()
    return statistics.median(call() for _ in range(repeat))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=24)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    g = torch.Generator().manual_seed(0)
    shape = (1, args.tokens, args.heads, args.head_dim)
    query, key = (torch.randn(shape, generator=g).to(torch.bfloat16) for _ in range(2))
    aten = QKNorm(args.head_dim).to(torch.bfloat16)
    with torch.no_grad():  # trained norms are not all ones
        for norm in (aten.norm_q, aten.norm_k):
            norm.weight.copy_(torch.rand(args.head_dim, generator=g) + 0.5)
    fused = QKNorm(args.head_dim, fused=True).to(torch.bfloat16)
    fused.load_state_dict(aten.state_dict())

    ok = True
    with torch.no_grad():
        want = aten(query, key)  # the CPU
        on_device = [t.to("neuron") for t in (query, key)]
        aten.to("neuron")
        fused.to("neuron")
        metrics.clear_op_tracking()
        for name, module in (("custom kernel", fused), ("ATen path", aten)):
            got = [t.cpu() for t in module(*on_device)]
            for what, a, b in zip(("query", "key"), got, want):
                diff = (a.float() - b.float()).abs().max().item()
                close = torch.allclose(a.float(), b.float(), rtol=1.6e-2, atol=1e-5)  # bfloat16's tolerance
                ok &= close
                print(f"{name:>13} {what:>5} vs CPU: max |diff| {diff:.3g} {'ok' if close else 'MISMATCH'}")

        rows = []
        for mode in ("eager", "compiled"):
            timings = {}
            for name, module in (("aten", aten), ("kernel", fused)):
                fn = torch.compile(module, backend="neuron", fullgraph=True) if mode == "compiled" else module
                timings[name] = _time(fn, on_device, args.repeat)
            rows.append((mode, timings))
    fallbacks = torch_neuronx.get_fallback_ops()
    ok &= not fallbacks

    print(f"\nFLUX.2 q/k RMSNorm, bfloat16, query and key {list(shape)}, eps 1e-6: median of {args.repeat} "
          f"calls after a warmup call")
    print(f"{'mode':<9} {'ATen path (nn.RMSNorm)':>24} {'custom kernel':>15} {'speedup':>8}")
    for mode, t in rows:
        print(f"{mode:<9} {t['aten'] * 1e3:>21.2f} ms {t['kernel'] * 1e3:>12.2f} ms {t['aten'] / t['kernel']:>7.2f}x")
    print(f"fallback ops: {', '.join(fallbacks) if fallbacks else 'none'}")
    print("RESULT: " + ("the custom kernel matches the CPU" if ok else "MISMATCH or CPU fallback"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
