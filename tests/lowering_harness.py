"""Runs one lowering the way the executor does (jitted, tensors and Scalars as traced inputs) on
CPU tensors converted to jax arrays, and compares it with the same ATen op run by PyTorch on the CPU.
For testing the lowering table on its own; the device tests go through the real `neuron` device.

The comparison is of the lowering's own results: no cast first. The executor (eager and compiled)
casts each result to the meta kernel's dtype, which would hide a lowering that computes the wrong
dtype; the lowerings must give PyTorch's dtype themselves (DTYPE_EXCEPTIONS lists where PyTorch's
CPU kernel and its meta kernel disagree, and why the lowering follows meta there).

In tests/test_lowerings_*.py, check_lowering also runs the op on the `neuron` device: each test that
calls it runs twice (tests/conftest.py's `lowering_mode` fixture), in eager mode (the lowering check
above, then the op through the dispatcher on neuron copies of the inputs) and in compiled mode (the
test's calls as one graph compiled by the neuron backend), both compared with the CPU at the test's
tolerance. Where a device path cannot match the CPU today because of a product bug, KNOWN_BUGS says
so, and the test is an xfail(strict=True) while it lasts."""
from __future__ import annotations

import functools

import numpy as np
import torch

import warm_cache
from torch_neuronx.runtime.lazy_jax import jax, jnp
from torch_neuronx.ops import LOWERINGS, normalize
from torch_neuronx.ops.dtypes import to_numpy_dtype, to_torch_dtype

aten = torch.ops.aten

# (op, output index) -> reason. PyTorch's CPU kernel and its meta kernel (which sizes and types the
# device's outputs: the executor allocates what meta says) give different dtypes here, so the device
# cannot match the CPU's dtype. The lowering must give meta's dtype; its values are compared after
# rounding to the CPU's dtype (the statistics convention tests/opinfo_support.py's STAT_OUTPUTS allows).
_BN_STATS = ("batch norm statistics (save_mean, save_invstd) of a 16-bit input without float32 running stats: "
             "the CPU kernel returns them in the input's dtype, meta (like CUDA and PyTorch's reference "
             "decomposition) in float32, the dtype they are computed in")
_LN_STATS = ("layer norm statistics (mean, rstd) of a 16-bit input with 16-bit (or no) weights: the CPU kernel "
             "returns them in the input's dtype, meta (and the CPU itself when the weights are float32) in "
             "float32, the dtype they are computed in")
DTYPE_EXCEPTIONS = {
    (aten._native_batch_norm_legit.no_stats, 1): _BN_STATS,
    (aten._native_batch_norm_legit.no_stats, 2): _BN_STATS,
    (aten.native_layer_norm.default, 1): _LN_STATS,
    (aten.native_layer_norm.default, 2): _LN_STATS,
}


def to_jax(t: torch.Tensor):
    t = t.detach().contiguous()
    if t.dtype in (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2):
        view = {1: torch.uint8, 2: torch.int16}[t.element_size()]
        return jnp.asarray(t.view(view).numpy().view(to_numpy_dtype(t.dtype)))
    return jnp.asarray(t.numpy())


def to_torch(a) -> torch.Tensor | None:
    if a is None:  # a lowering's undefined output (a gradient masked off)
        return None
    a = np.asarray(a)
    dtype = to_torch_dtype(a.dtype)
    if dtype in (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2):
        view = {1: np.uint8, 2: np.int16}[a.dtype.itemsize]
        return torch.from_numpy(a.view(view).copy()).view(dtype)
    return torch.from_numpy(a.copy())


def run_lowering(op, *args, key_seed: int = 0, **kwargs):
    """The lowering of `op` on these CPU arguments, as torch CPU tensors (a tuple for several outputs)."""
    with warm_cache.harness_compiles():  # the lowering jitted alone: the harness's compiles, not the product's
        return _run_lowering(op, args, kwargs, key_seed)


