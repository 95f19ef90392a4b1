"""OpInfo parity machinery: run the samples of PyTorch's `op_db` on `neuron` and compare with the CPU.

For one OpInfo entry and one dtype, `run_entry` takes the entry's first samples
(`op.sample_inputs("cpu", dtype, requires_grad=False)`, a fixed seed), runs each on the CPU and on
neuron copies of its tensors (same sizes, strides, offsets and aliasing), compares the results
(values, dtypes, shapes, devices, and the samples' own tensors afterwards, so in-place effects count
too; per-entry tolerances in TOLERANCES, torch's defaults otherwise) and classifies the pair:

    pass      every sample matched and nothing fell back to the CPU
    rejected  every sample is one the CPU rejects (raises), and neuron rejects each with an exception
              of the same type
    fallback  every sample matched, but some ATen ops ran on the CPU, or TORCH_NEURONX_CPU_FALLBACK=error
              refused to run them there (`fallback_ops` says which)
    fail      a mismatch or an exception on neuron, a sample the CPU rejects that neuron computes (or
              rejects with another exception type), a sample generator that raises, or a timeout
              (`reason` is the first line of what happened)
    skip      listed in SKIPS (with its reason), or the entry has no samples for the dtype
    xfail     listed in XFAILS (with its reason) and failed as expected; one that passes anyway is
              reported as `xpass` so the list can be pruned

Where the values are not all defined, the comparison says what is: random entries (RANDOM_OPS) are
compared by shape and dtype per sample, and their distributions are checked on large draws of
their own (RANDOM_CHECKS); samples that draw random numbers (RANDOM_SAMPLES) and uninitialized
results (SHAPE_ONLY) by shape and dtype; unspecified tie-breaking indices (TIES_UNSPECIFIED) must
pick the right values and equal the CPU's where there is no tie; statistics outputs (STAT_OUTPUTS)
under either device convention; bfloat16 results that differ from the CPU's get a second opinion from
a float32 reference (see no_worse_than_cpu).

Shared by tests/test_opinfo.py (the default subset), tests/test_compile_opinfo.py (compiled),
tests/test_random_distributions.py and benchmarks/opinfo_coverage.py (the full sweep and its coverage
table). Nothing here edits or depends on the lowerings themselves.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import math
import os
import signal
import threading
import time
import warnings

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see tests/conftest.py

import torch  # noqa: E402  (autoloads torch_neuronx)

import torch_neuronx  # noqa: E402
import warm_cache  # noqa: E402
from helpers import gen  # noqa: E402

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

_OP_DB = None


def op_db() -> list:
    """`torch.testing._internal.common_methods_invocations.op_db` (imported once; takes ~5 s)."""
    global _OP_DB
    if _OP_DB is None:
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
# samples' results are compared by shape and dtype; their distributions by RANDOM_CHECKS (below).
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
# dtype, and one where the CPU returned an empty tensor is compared with the running statistics
# (see _stat_reference).
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
# (sort without stable=True, topk, kthvalue, median, mode): values are compared; the indices must pick
# the values out of the input, and equal the CPU's wherever the value occurs once along the dim (all
# of them with stable=True). Index = the position of the index output; TIE_ARGS names the positional
# arguments after the input.
TIES_UNSPECIFIED = {
    "sort": (1, "unstable sort: indices of equal values are unspecified unless stable=True"),
    "argsort": (0, "unstable sort: indices of equal values are unspecified unless stable=True"),
    "topk": (1, "topk: which of several equal values is returned is unspecified"),
    "kthvalue": (1, "kthvalue: the index of a repeated value is unspecified"),
    "median": (1, "median: the index of a repeated value is unspecified"),
    "nanmedian": (1, "nanmedian: the index of a repeated value is unspecified"),
    "mode": (1, "mode: the index of a repeated value is unspecified"),
}
TIE_ARGS = {
    "sort": ("dim", "descending"),
    "argsort": ("dim", "descending"),
    "topk": ("k", "dim", "largest", "sorted"),
    "kthvalue": ("k", "dim", "keepdim"),
    "median": ("dim", "keepdim"),
    "nanmedian": ("dim", "keepdim"),
    "mode": ("dim", "keepdim"),
}

# Per-entry tolerances: tests/tolerances.py holds every tolerance of the suite, OpInfo's included.
from tolerances import OPINFO_TOLERANCES as TOLERANCES, opinfo_tolerance as tolerance  # noqa: E402


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
    ("chalf", None): "complex32 is not a dtype the neuron device carries (documented: converting to it raises NotImplementedError)",
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
    status: str  # pass | rejected | fallback | fail | skip | xfail | xpass
    reason: str = ""  # skip/xfail reason, or the first line of the error for fail
    fallback_ops: dict = dataclasses.field(default_factory=dict)  # ATen op -> count
    has_samples: bool = False  # the CPU produced at least one sample for this dtype
    samples_run: int = 0
    samples_cpu_error: int = 0  # samples the CPU itself rejects (neuron must reject them too)
    compare: str = "values"  # values | shape (random/uninitialized) | values, indices where defined
    seconds: float = 0.0
    order_dependent: bool = False  # failed in the sweep, passed when rerun in a fresh process

    @property
    def ok(self) -> bool:
        return self.status in ("pass", "rejected")

    def line(self) -> str:
        extra = self.reason
        if self.fallback_ops and self.status == "fallback":
            extra = "fell back: " + ", ".join(sorted(self.fallback_ops))
        return f"{self.name} [{self.dtype}] {self.status}{': ' + extra if extra else ''}"


class _Timeout(BaseException):
    """Not an Exception: no `except Exception` on the way (ours, a lowering's) may swallow it."""


@contextlib.contextmanager
def _alarm(seconds: float):
    """Raise _Timeout in the main thread after `seconds` (checked when Python code runs again).

    SIGALRM / ITIMER_REAL is one timer per process, and pytest-timeout's default method uses it too:
    an outer timer that is running is saved and re-armed with its remaining time on exit, and if its
    deadline comes first, its own handler runs then (so an outer timeout still fires on time)."""
    usable = seconds and seconds > 0 and threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    if not usable:
        yield
        return
    outer_left, outer_interval = signal.setitimer(signal.ITIMER_REAL, 0)  # disarms it and says what was left
    start = time.monotonic()
    ours = start + seconds
    outer = [start + outer_left if outer_left > 0 else None]

    def handler(signum, frame):
        if outer[0] is not None and outer[0] < ours:  # the outer deadline came first
            outer[0] = None
            signal.setitimer(signal.ITIMER_REAL, max(ours - time.monotonic(), 1e-6))
            if callable(outer_handler):
                outer_handler(signum, frame)
            return
        raise _Timeout(f"timeout: over {seconds:g} s")

    outer_handler = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, min(ours, outer[0] or ours) - start)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer_handler)
        if outer[0] is not None:  # re-arm the outer timer with what is left of it (at once if it is past)
            signal.setitimer(signal.ITIMER_REAL, max(outer[0] - time.monotonic(), 1e-6), outer_interval)


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
    # Dynamo's BackendCompilerFailed opens with "backend='neuron' raised:": report what was raised
    e = getattr(e, "inner_exception", None) or e
    text = str(e).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {line}"[:300]


