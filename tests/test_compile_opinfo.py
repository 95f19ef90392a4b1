"""PyTorch's OpInfo samples through torch.compile(backend="neuron") vs eager on the CPU: the lowering
table as compiled graphs use it (scalars folded into the graph, AOTAutograd's decompositions, the
graph interpreter). A curated subset and the quick entries (measured) in float32; each sample
compiles its own graph, and each sample must have run a compiled graph on neuron (a sample left
entirely to eager mode proves nothing here)."""
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
    # (narrow: one of its samples passes `start` as a 0-dim tensor; with a neuron tensor there,
    # Dynamo's fake narrow makes an unbacked symbol it then cannot find (PendingUnbackedSymbolNotFound)
    # and runs the whole call in eager mode: no graph to check. Eager narrow is in test_opinfo)
    "cat", "stack", "split", "chunk", "transpose", "permute", "reshape", "expand", "flatten",
    "repeat", "flip", "roll", "tril", "triu", "full_like", "arange",
    "linalg.solve", "linalg.cholesky", "linalg.qr", "special.i0e", "polygamma.polygamma_n_1",
]
# Every other entry of tests/test_opinfo.py's default run that compiles quickly: generated from a
# compiled float32 sweep on the 2-core CPU machine (3 samples, fresh chunk processes) by
#     python3.11 benchmarks/opinfo_coverage.py --compiled --dtypes float32 --max-samples 3 \
#         --ops "=name,=name,..." --json /tmp/compiled.json      (the default run's entries not above)
#     python3.11 benchmarks/opinfo_coverage.py --fast-list /tmp/compiled.json --max-seconds 0.3
# i.e. those that passed, each in at most 0.3 s (they add about a minute to this file).
# Not in it, besides the slower ones: the entries whose samples do not all compile (every op left
# to eager mode: wrapper_set_seed's RNG state handling in the random entries, .item() and
# data-dependent shapes in item, equal, allclose, nonzero, unique, ...) and those failing or falling
# back to the CPU in compiled mode (see the sweep's report). take, cholesky_solve, linalg.pinv(.hermitian)
# and fft.ifft/hfft/hfftn/ihfft/ihfftn, once among these, have focused tests in test_compile_ops.py.
MEASURED_COMPILED_OPS = [
    'acos', 'acosh', 'clamp_max', 'clamp_min', 'sub', 'dot', 'vdot', 'bmm', 'mv', 'asin', 'asinh', 'atan',
    'atan2', 'broadcast_shapes', 'ceil', 'cholesky_inverse', 'clone', 'sum_to_size', 'positive', 'conj',
    'conj_physical', 'resolve_conj', 'resolve_neg', 'view_as_complex', 'cos', 'cosh', 'cumprod', 'deg2rad',
    'diff', 'true_divide', 'expand_as', 'expand_copy', 'diagonal', 'diagonal_copy', 'alias_copy', 'fmax',
    'fmin', 'fmod', 'remainder', 'frac', 'floor', 'fliplr', 'flipud', 'i0', 'log1p', 'ge', 'gt', 'isin', 'le',
    'linspace', 'linspace.tensor_overload', 'logspace', 'logspace.tensor_overload', 'log10', 'log2',
    'logaddexp2', 'logical_not', 'lt', 'max.reduction_no_dim', 'std_mean.unbiased',
    'meshgrid.list_of_tensors', 'min.reduction_with_dim', 'min.reduction_no_dim', 'max.binary', 'min.binary',
    'minimum', 'logical_and', 'heaviside', 'as_strided_copy', 'as_strided_scatter', 'native_group_norm',
    'nn.functional.relu', 'nn.functional.hardswish', 'nn.functional.max_unpool1d.grad',
    'nn.functional.max_unpool2d.grad', 'nn.functional.prelu', 'nn.functional.celu', 'nn.functional.selu',
    'nn.functional.hardsigmoid', 'nn.functional.mish', 'nn.functional.softsign', 'nn.functional.tanhshrink',
    'nn.functional.threshold', 'nextafter', 'nn.functional.hardshrink', 'nn.functional.hardtanh',
    'nn.functional.relu6', 'mvlgamma.mvlgamma_p_5', 'narrow_copy', 'view_copy', 'neg', 'outer',
    'permute_copy', 'rad2deg', 'round', 'round.decimals_0', 'round.decimals_3', 'round.decimals_neg_3',
    'sinc', 'sinh', 'sign', 'sgn', 'unsafe_split', '__radd__', '__rmul__', '__rmatmul__', '__rsub__',
    'select_scatter', 'signbit', 'tan', 'trunc', 'exp2', 'expm1', 'reciprocal', 'sqrt', 'square', 'angle',
    'isfinite', 'isinf', 'isposinf', 'isneginf', 'isreal', 'isnan', 'svd', 'polygamma.polygamma_n_3',
    'polygamma.polygamma_n_4', 'ravel', 'reshape_as', 'view', 'view_as', 'atleast_1d', 'atleast_2d',
    'atleast_3d', 'unflatten', 'index_add', 'index_reduce.amax', 'bfloat16', 'bool', 'byte', 'char', 'double',
    'float', 'half', 'short', 'cdouble', 'cfloat', 'empty_like', 'zeros_like', 'ones_like', 'new_zeros',
    'new_ones', 'ones', 'zeros', 'full', 'new_empty', 'new_empty_strided', 'empty', 'empty_permuted',
    'scalar_tensor', 'new_full', 'hstack', 'searchsorted', 'vstack', 'dstack', 'msort', 'movedim', 'squeeze',
    'squeeze.multiple', 'squeeze_copy', 'fill', 'unsqueeze', 'unsqueeze_copy', 'zero_', 'transpose_copy', 'T',
    'H', 'mT', 'mH', 'kron', 'inner', 'erfc', 'erfinv', 'nn.functional.l1_loss', 'lgamma', 'nonzero_static',
    'norm', 'norm.nuc', 'norm.fro', 'norm.inf', 't', 't_copy', 'native_dropout_backward',
    'nn.functional.mse_loss', 'all', 'amin', 'argmin', 'count_nonzero', 'nanmean', 'std.unbiased',
    'var.unbiased', 'prod', 'nansum', 'hash_tensor', 'nn.functional.huber_loss', 'nn.functional.pdist',
    'nn.functional.poisson_nll_loss', 'repeat_interleave', 'nn.functional.pairwise_distance',
    'nn.functional.pixel_shuffle', 'nn.functional.pixel_unshuffle', 'diagflat', 'scatter_reduce.amin',
    'fft.fftn', 'fft.rfft2', 'fft.rfftn', 'fft.ifftn', 'fft.irfftn', 'fft.ifftshift', 'linalg.diagonal',
    'linalg.vecdot', 'linalg.eigvalsh', 'linalg.matrix_power', 'linalg.norm',
    'linalg.norm.subgradients_at_zero', 'linalg.matrix_norm', 'linalg.vector_norm', 'linalg.matrix_rank',
    'linalg.matrix_rank.hermitian', 'linalg.svd', 'linalg.svdvals', 'signal.windows.hamming',
    'signal.windows.hann', 'signal.windows.bartlett', 'signal.windows.blackman', 'signal.windows.exponential',
    'signal.windows.gaussian', 'signal.windows.kaiser', 'signal.windows.general_cosine',
    'signal.windows.general_hamming', 'signal.windows.nuttall', 'special.i1', 'special.i1e', 'special.ndtr',
    'special.entr', 'special.spherical_bessel_j0', 'masked.sum', 'masked.prod', 'masked.amax', 'masked.amin',
    'masked.argmax', 'masked.argmin', 'masked.mean', 'masked.norm', 'bmm.triton_optimized',
]
ALL_COMPILED = COMPILED_OPS + [n for n in MEASURED_COMPILED_OPS if n not in set(COMPILED_OPS)]
MAX_SAMPLES = 3