def _run_lowering(op, args, kwargs, key_seed):
    lowering = LOWERINGS[op]
    values = normalize(op, args, kwargs)
    schema = op._schema.arguments
    dynamic, slots = [], []
    for i, (a, v) in enumerate(zip(schema, values)):
        kind = str(a.type)
        if isinstance(v, torch.Tensor):
            slots.append(("dyn", len(dynamic))); dynamic.append(to_jax(v))
        elif isinstance(v, (list, tuple)) and v and all(isinstance(x, torch.Tensor) for x in v):
            slots.append(("dynlist", len(dynamic), len(v))); dynamic.extend(to_jax(x) for x in v)
        elif "Generator" in kind:
            # a jax key passed by the caller is used as given; else one made from key_seed
            slots.append(("key",) if v is None or isinstance(v, torch.Generator) else ("static", v))
        elif kind.startswith("Scalar") and v is not None and a.name not in lowering.static:
            slots.append(("dyn", len(dynamic))); dynamic.append(v)
        else:
            slots.append(("static", v))

    def call(*dyn):
        full = []
        for s in slots:
            if s[0] == "dyn":
                full.append(dyn[s[1]])
            elif s[0] == "dynlist":
                full.append(list(dyn[s[1]: s[1] + s[2]]))
            elif s[0] == "key":
                full.append(jax.random.key(key_seed))
            else:
                full.append(s[1])
        if lowering.rng:
            full.append(jax.random.key(key_seed))
        return lowering.fn(*full)

    out = jax.jit(call)(*dynamic)
    if isinstance(out, (tuple, list)):
        return tuple(to_torch(o) for o in out)
    return to_torch(out)


def _meta_dtypes(op, args, kwargs):
    def meta(x):
        if isinstance(x, torch.Tensor):
            return torch.empty_like(x, device="meta")
        if isinstance(x, (list, tuple)):
            return type(x)(meta(v) for v in x)
        return x

    out = op(*meta(args), **{k: meta(v) for k, v in kwargs.items()})
    return [o.dtype if isinstance(o, torch.Tensor) else None for o in (out if isinstance(out, (tuple, list)) else (out,))]


def assert_same_dtype(op, index, got, expected, meta_dtype=None):
    """The lowering's own dtype is PyTorch's (or meta's, for a listed exception)."""
    want = expected.dtype
    if (op, index) in DTYPE_EXCEPTIONS and meta_dtype is not None:
        want = meta_dtype
    assert got.dtype == want, f"{op} output {index}: the lowering gives {got.dtype}, PyTorch {want}"


def check_lowering(op, *args, atol=None, rtol=None, family=None, skip_modes=None, **kwargs):
    """Assert the lowering matches PyTorch's CPU result for `op(*args, **kwargs)`: the same dtype (the
    lowering's own, not cast), shape and values: within atol/rtol if given, else within the
    tests/tolerances.py entry `family` for each output's dtype, else torch's defaults.

    Under the `lowering_mode` fixture (tests/conftest.py: every test of tests/test_lowerings_*.py that calls
    this runs once per mode), the op is also checked on the `neuron` device, at the same tolerance:
    - eager: the lowering on its own as above, then the ATen op on neuron copies of the inputs
      (through the dispatcher), which must have run on the device (`get_executed_ops` counts it);
    - compiled: the op as a node of a graph compiled by the neuron backend (`neuron_backend`:
      AOTAutograd, then GraphProgram), one graph for all the calls of a test (see `flush_compiled`).
    Each device compile costs as much as the lowering check, so by default a mode checks the calls of a
    test that differ in what the device path depends on (see `_device_check_due`); pytest
    --lowering-calls=all checks every call in both modes.
    skip_modes: {mode: reason} where this call cannot be checked in a mode (the reason is reported
    in the test summary; a test whose every call is skipped in a mode shows as skipped)."""
    mode = _begin_call(op, skip_modes)
    if mode is _SKIPPED:
        return
    on_device = mode in MODES and _device_check_due(mode, op, args, kwargs)
    device_args = _device_copies((args, kwargs), op) if on_device else None  # before an in-place op runs
    expected = op(*args, **kwargs)
    exp_list = _flat_outputs(expected)
    metas = _meta_dtypes(op, args, kwargs) if any((op, i) in DTYPE_EXCEPTIONS for i in range(len(exp_list))) else None
    if mode in (None, "eager"):
        got = run_lowering(op, *args, **kwargs)
        got_list = got if isinstance(got, tuple) else (got,)
        assert len(exp_list) == len(got_list), f"{op}: {len(got_list)} outputs, expected {len(exp_list)}"
        for i, (e, g) in enumerate(zip(exp_list, got_list)):
            assert g is not None, f"{op} output {i}: the lowering returned None, PyTorch a tensor"
            assert tuple(g.shape) == tuple(e.shape), f"{op} output {i}: shape {tuple(g.shape)} != {tuple(e.shape)}"
            assert_same_dtype(op, i, g, e, metas[i] if metas else None)
            if g.dtype != e.dtype:  # a listed exception: meta's dtype, compared once rounded to the CPU's
                g = g.to(e.dtype)
            torch.testing.assert_close(g, e, equal_nan=True, **tolerance(e, atol, rtol, family))
    if not on_device:
        return
    if mode == "compiled":
        why = not_in_graph(op, device_args)
        if why is not None:
            _state.skipped.append((str(op), why))
            return
    _device_checked(op, args, kwargs)
    if mode == "eager":
        bug = known_bug(mode, op, args, kwargs)
        _expect(bug, _call_site() if bug else None, lambda: _check_eager(op, device_args, exp_list, metas, atol, rtol, family))
    else:
        _state.pending.append(_Pending(op, device_args, [e.clone() for e in exp_list], isinstance(expected, torch.Tensor),
                                       metas, (atol, rtol, family), _call_site(), known_bug(mode, op, args, kwargs)))


