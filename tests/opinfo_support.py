"""OpInfo parity machinery: run the samples of PyTorch's `op_db` on `neuron` and compare with the CPU.

For one OpInfo entry and one dtype, `run_entry` takes the entry's first samples
(`op.sample_inputs("cpu", dtype, requires_grad=False)`, a fixed seed), runs each on the CPU and on
neuron copies of its tensors (same sizes, strides, offsets and aliasing), compares the results
(values, dtypes, shapes, devices, and the samples' own tensors afterwards, so in-place effects count
too; per-entry tolerances in TOLERANCES, torch's defaults otherwise) and classifies the pair:

    pass      every sample matched and nothing fell back to the CPU
    fallback  every sample matched, but some ATen ops ran on the CPU (`fallback_ops` says which)
    fail      a mismatch or an exception on neuron (`reason` is its first line)
    skip      listed in SKIPS (with its reason), no sample the CPU itself can run, or a timeout
    xfail     listed in XFAILS (with its reason) and failed as expected; one that passes anyway is
              reported as `xpass` so the list can be pruned

A sample the CPU itself rejects is not run. Random entries (RANDOM_OPS, RANDOM_SAMPLES) and
uninitialized results (SHAPE_ONLY) are compared by shape and dtype; unspecified tie-breaking indices
(TIES_UNSPECIFIED) by shape and dtype; bfloat16 results that differ from the CPU's get a second
opinion from a float32 reference (see no_worse_than_cpu).

Shared by tests/test_opinfo.py (a fast, curated subset) and benchmarks/opinfo_coverage.py (the full
sweep and its coverage table). Nothing here edits or depends on the lowerings themselves.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import math
import os
import signal
import sys
import threading
import time
import types
import unittest
import warnings

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see tests/conftest.py

import torch  # noqa: E402  (autoloads torch_neuronx)

import torch_neuronx  # noqa: E402

DEVICE = "neuron"
DEFAULT_MAX_SAMPLES = 8
DEFAULT_TIMEOUT_S = 60.0

# float32 and bfloat16, plus the integer and bool dtypes an entry supports on the CPU.
SWEEP_DTYPES = (
    torch.float32,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
)
DTYPE_NAMES = {
    torch.float32: "float32",
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.float64: "float64",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.int16: "int16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bool: "bool",
    torch.complex64: "complex64",
}
DTYPES_BY_NAME = {v: k for k, v in DTYPE_NAMES.items()}
_SHORT = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "f64": "float64", "i64": "int64", "i32": "int32",
          "i16": "int16", "i8": "int8", "u8": "uint8"}


def parse_dtype(name: str) -> torch.dtype:
    name = _SHORT.get(name, name)
    if name not in DTYPES_BY_NAME:
        raise ValueError(f"unknown dtype {name!r}; one of {', '.join(DTYPES_BY_NAME)}")
    return DTYPES_BY_NAME[name]


# ----------------------------------------------------------------------------------------------
# op_db

def _ensure_expecttest() -> None:
    """torch.testing._internal imports `expecttest` (a test-only package) for its TestCase base class.
    op_db itself never uses it: when it is not installed, a stand-in with that base class suffices."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        stub = types.ModuleType("expecttest")

        class TestCase(unittest.TestCase):
            longMessage = True

            def assertExpectedInline(self, *args, **kwargs):  # pragma: no cover
                raise unittest.SkipTest("expecttest is not installed")

        stub.TestCase = TestCase
        sys.modules["expecttest"] = stub


_OP_DB = None


def op_db() -> list:
    """`torch.testing._internal.common_methods_invocations.op_db` (imported once; takes ~5 s)."""
    global _OP_DB
    if _OP_DB is None:
        _ensure_expecttest()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.testing._internal.common_methods_invocations import op_db as db
        _OP_DB = list(db)
    return _OP_DB