def _compare_mode(name: str) -> tuple[str, str]:
    if name in RANDOM_OPS:
        return "shape", RANDOM_OPS[name]
    if name in SHAPE_ONLY:
        return "shape", SHAPE_ONLY[name]
    if name in TIES_UNSPECIFIED:
        return "values, indices where defined", TIES_UNSPECIFIED[name][1]
    return "values", ""


def _same_values(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise a == b, NaN equal to NaN."""
    eq = a == b
    if a.is_floating_point():
        eq |= torch.isnan(a) & torch.isnan(b)
    return eq


def _order_key(t: torch.Tensor) -> torch.Tensor:
    """A totally ordered copy of t for counting equal values with searchsorted: floats in float64 with
    NaN above +inf (+inf becomes the largest finite double, which no float32/bfloat16 value is)."""
    if t.is_floating_point():
        t = t.double()
        big = torch.finfo(torch.float64).max
        return torch.where(torch.isnan(t), math.inf, torch.where(t == math.inf, big, t))
    return t.long()


def _tie_args(name, sample) -> dict:
    a = dict(zip(TIE_ARGS[name], sample.args))
    a.update(sample.kwargs)
    return a


def _check_tie_indices(name, got, want, sample, tol):
    """(values, indices) ops whose index is unspecified among equal values. The values are compared
    with the CPU's; the indices must be in range and pick the device's values out of the input (for
    argsort: the CPU's sorted values), and wherever the picked value occurs only once along the dim
    (everywhere for stable=True) the index is defined: it must equal the CPU's."""
    index = TIES_UNSPECIFIED[name][0]
    if name != "argsort" and isinstance(want, torch.Tensor):  # median(input): the value only, no index
        compare(got, want, **tol)
        return
    args = _tie_args(name, sample)
    if name == "argsort":
        g_idx, w_idx, values = got, want, None
    else:
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            raise Mismatch(f"output: expected a sequence of {len(want)}, got {type(got).__name__}")
        compare(got[0], want[0], path="output[0]", **tol)
        g_idx, w_idx, values = got[index], want[index], got[0].detach().cpu()
    path = f"output[{index}]" if name != "argsort" else "output"
    compare(g_idx, w_idx, shape_only=True, path=path)
    x = sample.input.detach()
    g_idx = g_idx.detach().cpu()
    if x.dim() == 0:  # a 0-dim input is one slice of length 1
        x, g_idx, w_idx = x.reshape(1), g_idx.reshape(1), w_idx.reshape(1)
        values = values.reshape(1) if values is not None else None
        d = 0
    else:
        d = args.get("dim", -1) % x.dim()
        if name in ("kthvalue", "median", "nanmedian", "mode") and not args.get("keepdim", False):
            g_idx, w_idx = g_idx.unsqueeze(d), w_idx.unsqueeze(d)
            values = values.unsqueeze(d)
    if g_idx.numel() == 0:
        return
    n = x.shape[d]
    if not ((g_idx >= 0) & (g_idx < n)).all():
        raise Mismatch(f"{path}: indices out of range [0, {n}): {g_idx.min().item()}..{g_idx.max().item()}")
    if values is None:  # argsort: the indices must sort the input
        values = torch.sort(x, dim=d, descending=bool(args.get("descending", False))).values
    picked = x.gather(d, g_idx)
    wrong = ~_same_values(picked, values)
    if wrong.any():
        raise Mismatch(f"{path}: {int(wrong.sum())} of {wrong.numel()} indices do not pick the returned value "
                       f"out of the input")
    if args.get("stable") is True:
        defined = torch.ones_like(g_idx, dtype=torch.bool)
    else:  # how often each picked value occurs in its slice: once means its index is defined
        xs = _order_key(x).movedim(d, -1).contiguous().sort(dim=-1).values
        v = _order_key(values).movedim(d, -1).contiguous()
        count = torch.searchsorted(xs, v, right=True) - torch.searchsorted(xs, v, right=False)
        defined = (count == 1).movedim(-1, d)
    differ = defined & (g_idx != w_idx)
    if differ.any():
        raise Mismatch(f"{path}: {int(differ.sum())} indices of values without ties differ from the CPU's "
                       f"(of {int(defined.sum())} defined)")


def _stat_reference(name, sample) -> dict | None:
    """What the statistics outputs are under the non-CPU convention when the CPU returned empty ones
    (batch norm in eval mode): the running mean and 1 / sqrt(running_var + eps), in the computation
    dtype (float32 for 16-bit inputs), as PyTorch's reference decomposition returns them for devices
    other than the CPU. Computed on the CPU from the sample's own running statistics."""
    if name in ("native_batch_norm", "_native_batch_norm_legit") and len(sample.args) == 7 \
            and sample.args[4] is False and isinstance(sample.args[2], torch.Tensor):
        rm, rv, eps = sample.args[2].detach(), sample.args[3].detach(), sample.args[6]
        acc = torch.float32 if rm.dtype in LOW_PRECISION else rm.dtype
        return {1: rm.to(acc), 2: 1 / torch.sqrt(rv.to(acc) + eps)}
    return None


def _compare_result(name, got, want, sample, tol):
    mode, _ = _compare_mode(name)
    if mode == "shape":
        compare(got, want, shape_only=True, **tol)
        return
    if name in TIES_UNSPECIFIED:
        _check_tie_indices(name, got, want, sample, tol)
        return
    if name in STAT_OUTPUTS and isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)) \
            and len(got) == len(want):
        for i, (g, w) in enumerate(zip(got, want)):
            if i in STAT_OUTPUTS[name] and isinstance(g, torch.Tensor) and isinstance(w, torch.Tensor):
                if w.numel() == 0 and g.numel() != 0:  # CPU eval mode: empty; other devices: running stats
                    ref = (_stat_reference(name, sample) or {}).get(i)
                    if ref is None:
                        raise Mismatch(f"output[{i}]: the CPU returned an empty statistic, neuron one of shape "
                                       f"{tuple(g.shape)}, and no other convention is known for this sample")
                    # the computation dtype, or the input's (then rounded like it)
                    compare(g, ref.to(g.dtype) if g.dtype in LOW_PRECISION else ref,
                            path=f"output[{i}] (eval mode: vs the running statistics)", **tol)
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