# ---- the short helpers the tests/test_lowerings_*.py files share (conftest's lowering_mode detection
# counts a test that calls `chk` as a check_lowering user: chk calls check_lowering; their test data:
# tests/helpers.py's randn, randint)

def chk(op, *args, **kwargs):
    """check_lowering by the tests' short name (torch's default tolerances unless atol/rtol or a family is given)."""
    check_lowering(op, *args, **kwargs)


def dev(fn, *args, must_run, **kwargs):
    """device_harness.check_device, with must_run one op name or a list of them."""
    from device_harness import check_device  # here, not at the top: device_harness imports this module

    return check_device(fn, *args, must_run=[must_run] if isinstance(must_run, str) else must_run, **kwargs)


def _flat_outputs(expected):
    return list(expected) if isinstance(expected, (tuple, list)) else [expected]


def _compare_device(op, mode, i, g, e, meta, atol, rtol, family):
    """One device output against the CPU's: on neuron, PyTorch's dtype (meta's for a listed
    exception: the executor allocates what meta says), the shape, the values at the test's tolerance."""
    assert isinstance(g, torch.Tensor), f"{op} output {i} ({mode}): {type(g).__name__}, PyTorch a tensor"
    warm_cache.record(g)
    assert g.device.type == "neuron", f"{op} output {i} ({mode}): on {g.device}, not on neuron"
    want = meta if (op, i) in DTYPE_EXCEPTIONS and meta is not None else e.dtype
    assert g.dtype == want, f"{op} output {i} ({mode}): dtype {g.dtype}, PyTorch {want}"
    assert tuple(g.shape) == tuple(e.shape), f"{op} output {i} ({mode}): shape {tuple(g.shape)} != {tuple(e.shape)}"
    g = g.cpu()
    if g.dtype != e.dtype:
        g = g.to(e.dtype)
    torch.testing.assert_close(g, e, equal_nan=True, **tolerance(e, atol, rtol, family),
                               msg=lambda m: f"{op} output {i} ({mode} on neuron vs the CPU): {m}")


# ---- the `lowering_mode` fixture's state (tests/conftest.py sets it around each test)

MODES = ("eager", "compiled")
UNPARAMETRIZED = "unparametrized"  # a lowering-file test the lowering_mode fixture did not parametrize
_SKIPPED = object()


class _State:
    def __init__(self):
        self.mode = None  # None outside the lowering files: the lowering on its own, as before the modes
        self.test = None
        self.calls = 0
        self.skipped: list[tuple[str, str]] = []  # (op, reason) of the calls skipped in this mode
        self.pending: list["_Pending"] = []
        self.graphs = 0
        self.bugs_seen: list["KnownBug"] = []  # the KNOWN_BUGS entries this test's calls matched
        self.bug_hits: list[str] = []  # the failures of those calls, as expected
        self.all_calls = False  # pytest --lowering-calls=all: every call on the device, in both modes
        self.structures: set = set()  # the call structures this test checked on the device already
        self.device_checks = 0