def entry_name(op) -> str:
    """`name` or `name.variant_test_name`: unique within op_db."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def entries_by_name() -> dict:
    return {entry_name(op): op for op in op_db()}


def sweep_dtypes(op, wanted=SWEEP_DTYPES) -> list[torch.dtype]:
    """The dtypes of `wanted` that the entry supports on the CPU, in the order of `wanted`."""
    supported = op.supported_dtypes("cpu")
    return [d for d in wanted if d in supported]


# ----------------------------------------------------------------------------------------------
# Lists: each entry says why. Keys are entry names (see entry_name); a dtype of None means all dtypes.

# Random ops: neuron draws from its own generator, so values differ from the CPU's by design. Their
# results are compared by shape and dtype only (a wrong distribution is the random-op tests' business).
RANDOM_OPS = {
    "bernoulli": "random: draws from the device generator",
    "normal": "random: draws from the device generator",
    "normal.in_place": "random: draws from the device generator",
    "normal.number_mean": "random: draws from the device generator",
    "uniform": "random: draws from the device generator",
    "exponential": "random: draws from the device generator",
    "geometric": "random: draws from the device generator",
    "cauchy": "random: draws from the device generator",
    "log_normal": "random: draws from the device generator",
    "multinomial": "random: draws from the device generator",
    "randint": "random: draws from the device generator",
    "randn": "random: draws from the device generator",
    "rand_like": "random: draws from the device generator",
    "randn_like": "random: draws from the device generator",
    "randint_like": "random: draws from the device generator",
    "nn.functional.dropout": "random mask",
    "nn.functional.dropout2d": "random mask",
    "nn.functional.dropout3d": "random mask",
    "nn.functional.alpha_dropout": "random mask",
    "nn.functional.feature_alpha_dropout.with_train": "random mask",
    "nn.functional.rrelu": "random slopes in training mode",
    "nn.functional.fractional_max_pool2d": "random pooling regions",
    "nn.functional.fractional_max_pool3d": "random pooling regions",
    "svd_lowrank": "random projection",
    "pca_lowrank": "random projection",
}

# Entries random only for some samples (dropout inside): sample -> True when it draws random numbers.
RANDOM_SAMPLES = {
    "nn.functional.scaled_dot_product_attention": (
        lambda s: s.kwargs.get("dropout_p", 0.0) > 0, "dropout_p > 0: random dropout mask"),
    "nn.functional.multi_head_attention_forward": (
        lambda s: s.kwargs.get("dropout_p", s.args[9] if len(s.args) > 9 else 0.0) > 0 and s.kwargs.get("training", True),
        "dropout_p > 0 in training: random dropout mask"),
}

# Tensor arguments that PyTorch requires on the CPU whatever the device (as on CUDA): they stay there.
# name -> reason; every tensor in the sample's args and kwargs (not its input) stays on the CPU.
CPU_ARGS = {
    "tensor_split": "a tensor indices_or_sections must be a CPU tensor (PyTorch reads it on the host)",
}

# Normalization statistics outputs (mean, rstd / save_mean, save_invstd): PyTorch's CPU kernels
# return them in the input's dtype and, in eval mode, empty; every other device (CUDA, and PyTorch's own
# reference decomposition for non-CPU devices, torch/_decomp/decompositions.py) returns them in the
# computation dtype (float32 for bfloat16 input) and, in eval mode, the running statistics. The
# device may follow either convention: a float32 statistic is compared after rounding to the CPU's
# dtype, and one where the CPU returned an empty tensor is compared by dtype only.
STAT_OUTPUTS = {
    "native_layer_norm": (1, 2),
    "native_batch_norm": (1, 2),
    "_native_batch_norm_legit": (1, 2),
    "_batch_norm_with_update": (1, 2),
    "native_group_norm": (1, 2),
}
STAT_OUTPUTS_REASON = "statistics outputs compared under either convention (CPU, or computation dtype and running stats in eval mode)"

# Results whose values are implementation-defined: compared by shape and dtype only.
SHAPE_ONLY = {
    "empty": "uninitialized memory",
    "empty_like": "uninitialized memory",
    "empty_strided": "uninitialized memory",
    "empty_permuted": "uninitialized memory",
    "new_empty": "uninitialized memory",
    "new_empty_strided": "uninitialized memory",
}

# Ops returning (values, indices) where the index of one of several equal values is unspecified
# (sort without stable=True, topk, kthvalue, median, mode): values are compared, the indices by
# shape and dtype only. Index = the position of the index output.
TIES_UNSPECIFIED = {
    "sort": (1, "unstable sort: indices of equal values are unspecified unless stable=True"),
    "argsort": (0, "unstable sort: indices of equal values are unspecified unless stable=True"),
    "topk": (1, "topk: which of several equal values is returned is unspecified"),
    "kthvalue": (1, "kthvalue: the index of a repeated value is unspecified"),
    "median": (1, "median: the index of a repeated value is unspecified"),
    "nanmedian": (1, "nanmedian: the index of a repeated value is unspecified"),
    "mode": (1, "mode: the index of a repeated value is unspecified"),
}

# Per-entry tolerances where the device legitimately differs from the CPU by more than torch's
# defaults (float32: rtol 1.3e-6, atol 1e-5; bfloat16: rtol 1.6e-2, atol 1e-5).
# name -> ({dtype or None: dict(rtol=, atol=)}, reason)
_MATMUL = "matmul-based: XLA's dot accumulates in a different order (and blocks differently) from the CPU's BLAS"
_TRANSCENDENTAL = "XLA's vectorized polynomial approximations of transcendental functions differ from libm by a few ulp"
_REDUCE = "reduction: XLA sums in a different (tree) order from the CPU"
TOLERANCES: dict[str, tuple[dict, str]] = {}


def _tol(names, f32=None, bf16=None, reason=""):
    """f32/bf16: (rtol, atol) or (rtol, atol, atol_scale). atol_scale: the absolute tolerance grows to
    atol_scale * max|expected| (for sums of many products rounded to a short mantissa: an element that
    cancels to near zero keeps an error of about one ulp of the partial sums, not of itself)."""
    for name in names.split():
        table = {}
        for dtype, t in ((torch.float32, f32), (torch.bfloat16, bf16)):
            if t is not None:
                table[dtype] = dict(rtol=t[0], atol=t[1], **({"atol_scale": t[2]} if len(t) > 2 else {}))
        TOLERANCES[name] = (table, reason)


_tol("matmul mm bmm addmm addmm.decomposed addmv addbmm baddbmm addr mv dot vdot inner outer tensordot einsum "
     "nn.functional.linear nn.functional.bilinear linalg.multi_dot linalg.vecdot __rmatmul__ kron "
     "bmm.triton_optimized cdist linalg.matrix_power",
     f32=(1e-5, 1e-5), bf16=(1.6e-2, 1e-2, 8e-3), reason=_MATMUL)
_tol("nn.functional.conv1d nn.functional.conv2d nn.functional.conv3d nn.functional.conv_transpose1d "
     "nn.functional.conv_transpose2d nn.functional.conv_transpose3d",
     f32=(1e-5, 1e-5), bf16=(1.6e-2, 1e-2, 8e-3), reason="convolution: accumulation order differs from oneDNN's")
_tol("nn.functional.scaled_dot_product_attention nn.functional.multi_head_attention_forward",
     f32=(1e-5, 1e-5), bf16=(1.6e-2, 1e-2, 8e-3), reason=_MATMUL)
_tol("sum nansum mean nanmean cumsum cumprod logcumsumexp logsumexp prod var var.unbiased std std.unbiased var_mean "
     "var_mean.unbiased std_mean std_mean.unbiased masked.sum masked.mean masked.var masked.std masked.logsumexp "
     "masked.cumsum masked.cumprod masked.prod norm norm.fro linalg.vector_norm linalg.norm linalg.matrix_norm "
     "nn.functional.normalize nn.functional.cosine_similarity nn.functional.pairwise_distance nn.functional.pdist "
     "dist trace trapz trapezoid cumulative_trapezoid sum_to_size nn.functional.mse_loss nn.functional.l1_loss "
     "nn.functional.huber_loss nn.functional.smooth_l1_loss nn.functional.kl_div nn.functional.cross_entropy "
     "nn.functional.nll_loss nn.functional.binary_cross_entropy nn.functional.binary_cross_entropy_with_logits "
     "nn.functional.poisson_nll_loss nn.functional.gaussian_nll_loss nn.functional.soft_margin_loss "
     "nn.functional.margin_ranking_loss nn.functional.hinge_embedding_loss nn.functional.cosine_embedding_loss "
     "nn.functional.multilabel_soft_margin_loss nn.functional.triplet_margin_loss "
     "nn.functional.triplet_margin_with_distance_loss nn.functional.multi_margin_loss",
     f32=(1e-5, 1e-5), bf16=(1.6e-2, 1e-2), reason=_REDUCE)
_tol("nn.functional.layer_norm native_layer_norm nn.functional.rms_norm nn.functional.group_norm native_group_norm "
     "nn.functional.batch_norm nn.functional.batch_norm.without_cudnn native_batch_norm _native_batch_norm_legit "
     "_batch_norm_with_update nn.functional.instance_norm nn.functional.local_response_norm softmax "
     "softmax.with_dtype log_softmax log_softmax.with_dtype nn.functional.softmin nn.functional.softmin.with_dtype "
     "masked.softmax masked.log_softmax masked.softmin masked.normalize _softmax_backward_data "
     "torch.ops.aten._safe_softmax.default",
     f32=(1e-5, 1e-5), bf16=(1.6e-2, 1e-2), reason=_REDUCE + "; normalization statistics")
_tol("exp exp2 expm1 log log10 log1p log2 sin cos tan sinh cosh tanh asin acos atan atan2 asinh acosh atanh "
     "sigmoid logit erf erfc erfinv rsqrt sqrt pow __rpow__ float_power nn.functional.gelu nn.functional.silu "
     "nn.functional.mish nn.functional.softplus nn.functional.elu nn.functional.celu nn.functional.selu "
     "nn.functional.logsigmoid nn.functional.tanhshrink nn.functional.glu nn.functional.hardswish "
     "nn.functional.hardsigmoid logaddexp logaddexp2 xlogy special.xlog1py special.entr sinc lgamma digamma "
     "polygamma.polygamma_n_0 polygamma.polygamma_n_1 polygamma.polygamma_n_2 polygamma.polygamma_n_3 "
     "polygamma.polygamma_n_4 special.polygamma.special_polygamma_n_0 mvlgamma.mvlgamma_p_1 mvlgamma.mvlgamma_p_3 mvlgamma.mvlgamma_p_5 "
     "special.ndtr special.log_ndtr special.ndtri special.erfcx special.i0e special.i1 special.i1e i0 "
     "reciprocal div.no_rounding_mode true_divide __rdiv__ hypot lerp addcdiv angle polar sgn "
     "nn.functional.interpolate.bilinear nn.functional.interpolate.bicubic nn.functional.interpolate.trilinear "
     "nn.functional.interpolate.linear nn.functional.interpolate.area nn.functional.upsample_bilinear "
     "nn.functional.grid_sample grid_sampler_2d grid_sampler_3d _upsample_bilinear2d_aa "
     "nn.functional.avg_pool1d nn.functional.avg_pool2d nn.functional.avg_pool3d "
     "nn.functional.adaptive_avg_pool1d nn.functional.adaptive_avg_pool2d nn.functional.adaptive_avg_pool3d "
     "linspace logspace linspace.tensor_overload logspace.tensor_overload signal.windows.gaussian "
     "signal.windows.exponential signal.windows.kaiser signal.windows.hann signal.windows.hamming "
     "signal.windows.blackman signal.windows.nuttall signal.windows.general_cosine signal.windows.general_hamming "
     "signal.windows.cosine signal.windows.bartlett",
     f32=(1e-5, 1e-5), bf16=(1.6e-2, 1e-2), reason=_TRANSCENDENTAL)

_tol("fft.fft fft.fft2 fft.fftn fft.hfft fft.hfft2 fft.hfftn fft.ifft fft.ifft2 fft.ifftn fft.ihfft fft.ihfft2 "
     "fft.ihfftn fft.irfft fft.irfft2 fft.irfftn fft.rfft fft.rfft2 fft.rfftn stft istft",
     f32=(1e-5, 2e-5), bf16=(1.6e-2, 1e-2, 8e-3),
     reason="FFT: XLA's FFT library and PocketFFT/MKL combine the terms in different orders")
_tol("matrix_exp", f32=(1e-5, 1e-5, 2e-6),
     reason="matrix_exp: squarings of a degree-18 Taylor polynomial; " + _MATMUL + " (errors of about one ulp "
            "of the largest element, both sides)")


def tolerance(name: str, dtype: torch.dtype) -> dict:
    """rtol/atol for assert_close: the table's entry, else torch's defaults for the dtype (empty dict).
    Integer and bool samples use the float32 entry: where a tolerance matters their results are
    float32 (exp of an int64 tensor), and integer results are exact under any atol below 1."""
    table, _ = TOLERANCES.get(name, ({}, ""))
    if not (dtype.is_floating_point or dtype.is_complex):
        dtype = torch.float32
    return dict(table.get(dtype, {}))


# Not run at all. (name, dtype or None) -> reason. Only true limitations of the device model or of the
# comparison, never "not lowered yet" (that shows up as fallback/fail, which is the point).
SKIPS: dict[tuple[str, torch.dtype | None], str] = {
    ("to_sparse", None): "sparse layouts are not a neuron tensor type (the device holds dense strided tensors only)",
    ("sparse.mm.reduce", None): "sparse layouts are not a neuron tensor type",
    ("sparse.sampled_addmm", None): "sparse layouts are not a neuron tensor type",
    ("jiterator_2inputs_2outputs", None): "CUDA-only jiterator entry",
    ("jiterator_4inputs_with_extra_args", None): "CUDA-only jiterator entry",
    ("jiterator_binary", None): "CUDA-only jiterator entry",
    ("jiterator_binary_return_by_ref", None): "CUDA-only jiterator entry",
    ("jiterator_unary", None): "CUDA-only jiterator entry",
    ("torch._scaled_mm", None): "float8 scaled matmul: CUDA-only entry",
    ("torch._scaled_mm_v2", None): "float8 scaled matmul: CUDA-only entry",
    ("torch.ops.aten._flash_attention_forward", None): "CUDA-only attention kernel entry",
    ("torch.ops.aten._efficient_attention_forward", None): "CUDA-only attention kernel entry",
}

# Expected to fail, with the reason. Only true limitations; an entry that passes is reported as xpass.
XFAILS: dict[tuple[str, torch.dtype | None], str] = {
    ("chalf", None): "complex32 is not a dtype the neuron device carries (documented: converting to it raises TypeError)",
    ("matrix_exp", torch.bfloat16): "PyTorch's CPU matrix_exp returns garbage (NaN/inf) for bfloat16: it reads its "
                                    "float64 coefficient tables as 16-bit floats; neuron computes it in float32",
}


def skip_reason(name: str, dtype: torch.dtype) -> str | None:
    return SKIPS.get((name, dtype)) or SKIPS.get((name, None))


def xfail_reason(name: str, dtype: torch.dtype) -> str | None:
    return XFAILS.get((name, dtype)) or XFAILS.get((name, None))


# ----------------------------------------------------------------------------------------------
# Running one entry


@dataclasses.dataclass
class Result:
    name: str
    dtype: str
    status: str  # pass | fallback | fail | skip | xfail | xpass
    reason: str = ""  # skip/xfail reason, or the first line of the error for fail
    fallback_ops: dict = dataclasses.field(default_factory=dict)  # ATen op -> count
    has_samples: bool = False  # the CPU produced at least one sample for this dtype
    samples_run: int = 0
    samples_cpu_error: int = 0  # samples skipped because the CPU itself raised
    compare: str = "values"  # values | shape (random/uninitialized) | values, indices by shape
    seconds: float = 0.0
    order_dependent: bool = False  # failed in the sweep, passed when rerun in a fresh process

    @property
    def ok(self) -> bool:
        return self.status == "pass"

    def line(self) -> str:
        extra = self.reason
        if self.fallback_ops and self.status == "fallback":
            extra = "fell back: " + ", ".join(sorted(self.fallback_ops))
        return f"{self.name} [{self.dtype}] {self.status}{': ' + extra if extra else ''}"


class _Timeout(BaseException):
    """Not an Exception: no `except Exception` on the way (ours, a lowering's) may swallow it."""


@contextlib.contextmanager
def _alarm(seconds: float):
    """Raise _Timeout in the main thread after `seconds` (checked when Python code runs again)."""
    usable = seconds and seconds > 0 and threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    if not usable:
        yield
        return

    def handler(signum, frame):
        raise _Timeout(f"timeout: over {seconds:g} s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _is_cpu_device(v) -> bool:
    if isinstance(v, torch.device):
        return v.type == "cpu"
    return isinstance(v, str) and v == "cpu"


def _tensor_to_device(x: torch.Tensor, device, storages: dict) -> torch.Tensor:
    """x on `device` with the same layout: its whole storage is copied once (shared by every tensor of
    the sample that views it) and x is rebuilt on it with the same sizes, strides and offset. A
    non-contiguous sample stays non-contiguous, a partial view still sees the rest of its storage, and
    sample tensors that alias each other still do, exactly as for samples made on the device."""
    x = x.detach()
    if x.layout != torch.strided or x.is_conj() or x.is_neg() or x.device.type != "cpu":
        return x.to(device)
    storage = x.untyped_storage()
    key = (storage.data_ptr(), storage.nbytes(), x.dtype)
    flat = storages.get(key)
    if flat is None:
        n = storage.nbytes() // x.element_size()
        flat = torch.empty(0, dtype=x.dtype).set_(storage, 0, (n,), (1,)).to(device)
        storages[key] = flat
    return flat.as_strided(x.size(), x.stride(), x.storage_offset())


def to_device(x, device=DEVICE, _storages=None):
    """A copy of a sample's structure with every tensor on `device` (same layout, see
    _tensor_to_device) and `device="cpu"` arguments pointing at it, recursively through lists,
    tuples and dicts."""
    storages = {} if _storages is None else _storages
    if isinstance(x, torch.Tensor):
        return _tensor_to_device(x, device, storages)
    if _is_cpu_device(x):
        return torch.device(device) if isinstance(x, torch.device) else device
    if isinstance(x, torch.Size):
        return x
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # namedtuple
        return type(x)(*(to_device(v, device, storages) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(v, device, storages) for v in x)
    if isinstance(x, dict):
        return {k: to_device(v, device, storages) for k, v in x.items()}
    return x


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, torch.Size):
        return x
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(_clone(v) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(v) for v in x)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


def _tensors(x) -> list:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


class Mismatch(AssertionError):
    pass


def compare(got, want, *, rtol=None, atol=None, atol_scale=None, shape_only=False, path="output",
            check_device=True):
    """Recursively compare a neuron result with the CPU's: tensors by dtype, shape, device and values
    (assert_close with equal_nan), or by dtype and shape only; other values with ==."""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise Mismatch(f"{path}: expected a tensor, got {type(got).__name__}")
        if check_device and want.device.type == "cpu" and got.device.type != DEVICE:
            raise Mismatch(f"{path}: on {got.device}, expected on {DEVICE}")
        if got.dtype != want.dtype:
            raise Mismatch(f"{path}: dtype {got.dtype} != {want.dtype}")
        if got.shape != want.shape:
            raise Mismatch(f"{path}: shape {tuple(got.shape)} != {tuple(want.shape)}")
        if shape_only:
            return
        g = got.detach().cpu()
        w = want.detach()
        if w.layout != torch.strided:
            w = w.to_dense()
        if w.is_conj():
            w = w.resolve_conj()
        if w.is_neg():
            w = w.resolve_neg()
        if g.is_conj():
            g = g.resolve_conj()
        if g.is_neg():
            g = g.resolve_neg()
        if atol_scale and w.numel() and (w.is_floating_point() or w.is_complex()):
            finite = w[torch.isfinite(w)]
            if finite.numel():
                atol = max(atol, atol_scale * finite.abs().max().item())
        try:
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True, check_device=False,
                                       check_stride=False)
        except AssertionError as e:
            msg = " ".join(str(e).split("\n")[:4])
            raise Mismatch(f"{path}: {msg}") from None
        return
    if isinstance(want, (list, tuple)) and not isinstance(want, torch.Size):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            raise Mismatch(f"{path}: expected a sequence of {len(want)}, got {type(got).__name__}"
                           f"{' of ' + str(len(got)) if isinstance(got, (list, tuple)) else ''}")
        for i, (g, w) in enumerate(zip(got, want)):
            compare(g, w, rtol=rtol, atol=atol, atol_scale=atol_scale, shape_only=shape_only, path=f"{path}[{i}]")
        return
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            raise Mismatch(f"{path}: dict keys differ")
        for k in want:
            compare(got[k], want[k], rtol=rtol, atol=atol, atol_scale=atol_scale, shape_only=shape_only,
                    path=f"{path}[{k!r}]")
        return
    if isinstance(want, float) and isinstance(got, (int, float)):
        if shape_only or (math.isnan(want) and math.isnan(got)):
            return
        tol = dict(rtol=rtol, atol=atol) if rtol is not None else {}
        try:
            torch.testing.assert_close(float(got), want, **tol)
        except AssertionError as e:
            raise Mismatch(f"{path}: {got!r} != {want!r} ({str(e).splitlines()[0]})") from None
        return
    if isinstance(want, torch.dtype) or isinstance(want, torch.device):
        if want != got and not (_is_cpu_device(want) and getattr(got, "type", None) == DEVICE):
            raise Mismatch(f"{path}: {got!r} != {want!r}")
        return
    if shape_only:
        return
    if got != want:
        raise Mismatch(f"{path}: {got!r} != {want!r}")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {line}"[:300]


def _compare_mode(name: str) -> tuple[str, str]:
    if name in RANDOM_OPS:
        return "shape", RANDOM_OPS[name]
    if name in SHAPE_ONLY:
        return "shape", SHAPE_ONLY[name]
    if name in TIES_UNSPECIFIED:
        return "values, indices by shape", TIES_UNSPECIFIED[name][1]
    return "values", ""


def _compare_result(name, got, want, sample, tol):
    mode, _ = _compare_mode(name)
    if mode == "shape":
        compare(got, want, shape_only=True, **tol)
        return
    if name in TIES_UNSPECIFIED:
        stable = sample.kwargs.get("stable", False) is True
        index = TIES_UNSPECIFIED[name][0]
        if isinstance(want, torch.Tensor):  # argsort: the only output is the indices
            compare(got, want, shape_only=not stable, **tol)
            return
        for i, (g, w) in enumerate(zip(got, want)):
            compare(g, w, shape_only=(i == index and not stable), path=f"output[{i}]", **tol)
        if len(got) != len(want):
            raise Mismatch(f"output: {len(got)} results, expected {len(want)}")
        return
    if name in STAT_OUTPUTS and isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)) \
            and len(got) == len(want):
        for i, (g, w) in enumerate(zip(got, want)):
            if i in STAT_OUTPUTS[name] and isinstance(g, torch.Tensor) and isinstance(w, torch.Tensor):
                if w.numel() == 0 and g.dim() == 1:  # CPU eval mode: empty; other devices: running stats
                    continue
                if g.dtype == torch.float32 and w.dtype in LOW_PRECISION:
                    g = g.to(w.dtype)
            compare(g, w, path=f"output[{i}]", **tol)
        return
    compare(got, want, **tol)


