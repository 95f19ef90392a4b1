"""`out=` as the CPU: every op_db entry with an `out=` overload, called with out tensors on neuron and on the CPU.

For each OpInfo entry that supports `out=` (`op_db`, `supports_out`) and a sample of it, the op is called
with out tensors that are

    right   of the result's dtype and shape
    dtype   of another dtype, one output at a time: for the first output float64 and int64 (the full
            sweep adds bfloat16, bool and complex64), for each other one int32 or float64
    shape   of the result's dtype but a wrong non-empty shape (the CPU resizes it, most kernels with a
            UserWarning)
    empty   of the result's dtype and no elements (the CPU resizes it quietly)

on the CPU and on neuron copies of the sample, and neuron's OUTCOME is compared with the CPU's: the
same exception type with a neuron message that contains the CPU's (neuron's names the op first), or
the same returned tensors (the out tensors themselves), out dtypes, shapes and contiguity, the same
values (an out tensor of a wider dtype compared in the dtype the op computes) and the same warnings
(category and message, in order). Nothing here states what an op should do: the CPU says it.

The default test takes one float32 sample of every entry and the dtypes above. The full sweep
(`-m slow`, or `python tests/test_out_variants.py --full [entry ...]`, which prints its figures and
every difference) takes a float32 sample and one of an integer or bool dtype the entry supports, and
every dtype. Entries whose out= call neuron does not run on the device (NOT_ON_DEVICE: a CPU fallback,
refused under the test policy; the test fails when that list changes) are left out, and so are entries
whose out= the CPU rejects even with the right tensors (OpInfo passes `out=` as a tuple where the op
takes outs by name). What still differs is listed with its reason (KNOWN_DIFFERENCES), and must go on
differing. A few out= calls are also compiled (`torch.compile(backend="neuron")`) and compared with the
CPU's compiled function (`backend="eager"`, which runs the CPU's kernels): COMPILED_CASES.
"""
from __future__ import annotations

import os
import re
import sys
import time
import warnings

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, os.path.dirname(__file__))

import pytest  # noqa: E402
import torch  # noqa: E402

import opinfo_support as S  # noqa: E402
import torch_neuronx  # noqa: E402

# the first output's other dtypes: a wider dtype of the float category and one of a lower category (the
# full sweep adds a narrower float, bool and a complex dtype)
DTYPES = (torch.float64, torch.int64)
FULL_DTYPES = (torch.float64, torch.bfloat16, torch.int64, torch.bool, torch.complex64)
INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.uint8, torch.bool)

# entries whose out= overload neuron runs on the CPU (no lowering of it): left out, and expected to stay so
# until one comes (the test fails when one of them runs on the device, or another entry does not)
NOT_ON_DEVICE = {
    "masked_select": "aten.masked_select.out: its result's size depends on the values (only the functional "
                     "overload has a neuron kernel, eager/dynamic.py)",
    "nonzero": "aten.nonzero.out: its result's size depends on the values (only the functional overload has a "
               "neuron kernel)",
    "linalg.eigvals": "aten.linalg_eigvals.out has no lowering",
    "_native_batch_norm_legit": "aten._native_batch_norm_legit.out has no lowering",
}

# what still differs from the CPU, (entry, case) -> why; the test fails when one of them matches (prune it)
KNOWN_DIFFERENCES = {
    ("linalg.eig", "empty"): "the eigenvectors out tensor, resized from empty, is contiguous where the CPU's is "
                             "column-major: PyTorch's meta kernel of linalg_eig gives its eigenvectors contiguous "
                             "strides (the CPU's kernel returns them column-major), and neuron takes the strides of "
                             "an op's result from its meta kernel",
}

_TRIGGERED = re.compile(r"\s*\(Triggered internally at .*?\)\s*$", re.S)


def entries():
    return [op for op in S.op_db() if op.supports_out and not S.skip_reason(S.entry_name(op), torch.float32)]


def _dtypes(op, full):
    supported = op.supported_dtypes("cpu")
    found = [d for d in (torch.float32,) if d in supported]
    if full:
        found += [d for d in INT_DTYPES if d in supported][:1]
    return found


def _flat(result):
    """The result's tensors as a list (None when it holds anything else: no out= form to build)."""
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)) and result and all(isinstance(t, torch.Tensor) for t in result):
        return list(result)
    return None


def _wrong_shape(shape):
    """A wrong non-empty shape with no more elements than `shape` (resized, its storage is the right
    one's size: the right case's executable serves it)."""
    return (1,) if tuple(shape) != (1,) else ()