_state = _State()


def begin_test(mode, test_id):
    _state.mode, _state.test = mode, test_id
    _state.calls, _state.skipped, _state.pending, _state.graphs = 0, [], [], 0
    _state.bugs_seen, _state.bug_hits = [], []
    _state.structures, _state.device_checks = set(), 0


def end_test():
    begin_test(None, None)


# ---- known product bugs: a device check that fails today, kept visible as an xfail

class KnownBugFailure(AssertionError):
    """The calls of a test that match KNOWN_BUGS failed, as expected: conftest marks such a test
    xfail(strict=True, raises=KnownBugFailure), so it is reported xfailed while the bug lasts, fails
    once the calls pass (XPASS strict: remove the entry), and fails for any other error."""


class KnownBug:
    """A device check of `op` in `mode` that fails today because of a product bug (recorded here, not
    fixed by the tests). when(args, kwargs) narrows it to some calls (default: every call of op)."""

    def __init__(self, mode, op, reason, when=None):
        assert mode in MODES, mode
        self.mode, self.op, self.reason, self.when = mode, op, reason, when

    def __repr__(self):
        return f"KnownBug({self.mode}, {self.op})"


def _dtype_is(*dtypes):
    """when= for KnownBug: the first tensor argument has one of these dtypes."""
    def when(args, kwargs):
        first = _first_tensor(args, kwargs)
        return first is not None and first.dtype in dtypes

    return when


def _first_tensor(args, kwargs):
    import torch.utils._pytree as pytree

    return next((t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)), None)


def _resize_scale_ignored(args, kwargs, twice: bool, align_corners_arg: bool) -> bool:
    """upsample_*2d(x, output_size, [align_corners,] scales_h, scales_w): a spatial dim whose output size
    equals the input's (or twice it, for nearest) while a scale is given (not under align_corners):
    the CPU kernel special-cases those sizes and ignores the scale."""
    x, size = args[0], list(args[1])
    rest = list(args[2:])
    if align_corners_arg:
        if rest and rest[0]:
            return False
        rest = rest[1:]
    scales = (rest + [None, None])[:2]
    ins = list(x.shape[-2:])
    return any(s is not None and (o == i or (twice and o == 2 * i)) for o, i, s in zip(size, ins, scales))


def _interp_decomposition_differs(args, kwargs) -> bool:
    x = args[0]
    return (x.dtype in (torch.bfloat16, torch.float16, torch.uint8)
            or _resize_scale_ignored(args, kwargs, False, True)
            or (x.is_floating_point() and not bool(torch.isfinite(x).all())))


_AOT_DECOMPOSES = ("compiled mode never reaches the neuron lowering of this op: AOTAutograd runs PyTorch's Python "
                   "decomposition of it (torch._decomp, registered with py_impl on the Autograd key, which "
                   "AOTAutograd's Python dispatcher runs whatever the backend's decomposition table holds), and "
                   "that decomposition differs from the CPU kernel (which the lowering and eager mode match): ")
_MATH_SILU_BACKWARD = ("silu_backward is CompositeImplicitAutograd for every backend but CPU/CUDA, so the neuron "
                       "lowering is never reached (eager: the dispatcher decomposes it; compiled: AOTAutograd does): "
                       "PyTorch's math_silu_backward runs sigmoid, mul, add in the 16-bit dtype, rounding each step, "
                       "while the CPU kernel computes in float32 and rounds once: bfloat16 off by up to 8% relative "
                       "(abs 4.9e-4) on 3 of 45 elements")

