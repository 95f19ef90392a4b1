"""Reductions on the CPU platform are lowered without their operand's unit dims (ops/cpu_reductions.py):
XLA's CPU backend runs a sum of a product over (1, L, D) ~30x slower than over (L, D). The values are the
CPU's; the program's reduce sees no unit dim."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402
import torch  # noqa: E402

from helpers import randn  # noqa: E402

aten = torch.ops.aten


@pytest.mark.parametrize("shape,dims", [((1, 40, 48), [-1]), ((1, 40, 1, 32), [-1]), ((3, 1, 32), [0, 2]),
                                        ((1, 1, 8), [0, 1]), ((1, 6, 1, 8), [1, 3]), ((5, 1), [0])])
@pytest.mark.parametrize("reduce", ["sum", "amax", "amin", "prod", "mean"])
def test_reductions_over_unit_dims_equal_the_cpu(shape, dims, reduce):
    a, b = randn(*shape, seed=1), randn(*shape, seed=2)
    if reduce == "prod":  # torch.prod takes one dim
        dims = dims[-1]
    for keepdim in (False, True):
        want = getattr(torch, reduce)(a * b, dim=dims, keepdim=keepdim)
        got = getattr(torch, reduce)(a.to("neuron") * b.to("neuron"), dim=dims, keepdim=keepdim)
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def test_layer_norm_backward_equals_the_cpu():
    """The sums of a layer norm's backward over a batch-1 activation, against the CPU."""
    x, g = randn(1, 24, 64, seed=3), randn(1, 24, 64, seed=4)
    grads = []
    for dev in ("cpu", "neuron"):
        leaf = x.clone().to(dev).requires_grad_()
        torch.nn.functional.layer_norm(leaf, [64], eps=1e-6).backward(g.to(dev))
        grads.append(leaf.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-5)


def test_the_reduce_sees_no_unit_dim():
    """The lowered program reduces a (40, 48) operand where the caller's is (1, 40, 48)."""
    import torch_neuronx  # noqa: F401  (jax comes configured with the rules)
    from torch_neuronx.runtime.lazy_jax import jax, jnp

    text = jax.jit(lambda g, x: jnp.sum(g * x, axis=-1)).lower(
        jnp.ones((1, 40, 48), jnp.float32), jnp.ones((1, 40, 48), jnp.float32)).as_text()
    reduces = [line for line in text.splitlines() if "stablehlo.reduce" in line]
    assert reduces and all("tensor<40x48xf32>" in line and "1x40x48" not in line for line in reduces), text
