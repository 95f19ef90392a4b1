"""Demo: a small transformer on the `neuron` device, checked against the CPU.

    bash scripts/demo.sh          (sets up what is missing, then runs this)

Builds a small pre-norm transformer (attention with SDPA, GELU MLP, RMSNorm/LayerNorm) with random
weights, runs a forward and a training step on neuron and on the CPU, prints the largest difference,
the times (first call compiles each op; later calls reuse the executables) and the op report.
"""
from __future__ import annotations

import copy
import os

# torch's OpenMP threads spin while idle and starve XLA's CPU threads on a small machine (and the
# other way round): a 64x64 CPU matmul goes from 10 µs to 5 ms right after a device op. Passive
# waiting must be chosen before torch loads OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import time

import torch
import torch.nn.functional as F

import torch_neuronx


class Block(torch.nn.Module):
    def __init__(self, dim=64, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm2 = torch.nn.RMSNorm(dim, eps=1e-6)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(approximate="tanh"), torch.nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (t.view(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x))


class TinyLM(torch.nn.Module):
    def __init__(self, vocab=100, dim=64, layers=2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList(Block(dim) for _ in range(layers))
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, ids):
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


def main():
    torch.manual_seed(0)
    print(f"neuron devices: {torch.neuron.device_count()} ({torch.neuron.get_device_name(0)})")
    cpu_model = TinyLM()
    dev_model = copy.deepcopy(cpu_model).to("neuron")
    ids = torch.randint(0, 100, (2, 16))
    targets = torch.randint(0, 100, (2, 16))

    def step(model, device):
        logits = model(ids.to(device))
        loss = F.cross_entropy(logits.flatten(0, 1), targets.to(device).flatten())
        loss.backward()
        return logits, loss

    want_logits, want_loss = step(cpu_model, "cpu")
    timings = []
    for i in range(3):
        dev_model.zero_grad()
        start = time.perf_counter()
        logits, loss = step(dev_model, "neuron")
        loss_value = loss.item()  # waits for the device
        timings.append(time.perf_counter() - start)
    diff = (logits.cpu() - want_logits).abs().max().item()
    grad_diff = max(
        (p.grad.cpu() - q.grad).abs().max().item() for p, q in zip(dev_model.parameters(), cpu_model.parameters())
    )
    print(f"loss: neuron {loss_value:.6f}  cpu {want_loss.item():.6f}")
    print(f"max |logits difference| = {diff:.2e}, max |gradient difference| = {grad_diff:.2e}")
    print(f"forward+backward: first call {timings[0]:.2f} s (compiles each op), then {timings[-1] * 1e3:.1f} ms")
    print()
    print(torch_neuronx.metrics.report())
    ok = diff < 1e-4 and grad_diff < 1e-4
    print("\nRESULT:", "neuron matches the CPU" if ok else "MISMATCH")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