KNOWN_BUGS: list[KnownBug] = [
    KnownBug("eager", aten.silu_backward.default, _MATH_SILU_BACKWARD, when=_dtype_is(torch.bfloat16, torch.float16)),
    KnownBug("compiled", aten.silu_backward.default, _MATH_SILU_BACKWARD, when=_dtype_is(torch.bfloat16, torch.float16)),
    KnownBug("compiled", aten.upsample_nearest2d.default, _AOT_DECOMPOSES +
             "with a scale given where the output size equals the input size or twice it, the CPU kernel ignores "
             "the scale and the decomposition uses it: other source pixels (abs error 182 on 40% of the elements)",
             when=lambda args, kwargs: _resize_scale_ignored(args, kwargs, True, False)),
    KnownBug("compiled", aten.upsample_bilinear2d.default, _AOT_DECOMPOSES +
             "uint8 (the CPU's fixed-point weights: off by 1), bfloat16 (the generic kernel's bfloat16 weights: "
             "abs 7.8e-3), a scale given where the output size equals the input's (the CPU ignores it: abs 1.4), "
             "and non-finite inputs (NaN spreads to outputs that give the inf/NaN pixel zero weight)",
             when=_interp_decomposition_differs),
    KnownBug("compiled", aten.upsample_bicubic2d.default, _AOT_DECOMPOSES +
             "uint8 (the CPU's fixed-point weights: off by 1) and bfloat16 (rounding of the weights and sums: "
             "abs up to 6.7e-3)", when=_dtype_is(torch.bfloat16, torch.float16, torch.uint8)),
]


def known_bug(mode, op, args, kwargs) -> KnownBug | None:
    for bug in KNOWN_BUGS:
        if bug.mode == mode and bug.op == op and (bug.when is None or bug.when(args, kwargs)):
            return bug
    return None


def _expect(bug, site, check):
    """Run `check`; for a call that matches a known bug, its failure is recorded (not raised)."""
    if bug is None:
        return check()
    if bug not in _state.bugs_seen:
        _state.bugs_seen.append(bug)
    try:
        check()
    except Exception as e:  # noqa: BLE001 (a known bug may be an error as well as a mismatch)
        _state.bug_hits.append(f"{site}: {bug.op} ({bug.mode}): {type(e).__name__}: {_short(e, 400)}")


def known_bugs_of_test():
    """(reason for the test's xfail marker, the failures seen) when the test ran calls listed in
    KNOWN_BUGS, else None."""
    if not _state.bugs_seen:
        return None
    reason = "known bug: " + " | ".join(f"{b.op} ({b.mode}): {b.reason}" for b in _state.bugs_seen)
    return reason, list(_state.bug_hits)


def _begin_call(op, skip_modes):
    mode = _state.mode
    if mode == UNPARAMETRIZED:
        raise RuntimeError(
            f"check_lowering({op}) in {_state.test}, which the lowering_mode fixture did not parametrize: tests/conftest.py "
            f"finds the tests that call check_lowering by their source (directly, or through a function or "
            f"fixture of their module); call it through such a function so that the test runs in both modes")
    if skip_modes:
        unknown = set(skip_modes) - set(MODES)
        assert not unknown, f"skip_modes: unknown modes {sorted(unknown)} (the modes are {MODES})"
        assert all(isinstance(r, str) and r for r in skip_modes.values()), "skip_modes: each mode needs its reason"
    _state.calls += 1
    if mode in MODES and skip_modes and mode in skip_modes:
        _state.skipped.append((str(op), skip_modes[mode]))
        return _SKIPPED
    return mode


def _device_check_due(mode, op, args, kwargs) -> bool:
    """Whether this call is checked on the device in `mode`: every call with --lowering-calls=all;
    by default the first call of the test with its structure (`_structure`: what the executor's and
    the graph's handling of a call depends on besides the lowering, which the eager variant checks on
    every call by itself), and every call of an op whose device path is not its lowering (eager:
    `eager_path`; compiled: `compiled_path`), whose results can depend on the values as the
    lowering's do."""
    if _state.all_calls or (eager_path(op) if mode == "eager" else compiled_path(op)) is not None:
        return True
    return _structure(op, args, kwargs) not in _state.structures


def _structure(op, args, kwargs):
    """The op and, per tensor argument, its dtype and whether it is 0-d, empty or non-contiguous."""
    import torch.utils._pytree as pytree

    return (op, tuple((t.dtype, t.dim() == 0, t.numel() == 0, t.is_contiguous())
                      for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)))


def _device_checked(op, args, kwargs):
    _state.structures.add(_structure(op, args, kwargs))
    _state.device_checks += 1