def cases(want, full=False):
    """(case name, [(dtype, shape) per out tensor]) for a CPU result `want` (a list of tensors)."""
    right = [(t.dtype, tuple(t.shape)) for t in want]
    found = [("right", right)]
    for i, (dtype, shape) in enumerate(right):
        others = (FULL_DTYPES if full else DTYPES) if i == 0 else (
            (torch.int32,) if dtype == torch.int64 else (torch.float64 if dtype != torch.float64 else torch.float32,))
        for other in others:
            if other != dtype:
                wrong = list(right)
                wrong[i] = (other, shape)
                found.append((f"dtype out{i}={str(other).removeprefix('torch.')}", wrong))
    found.append(("shape", [(d, _wrong_shape(s)) for d, s in right]))
    found.append(("empty", [(d, (0,)) for d, _s in right]))
    return found


def _call(op, sample_args, outs, single, seed):
    """(what the call returned or raised, its warnings); the out tensors are read, and an error raised
    then counts as the call's. (Each call is its own fused run: the right, wrong-shape and empty cases
    are one op of one signature, whose run's executable they share.)"""
    x, args, kwargs = sample_args
    out = outs[0] if single else tuple(outs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if seed:
                torch.manual_seed(0)
            ret = op(x, *args, out=out, **kwargs)
            for t in outs:
                t.cpu()
        except Exception as e:  # noqa: BLE001
            ret = e
    seen = [(w.category.__name__, _TRIGGERED.sub("", str(w.message))) for w in caught]
    return ret, seen


def _message(e):
    return _TRIGGERED.sub("", str(e)).strip()


def _as(t, dtype):
    """`t` in the dtype the op computes (the real part of a complex out tensor holding a real result)."""
    if t.dtype == dtype:
        return t
    return (t.real if t.is_complex() and not dtype.is_complex else t).to(dtype)


def compare_outcome(name, sample, sample_dtype, results, cpu, dev, cpu_outs, dev_outs, single):
    """None when neuron's outcome is the CPU's, else what differs. `results`: the dtypes of the op's
    own results (those of the out tensors of the right dtype)."""
    (want, want_warnings), (got, got_warnings) = cpu, dev
    if isinstance(want, Exception) or isinstance(got, Exception):
        if not isinstance(want, Exception):
            return f"the CPU returned, neuron raised {S._first_line(got)}"
        if not isinstance(got, Exception):
            return f"the CPU raised {S._first_line(want)}, neuron returned"
        if type(got) is not type(want) or _message(want) not in _message(got):
            return f"the CPU raised {S._first_line(want)}, neuron {S._first_line(got)}"
        return None
    if want is not None or got is not None:  # (an op with a Tensor[] out= returns nothing)
        returned = [want] if single else list(want) if isinstance(want, (tuple, list)) else None
        got_returned = [got] if single else list(got) if isinstance(got, (tuple, list)) else None
        if returned is None or got_returned is None or len(returned) != len(got_returned):
            return f"returned {type(got).__name__}, the CPU {type(want).__name__}"
        for i, (r, o, gr, go) in enumerate(zip(returned, cpu_outs, got_returned, dev_outs)):
            if (r is o) != (gr is go):
                return (f"out{i} {'is' if gr is go else 'is not'} the returned tensor, on the CPU "
                        f"{'it is' if r is o else 'not'}")
    for i, (w, g) in enumerate(zip(cpu_outs, dev_outs)):
        if (g.dtype, g.shape, g.is_contiguous()) != (w.dtype, w.shape, w.is_contiguous()):
            return (f"out{i}: {g.dtype} {tuple(g.shape)} contiguous={g.is_contiguous()}, on the CPU "
                    f"{w.dtype} {tuple(w.shape)} contiguous={w.is_contiguous()}")
    # an out tensor of another dtype holds what the op computes in its own (`results`): compared there;
    # the sample's post-processing removes what is not well defined (the signs of eigenvectors), as in
    # PyTorch's own device-vs-CPU test
    got_values = [_as(g, r) for g, r in zip(dev_outs, results)]
    want_values = [_as(w, r) for w, r in zip(cpu_outs, results)]
    process = sample.output_process_fn_grad
    try:
        S._compare_result(name, process(got_values[0] if single else tuple(got_values)),
                          process(want_values[0] if single else tuple(want_values)), sample,
                          S.tolerance(name, sample_dtype))
    except S.Mismatch as e:
        return f"values: {e}"[:300]
    if got_warnings != want_warnings:
        return f"warnings {got_warnings}, on the CPU {want_warnings}"[:2000]
    return None


class Figures:
    def __init__(self):
        self.entries = set()  # entries checked
        self.calls = 0
        self.matched = 0
        self.differences = []  # (entry, dtype, case, what)
        self.not_on_device = {}  # entry -> the ops that ran on the CPU (or were refused)
        self.no_samples = []  # (entry, dtype) without a sample the CPU runs
        self.no_out_form = []  # (entry, dtype) whose out= as OpInfo passes it the CPU rejects even right
        self.seconds = 0.0


def _fallbacks():
    return sorted({**torch_neuronx.get_fallback_ops(), **torch_neuronx.metrics.get_refused_fallbacks()})


def _samples(op, dtype, most=8):
    """The entry's samples for `dtype`, drawn with a fixed seed, one at a time (as many as are used)."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = iter(op.sample_inputs("cpu", dtype, requires_grad=False))
    for _ in range(most):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sample = next(samples, None)
        if sample is None:
            return
        yield sample


def sweep_entry(op, dtype, figures, full=False):
    """One sample of the entry for `dtype` (the first the CPU runs without out=), every case."""
    name = S.entry_name(op)
    seed = name in S.RANDOM_OPS
    for sample in _samples(op, dtype):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.manual_seed(0)
                result = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001  (a sample the CPU rejects: no out= form to check)
            continue
        want = _flat(result)
        if want is not None:
            break
    else:
        figures.no_samples.append((name, dtype))
        return
    single = isinstance(result, torch.Tensor)
    results = [t.dtype for t in want]
    operands = (sample.input, sample.args, sample.kwargs)
    # a first call on the CPU: out= as OpInfo passes it must be one the op takes, and warnings PyTorch
    # gives once per process (deprecations) are given now
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = _call(op, S._clone(operands), [torch.empty_like(t) for t in want], single, seed)[0]
    if isinstance(first, Exception):
        figures.no_out_form.append((name, dtype))
        return
    cpu_args, dev_args = S._clone(operands), S.to_device(operands)  # shared by the cases (out= reads them)
    calls = []
    torch_neuronx.clear_op_tracking()
    for case, outs in cases(want, full):
        cpu_outs = [torch.empty(s, dtype=d) for d, s in outs]
        dev_outs = [torch.empty(s, dtype=d, device=S.DEVICE) for d, s in outs]
        cpu = _call(op, cpu_args, cpu_outs, single, seed)
        dev = _call(op, dev_args, dev_outs, single, seed)
        calls.append((case, cpu, dev, cpu_outs, dev_outs))
    used = _fallbacks()
    torch_neuronx.clear_op_tracking()
    if used:
        figures.not_on_device[name] = used
        return
    figures.entries.add(name)
    for case, cpu, dev, cpu_outs, dev_outs in calls:
        figures.calls += 1
        what = compare_outcome(name, sample, dtype, results, cpu, dev, cpu_outs, dev_outs, single)
        if what is None:
            figures.matched += 1
        else:
            figures.differences.append((name, str(dtype).removeprefix("torch."), case, what))


def run_sweep(ops=None, full=False, progress=False) -> Figures:
    figures = Figures()
    start = time.perf_counter()
    for op in entries() if ops is None else ops:
        for dtype in _dtypes(op, full):
            t = time.perf_counter()
            sweep_entry(op, dtype, figures, full)
            if progress:
                print(f"{S.entry_name(op)} {dtype}: {time.perf_counter() - t:.2f}s", file=sys.stderr, flush=True)
        S.bound_memory_maps()
    figures.seconds = time.perf_counter() - start
    return figures


def report(f: Figures) -> str:
    lines = [f"{len(f.entries)} entries, {f.calls} calls checked: {f.matched} matched the CPU, "
             f"{f.calls - f.matched} differ ({f.seconds:.1f} s)",
             f"{len(f.not_on_device)} entries not run on the device (CPU fallback): "
             + ", ".join(f"{k} ({', '.join(v)})" for k, v in sorted(f.not_on_device.items())),
             f"{len(f.no_samples)} (entry, dtype) pairs without a sample the CPU runs: "
             + ", ".join(f"{n} [{str(d).removeprefix('torch.')}]" for n, d in f.no_samples),
             f"{len(f.no_out_form)} (entry, dtype) pairs whose out= (as OpInfo passes it) the CPU rejects even "
             "with the right tensors: " + ", ".join(sorted({n for n, _d in f.no_out_form}))]
    lines += [f"  {n} [{d}] {c}: {w}" for n, d, c, w in f.differences]
    return "\n".join(lines)


def _check(figures: Figures):
    differing = {(name, case) for name, _dtype, case, _what in figures.differences}
    unexpected = [d for d in figures.differences if (d[0], d[2]) not in KNOWN_DIFFERENCES]
    assert not unexpected, report(figures)
    assert differing == set(KNOWN_DIFFERENCES), f"known differences that now match (prune them): " \
                                                f"{set(KNOWN_DIFFERENCES) - differing}"
    assert set(figures.not_on_device) == set(NOT_ON_DEVICE), report(figures)
    assert figures.calls > 0


@pytest.fixture
def shallow_samples(monkeypatch):
    """OpInfo's sample generators look for the unittest test calling them in `inspect.stack()` (for
    sample-specific skips, which these tests do not use): under pytest's deep stack that reads the
    source of every frame, most of the sweep's time. Nothing is found either way."""
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core

    monkeypatch.setattr(common_utils, "extract_test_fn", lambda: None)
    monkeypatch.setattr(core, "extract_test_fn", lambda: None)


