"""OpInfo parity: PyTorch's own op_db samples on neuron vs the CPU (machinery: opinfo_support.py).

The default run checks a curated subset — the op_db entries transformers and diffusion models depend
on — in float32 and bfloat16, one test per (entry, dtype), each required to match the CPU with no
CPU fallback. The full sweep over all of op_db (every entry, float32, bfloat16 and the integer and
bool dtypes it supports) is `-m slow` here, or benchmarks/opinfo_coverage.py for the coverage table.
"""
from __future__ import annotations

import pytest
import torch

import opinfo_support as S

# op_db entry names (see opinfo_support.entry_name) that transformer and diffusion models depend on.
FAST_OPS = [
    # elementwise arithmetic and activations
    "add", "sub", "mul", "div.no_rounding_mode", "rsub", "neg", "abs", "reciprocal", "pow", "exp", "log",
    "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf", "clamp", "lerp", "addcmul", "maximum",
    "minimum", "nan_to_num", "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu",
    "nn.functional.mish", "nn.functional.softplus", "nn.functional.hardtanh", "nn.functional.leaky_relu",
    # comparisons and selection
    "eq", "ne", "lt", "ge", "where", "masked_fill", "isnan", "any", "all",
    # matmul family
    "matmul", "mm", "bmm", "addmm", "baddbmm", "nn.functional.linear", "einsum", "outer",
    # reductions and normalization
    "sum", "mean", "amax", "amin", "max.reduction_with_dim", "argmax", "var", "std", "logsumexp",
    "cumsum", "softmax", "log_softmax", "nn.functional.layer_norm", "nn.functional.rms_norm",
    "nn.functional.group_norm", "nn.functional.normalize",
    # attention, convolution, resampling
    "nn.functional.scaled_dot_product_attention", "nn.functional.conv2d", "nn.functional.conv_transpose2d",
    "nn.functional.interpolate.nearest", "nn.functional.interpolate.bilinear", "nn.functional.avg_pool2d",
    "nn.functional.max_pool2d", "nn.functional.pad.constant", "nn.functional.dropout",
    # losses and embeddings
    "nn.functional.cross_entropy", "nn.functional.mse_loss", "nn.functional.embedding", "nn.functional.one_hot",
    # indexing
    "index_select", "gather", "scatter", "scatter_add", "index_put", "__getitem__", "sort", "topk",
    # shape and layout
    "cat", "stack", "split", "chunk", "narrow", "transpose", "permute", "reshape", "view", "expand",
    "flatten", "unsqueeze", "squeeze", "repeat", "flip", "roll", "tril", "triu", "contiguous", "clone",
    "to", "full_like", "zeros_like", "arange",
]
FAST_DTYPES = (torch.float32, torch.bfloat16)
FAST_MAX_SAMPLES = 6


def _cases():
    by_name = S.entries_by_name()
    missing = [n for n in FAST_OPS if n not in by_name]
    assert not missing, f"not in op_db: {missing}"
    cases = []
    for name in FAST_OPS:
        op = by_name[name]
        for dtype in S.sweep_dtypes(op, FAST_DTYPES):
            marks = []
            xr = S.xfail_reason(name, dtype)
            if xr:
                marks.append(pytest.mark.xfail(reason=xr, strict=True))
            cases.append(pytest.param(op, dtype, marks=marks, id=f"{name}-{S.DTYPE_NAMES[dtype]}"))
    return cases


@pytest.mark.parametrize("op, dtype", _cases())
def test_opinfo_fast(op, dtype):
    name = S.entry_name(op)
    reason = S.skip_reason(name, dtype)
    if reason:
        pytest.skip(reason)
    r = S.run_entry(op, dtype, max_samples=FAST_MAX_SAMPLES, apply_lists=False)
    if r.status == "skip":
        pytest.skip(r.reason)
    assert r.status == "pass", r.line()


def test_lists_name_real_entries():
    """Every entry named in the skip/xfail/tolerance/compare lists exists in op_db (catches renames)."""
    names = set(S.entries_by_name())
    listed = {n for n, _ in S.SKIPS} | {n for n, _ in S.XFAILS} | set(S.TOLERANCES) | set(S.RANDOM_OPS) \
        | set(S.RANDOM_SAMPLES) | set(S.SHAPE_ONLY) | set(S.TIES_UNSPECIFIED) | set(S.CPU_ARGS)
    unknown = sorted(listed - names)
    assert not unknown, f"not op_db entries: {unknown}"