@functools.cache
def compiled_path(op) -> str | None:
    """Why a graph does not run `op` through its lowering (None when it does): AOTAutograd decomposes
    it first (CompositeImplicitAutograd, a Python decomposition registered on the Autograd key, or an
    entry of the backend's decomposition table)."""
    from torch._C import DispatchKey

    if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"):
        return "CompositeImplicitAutograd"
    if DispatchKey.Autograd in op.py_kernels or DispatchKey.CompositeImplicitAutograd in op.py_kernels:
        return "PyTorch's Python decomposition (py_impl), which AOTAutograd's Python dispatcher runs"
    from torch_neuronx.ops.decompositions import decomposition_table

    if op in decomposition_table():
        return "the backend's decomposition table"
    return None


def _call_site() -> str:
    """file:line of the test code that called check_lowering (for a compiled check's deferred report)."""
    import sys

    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename == __file__:
        f = f.f_back
    here = f
    while f is not None and not f.f_code.co_name.startswith("test_"):
        f = f.f_back
    import os

    site = f"{os.path.basename(here.f_code.co_filename)}:{here.f_lineno}" if here is not None else "?"
    if f is not None and f is not here:
        site += f" (from {f.f_code.co_name}, line {f.f_lineno})"
    return site


# ---- neuron copies of the arguments

def _device_copies(tree, op):
    """The arguments with every tensor copied to neuron (one copy per distinct tensor: an argument passed
    twice stays one tensor). A non-contiguous view stays that view of its base's copy. A factory (an op
    with a `device` argument) is asked for neuron."""
    memo = {}

    def move(x):
        if isinstance(x, torch.Tensor):
            if id(x) not in memo:
                memo[id(x)] = _to_neuron(x)
            return memo[id(x)]
        if isinstance(x, (list, tuple)):
            return type(x)(move(v) for v in x)
        return x

    args, kwargs = tree
    args, kwargs = move(list(args)), {k: move(v) for k, v in kwargs.items()}
    names = [a.name for a in op._schema.arguments]
    if "device" in names:
        i = names.index("device")
        if i < len(args) and not op._schema.arguments[i].kwarg_only:
            args[i] = torch.device("neuron")
        else:
            kwargs["device"] = torch.device("neuron")
    return tuple(args), kwargs


def _to_neuron(x: torch.Tensor) -> torch.Tensor:
    base = x._base
    x = x.detach()
    if not x.is_contiguous() and base is not None and base.is_contiguous() and base.storage_offset() == 0:
        view = base.detach().to("neuron").as_strided(tuple(x.shape), tuple(x.stride()), x.storage_offset())
        if x.is_conj():
            view = view.conj()
        if x.is_neg():
            view = view._neg_view()
        return view
    return x.to("neuron")


# ---- eager: the op on the device, through the dispatcher

# Ops whose eager path on neuron is a backend kernel of their own that launches other device ops, so
# the op itself is never counted as executed: op -> what runs instead. (Checked: the values, some device
# op ran, nothing fell back.)
EAGER_RUNS_AS = {
    aten._histogramdd_bin_edges.default: "a Tensor[] result, which the executor cannot return: the backend's kernel "
                                         "(eager/kernels.py) launches histogram.bin_ct once per dimension",
}


@functools.cache
def eager_path(op) -> str | None:
    """Why `op` does not run on neuron as itself in eager mode (None when it does): a view (its result
    is metadata over its input's storage: nothing runs), an op PyTorch's dispatcher decomposes before
    any backend sees it (CompositeImplicitAutograd), or a listed backend kernel (EAGER_RUNS_AS)."""
    if op in EAGER_RUNS_AS:
        return EAGER_RUNS_AS[op]
    if _is_view_op(op):
        return "view"
    if (torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")
            and not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "AutogradPrivateUse1")):
        return "CompositeImplicitAutograd: the dispatcher decomposes it before the backend"
    return None


# Views whose schema does not say so (no alias annotation on the result)
UNANNOTATED_VIEWS = {aten._unsafe_view.default}


def _is_view_op(op) -> bool:
    return op in UNANNOTATED_VIEWS or any(r.alias_info is not None and not r.alias_info.is_write
                                          for r in op._schema.returns)