# ----------------------------------------------------------------------------------------------
# bfloat16: a second opinion from float32
#
# The CPU's bfloat16 kernels round intermediate results (products, partial sums, quotients) to
# bfloat16 in their own places; the device's compiled programs round in others (often keeping float32
# inside a fusion). Where the two bfloat16 results differ by more than the tolerance, the sample is
# rerun on the CPU in float32 (its bfloat16 tensors converted exactly) as the reference: the device
# passes when its error against that reference is no worse than twice the CPU's own (root mean
# square over finite elements, plus 1e-5; non-finite elements and non-float outputs must still equal
# the CPU's). This is the accuracy check PyTorch's inductor uses against an fp64 reference.

LOW_PRECISION = (torch.bfloat16, torch.float16)


def _upcast(x):
    if isinstance(x, torch.Tensor):
        return x.detach().to(torch.float32) if x.dtype in LOW_PRECISION else x.detach().clone()
    if isinstance(x, torch.Size):
        return x
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(_upcast(v) for v in x)
    if isinstance(x, dict):
        return {k: _upcast(v) for k, v in x.items()}
    return x


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.numel() == 0:
        return 0.0
    return ((a.double() - b.double()) ** 2).mean().sqrt().item()


def no_worse_than_cpu(got, want, ref, *, factor=2.0, slack=1e-5, path="output"):
    """Raise Mismatch unless the device result `got` is at least about as close to the float32
    reference `ref` as the CPU's low-precision result `want` is (see above)."""
    gots, wants, refs = _tensors(got), _tensors(want), _tensors(ref)
    if not (len(gots) == len(wants) == len(refs)):
        raise Mismatch(f"{path}: the float32 reference has a different structure")
    for i, (g, w, r) in enumerate(zip(gots, wants, refs)):
        g = g.detach().cpu()
        if g.shape != w.shape or r.shape != w.shape or g.dtype != w.dtype:
            raise Mismatch(f"{path}[{i}]: shape or dtype differs from the CPU's")
        if not (w.is_floating_point() or w.is_complex()):
            if not torch.equal(g, w):
                raise Mismatch(f"{path}[{i}]: non-float output differs from the CPU's")
            continue
        r = r.to(torch.float32) if not r.is_complex() else r
        finite = torch.isfinite(r) & torch.isfinite(w)
        if not finite.all():
            try:
                torch.testing.assert_close(g[~finite], w[~finite], equal_nan=True, atol=0, rtol=0)
            except AssertionError:
                raise Mismatch(f"{path}[{i}]: non-finite elements differ from the CPU's") from None
        e_dev, e_cpu = _rmse(g[finite], r[finite]), _rmse(w[finite], r[finite])
        if not e_dev <= factor * e_cpu + slack:
            raise Mismatch(f"{path}[{i}]: error vs the float32 reference {e_dev:.3g} (rms) is over "
                           f"{factor:g}x the CPU's {e_cpu:.3g}")