# ----------------------------------------------------------------------------------------------
# Random entries: their distributions
#
# A random entry's samples are compared by shape and dtype only (the device draws from its own
# generator); what its values must be is checked here, once per entry and dtype (float32, bfloat16):
# one large draw on the device from inputs of our own, in the entry's calling convention, against
# closed-form values or against the CPU's own draws: the support, mean and variance (within 6
# standard errors, the variance's estimated from the draw's fourth moment), and a Kolmogorov-Smirnov
# statistic against the CDF (continuous; bfloat16 draws are discrete, so against the CPU's bfloat16
# draws with the two-sample statistic) or the frequencies (discrete). The KS threshold is the 0.1%
# critical value 1.95/sqrt(n) rather than 1% (1.63/sqrt(n)): the draws are seeded, so a result is
# reproducible, and an op that returns a constant, ignores a parameter or draws from another
# distribution is far beyond either (tests/test_random_distributions.py checks that every check
# rejects a constant).

DRAWS = 1 << 16
KS_CRIT = 1.95  # sqrt(-ln(0.001 / 2) / 2): the two-sided 0.1% critical value of sqrt(n) * D
SIGMAS = 6.0
DISTRIBUTION_DTYPES = (torch.float32, torch.bfloat16)


def _draw(out, dtype, what) -> torch.Tensor:
    """A device result as float64 on the CPU, after checking that it is a neuron tensor of `dtype`."""
    if not isinstance(out, torch.Tensor):
        raise Mismatch(f"{what}: expected a tensor, got {type(out).__name__}")
    if out.device.type != DEVICE or out.dtype != dtype:
        raise Mismatch(f"{what}: a {out.dtype} tensor on {out.device}, expected {dtype} on {DEVICE}")
    return out.detach().cpu().double()


def _support(ok: torch.Tensor, what, desc):
    bad = int((~ok).sum())
    if bad:
        raise Mismatch(f"{what}: {bad} of {ok.numel()} values outside the support ({desc})")


def _near(got, want, sd, what, quantity, slack=0.0):
    if not abs(got - want) <= SIGMAS * sd + slack:
        raise Mismatch(f"{what}: {quantity} {got:.5g}, expected {want:.5g} (+- {SIGMAS * sd + slack:.3g})")


def _moments(x: torch.Tensor, mean: float, var: float, what):
    x = x.flatten().double()
    n = x.numel()
    m, v = x.mean().item(), x.var().item()
    m4 = ((x - m) ** 4).mean().item()
    _near(m, mean, math.sqrt(var / n), what, "mean")
    _near(v, var, math.sqrt(max(m4 - v * v, 0.0) / n), what, "variance", slack=1e-12)


def _ks(x: torch.Tensor, cdf, what):
    x = x.flatten().double().sort().values
    n = x.numel()
    f = cdf(x)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    d = max((i / n - f).max().item(), (f - (i - 1) / n).max().item())
    if not d <= KS_CRIT / math.sqrt(n):
        raise Mismatch(f"{what}: Kolmogorov-Smirnov statistic against the CDF {d:.4f} > {KS_CRIT / math.sqrt(n):.4f}")


def _ks2(x: torch.Tensor, y: torch.Tensor, what):
    """Two-sample KS statistic: the device's draws against the CPU's."""
    x, y = x.flatten().double().sort().values, y.flatten().double().sort().values
    n, m = x.numel(), y.numel()
    grid = torch.cat([x, y])
    d = (torch.searchsorted(x, grid, right=True) / n - torch.searchsorted(y, grid, right=True) / m).abs().max().item()
    crit = KS_CRIT * math.sqrt((n + m) / (n * m))
    if not d <= crit:
        raise Mismatch(f"{what}: two-sample Kolmogorov-Smirnov statistic against the CPU's draws {d:.4f} > {crit:.4f}")


def _continuous(x, dtype, cdf, cpu_draw, what):
    """KS against the CDF for float32; bfloat16 draws are rounded to a coarse grid, so they are
    compared with the CPU's bfloat16 draws of the same op instead."""
    if dtype == torch.float32:
        _ks(x, cdf, what)
    else:
        _ks2(x, cpu_draw().double(), what)


def _frequencies(x: torch.Tensor, probs: dict, what):
    """Each value's frequency against its probability; values outside `probs` must not occur."""
    x = x.flatten()
    n = x.numel()
    for v, p in probs.items():
        f = (x == v).sum().item() / n
        _near(f, p, math.sqrt(p * (1 - p) / n), what, f"frequency of {v}", slack=1e-12)
    inside = torch.zeros_like(x, dtype=torch.bool)
    for v in probs:
        inside |= x == v
    _support(inside, what, f"values {sorted(probs)}")


def _normal_cdf(x):
    return torch.special.ndtr(x)


def _empty(dtype, device=DEVICE, n=DRAWS):
    return torch.empty(n, dtype=dtype, device=device)


def _standard_normal(draw, cpu_draw, dtype, what):
    """draw() on the device, cpu_draw() on the CPU: tensors that should be N(0, 1)."""
    x = _draw(draw(), dtype, what)
    _support(torch.isfinite(x), what, "finite")
    _moments(x, 0.0, 1.0, what)
    _continuous(x, dtype, _normal_cdf, cpu_draw, what)


def _check_uniform(op, dtype, ref):
    a, b = -2.0, 3.0
    what = "uniform_(-2, 3)"
    x = _draw(op(_empty(dtype), a, b), dtype, what)
    # a bfloat16 draw just below b may round up to it
    _support((x >= a) & ((x < b) if dtype == torch.float32 else (x <= b)), what, "[-2, 3)")
    _moments(x, (a + b) / 2, (b - a) ** 2 / 12, what)
    _continuous(x, dtype, lambda t: ((t - a) / (b - a)).clamp(0, 1), lambda: ref(_empty(dtype, "cpu"), a, b), what)