def _check_eager(op, device_args, exp_list, metas, atol, rtol, family):
    import torch_neuronx
    import torch.utils._pytree as pytree

    name = str(op)
    before = torch_neuronx.get_executed_ops()
    args, kwargs = device_args
    out = op(*args, **kwargs)
    after = torch_neuronx.get_executed_ops()
    got = _flat_outputs(out)
    path = eager_path(op)
    if path is None:
        assert after.get(name, 0) > before.get(name, 0), (
            f"{op} (eager) did not run on the device as itself; ran: {_grown(before, after)}, "
            f"decomposed: {torch_neuronx.metrics.get_decomposed_ops()}")
    else:
        storages = {t.untyped_storage().data_ptr() for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        aliases = all(isinstance(g, torch.Tensor) and g.untyped_storage().data_ptr() in storages for g in got)
        if path == "view":  # a view computes nothing: its result must alias an input's storage
            assert aliases, f"{op} (eager): a view op's result does not alias its input on neuron"
        else:  # it runs as other device ops (nothing fell back: the conftest fixture checks), or returns its input
            assert aliases or _grown(before, after), f"{op} (eager, {path}): no op ran on the device"
    assert len(got) == len(exp_list), f"{op} (eager): {len(got)} outputs, expected {len(exp_list)}"
    for i, (g, e) in enumerate(zip(got, exp_list)):
        _compare_device(op, "eager", i, g, e, metas[i] if metas else None, atol, rtol, family)


def _grown(before, after) -> dict:
    return {k: n - before.get(k, 0) for k, n in after.items() if n > before.get(k, 0)}


# ---- compiled: the test's calls as one graph, compiled by the neuron backend

class _Pending:
    def __init__(self, op, device_args, expected, single, metas, tol, site, bug):
        self.op, self.device_args, self.expected, self.single = op, device_args, expected, single
        self.metas, self.tol, self.site, self.bug = metas, tol, site, bug

    def describe(self) -> str:
        return f"{self.site}: {self.op}"


def not_in_graph(op, device_args) -> str | None:
    """Why this call cannot be a node of a compiled graph (None when it can): an op tagged
    dynamic_output_shape whose result size depends on the values for these arguments (its fake
    kernel raises DynamicOutputShapeException). Dynamo breaks the graph there and the op runs in eager
    mode, which the eager variant checks. (The tag alone is not enough: index.Tensor with integer
    indices has a static size and does go into graphs.)"""
    if torch.Tag.dynamic_output_shape not in op.tags:
        return None
    from torch._subclasses.fake_tensor import DynamicOutputShapeException, FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=False)
    args, kwargs = device_args
    fake = _map_tensors(lambda t: mode.from_tensor(t), (args, kwargs))
    try:
        with mode:
            op(*fake[0], **fake[1])
    except DynamicOutputShapeException:
        return ("data-dependent output shape (Tag.dynamic_output_shape; a graph cannot hold it: Dynamo breaks the "
                "graph and the op runs eagerly, checked in eager mode)")
    return None


def _map_tensors(fn, tree):
    import torch.utils._pytree as pytree

    return pytree.tree_map_only(torch.Tensor, fn, tree)


def _graph_of(pending):
    """An FX graph of torch-level calls, as Dynamo hands it to the backend: one placeholder per distinct
    tensor argument, one call_function node per call, its outputs (getitem for a tuple or list) as the
    graph's flat tuple of outputs."""
    import operator

    import torch.utils._pytree as pytree

    g = torch.fx.Graph()
    inputs, placeholders, outputs = [], {}, []
    for p in pending:
        args, kwargs = p.device_args
        leaves, spec = pytree.tree_flatten((list(args), kwargs))
        nodes = []
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                if id(leaf) not in placeholders:
                    placeholders[id(leaf)] = g.placeholder(f"arg{len(inputs)}")
                    inputs.append(leaf)
                nodes.append(placeholders[id(leaf)])
            else:
                nodes.append(leaf)
        a, k = pytree.tree_unflatten(nodes, spec)
        node = g.call_function(p.op, tuple(a), k)
        if p.single:
            outputs.append(node)
        else:
            outputs.extend(g.call_function(operator.getitem, (node, i)) for i in range(len(p.expected)))
    g.output(tuple(outputs))
    return torch.fx.GraphModule(torch.nn.Module(), g), inputs