def sample_list(op, dtype, max_samples: int):
    """The first `max_samples` samples of the entry for the dtype, drawn with a fixed seed."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        it = op.sample_inputs("cpu", dtype, requires_grad=False)
        return list(itertools.islice(it, max_samples))


def _cpu_runs_a_sample(op, dtype, max_samples, timeout_s) -> bool:
    """Whether the entry has a sample for the dtype that the CPU runs (so that it counts as an entry
    with samples even when it is skipped)."""
    try:
        with _alarm(timeout_s), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for sample in sample_list(op, dtype, max_samples):
                try:
                    op(sample.input, *sample.args, **sample.kwargs)
                    return True
                except Exception:  # noqa: BLE001
                    continue
    except (Exception, _Timeout):  # noqa: BLE001
        pass
    return False


def run_entry(op, dtype: torch.dtype, *, max_samples: int = DEFAULT_MAX_SAMPLES,
              timeout_s: float = DEFAULT_TIMEOUT_S, apply_lists: bool = True) -> Result:
    """Run the entry's samples for `dtype` on the CPU and on neuron; classify (see the module doc)."""
    name = entry_name(op)
    dname = DTYPE_NAMES.get(dtype, str(dtype))
    mode, mode_reason = _compare_mode(name)
    res = Result(name, dname, "pass", compare=mode)
    start = time.perf_counter()
    if apply_lists:
        reason = skip_reason(name, dtype)
        if reason:
            res.status, res.reason = "skip", reason
            res.has_samples = _cpu_runs_a_sample(op, dtype, max_samples, timeout_s)
            res.seconds = time.perf_counter() - start
            return res
    tol = tolerance(name, dtype)
    fallbacks: collections.Counter = collections.Counter()
    error = None
    random_samples = 0
    by_reference = 0  # low-precision samples accepted by the float32 reference
    try:
        with _alarm(timeout_s), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            samples = sample_list(op, dtype, max_samples)
            for sample in samples:
                # neuron copies first: the CPU run may modify the sample in place
                if name in CPU_ARGS:
                    dev_input, dev_args, dev_kwargs = (to_device(sample.input), _clone(sample.args),
                                                       _clone(sample.kwargs))
                else:
                    dev_input, dev_args, dev_kwargs = to_device((sample.input, sample.args, sample.kwargs))
                cpu_input, cpu_args, cpu_kwargs = sample.input, sample.args, sample.kwargs
                pristine = _upcast((sample.input, sample.args, sample.kwargs)) if dtype in LOW_PRECISION else None
                try:
                    torch.manual_seed(0)
                    want = sample.output_process_fn_grad(op(cpu_input, *cpu_args, **cpu_kwargs))
                except Exception:
                    res.samples_cpu_error += 1
                    continue
                res.has_samples = True
                torch_neuronx.clear_op_tracking()
                try:
                    torch.manual_seed(0)
                    got = op(dev_input, *dev_args, **dev_kwargs)
                    fallbacks.update(torch_neuronx.get_fallback_ops())
                    # what PyTorch's own device-vs-CPU test (test_compare_cpu) does too: the sample's
                    # post-processing removes what is not well defined (e.g. the signs of eigenvectors)
                    got = sample.output_process_fn_grad(got)
                    random_sample = name in RANDOM_SAMPLES and RANDOM_SAMPLES[name][0](sample)
                    if random_sample:
                        compare(got, want, shape_only=True)
                        random_samples += 1
                    else:
                        try:
                            _compare_result(name, got, want, sample, tol)
                        except Mismatch as first:
                            if pristine is None or mode != "values":
                                raise
                            try:
                                ref = sample.output_process_fn_grad(op(pristine[0], *pristine[1], **pristine[2]))
                            except Exception:  # noqa: BLE001  (no float32 reference: the mismatch stands)
                                raise first from None
                            try:
                                no_worse_than_cpu(got, want, ref)
                            except Mismatch as second:
                                raise Mismatch(f"{first}; {second}") from None
                            by_reference += 1
                    if mode == "values" and not random_sample:  # in-place effects on the sample's tensors
                        for i, (g, w) in enumerate(zip(_tensors((dev_input, dev_args, dev_kwargs)),
                                                       _tensors((cpu_input, cpu_args, cpu_kwargs)))):
                            compare(g, w, path=f"sample tensor {i} after the call", check_device=False, **tol)
                    res.samples_run += 1
                except _Timeout:
                    raise
                except Exception as e:  # noqa: BLE001  (a mismatch or any error on the device)
                    fallbacks.update(torch_neuronx.get_fallback_ops())
                    error = _first_line(e) if not isinstance(e, Mismatch) else f"Mismatch: {e}"[:300]
                    break
                if timeout_s and time.perf_counter() - start > timeout_s:
                    raise _Timeout(f"timeout: over {timeout_s:g} s")
    except _Timeout as e:
        res.status, res.reason = "skip", str(e)
        res.seconds = time.perf_counter() - start
        res.fallback_ops = dict(fallbacks)
        return res
    except Exception as e:  # noqa: BLE001  (building the samples failed)
        res.status, res.reason = "skip", f"no samples: {_first_line(e)}"
        res.seconds = time.perf_counter() - start
        return res
    finally:
        torch_neuronx.clear_op_tracking()
    res.seconds = time.perf_counter() - start
    res.fallback_ops = dict(fallbacks)
    if error is not None:
        res.status, res.reason = "fail", error
    elif not res.has_samples:
        res.status = "skip"
        res.reason = ("no samples the CPU can run" if res.samples_cpu_error else "no samples")
    elif fallbacks:
        res.status = "fallback"
    elif mode_reason:
        res.reason = f"compared {mode}: {mode_reason}"
    elif random_samples:
        res.reason = f"{random_samples} sample(s) compared by shape: {RANDOM_SAMPLES[name][1]}"
    if res.status == "pass" and by_reference:
        note = f"{by_reference} sample(s) accepted by the float32 reference (no worse than the CPU)"
        res.reason = f"{res.reason}; {note}" if res.reason else note
    if res.status == "pass" and name in STAT_OUTPUTS and not res.reason:
        res.reason = STAT_OUTPUTS_REASON
    if apply_lists:
        xr = xfail_reason(name, dtype)
        if xr:
            if res.status in ("fail", "fallback"):
                res.status, res.reason = "xfail", f"{xr} (got: {res.line()})"
            elif res.status == "pass":
                res.status, res.reason = "xpass", f"expected to fail: {xr}"
    return res


