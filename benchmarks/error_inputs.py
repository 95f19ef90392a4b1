"""PyTorch's OpInfo error inputs on neuron vs the CPU: does neuron reject what the CPU rejects, the same way?

    python benchmarks/error_inputs.py               # every op_db entry with error inputs
    python benchmarks/error_inputs.py --ops mm,conv # entries whose name contains a substring
    python benchmarks/error_inputs.py -v            # also list every entry that does not match
    python benchmarks/error_inputs.py --compiled    # each call in a torch.compile'd function: the CPU's
                                                    # backend "eager" (its kernels) against "neuron"
    python benchmarks/error_inputs.py --in-place    # in-place variants of int64 / bool tensors given the
                                                    # float32 samples' other arguments (see below)

Each OpInfo's `error_inputs(device)` yields ErrorInputs (a sample, the error type and a regex the
message must match). Each one runs on the CPU and on neuron (generated for that device, float32
where the generator takes a dtype); an entry is
  match     neuron raises the CPU's type and its message matches the regex,
  differs   neuron raises another type or a message the regex does not match,
  missing   neuron raises nothing,
  cpu-only  skipped: the CPU itself does not raise what the entry says (not neuron's business),
  generator the entry's error inputs could not be generated for neuron.
Where an entry yields other inputs for neuron than for the CPU (cases written for CUDA), each neuron
input is judged against its own expected error.
Prints one row per op (counts per class) and the totals; each entry runs under a --timeout (s).

`--in-place` makes error inputs of its own, where PyTorch's have few: each entry's in-place variant
called on its first float32 samples with `self` made int64 and bool (a result type that cannot be
written back, dtypes kernels do not take), on the CPU and on neuron; an input is
  match     both raise, the same type, neuron's message containing the CPU's (its first line),
  differs   both raise, otherwise,
  missing   the CPU raises and neuron does not,
  extra     neuron raises and the CPU does not,
  accepted  neither raises (not an error input).

Both devices run under torch's default threading unless `--omp-passive` (the script then runs itself
again with OMP_WAIT_POLICY=PASSIVE, which must be set before torch loads: faster on neuron on a small
machine, slower on the CPU); the summary line says which. Only the classes are the result here; the
seconds are how long the sweep took, not a comparison.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import os
import re
import signal
import sys
import time
import warnings

if "--omp-passive" in sys.argv[1:] and os.environ.get("OMP_WAIT_POLICY") != "PASSIVE":
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})

import torch  # noqa: E402


class EntryTimeout(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds):
    def fire(signum, frame):
        raise EntryTimeout(f"no result in {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _error_inputs(op, device):
    """The entry's error inputs for `device`, or the exception generating them raised."""
    torch.manual_seed(0)
    try:
        return list(op.error_inputs(device)), None
    except Exception as e:  # a generator that does not run on this device
        return [], e


def _run(op, error_input, device, seconds, compiled=False):
    """The exception the sample raises (None: none), its message's first line."""
    si = error_input.sample_input
    call = op
    if compiled:
        torch._dynamo.reset()  # each input traced afresh (past the recompile limit Dynamo runs eagerly)
        call = torch.compile(lambda *a, **k: op(*a, **k), backend="eager" if device == "cpu" else "neuron")
    try:
        with _deadline(seconds):
            result = call(si.input, *si.args, **si.kwargs)
            if device != "cpu":
                torch.neuron.synchronize()
                _touch(result)
    except EntryTimeout:
        raise
    except Exception as e:
        return e
    return None


def _touch(result):
    """Read results back, so an error raised when a value arrives is raised here."""
    if isinstance(result, torch.Tensor):
        result.cpu()
    elif isinstance(result, (tuple, list)):
        for r in result:
            _touch(r)


def _classify(e, error_type, regex):
    if e is None:
        return "missing"
    if isinstance(e, error_type) and re.search(regex, str(e)):
        return "match"
    return "differs"


def _first_line(e):
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ''}"


def _to(x, device):
    if isinstance(x, torch.Tensor):
        return x.detach().to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    return x


_TRIGGERED = re.compile(r"\s*\(Triggered internally at .*?\)\s*$", re.S)


def _in_place_inputs(op):
    """(label, maker(device) of an ErrorInput-like call) per in-place input of the entry (see --in-place)."""
    from torch.testing._internal.opinfo.core import SampleInput

    class Call:
        def __init__(self, sample):
            self.sample_input = sample

    made = []
    for i, sample in enumerate(list(op.sample_inputs("cpu", torch.float32))[:3]):
        if not isinstance(sample.input, torch.Tensor):
            continue
        for dtype in (torch.int64, torch.bool):
            self = sample.input > 0 if dtype == torch.bool else (sample.input * 3).to(dtype)

            def maker(device, self=self, sample=sample):
                return Call(SampleInput(_to(self, device), args=_to(sample.args, device),
                                        kwargs=_to(sample.kwargs, device)))
            made.append((f"sample {i}, self {str(dtype).removeprefix('torch.')}", maker))
    return made


