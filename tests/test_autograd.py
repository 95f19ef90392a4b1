"""Autograd on the device: an MLP's forward and backward match the CPU's values and gradients."""
import copy

import torch
import torch.nn.functional as F

import torch_neuronx
from tolerances import tol

TOL = tol("autograd_mlp", torch.float32)

class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = F.gelu(self.norm(self.fc1(x)))
        return F.silu(self.fc2(h)).softmax(-1)


def test_readme_example_matches_cpu(track):
    """The README's first example, on the device and on the CPU: same output and weight gradient."""
    x = torch.randn(4, 8)
    w = torch.nn.Linear(8, 8)
    results = []
    for device in ("cpu", "neuron"):
        wd = copy.deepcopy(w).to(device)
        y = torch.nn.functional.gelu(wd(x.to(device))).softmax(-1)
        (y * torch.arange(8.0, device=device)).sum().backward()  # a weighted sum: softmax's rows sum to 1
        results.append((y.detach(), wd.weight.grad, wd.bias.grad))
    for got, want in zip(results[1], results[0]):
        assert got.device == torch.device("neuron", 0)
        torch.testing.assert_close(got.cpu(), want, **TOL)
    assert {"aten.addmm.default", "aten.gelu_backward.default", "aten._softmax_backward_data.default"} \
        <= set(track.get_executed_ops())


def test_mlp_forward_backward_matches_cpu():
    torch.manual_seed(0)
    cpu = MLP()
    dev = copy.deepcopy(cpu).to("neuron")
    x = torch.randn(5, 8)
    target = torch.randn(5, 4)
    loss_cpu = F.mse_loss(cpu(x), target)
    loss_dev = F.mse_loss(dev(x.to("neuron")), target.to("neuron"))
    loss_cpu.backward()
    loss_dev.backward()
    torch.testing.assert_close(loss_dev.cpu(), loss_cpu, **TOL)
    for (name, p_cpu), p_dev in zip(cpu.named_parameters(), dev.parameters()):
        assert p_dev.grad.device.type == "neuron", name
        torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad, **TOL, msg=name)
    executed = torch_neuronx.get_executed_ops()
    assert {"aten.native_layer_norm_backward.default", "aten.gelu_backward.default", "aten.mm.default"} <= set(executed)


def test_sgd_steps_match_cpu():
    torch.manual_seed(1)
    cpu = MLP()
    dev = copy.deepcopy(cpu).to("neuron")
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.1, momentum=0.9)
    opt_dev = torch.optim.SGD(dev.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(6, 8)
    for _ in range(3):
        for model, opt, inp in ((cpu, opt_cpu, x), (dev, opt_dev, x.to("neuron"))):
            opt.zero_grad()
            model(inp).pow(2).sum().backward()
            opt.step()
    for p_cpu, p_dev in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(p_dev.detach().cpu(), p_cpu.detach(), **TOL)


def test_attention_gradients_match_cpu():
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))
    mask = torch.randn(5, 5)
    for kwargs in ({"is_causal": True}, {"attn_mask": mask}):
        grads = []
        for device in ("cpu", "neuron"):
            leaves = [t.detach().to(device).requires_grad_() for t in (q, k, v)]
            kw = {key: (val.to(device) if isinstance(val, torch.Tensor) else val) for key, val in kwargs.items()}
            out = F.scaled_dot_product_attention(*leaves, **kw)
            (out * out).sum().backward()
            grads.append([out.detach().cpu()] + [t.grad.cpu() for t in leaves])
        for got, want in zip(grads[1], grads[0]):
            torch.testing.assert_close(got, want, **tol("attention_grad", torch.float32))
    executed = torch_neuronx.get_executed_ops()
    assert "aten._scaled_dot_product_fused_attention_overrideable_backward.default" in executed