# ----------------------------------------------------------------------------------------------
# The sweep and its report


def sweep(ops, dtypes=SWEEP_DTYPES, *, max_samples=DEFAULT_MAX_SAMPLES, timeout_s=DEFAULT_TIMEOUT_S,
          progress=None) -> list[Result]:
    """run_entry over every (entry, dtype) the entry supports; `progress(result)` after each."""
    results = []
    for op in ops:
        for dtype in sweep_dtypes(op, dtypes):
            r = run_entry(op, dtype, max_samples=max_samples, timeout_s=timeout_s)
            results.append(r)
            if progress:
                progress(r)
    return results


STATUSES = ("pass", "fallback", "fail", "skip", "xfail", "xpass")


def summarize(results: list[Result]) -> dict:
    """Per dtype: counts by status, entries with samples; the float32 target metric."""
    by_dtype: dict[str, collections.Counter] = {}
    for r in results:
        c = by_dtype.setdefault(r.dtype, collections.Counter())
        c[r.status] += 1
        c["entries"] += 1
        c["with_samples"] += r.has_samples
    f32 = [r for r in results if r.dtype == "float32" and r.has_samples]
    f32_pass = sum(r.status in ("pass", "xpass") for r in f32)
    return {
        "by_dtype": {d: dict(c) for d, c in by_dtype.items()},
        "float32_entries_with_samples": len(f32),
        "float32_pass_no_fallback": f32_pass,
        "float32_pass_pct": 100.0 * f32_pass / len(f32) if f32 else 0.0,
    }