def _in_place_class(cpu_e, e):
    if cpu_e is None:
        return "accepted" if e is None else "extra"
    if e is None:
        return "missing"
    cpu_text = _TRIGGERED.sub("", str(cpu_e)).strip().splitlines()
    return "match" if type(e) is type(cpu_e) and (not cpu_text or cpu_text[0] in str(e)) else "differs"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="", help="comma-separated substrings of entry names")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per error input")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--compiled", action="store_true", help="run each call in a torch.compile'd function")
    parser.add_argument("--omp-passive", action="store_true", help="OMP_WAIT_POLICY=PASSIVE (both devices)")
    parser.add_argument("--in-place", action="store_true", help="in-place variants on int64 / bool tensors")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")  # the samples' own warnings (deprecations, padding='same')

    import torch_neuronx  # noqa: F401  registers the device
    from torch.testing._internal.common_methods_invocations import op_db

    wanted = [s for s in args.ops.split(",") if s]
    ops = [op for op in op_db if (op.inplace_variant if args.in_place else op.error_inputs_func) is not None]
    if wanted:
        ops = [op for op in ops if any(w in op.full_name for w in wanted)]
    rows = []  # (op name, class counts)
    details = []  # (op, class, expected, neuron's error)
    totals = collections.Counter()
    start = time.perf_counter()
    for op in ops:
        counts = collections.Counter()
        if args.in_place:
            try:
                made = _in_place_inputs(op)
            except Exception as e:  # samples that cannot be made
                counts["generator"] += 1
                details.append((op.full_name, "generator", "", _first_line(e)))
                made = []
            for label, maker in made:
                try:
                    cpu_e = _run(op.inplace_variant, maker("cpu"), "cpu", args.timeout, args.compiled)
                except EntryTimeout:
                    continue
                try:
                    e = _run(op.inplace_variant, maker("neuron"), "neuron", args.timeout, args.compiled)
                except EntryTimeout as t:
                    e = t
                kind = _in_place_class(cpu_e, e)
                counts[kind] += 1
                if kind not in ("match", "accepted"):
                    expected = "no error" if cpu_e is None else _first_line(cpu_e)
                    details.append((f"{op.full_name} ({label})", kind, expected,
                                    "no error" if e is None else _first_line(e)))
            rows.append((op.full_name, counts))
            totals.update(counts)
            continue
        cpu_inputs, cpu_err = _error_inputs(op, "cpu")
        neuron_inputs, neuron_err = _error_inputs(op, "neuron")
        if neuron_err is not None:
            counts["generator"] += max(len(cpu_inputs), 1)
            details.append((op.full_name, "generator", "", _first_line(neuron_err)))
        else:
            # the generators yield other inputs for a device that is not the CPU (CUDA's cases, a
            # cross-device one): then each neuron input is judged by its own expectation alone
            paired = cpu_err is None and len(cpu_inputs) == len(neuron_inputs)
            for i, neuron_ei in enumerate(neuron_inputs):
                if paired:
                    cpu_ei = cpu_inputs[i]
                    try:
                        cpu_e = _run(op, cpu_ei, "cpu", args.timeout, args.compiled)
                    except EntryTimeout:
                        counts["cpu-only"] += 1
                        continue
                    if _classify(cpu_e, cpu_ei.error_type, cpu_ei.error_regex) != "match":
                        counts["cpu-only"] += 1
                        continue
                try:
                    e = _run(op, neuron_ei, "neuron", args.timeout, args.compiled)
                except EntryTimeout as t:
                    e = t
                kind = _classify(e, neuron_ei.error_type, neuron_ei.error_regex)
                counts[kind] += 1
                if kind != "match":
                    expected = f"{neuron_ei.error_type.__name__}: /{neuron_ei.error_regex}/"
                    details.append((op.full_name, kind, expected, "no error" if e is None else _first_line(e)))
        rows.append((op.full_name, counts))
        totals.update(counts)

    classes = (["match", "differs", "missing", "extra", "accepted", "generator"] if args.in_place else
               ["match", "differs", "missing", "cpu-only", "generator"])
    width = max((len(n) for n, _ in rows), default=10)
    print(f"{'op':<{width}} " + " ".join(f"{c:>9}" for c in classes))
    for name, counts in rows:
        if args.verbose or counts["differs"] or counts["missing"] or counts["extra"] or counts["generator"]:
            print(f"{name:<{width}} " + " ".join(f"{counts[c]:>9}" for c in classes))
    print(f"{'TOTAL':<{width}} " + " ".join(f"{totals[c]:>9}" for c in classes))
    print(f"{len(rows)} entries, {sum(totals.values())} error inputs, {time.perf_counter() - start:.0f} s "
          f"(OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY') or 'unset'})")
    print("\nerror inputs neuron does not reject as the CPU does:")
    for name, kind, expected, got in details:
        print(f"  {kind:<9} {name}: {'the CPU: ' if args.in_place else 'expected '}{expected}; neuron: {got}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