def test_out_variants_as_the_cpu(shallow_samples):
    """Every op_db entry with out=: one float32 sample, the default cases (see the module doc)."""
    figures = run_sweep()
    print(report(figures))
    _check(figures)


@pytest.mark.slow
def test_out_variants_as_the_cpu_full(shallow_samples):
    """Every op_db entry with out=: float32 and an integer or bool dtype, every case."""
    figures = run_sweep(full=True)
    print(report(figures))
    _check(figures)


def test_resize_warning_is_the_cpus():
    """A resized non-empty out tensor warns with the CPU's words (PyTorch's Python out= wrapper leaves
    the required shape unformatted), once per out tensor; an empty one is resized quietly."""
    for device in ("cpu", S.DEVICE):
        x = torch.arange(6.0, device=device).reshape(2, 3)
        values = torch.empty(4, device=device)
        indices = torch.empty(0, dtype=torch.int64, device=device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.sort(x, out=(values, indices))
        messages = [_TRIGGERED.sub("", str(w.message)) for w in caught]
        assert messages == ["An output with one or more elements was resized since it had shape [4], which does not "
                            "match the required output shape [2, 3]. This behavior is deprecated, and in a future "
                            "PyTorch release outputs will not be resized unless they have zero elements. You can "
                            "explicitly reuse an out tensor t by resizing it, inplace, to zero elements with "
                            "t.resize_(0)."], (device, messages)
        assert values.shape == indices.shape == (2, 3)


def test_neg_out_of_another_dtype_raises_as_the_cpu():
    """The issue's case: neg into a float64 out tensor casts nothing, as on the CPU."""
    for device in ("cpu", S.DEVICE):
        with pytest.raises(RuntimeError, match="Found dtype Double but expected Float"):
            torch.neg(torch.randn(3, device=device), out=torch.empty(3, dtype=torch.float64, device=device))


def _compiled_outcome(fn, device, backend, make):
    torch._dynamo.reset()
    args = [m().to(device) for m in make]
    try:
        torch.compile(fn, backend=backend)(*args)
    except Exception as e:  # noqa: BLE001
        return e, args
    return None, [a.cpu() for a in args]


COMPILED_CASES = {
    "neg into float64": (lambda x, o: torch.neg(x, out=o), lambda: torch.randn(3),
                         lambda: torch.empty(3, dtype=torch.float64)),
    "sort values into float64": (lambda x, v, i: torch.sort(x, out=(v, i)), lambda: torch.randn(5),
                                 lambda: torch.empty(5, dtype=torch.float64),
                                 lambda: torch.empty(5, dtype=torch.int64)),
    "index_select into float64": (lambda x, i, o: torch.index_select(x, 0, i, out=o), lambda: torch.randn(3),
                                  lambda: torch.tensor([0, 2]), lambda: torch.empty(2, dtype=torch.float64)),
    "sum into int64": (lambda x, o: torch.sum(x, 0, out=o), lambda: torch.randn(4, 3) * 3,
                       lambda: torch.empty(3, dtype=torch.int64)),
    "sin into float64, resized": (lambda x, o: torch.sin(x, out=o), lambda: torch.randn(3),
                                  lambda: torch.empty(0, dtype=torch.float64)),
}


@pytest.mark.parametrize("case", list(COMPILED_CASES))
def test_compiled_out_as_the_cpus(case):
    """A compiled function's out= calls as the CPU's compiled function (backend="eager", its kernels) runs
    them: the same error, or the same out tensors (a sum into an int64 out computes in int64)."""
    fn, *make = COMPILED_CASES[case]
    torch.manual_seed(0)
    want_error, want = _compiled_outcome(fn, "cpu", "eager", make)
    torch.manual_seed(0)
    got_error, got = _compiled_outcome(fn, S.DEVICE, "neuron", make)
    if want_error is not None or got_error is not None:
        assert want_error is not None and got_error is not None, (want_error, got_error)
        assert type(got_error) is type(want_error) and _message(want_error) in _message(got_error), (want_error,
                                                                                                      got_error)
        return
    for w, g in zip(want, got):
        assert (g.dtype, g.shape) == (w.dtype, w.shape)
        torch.testing.assert_close(g, w)


if __name__ == "__main__":
    os.environ["TORCH_NEURONX_CPU_FALLBACK"] = "error"
    wanted = [a for a in sys.argv[1:] if not a.startswith("-")]
    ops = [op for op in entries() if not wanted or S.entry_name(op) in wanted]
    print(report(run_sweep(ops, full="--full" in sys.argv, progress="--progress" in sys.argv)))