# A custom op with only a CPU kernel: on neuron it can only reach the CPU fallback.
_lib = torch.library.Library("opinfo_test", "DEF")
_lib.define("twice(Tensor x) -> Tensor")
_lib.impl("twice", lambda x: x * 2, "CPU")


class _FakeOp:
    """Just enough of an OpInfo for run_entry."""

    def __init__(self, name, fn, variant_test_name=""):
        self.name, self.fn, self.variant_test_name = name, fn, variant_test_name

    def sample_inputs(self, device, dtype, requires_grad=False):
        from torch.testing._internal.opinfo.core import SampleInput

        yield SampleInput(torch.randn(4, 3, device=device, dtype=dtype), args=(), kwargs={})
        yield SampleInput(torch.randn(5, device=device, dtype=dtype), args=(), kwargs={})

    def __call__(self, x, *args, **kwargs):
        return self.fn(x, *args, **kwargs)


def test_harness_classifies_pass_fail_fallback_and_xfail(monkeypatch):
    """The machinery itself: a match passes, a wrong result or an error fails, a CPU fallback is
    reported with the ATen op that fell back, and an xfail that passes is an xpass."""
    assert S.run_entry(_FakeOp("fake_pass", lambda x: x * 2), torch.float32).status == "pass"
    wrong = S.run_entry(_FakeOp("fake_wrong", lambda x: x + (x.device.type == S.DEVICE)), torch.float32)
    assert wrong.status == "fail" and "Mismatch" in wrong.reason
    err = S.run_entry(_FakeOp("fake_err", lambda x: x.sum() if x.device.type == "cpu" else 1 / 0), torch.float32)
    assert err.status == "fail" and err.reason.startswith("ZeroDivisionError")
    fell = S.run_entry(_FakeOp("fake_fallback", lambda x: torch.ops.opinfo_test.twice(x)), torch.float32)
    assert fell.status == "fallback" and fell.fallback_ops == {"opinfo_test.twice.default": 2}, fell
    monkeypatch.setitem(S.XFAILS, ("fake_pass", None), "test")
    monkeypatch.setitem(S.XFAILS, ("fake_wrong", None), "test")
    assert S.run_entry(_FakeOp("fake_pass", lambda x: x * 2), torch.float32).status == "xpass"
    assert S.run_entry(_FakeOp("fake_wrong", lambda x: x + (x.device.type == S.DEVICE)), torch.float32).status == "xfail"
    cpu_only = S.run_entry(_FakeOp("fake_cpu_raises", lambda x: 1 / 0), torch.float32)
    assert cpu_only.status == "skip" and not cpu_only.has_samples and cpu_only.samples_cpu_error == 2


def test_compare():
    with pytest.raises(S.Mismatch):
        S.compare(torch.ones(3).to(S.DEVICE), torch.zeros(3))
    with pytest.raises(S.Mismatch):
        S.compare(torch.ones(3, dtype=torch.float64).to(S.DEVICE), torch.ones(3))
    with pytest.raises(S.Mismatch):
        S.compare(torch.ones(3), torch.ones(3))  # a result left on the CPU
    with pytest.raises(S.Mismatch):
        S.compare(torch.ones(2, 3).to(S.DEVICE), torch.ones(3, 2))
    S.compare(torch.ones(2, 3).to(S.DEVICE), torch.zeros(2, 3), shape_only=True)
    S.compare((torch.ones(2).to(S.DEVICE), 3, [torch.full((2,), float("nan")).to(S.DEVICE)]),
              (torch.ones(2), 3, [torch.full((2,), float("nan"))]))


@pytest.mark.slow
def test_opinfo_full_sweep():
    """Every op_db entry with float32 samples: at least 95% pass on neuron with no CPU fallback."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "opinfo_coverage.py")
    spec = importlib.util.spec_from_file_location("opinfo_coverage", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    results = bench.run_sweep()
    print(S.report(results))
    summary = S.summarize(results)
    xpass = [r.line() for r in results if r.status == "xpass"]
    assert not xpass, f"expected failures that pass (prune XFAILS): {xpass}"
    assert summary["float32_pass_pct"] >= 95.0, S.report(results, max_list=40)