def _check_normal_tensors(op, dtype, ref):
    # per-element means and standard deviations: z = (x - mean) / std must be N(0, 1)
    what = "normal(mean tensor, std tensor), standardized"
    mean = torch.tensor([-3.0, 4.0], dtype=dtype).repeat(DRAWS // 2)
    std = torch.tensor([0.5, 2.0], dtype=dtype).repeat(DRAWS // 2)
    z = (_draw(op(mean.to(DEVICE), std.to(DEVICE)), dtype, what) - mean.double()) / std.double()
    _support(torch.isfinite(z), what, "finite")
    _moments(z, 0.0, 1.0, what)
    _continuous(z, dtype, _normal_cdf, lambda: (ref(mean, std).double() - mean.double()) / std.double(), what)


def _check_normal_in_place(op, dtype, ref):
    what = "normal_(1.5, 2)"
    x = _draw(op(_empty(dtype), 1.5, 2.0), dtype, what)
    _moments(x, 1.5, 4.0, what)
    _continuous(x, dtype, lambda t: _normal_cdf((t - 1.5) / 2), lambda: ref(_empty(dtype, "cpu"), 1.5, 2.0), what)


def _check_normal_number_mean(op, dtype, ref):
    what = "normal(1.5, 2, size)"
    x = _draw(op(2.0, 1.5, (DRAWS,), dtype=dtype, device=DEVICE), dtype, what)
    _moments(x, 1.5, 4.0, what)
    _continuous(x, dtype, lambda t: _normal_cdf((t - 1.5) / 2),
                lambda: ref(2.0, 1.5, (DRAWS,), dtype=dtype, device="cpu"), what)


def _check_exponential(op, dtype, ref):
    lam = 1.5
    what = "exponential_(1.5)"
    x = _draw(op(_empty(dtype), lam), dtype, what)
    _support((x >= 0) & torch.isfinite(x), what, "[0, inf)")
    _moments(x, 1 / lam, 1 / lam ** 2, what)
    _continuous(x, dtype, lambda t: 1 - torch.exp(-lam * t.clamp(min=0)), lambda: ref(_empty(dtype, "cpu"), lam), what)


def _check_geometric(op, dtype, ref):
    p = 0.3
    what = "geometric_(0.3)"
    x = _draw(op(_empty(dtype), p), dtype, what)
    _support((x >= 1) & (x == x.round()), what, "integers >= 1")
    _moments(x, 1 / p, (1 - p) / p ** 2, what)
    n = x.numel()
    for k in range(1, 20):  # the pmf where it is not tiny, and the CDF (a discrete KS bound)
        pk = (1 - p) ** (k - 1) * p
        _near((x == k).sum().item() / n, pk, math.sqrt(pk * (1 - pk) / n), what, f"frequency of {k}")
    ks = torch.arange(1, int(x.max().item()) + 1, dtype=torch.float64)
    ecdf = torch.searchsorted(x.sort().values, ks, right=True) / n
    d = (ecdf - (1 - (1 - p) ** ks)).abs().max().item()
    if not d <= KS_CRIT / math.sqrt(n):
        raise Mismatch(f"{what}: largest CDF difference {d:.4f} > {KS_CRIT / math.sqrt(n):.4f}")


def _check_cauchy(op, dtype, ref):
    m, g = -1.0, 2.0
    what = "cauchy_(-1, 2)"
    x = _draw(op(_empty(dtype), m, g), dtype, what)
    _support(~torch.isnan(x), what, "not NaN")
    n = x.numel()
    # no mean or variance: the median and the quartiles (m -+ g), with their standard errors
    # sqrt(q (1 - q) / n) / density(quantile)
    for q, want in ((0.25, m - g), (0.5, m), (0.75, m + g)):
        density = 1 / (math.pi * g * (1 + ((want - m) / g) ** 2))
        _near(torch.quantile(x, q).item(), want, math.sqrt(q * (1 - q) / n) / density, what, f"{q:g} quantile")
    _continuous(x, dtype, lambda t: 0.5 + torch.atan((t - m) / g) / math.pi,
                lambda: ref(_empty(dtype, "cpu"), m, g), what)


def _check_log_normal(op, dtype, ref):
    mu, s = 0.5, 0.5
    what = "log_normal_(0.5, 0.5)"
    x = _draw(op(_empty(dtype), mu, s), dtype, what)
    _support((x > 0) & torch.isfinite(x), what, "(0, inf)")
    y = torch.log(x)  # normal(mu, s)
    _moments(y, mu, s * s, what + ", log")
    _continuous(y, dtype, lambda t: _normal_cdf((t - mu) / s),
                lambda: torch.log(ref(_empty(dtype, "cpu"), mu, s).double()), what + ", log")


def _check_bernoulli(op, dtype, ref):
    what = "bernoulli(p tensor)"
    ps = torch.tensor([0.0, 0.2, 0.5, 0.9, 1.0], dtype=dtype)
    p = ps.repeat(DRAWS // 5)
    x = _draw(op(p.to(DEVICE)), dtype, what)
    _support((x == 0) | (x == 1), what, "{0, 1}")
    for pv in ps.double().tolist():  # the probability as rounded to the dtype
        group = x[p.double() == pv]
        _near(group.mean().item(), pv, math.sqrt(pv * (1 - pv) / group.numel()), what, f"mean where p = {pv:g}",
              slack=1e-12)


def _check_multinomial(op, dtype, ref):
    w = torch.tensor([1.0, 2.0, 0.0, 3.0, 4.0], dtype=dtype)
    p = (w.double() / w.double().sum()).tolist()
    what = "multinomial(w, n, replacement=True)"
    out = op(w.to(DEVICE), DRAWS, True)
    x = _draw(out, torch.int64, what)
    _frequencies(x, {j: pj for j, pj in enumerate(p) if pj > 0}, what)
    # without replacement: distinct categories in each row; the first draw has probabilities p, the
    # second sum_i p_i p_j / (1 - p_i) over i != j
    rows = DRAWS // 8
    what = "multinomial(w rows, 3, replacement=False)"
    x = _draw(op(w.repeat(rows, 1).to(DEVICE), 3, False), torch.int64, what)
    if x.shape != (rows, 3):
        raise Mismatch(f"{what}: shape {tuple(x.shape)}")
    xs = x.sort(dim=1).values
    _support((xs[:, 1:] != xs[:, :-1]).all(dim=1), what, "distinct categories in a row")
    _frequencies(x[:, 0], {j: pj for j, pj in enumerate(p) if pj > 0}, what + ", first draw")
    second = {j: sum(p[i] * p[j] / (1 - p[i]) for i in range(len(p)) if i != j) for j in range(len(p)) if p[j] > 0}
    _frequencies(x[:, 1], second, what + ", second draw")


def _check_integers(x, low, high, what):
    _support((x >= low) & (x < high) & (x == x.round()), what, f"integers in [{low}, {high})")
    _frequencies(x, {v: 1 / (high - low) for v in range(low, high)}, what)


def _check_randint(op, dtype, ref):
    what = f"randint(3, 13, size, dtype={dtype})"
    _check_integers(_draw(op(3, 13, (DRAWS,), device=DEVICE, dtype=dtype), dtype, what), 3, 13, what)
    what = "randint(3, 13, size)"
    _check_integers(_draw(op(3, 13, (DRAWS,), device=DEVICE), torch.int64, what), 3, 13, what)


def _check_randint_like(op, dtype, ref):
    what = "randint_like(x, 3, 13)"
    _check_integers(_draw(op(_empty(dtype), 3, 13), dtype, what), 3, 13, what)


def _check_randn(op, dtype, ref):
    _standard_normal(lambda: op((DRAWS,), dtype=dtype, device=DEVICE), lambda: ref((DRAWS,), dtype=dtype, device="cpu"),
                     dtype, "randn(size)")


def _check_randn_like(op, dtype, ref):
    # (op_db's rand_like entry calls torch.randn_like: it is checked as what it runs)
    _standard_normal(lambda: op(_empty(dtype)), lambda: ref(_empty(dtype, "cpu")), dtype, "randn_like(x)")


def _scaled_close(y, want, dtype):
    """y == want up to one rounding of the dtype (the device may scale by 1 / (1 - p) or divide)."""
    rtol = 1e-6 if dtype == torch.float32 else 8e-3
    return (y - want).abs() <= rtol * want.abs()


def _check_dropout_like(op, dtype, shape, what):
    """Dropout of a whole trailing block (`shape`'s last dims after the first two, or elements): each
    block is zeroed (with probability p) or scaled by 1 / (1 - p); eval mode and p = 0 are the input."""
    p = 0.3
    x = (1 + torch.arange(math.prod(shape)) % 7).to(dtype).reshape(shape)
    y = _draw(op(x.to(DEVICE), p=p, training=True), dtype, what)
    if y.shape != x.shape:
        raise Mismatch(f"{what}: shape {tuple(y.shape)}, expected {tuple(x.shape)}")
    blocks = y.reshape(-1, math.prod(shape[2:]) if len(shape) > 2 else 1)
    scaled = (x.double() / (1 - p)).reshape(blocks.shape)
    zero = (blocks == 0).all(dim=1)
    kept = _scaled_close(blocks, scaled, dtype).all(dim=1)
    _support(zero | kept, what, "each block zero or the input / (1 - p)")
    n = zero.numel()
    _near(zero.double().mean().item(), p, math.sqrt(p * (1 - p) / n), what, "fraction dropped")
    for kwargs in (dict(p=p, training=False), dict(p=0.0, training=True)):
        same = _draw(op(x.to(DEVICE), **kwargs), dtype, what)
        if not torch.equal(same, x.double()):
            raise Mismatch(f"{what} with {kwargs}: not the input")


def _check_dropout(op, dtype, ref):
    _check_dropout_like(op, dtype, (DRAWS,), "dropout(x, 0.3)")


def _check_dropout2d(op, dtype, ref):
    _check_dropout_like(op, dtype, (256, 64, 2, 2), "dropout2d(x, 0.3)")


def _check_dropout3d(op, dtype, ref):
    _check_dropout_like(op, dtype, (128, 64, 2, 2, 2), "dropout3d(x, 0.3)")


# SELU's saturation value -scale * alpha: alpha dropout sets dropped elements to it, then applies the
# affine map a * x + b that restores zero mean and unit variance (Klambauer et al., 2017)
_SELU_SATURATION = -1.0507009873554805 * 1.6732632423543772


def _check_alpha_dropout_like(op, dtype, shape, what):
    p = 0.3
    x = torch.randn(shape, generator=gen(0), dtype=torch.float64)
    x = ((x - x.mean()) / x.std()).to(dtype)
    y = _draw(op(x.to(DEVICE), p=p, training=True), dtype, what)
    if y.shape != x.shape:
        raise Mismatch(f"{what}: shape {tuple(y.shape)}, expected {tuple(x.shape)}")
    a = ((1 - p) * (1 + p * _SELU_SATURATION ** 2)) ** -0.5
    b = -a * _SELU_SATURATION * p
    per = math.prod(shape[2:]) if len(shape) > 2 else 1
    blocks, xb = y.reshape(-1, per), x.double().reshape(-1, per)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    dropped = ((blocks - (a * _SELU_SATURATION + b)).abs() <= tol).all(dim=1)
    kept = ((blocks - (a * xb + b)).abs() <= tol * (1 + xb.abs())).all(dim=1)
    _support(dropped | kept, what, "each block a * x + b or the dropped value a * alpha' + b")
    n = dropped.numel()
    _near(dropped.double().mean().item(), p, math.sqrt(p * (1 - p) / n), what, "fraction dropped")
    if len(shape) == 1:  # independent elements: the output keeps mean 0 and variance 1
        _moments(y, 0.0, 1.0, what)
    same = _draw(op(x.to(DEVICE), p=p, training=False), dtype, what)
    if not torch.equal(same, x.double()):
        raise Mismatch(f"{what} in eval mode: not the input")


def _check_alpha_dropout(op, dtype, ref):
    _check_alpha_dropout_like(op, dtype, (DRAWS,), "alpha_dropout(x, 0.3)")


def _check_feature_alpha_dropout(op, dtype, ref):
    _check_alpha_dropout_like(op, dtype, (256, 64, 2, 2), "feature_alpha_dropout(x, 0.3)")


def _check_rrelu(op, dtype, ref):
    lo, hi = 0.1, 0.3
    what = "rrelu(x, 0.1, 0.3, training=True)"
    x = torch.randn(DRAWS, generator=gen(0), dtype=torch.float64)
    x = torch.where(x.abs() < 1e-2, 1.0, x).to(dtype)  # slopes y / x well defined
    y = _draw(op(x.to(DEVICE), lower=lo, upper=hi, training=True), dtype, what)
    xd = x.double()
    pos = xd >= 0
    if not torch.equal(y[pos], xd[pos]):
        raise Mismatch(f"{what}: non-negative inputs changed")
    slopes = y[~pos] / xd[~pos]
    tol = 1e-6 if dtype == torch.float32 else 8e-3 * hi
    _support((slopes >= lo - tol) & (slopes <= hi + tol), what, "slopes in [lower, upper]")
    _moments(slopes, (lo + hi) / 2, (hi - lo) ** 2 / 12, what + ", slopes")

    def cpu_slopes():
        yc = ref(x, lower=lo, upper=hi, training=True).double()
        return yc[~pos] / xd[~pos]

    _continuous(slopes, dtype, lambda t: ((t - lo) / (hi - lo)).clamp(0, 1), cpu_slopes, what + ", slopes")
    what = "rrelu(x, 0.1, 0.3, training=False)"
    y = op(x.to(DEVICE), lower=lo, upper=hi, training=False)
    compare(y, ref(x, lower=lo, upper=hi, training=False), path=what, **tolerance("nn.functional.rrelu", dtype))


def _check_fractional_max_pool(op, dtype, ref, nsp, grid):
    """Each output plane must be what the CPU computes for some pooling-window draw u (one per spatial
    dim, uniform in [0, 1)): the CPU's outputs for a grid of u values are the catalog (values and
    indices; the plane's values are distinct, so the indices are defined), and the device's planes,
    all of the same input, must each be in it with the catalog's frequencies (6 standard errors plus
    the grid's resolution). With the draws given (_random_samples), the device must equal the CPU."""
    what = f"fractional_max_pool{nsp}d(x, 3, output_size=3)"
    size = (6,) * nsp  # output 3 per dim from windows of 3: two window sequences per dim
    plane = (torch.randperm(6 ** nsp, generator=gen(0)) + 1).to(dtype).reshape(size)  # distinct, exact
    u = (torch.arange(grid, dtype=torch.float64) + 0.5) / grid
    us = torch.cartesian_prod(*([u] * nsp)).reshape(-1, nsp)
    m = us.shape[0]
    samples = us.to(dtype).reshape(1, m, nsp)  # (the op wants them in the input's dtype)
    kw = dict(output_size=3, return_indices=True)
    cpu_x = plane.expand(1, m, *size).contiguous()
    c_out, c_idx = ref(cpu_x, 3, _random_samples=samples, **kw)
    g_out, g_idx = op(cpu_x.to(DEVICE), 3, _random_samples=samples.to(DEVICE), **kw)
    compare((g_out, g_idx), (c_out, c_idx), path=what + " with _random_samples")
    catalog = collections.Counter()
    indices = {}
    for v, i in zip(c_out.reshape(m, -1).tolist(), c_idx.reshape(m, -1).tolist()):
        catalog[tuple(v)] += 1 / m
        indices[tuple(v)] = tuple(i)
    planes = 4096
    out, idx = op(plane.expand(4, planes // 4, *size).contiguous().to(DEVICE), 3, **kw)
    out, idx = _draw(out, dtype, what), _draw(idx, torch.int64, what).long()
    seen = collections.Counter()
    for v, i in zip(out.reshape(planes, -1).tolist(), idx.reshape(planes, -1).tolist()):
        v = tuple(v)
        if v not in catalog:
            raise Mismatch(f"{what}: an output plane that no pooling-window draw gives: {v}")
        if tuple(i) != indices[v]:
            raise Mismatch(f"{what}: indices {tuple(i)} of a plane, expected {indices[v]}")
        seen[v] += 1
    for v, pv in catalog.items():
        _near(seen[v] / planes, pv, math.sqrt(pv * (1 - pv) / planes), what, "frequency of a window sequence",
              slack=2 * nsp / grid)


def _check_fractional_max_pool2d(op, dtype, ref):
    _check_fractional_max_pool(op, dtype, ref, 2, 128)


def _check_fractional_max_pool3d(op, dtype, ref):
    _check_fractional_max_pool(op, dtype, ref, 3, 24)


def _check_lowrank(op, dtype, pca):
    """svd_lowrank / pca_lowrank of an exactly low-rank matrix (a @ b.mT, rank 3): with q >= 3 the
    random projection loses nothing, so U diag(S) V^T reconstructs the (centered) matrix and S are
    its singular values (the CPU's svdvals), within float32 rounding; U and V are orthonormal."""
    g = gen(0)
    a = torch.randn(64, 3, generator=g, dtype=dtype)
    b = torch.randn(48, 3, generator=g, dtype=dtype)
    full = a @ b.mT
    for center in ((True, False) if pca else (None,)):
        want = full - full.mean(dim=0, keepdim=True) if center else full
        scale = want.abs().max().item()
        for q in (3, 5):
            what = f"{'pca' if pca else 'svd'}_lowrank(a @ b.mT, q={q}{f', center={center}' if pca else ''})"
            out = op(a.to(DEVICE), b.to(DEVICE), q=q, **(dict(center=center) if pca else {}))
            if not (isinstance(out, (tuple, list)) and len(out) == 3):
                raise Mismatch(f"{what}: expected (U, S, V)")
            u, s, v = (_draw(t, dtype, what) for t in out)
            recon = u @ torch.diag_embed(s) @ v.mT
            compare(recon.to(dtype), want, rtol=1e-4, atol=1e-4 * scale, path=what + ": U S V^T", check_device=False)
            sv = torch.linalg.svdvals(want.double())[:q]
            compare(s.to(dtype), sv.to(dtype), rtol=1e-4, atol=1e-4 * scale, path=what + ": S", check_device=False)
            for name, w in (("U", u), ("V", v)):
                compare((w.mT @ w).to(dtype), torch.eye(q, dtype=dtype), atol=1e-4, rtol=0,
                        path=f"{what}: {name}^T {name}", check_device=False)


RANDOM_CHECKS = {
    "bernoulli": _check_bernoulli,
    "normal": _check_normal_tensors,
    "normal.in_place": _check_normal_in_place,
    "normal.number_mean": _check_normal_number_mean,
    "uniform": _check_uniform,
    "exponential": _check_exponential,
    "geometric": _check_geometric,
    "cauchy": _check_cauchy,
    "log_normal": _check_log_normal,
    "multinomial": _check_multinomial,
    "randint": _check_randint,
    "randn": _check_randn,
    "rand_like": _check_randn_like,
    "randn_like": _check_randn_like,
    "randint_like": _check_randint_like,
    "nn.functional.dropout": _check_dropout,
    "nn.functional.dropout2d": _check_dropout2d,
    "nn.functional.dropout3d": _check_dropout3d,
    "nn.functional.alpha_dropout": _check_alpha_dropout,
    "nn.functional.feature_alpha_dropout.with_train": _check_feature_alpha_dropout,
    "nn.functional.rrelu": _check_rrelu,
    "nn.functional.fractional_max_pool2d": _check_fractional_max_pool2d,
    "nn.functional.fractional_max_pool3d": _check_fractional_max_pool3d,
    "svd_lowrank": lambda op, dtype, ref: _check_lowrank(op, dtype, pca=False),
    "pca_lowrank": lambda op, dtype, ref: _check_lowrank(op, dtype, pca=True),
}


def check_distribution(op, dtype, name=None) -> None:
    """Raise Mismatch unless the draws of `op` on the device have the distribution of the random
    entry `name` (default: op's entry name; see above). The CPU draws it is compared with come from
    the op_db entry itself, never from `op` (which may be a compiled or a deliberately broken one)."""
    name = name or entry_name(op)
    ref = entries_by_name()[name]
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        RANDOM_CHECKS[name](op, dtype, ref)


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
    cpu_op = getattr(op, "reference_on_cpu", op)
    try:
        with _alarm(timeout_s), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for sample in sample_list(op, dtype, max_samples):
                try:
                    cpu_op(sample.input, *sample.args, **sample.kwargs)
                    return True
                except Exception:  # noqa: BLE001
                    continue
    except (Exception, _Timeout):  # noqa: BLE001
        pass
    return False


def _device_fallbacks() -> dict:
    """CPU fallbacks since the last clear: those that ran and those TORCH_NEURONX_CPU_FALLBACK=error
    refused (a refusal is an exception on the device that must not pass for its own answer)."""
    c = collections.Counter(torch_neuronx.get_fallback_ops())
    c.update(torch_neuronx.metrics.get_refused_fallbacks())
    return dict(c)


def _expect_rejection(op, dev_input, dev_args, dev_kwargs, cpu_error: Exception) -> None:
    """A sample the CPU rejects: neuron must reject it too, with an exception of the same type."""
    try:
        torch.manual_seed(0)
        got = op(dev_input, *dev_args, **dev_kwargs)
        for t in _tensors(got):  # an error raised when the result is read counts as a rejection too
            t.cpu()
    except _Timeout:
        raise
    except Exception as e:  # noqa: BLE001
        if type(e) is not type(cpu_error):
            raise Mismatch(f"the CPU raised {_first_line(cpu_error)}; neuron raised another type: "
                           f"{_first_line(e)}") from None
        return
    raise Mismatch(f"the CPU raised {_first_line(cpu_error)}; neuron returned a result")


REJECTED_REASON = "every sample is one the CPU rejects, and neuron rejects each with the same exception type"


def run_entry(op, dtype: torch.dtype, *, max_samples: int = DEFAULT_MAX_SAMPLES,
              timeout_s: float = DEFAULT_TIMEOUT_S, apply_lists: bool = True) -> Result:
    """Run the entry's samples for `dtype` on the CPU and on neuron; classify (see the module doc).

    `op` is called with the neuron copies of each sample; the CPU reference is `op.reference_on_cpu`
    where the op has one (an op whose neuron calls differ, e.g. compiled), else `op` itself."""
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
    cpu_op = getattr(op, "reference_on_cpu", op)
    tol = tolerance(name, dtype)
    fallbacks: collections.Counter = collections.Counter()
    error = None
    random_samples = 0
    by_reference = 0  # low-precision samples accepted by the float32 reference
    rejected = 0  # samples the CPU rejects that neuron rejects too
    stage = "building the samples"
    try:
        with _alarm(timeout_s), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            samples = sample_list(op, dtype, max_samples)
            for k, sample in enumerate(samples):
                stage = f"sample {k}"
                # neuron copies first: the CPU run may modify the sample in place
                if name in CPU_ARGS:
                    dev_input, dev_args, dev_kwargs = (to_device(sample.input), _clone(sample.args),
                                                       _clone(sample.kwargs))
                else:
                    dev_input, dev_args, dev_kwargs = to_device((sample.input, sample.args, sample.kwargs))
                cpu_input, cpu_args, cpu_kwargs = sample.input, sample.args, sample.kwargs
                pristine = _upcast((sample.input, sample.args, sample.kwargs)) if dtype in LOW_PRECISION else None
                cpu_error = None
                try:
                    torch.manual_seed(0)
                    want = sample.output_process_fn_grad(cpu_op(cpu_input, *cpu_args, **cpu_kwargs))
                except Exception as e:  # noqa: BLE001
                    cpu_error = e
                torch_neuronx.clear_op_tracking()
                try:
                    if cpu_error is not None:
                        res.samples_cpu_error += 1
                        _expect_rejection(op, dev_input, dev_args, dev_kwargs, cpu_error)
                        used = _device_fallbacks()
                        if used:  # the device's error was a fallback's (or its refusal): not its own answer
                            fallbacks.update(used)
                            raise Mismatch(f"rejected via a CPU fallback: {', '.join(sorted(used))}")
                        rejected += 1
                        continue
                    res.has_samples = True
                    torch.manual_seed(0)
                    got = op(dev_input, *dev_args, **dev_kwargs)
                    fallbacks.update(_device_fallbacks())
                    # what PyTorch's own device-vs-CPU test (test_compare_cpu) does too: the sample's
                    # post-processing removes what is not well defined (e.g. the signs of eigenvectors)
                    got = sample.output_process_fn_grad(got)
                    warm_cache.record(got)
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
                                ref = sample.output_process_fn_grad(cpu_op(pristine[0], *pristine[1], **pristine[2]))
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
                    fallbacks.update(_device_fallbacks())
                    error = _first_line(e) if not isinstance(e, Mismatch) else f"Mismatch: sample {k}: {e}"[:300]
                    break
                if timeout_s and time.perf_counter() - start > timeout_s:
                    raise _Timeout(f"timeout: over {timeout_s:g} s")
            if error is None and res.has_samples and name in RANDOM_CHECKS and dtype in DISTRIBUTION_DTYPES:
                stage = "the distribution check"
                torch_neuronx.clear_op_tracking()
                try:
                    check_distribution(op, dtype, name)
                except Exception as e:  # noqa: BLE001
                    error = f"Mismatch: distribution: {e}"[:300] if isinstance(e, Mismatch) else _first_line(e)
                fallbacks.update(_device_fallbacks())
    except _Timeout as e:  # a timeout is a failure: whatever ran so long is a bug or hides one
        res.status, res.reason = "fail", f"{e} (in {stage})"
        res.has_samples = True  # counted against the coverage metric, not left out of it
        res.seconds = time.perf_counter() - start
        res.fallback_ops = dict(fallbacks)
        return _apply_xfail(res, name, dtype, apply_lists)
    except Exception as e:  # noqa: BLE001  (building or preparing the samples failed)
        what = "sample generator raised" if stage == "building the samples" else f"preparing {stage} raised"
        res.status, res.reason = "fail", f"{what}: {_first_line(e)}"
        res.has_samples = True
        res.seconds = time.perf_counter() - start
        return _apply_xfail(res, name, dtype, apply_lists)
    finally:
        torch_neuronx.clear_op_tracking()
    res.seconds = time.perf_counter() - start
    res.fallback_ops = dict(fallbacks)
    if error is not None:
        res.status, res.reason = "fail", error
    elif fallbacks:
        res.status = "fallback"
    elif not res.has_samples:
        if rejected:
            res.status, res.reason = "rejected", REJECTED_REASON
        else:
            res.status, res.reason = "skip", "no samples"
    elif mode_reason:
        res.reason = f"compared {mode}: {mode_reason}"
    elif random_samples:
        res.reason = f"{random_samples} sample(s) compared by shape: {RANDOM_SAMPLES[name][1]}"
    if res.status == "pass" and name in RANDOM_CHECKS and dtype in DISTRIBUTION_DTYPES:
        res.reason = f"{res.reason}; distribution checked" if res.reason else "distribution checked"
    if res.status == "pass" and by_reference:
        note = f"{by_reference} sample(s) accepted by the float32 reference (no worse than the CPU)"
        res.reason = f"{res.reason}; {note}" if res.reason else note
    if res.status == "pass" and rejected:
        note = f"{rejected} sample(s) the CPU rejects rejected by neuron too"
        res.reason = f"{res.reason}; {note}" if res.reason else note
    if res.status == "pass" and name in STAT_OUTPUTS and not res.reason:
        res.reason = STAT_OUTPUTS_REASON
    return _apply_xfail(res, name, dtype, apply_lists)


def _apply_xfail(res: Result, name, dtype, apply_lists) -> Result:
    if apply_lists:
        xr = xfail_reason(name, dtype)
        if xr:
            if res.status in ("fail", "fallback"):
                res.status, res.reason = "xfail", f"{xr} (got: {res.line()})"
            elif res.status in ("pass", "rejected"):
                res.status, res.reason = "xpass", f"expected to fail: {xr}"
    return res


# ----------------------------------------------------------------------------------------------
# Memory mappings
#
# Every executable the device compiles keeps memory mappings (about 6 per signature), and the kernel
# allows a process vm.max_map_count of them (65530): one pytest process running the OpInfo tests
# after the rest of the suite could reach it. Past half of that, the compile caches are dropped
# (whatever is needed again recompiles). The OpInfo test files call this after each test.

MAPS_GUARD = 32768
_guard_calls = [0]


def map_count() -> int:
    try:
        with open("/proc/self/maps", "rb") as f:
            return f.read().count(b"\n")
    except OSError:  # not Linux: no such limit to watch
        return 0


def bound_memory_maps(every: int = 20) -> None:
    """Every `every` calls: drop the device's compile caches if the process is past MAPS_GUARD."""
    _guard_calls[0] += 1
    if _guard_calls[0] % every or map_count() <= MAPS_GUARD:
        return
    import gc

    import jax

    import torch_neuronx.compile
    from torch_neuronx.eager import executor

    executor.clear_cache()
    torch_neuronx.compile.clear_cache()
    jax.clear_caches()
    gc.collect()


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


STATUSES = ("pass", "rejected", "fallback", "fail", "skip", "xfail", "xpass")


def failure_kind(r: Result) -> str:
    """What kind of failure a failed result is (for the report's counts)."""
    if r.reason.startswith("timeout"):
        return "timeout"
    if r.reason.startswith("sample generator raised"):
        return "sample generator error"
    if r.reason.startswith("crashed") or r.reason.startswith("hung"):
        return "crashed or hung"
    if "the CPU raised" in r.reason:
        return "does not reject what the CPU rejects"
    if r.reason.startswith("Mismatch"):
        return "mismatch"
    return "error on neuron"


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
        "failures_by_kind": dict(collections.Counter(failure_kind(r) for r in results if r.status == "fail")),
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
    rows = [("dtype", "entries", "w/ samples", "passed", "both reject", "fell back", "failed", "skipped", "xfail",
             "xpass", "pass %")]
    for d in order:
        c = s["by_dtype"].get(d)
        if not c:
            continue
        ws = c.get("with_samples", 0)
        pct = f"{100.0 * (c.get('pass', 0) + c.get('xpass', 0)) / ws:.1f}" if ws else "-"
        rows.append((d, str(c["entries"]), str(ws), str(c.get("pass", 0)), str(c.get("rejected", 0)),
                     str(c.get("fallback", 0)),
                     str(c.get("fail", 0)), str(c.get("skip", 0)), str(c.get("xfail", 0)), str(c.get("xpass", 0)), pct))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.append("")
    lines.append(
        f"float32 target: {s['float32_pass_no_fallback']} of {s['float32_entries_with_samples']} op_db entries with "
        f"float32 samples pass on {DEVICE} with no CPU fallback = {s['float32_pass_pct']:.1f}% (target >= 95%)"
    )
    lines.append("(pass % = passed / entries with samples (samples the CPU runs); 'both reject': every sample is one "
                 "the CPU rejects and neuron rejects each the same way; failed includes timeouts and broken sample "
                 "generators; skips, xfails, fallbacks and failures count as not passing)")

    fails = [r for r in results if r.status == "fail"]
    if fails:
        by_entry: dict[str, list] = {}
        for r in fails:
            by_entry.setdefault(r.name, []).append(r)
        n_order = sum(r.order_dependent for r in fails)
        kinds = collections.Counter(failure_kind(r) for r in fails)
        lines += ["", f"failing: {len(by_entry)} entries, {len(fails)} entry/dtype pairs"
                      + (f" ({n_order} of them order-dependent: they pass in a fresh process)" if n_order else "")
                      + " (" + ", ".join(f"{n} {k}" for k, n in kinds.most_common()) + ")"
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
    skips = collections.Counter(r.reason for r in results if r.status == "skip")
    if skips:
        lines += ["", "skipped, by reason:"] + [f"  {n:4d}  {why}" for why, n in skips.most_common()]
    return "\n".join(lines)