def fallback_ranking(results: list[Result]) -> list[tuple[str, int, list[str]]]:
    """ATen ops that fell back, ranked by how many OpInfo entries (any dtype) needed them."""
    users: dict[str, set] = collections.defaultdict(set)
    for r in results:
        for aten in r.fallback_ops:
            users[aten].add(r.name)
    return sorted(((a, len(u), sorted(u)) for a, u in users.items()), key=lambda t: (-t[1], t[0]))


def report(results: list[Result], *, max_list: int | None = None) -> str:
    s = summarize(results)
    order = [DTYPE_NAMES[d] for d in SWEEP_DTYPES] + sorted(set(s["by_dtype"]) - {DTYPE_NAMES[d] for d in SWEEP_DTYPES})
    rows = [("dtype", "entries", "w/ samples", "passed", "fell back", "failed", "skipped", "xfail", "xpass", "pass %")]
    for d in order:
        c = s["by_dtype"].get(d)
        if not c:
            continue
        ws = c.get("with_samples", 0)
        pct = f"{100.0 * (c.get('pass', 0) + c.get('xpass', 0)) / ws:.1f}" if ws else "-"
        rows.append((d, str(c["entries"]), str(ws), str(c.get("pass", 0)), str(c.get("fallback", 0)),
                     str(c.get("fail", 0)), str(c.get("skip", 0)), str(c.get("xfail", 0)), str(c.get("xpass", 0)), pct))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.append("")
    lines.append(
        f"float32 target: {s['float32_pass_no_fallback']} of {s['float32_entries_with_samples']} op_db entries with "
        f"float32 samples pass on {DEVICE} with no CPU fallback = {s['float32_pass_pct']:.1f}% (target >= 95%)"
    )
    lines.append("(pass % = passed / entries with samples; skips, xfails, fallbacks and failures count as not passing)")

    fails = [r for r in results if r.status == "fail"]
    if fails:
        by_entry: dict[str, list] = {}
        for r in fails:
            by_entry.setdefault(r.name, []).append(r)
        n_order = sum(r.order_dependent for r in fails)
        lines += ["", f"failing: {len(by_entry)} entries, {len(fails)} entry/dtype pairs"
                      + (f" ({n_order} of them order-dependent: they pass in a fresh process)" if n_order else "")
                      + "; the first error of each entry:"]
        shown = list(by_entry.items())
        for name, rs in shown[:max_list] if max_list else shown:
            dts = ",".join(r.dtype for r in rs)
            lines.append(f"  {name} [{dts}]: {rs[0].reason}")
        if max_list and len(shown) > max_list:
            lines.append(f"  ... and {len(shown) - max_list} more entries (--full-lists)")
    fb = fallback_ranking(results)
    if fb:
        lines += ["", f"fallback ATen ops, by number of OpInfo entries that need them ({len(fb)} ops):"]
        for aten, n, users in fb[:max_list] if max_list else fb:
            shown = ", ".join(users[:6]) + (", ..." if len(users) > 6 else "")
            lines.append(f"  {n:4d}  {aten}  ({shown})")
        if max_list and len(fb) > max_list:
            lines.append(f"  ... and {len(fb) - max_list} more ops (--full-lists)")
    other = [r for r in results if r.status in ("xpass",)]
    if other:
        lines += ["", "xpass (prune these from XFAILS):"] + [f"  {r.name} [{r.dtype}]" for r in other]
    skips = collections.Counter(r.reason.split(":")[0] if r.reason.startswith(("timeout", "no samples")) else r.reason
                                for r in results if r.status == "skip")
    if skips:
        lines += ["", "skipped, by reason:"] + [f"  {n:4d}  {why}" for why, n in skips.most_common()]
    return "\n".join(lines)