def _run_compiled(pending):
    """The calls' outputs (one list per call) from one graph compiled and run by the neuron backend."""
    import torch_neuronx
    from torch_neuronx.compile import neuron_backend

    gm, inputs = _graph_of(pending)
    before = torch_neuronx.metrics.get_dynamo_metrics()
    compiled = neuron_backend(gm, inputs)
    outs = compiled(*inputs)
    after = torch_neuronx.metrics.get_dynamo_metrics()
    ran = {g: n - before["executions"].get(g, 0) for g, n in after["executions"].items()
           if n > before["executions"].get(g, 0)}
    new = after["graphs"][len(before["graphs"]):]
    reused = {g for g, n in after["reused"].items() if n > before["reused"].get(g, 0)}
    reused |= {g for g, n in after["loaded_from_disk"].items() if n > before["loaded_from_disk"].get(g, 0)}
    assert ran, f"compiled: no graph ran on the neuron backend for {[p.describe() for p in pending]}"
    assert new or reused, (f"compiled: graph(s) {sorted(ran)} ran, but none was compiled (nor reused, nor loaded "
                           f"from the disk cache) by the neuron backend")
    fell = sorted({op for g in new for op in g["fallback_ops"]})
    assert not fell, f"compiled: the graph runs {fell} on the host (no lowering)"
    _state.graphs += len(new) + len(reused)
    outs = list(outs)
    assert len(outs) == sum(1 if p.single else len(p.expected) for p in pending), "compiled: output count"
    per_call = []
    for p in pending:
        n = 1 if p.single else len(p.expected)
        per_call.append(outs[:n])
        outs = outs[n:]
    return per_call


def _compare_compiled(p, got):
    for i, (g, e) in enumerate(zip(got, p.expected)):
        _compare_device(p.op, "compiled", i, g, e, p.metas[i] if p.metas else None, *p.tol)


def flush_compiled():
    """Compile and run the pending calls of the test (compiled mode) as one graph and compare each with
    the CPU. If the graph fails as a whole, each call is compiled alone so that the report names every
    call that fails, with its own error. Raises one AssertionError listing the failures."""
    pending, _state.pending = _state.pending, []
    if not pending:
        return
    failures = []

    def check(p, outputs):
        try:
            _expect(p.bug, p.site, lambda: _compare_compiled(p, outputs()))
        except Exception as e:  # noqa: BLE001 (reported below, with the call it belongs to)
            failures.append((p, e))

    try:
        results = _run_compiled(pending)
    except Exception:
        hits = len(_state.bug_hits)
        for p in pending:  # each call alone, so that every failing call is named with its own error
            check(p, lambda: _run_compiled([p])[0])
        if not failures and len(_state.bug_hits) == hits:  # the calls pass alone but not together
            raise
    else:
        for p, got in zip(pending, results):
            check(p, lambda: got)
    if failures:
        lines = [f"compiled mode: {len(failures)} of {len(pending)} check_lowering calls fail on the neuron backend"]
        for p, e in failures:
            lines.append(f"  {p.describe()}: {type(e).__name__}: {_short(e)}")
        raise AssertionError("\n".join(lines)) from failures[0][1]


def _short(e, limit=1500):
    text = str(e).strip()
    return text if len(text) <= limit else text[:limit] + " ..."


def tolerance(expected, atol=None, rtol=None, family=None) -> dict:
    """assert_close's rtol/atol for one output: the explicit ones, else the table entry `family` at the
    output's dtype (its atol_scale applied to `expected`), else torch's defaults (an empty dict)."""
    if atol is not None or rtol is not None:
        return dict(atol=atol, rtol=rtol)
    if family is None:
        return {}
    from tolerances import tol

    return tol(family, expected.dtype, expected)


def compare_outputs(expected, got, family=None, **tol):
    """Outputs of a lowering (None where masked off) against PyTorch's: same dtype (no cast), shape, values
    (within tolerance(...)'s rtol/atol: the explicit ones in tol, else the entry `family`)."""
    assert len(expected) == len(got), (len(expected), len(got))
    for e, g in zip(expected, got):
        if e is None:
            assert g is None
            continue
        assert g is not None and tuple(g.shape) == tuple(e.shape), (None if g is None else g.shape, e.shape)
        torch.testing.assert_close(g, e, equal_nan=True, **tolerance(e, family=family, **tol))
