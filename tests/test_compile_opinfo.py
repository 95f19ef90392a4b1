"""PyTorch's OpInfo samples through torch.compile(backend="neuron") vs eager on the CPU: the lowering
table as compiled graphs use it (scalars folded into the graph, AOTAutograd's decompositions, the
graph interpreter). A curated subset in float32; each sample compiles its own graph."""
import pytest
import torch

import opinfo_support as S

COMPILED_OPS = [
    "add", "mul", "div.no_rounding_mode", "rsub", "pow", "exp", "log", "rsqrt", "sin", "tanh", "sigmoid",
    "erf", "clamp", "lerp", "addcmul", "where", "masked_fill", "nan_to_num", "nn.functional.gelu",
    "nn.functional.silu", "nn.functional.softplus", "nn.functional.leaky_relu", "eq", "any",
    "matmul", "addmm", "baddbmm", "nn.functional.linear", "einsum",
    "sum", "mean", "amax", "argmax", "var", "logsumexp", "cumsum", "softmax", "log_softmax",
    "nn.functional.layer_norm", "nn.functional.rms_norm", "nn.functional.group_norm",
    # (scaled_dot_product_attention: its OpInfo wrapper saves and restores the RNG state around the
    # call, a graph break; test_compile's FLUX.2 and Qwen3 models compile it)
    "nn.functional.conv2d", "nn.functional.conv_transpose2d",
    "nn.functional.interpolate.nearest", "nn.functional.interpolate.bilinear", "nn.functional.avg_pool2d",
    "nn.functional.max_pool2d", "nn.functional.pad.constant", "nn.functional.pad.reflect",
    "nn.functional.cross_entropy", "nn.functional.embedding",
    "index_select", "gather", "scatter_add", "index_put", "__getitem__", "sort", "topk",
    "cat", "stack", "split", "chunk", "narrow", "transpose", "permute", "reshape", "expand", "flatten",
    "repeat", "flip", "roll", "tril", "triu", "full_like", "arange",
    "linalg.solve", "linalg.cholesky", "linalg.qr", "special.i0e", "polygamma.polygamma_n_1",
]
MAX_SAMPLES = 3


class Compiled:
    """An OpInfo entry whose neuron calls go through torch.compile(backend="neuron")."""

    def __init__(self, op):
        self.op, self.name, self.variant_test_name = op, op.name, op.variant_test_name

    def sample_inputs(self, *args, **kwargs):
        return self.op.sample_inputs(*args, **kwargs)

    def _run(self, *args, **kwargs):
        return self.op(*args, **kwargs)

    def __call__(self, x, *args, **kwargs):
        if S._tensors((x, args, kwargs)) and all(t.device.type == "cpu" for t in S._tensors((x, args, kwargs))):
            return self.op(x, *args, **kwargs)
        return torch.compile(self._run, backend="neuron", dynamic=False)(x, *args, **kwargs)


@pytest.mark.parametrize("name", COMPILED_OPS)
def test_opinfo_compiled(name):
    op = S.entries_by_name()[name]
    if torch.float32 not in S.sweep_dtypes(op, (torch.float32,)):
        pytest.fail(f"{name} has no float32 samples")
    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    r = S.run_entry(Compiled(op), torch.float32, max_samples=MAX_SAMPLES, apply_lists=False)
    assert r.status == "pass", r.line()
    m = torch.neuron.get_dynamo_metrics()
    assert m["graphs_compiled"] + sum(m["reused"].values()) >= 1  # it did compile (not all graph breaks)