def _graph_runs() -> int:
    return sum(torch.neuron.get_dynamo_metrics()["executions"].values())


class Compiled:
    """An OpInfo entry whose neuron calls go through torch.compile(backend="neuron"), and whose CPU
    reference (run_entry calls `reference_on_cpu` for it) is the op in eager mode on the CPU. Which
    side a call is for is what run_entry says, never guessed from the arguments (a sample with no
    tensors, like arange's, would otherwise look like either). Each neuron call must run at least one
    compiled graph: `calls` and `compiled_calls` count them."""

    def __init__(self, op):
        self.op, self.name, self.variant_test_name = op, op.name, op.variant_test_name
        self.calls = self.compiled_calls = 0

    def sample_inputs(self, *args, **kwargs):
        return self.op.sample_inputs(*args, **kwargs)

    def supported_dtypes(self, device):
        return self.op.supported_dtypes(device)

    def reference_on_cpu(self, x, *args, **kwargs):
        return self.op(x, *args, **kwargs)

    def _run(self, *args, **kwargs):
        return self.op(*args, **kwargs)

    def __call__(self, x, *args, **kwargs):
        self.calls += 1
        before, graphs = _graph_runs(), len(torch.neuron.get_dynamo_metrics()["graphs"])
        out = torch.compile(self._run, backend="neuron", dynamic=False)(x, *args, **kwargs)
        if _graph_runs() == before:
            raise AssertionError("no compiled graph ran for this sample (every op left to eager mode)")
        # a graph op without a lowering runs on the CPU inside the graph (TORCH_NEURONX_CPU_FALLBACK=warn):
        # the eager fallback counters do not see it, the graph's record does
        fell = sorted({op for g in torch.neuron.get_dynamo_metrics()["graphs"][graphs:] for op in g["fallback_ops"]})
        if fell:
            raise AssertionError(f"a compiled graph runs ops on the CPU: {', '.join(fell)}")
        self.compiled_calls += 1
        return out


@pytest.fixture(autouse=True)
def _bounded_memory_maps():
    yield
    S.bound_memory_maps()


@pytest.mark.parametrize("name", ALL_COMPILED)
def test_opinfo_compiled(name):
    op = S.entries_by_name()[name]
    if torch.float32 not in S.sweep_dtypes(op, (torch.float32,)):
        pytest.fail(f"{name} has no float32 samples")
    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    compiled = Compiled(op)
    r = S.run_entry(compiled, torch.float32, max_samples=MAX_SAMPLES, apply_lists=False)
    assert r.status == "pass", r.line()
    # every sample the CPU runs was compared with a compiled neuron result (the CPU's rejections are
    # checked on neuron too, and need not compile)
    assert r.samples_run >= 1 and compiled.compiled_calls >= r.samples_run, (r.samples_run, compiled.compiled_calls)


def test_compiled_reference_is_eager_on_the_cpu():
    """The reference never goes through the compiler, also for samples without tensors (arange's)."""
    op = S.entries_by_name()["arange"]
    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    compiled = Compiled(op)
    for sample in S.sample_list(op, torch.float32, MAX_SAMPLES):
        before = _graph_runs()
        compiled.reference_on_cpu(sample.input, *sample.args, **sample.kwargs)
        assert _graph_runs() == before
    r = S.run_entry(compiled, torch.float32, max_samples=MAX_SAMPLES, apply_lists=False)
    assert r.status == "pass" and compiled.calls == compiled.compiled_calls == r.samples_run == MAX_SAMPLES, r.line()
