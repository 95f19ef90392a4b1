"""The TorchDynamo backend `neuron`: Dynamo's graph -> AOTAutograd (functional ATen, PyTorch's
decompositions for what the lowering table lacks) -> one GraphProgram per forward/backward graph ->
one XLA executable per graph and input signature (a graph that calls collectives: one per segment
between them, `split.py`). No Inductor.

Shapes are static. `dynamic=True` (even for a graph Dynamo kept no symbol in) or a dimension marked
dynamic is refused with an error that says how to fix the call. When Dynamo makes shapes symbolic on its own (the default `dynamic=None`, after
an input's shape changed), the graph is specialized at run time instead: each concrete shape
compiles once and is reused afterwards, as with `dynamic=False`.

A graph that fails to compile (its AOTAutograd trace, a lowering, XLA) raises NEFFCompilationError,
unless fallback execution is on (`TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0`, or
`torch.compile(..., options={"fallback_execution": True})`, which wins over the setting either way):
then it warns once and runs Dynamo's graph eagerly on neuron, from the failed call on.
"""
from __future__ import annotations

import itertools
import warnings

import torch

from ..ops.decompositions import decomposition_table
from ..runtime import config, devices, storage
from . import aot_records, graph_argument_checks
from .errors import NEFFCompilationError
from .split import SplitProgram, program_for

FALLBACK_ENV = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"
FALLBACK_OPTION = "fallback_execution"

_model_name: str | None = None
_counter = itertools.count()


def set_model_name(name: str | None) -> None:
    """Name the graphs compiled from now on (`<name>_<n>_forward`) in metrics and artifacts."""
    global _model_name
    if name is not None and not isinstance(name, str):
        raise TypeError(f"set_model_name expects a str or None, got {type(name).__name__}")
    _model_name = name


def get_model_name() -> str | None:
    return _model_name


class StaticShapesRequired(NEFFCompilationError):
    """torch.compile(backend="neuron") was asked for dynamic shapes."""


def neuron_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """TorchDynamo backend: compile `gm` for the neuron device."""
    devices.check_not_forked()  # compiling starts jax work the fork's missing threads would run
    mode = kwargs.pop("mode", None)
    if mode not in (None, "default"):
        warnings.warn(f"torch.compile(backend='neuron'): mode={mode!r} is ignored (the neuron backend has one mode)")
    options = dict(kwargs.pop("options", None) or {})
    option = options.pop(FALLBACK_OPTION, None)
    if options:
        warnings.warn(f"torch.compile(backend='neuron'): options {sorted(options)} are ignored")
    if kwargs:
        warnings.warn(f"torch.compile(backend='neuron'): arguments {sorted(kwargs)} are ignored")
    name = f"{_model_name or 'graph'}_{next(_counter)}"
    fallback = _fallback_execution(option, name)
    reason = _dynamo_recompile_reason()
    _refuse_dynamic(gm)  # also when Dynamo kept no symbol (parameters only, sizes 0 and 1); never falls back
    if fallback is None:
        return _compiled(gm, example_inputs, name, reason, None)
    try:
        compiled = _compiled(gm, example_inputs, name, reason, fallback)
    except NEFFCompilationError as e:
        fallback.warn(e)
        return gm.forward
    if isinstance(compiled, graph_argument_checks.Raises):
        return compiled  # the CPU's own error for this call: eager mode raises it too
    return _EagerOnCompileFailure(compiled, gm.forward, fallback)


def _compiled(gm, example_inputs, name, reason, fallback):
    if _has_symbolic_inputs(example_inputs):
        return _PerShape(gm, name, reason, fallback)
    return _aot(gm, example_inputs, name, reason, fallback)


class _Fallback:
    """Fallback execution is on for graph `name`: `why` says which switch turned it on."""

    def __init__(self, name: str, why: str):
        self.name = name
        self.why = why
        self.warned = False

    def warn(self, error: Exception) -> None:
        if not self.warned:
            self.warned = True
            warnings.warn(f"torch.compile(backend='neuron'): graph {self.name} could not be compiled and runs "
                          f"eagerly on neuron instead ({self.why}): {type(error).__name__}: {error}", stacklevel=3)


def _fallback_execution(option, name: str) -> "_Fallback | None":
    """Whether graph `name` runs eagerly when it fails to compile: the `fallback_execution` option when
    given, else TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION (1, the default: it raises)."""
    if option is not None:
        if not isinstance(option, bool):
            raise TypeError(f"torch.compile(backend='neuron'): options['{FALLBACK_OPTION}'] is True or False, "
                            f"not {option!r}")
        return _Fallback(name, f"options={{'{FALLBACK_OPTION}': True}}") if option else None
    if config.settings.disable_fallback_execution:
        return None
    return _Fallback(name, f"{FALLBACK_ENV}=0")


class _Wrapped:
    """A callable standing in for `program` (a GraphProgram or another wrapper): its name, kind, ... are
    the program's, for whoever inspects it."""

    def __init__(self, program):
        self.program = program

    def __getattr__(self, name):
        program = self.__dict__.get("program")  # (None while unpickling or before __init__)
        if program is None:
            raise AttributeError(name)
        return getattr(program, name)


class _EagerOnCompileFailure(_Wrapped):
    """A compiled graph whose compile may still fail: a GraphProgram compiles at its first call (and at
    a call with new input signatures), so the failure is caught there. The failed call and every
    later one run `eager` (the Dynamo graph's forward, its ops through the eager neuron kernels). A
    compile fails before its executable launches, so nothing of the failed call has run."""

    def __init__(self, program, eager, fallback: _Fallback):
        super().__init__(program)
        self.eager = eager
        self.fallback = fallback
        self.failed = False

    def __call__(self, *args):
        if not self.failed:
            try:
                return self.program(*args)
            except _RanBeforeFailing:
                raise
            except NEFFCompilationError as e:
                self.failed = True
                self.fallback.warn(e)
        return self.eager(*args)


class _RanBeforeFailing(NEFFCompilationError):
    """A split graph's segment failed to compile after earlier steps of the call ran (collectives
    issued, segments launched): running the graph again eagerly would run them twice."""


class _NoFallbackAfter(_Wrapped):
    """A split graph's segment that runs after other steps of the call: its compile failure raises."""

    def __call__(self, *args):
        try:
            return self.program(*args)
        except NEFFCompilationError as e:
            raise _RanBeforeFailing(f"{e} (no fallback execution: earlier steps of this call, its collectives "
                                    f"or segments, ran already, and running the graph eagerly would run them twice)"
                                    ) from e


def _guard_split(program) -> None:
    """Segments after the first step that does something (a segment, a collective or stream op; not a
    mere stream switch) raise their compile failure instead of falling back."""
    ran = False
    for what, step in program.steps:
        if what == "segment":
            if ran:
                step.program = _NoFallbackAfter(step.program)
            ran = True
        elif getattr(step, "target", None) is not None:
            ran = True


def _may_split(gm) -> bool:
    """Whether Dynamo's graph may call a collective or a stream op (its AOTAutograd graph is then cut
    into segments, `split.py`): a call outside ATen and prims's ops, of torch.distributed's functions,
    or traced under a stream."""
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        target = n.target
        if isinstance(target, torch._ops.OpOverload) and target.namespace not in ("aten", "prims"):
            return True
        if isinstance(target, torch._ops.OpOverloadPacket) and target._qualified_op_name.split("::")[0] not in (
                "aten", "prims"):
            return True
        if (getattr(target, "__module__", None) or "").startswith("torch.distributed"):
            return True
        if (n.meta.get("custom") or {}).get("stream") is not None:
            return True
    return False


def _aot_decompositions() -> dict:
    """The eager fallback's decomposition table, less the ops whose decomposition must not run while
    AOTAutograd traces: `lift_fresh` (a constant made by torch.tensor(...) is a real tensor until the
    fake mode lifts it; decomposing it to `alias` first hands the real tensor to the fake mode)."""
    table = dict(decomposition_table())
    table.pop(torch.ops.aten.lift_fresh.default, None)
    return table


def _aot(gm, example_inputs, name, reason, fallback=None):
    # the device work of compiling (AOTAutograd's copies of constants; none where a record loads) runs
    # op by op, apart from the user's queued ops: their fused runs are then the same in a process that
    # compiles the graph and in one that loads it from the disk cache
    with storage.unfused():
        return _aot_unfused(gm, example_inputs, name, reason, fallback)


def _aot_unfused(gm, example_inputs, name, reason, fallback):
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    record = aot_records.key_of(gm, example_inputs)
    if record is not None and fallback is not None and _may_split(gm):
        record = None  # a loaded record's segments would miss _guard_split
    if record is not None:  # AOTAutograd's graph for these inputs, stored by an earlier process
        # which ran the CPU's checks on this graph and these inputs first (a rejected graph stores
        # nothing; the checks' code is in the entry's key): they passed, and are not run again
        forward = aot_records.load(record, name, reason)
        if forward is not None:
            return forward
    rejected = graph_argument_checks.first_error(gm, example_inputs)  # what the CPU's kernels reject and no meta kernel
    if rejected is not None:
        return graph_argument_checks.Raises(rejected)

    def compiler(kind):
        def compile_graph(graph_module, inputs):
            program = program_for(graph_module, f"{name}_{kind}", kind, reason)
            if fallback is not None:
                if isinstance(program, SplitProgram):
                    _guard_split(program)
                if kind == "backward":  # compiled at the first backward, long after Dynamo's graph ran:
                    # it falls back to AOTAutograd's backward graph, run eagerly
                    program = _EagerOnCompileFailure(program, graph_module, fallback)
            if kind == "inference" and record is not None and aot_records.remember(record, graph_module, program.name):
                return make_boxed_func(_RecordedOnFirstCall(program))
            return make_boxed_func(program)

        return compile_graph

    try:
        return aot_autograd(
            fw_compiler=compiler("forward"),
            bw_compiler=compiler("backward"),
            inference_compiler=compiler("inference"),
            decompositions=_aot_decompositions(),
            keep_inference_input_mutations=True,
        )(gm, example_inputs)
    except (NEFFCompilationError, IndexError, torch._dynamo.exc.TorchDynamoException):
        raise  # named already, or errors Dynamo itself handles (it passes IndexError on as is)
    except Exception as e:
        raise NEFFCompilationError(f"graph {name}: {_failed_where(gm, e)}: AOTAutograd could not trace it: "
                                   f"{type(e).__name__}: {_first_line(e)}") from e


class _RecordedOnFirstCall(_Wrapped):
    """A program whose AOTAutograd record is being written by a thread (`aot_records.remember`): its
    first call (which lowers and compiles the graph meanwhile) returns once the record is written."""

    def __init__(self, program):
        super().__init__(program)
        self.pending = True

    def __call__(self, *args):
        if not self.pending:
            return self.program(*args)
        try:
            return self.program(*args)
        finally:
            self.pending = False
            aot_records.finish_records()


def _failed_where(gm, e) -> str:
    """The Dynamo graph node (and the ATen op being decomposed) an AOTAutograd trace failed in, from
    the frames of its traceback: FX's Interpreter.run_node holds the node, proxy_tensor's
    maybe_handle_decomp the op whose decomposition ran."""
    node = decomposed = None
    tb = e.__traceback__
    while tb is not None:
        local = tb.tb_frame.f_locals
        code = tb.tb_frame.f_code.co_name
        if code == "run_node" and isinstance(local.get("n"), torch.fx.Node) and local["n"].graph is gm.graph:
            node, decomposed = local["n"], None
        elif code == "maybe_handle_decomp" and node is not None and decomposed is None:
            decomposed = local.get("op")
        tb = tb.tb_next
    if node is None:
        return "the graph"
    where = f"op {_target_name(node)} (node '{node.name}')"
    if decomposed is not None:
        where += f", in PyTorch's decomposition of {decomposed}"
    return where


def _target_name(node) -> str:
    if node.op == "call_function":
        try:
            return torch.fx.node._get_qualified_name(node.target)
        except Exception:
            pass
    return str(node.target)


def _first_line(e) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


class _PerShape:
    """A graph Dynamo made symbolic by itself: AOTAutograd runs once per concrete input signature."""

    def __init__(self, gm, name, reason, fallback=None):
        self.gm = gm
        self.name = name
        self.reason = reason
        self.fallback = fallback
        self.compiled: dict[tuple, object] = {}

    def __call__(self, *args):
        sig = tuple(
            (a.dtype, tuple(a.shape), a.device) if isinstance(a, torch.Tensor) else ("static", a) for a in args
        )
        fn = self.compiled.get(sig)
        if fn is None:
            n = len(self.compiled)
            reason = self.reason if n == 0 else "new input shapes (Dynamo made them symbolic; neuron specializes)"
            fn = self.compiled[sig] = _aot(self.gm, list(args), f"{self.name}_{n}", reason, self.fallback)
        return fn(*args)


def _has_symbolic_inputs(example_inputs) -> bool:
    return any(
        not _is_concrete(x) if isinstance(x, torch.SymInt)
        else isinstance(x, torch.Tensor) and not all(_is_concrete(s) for s in x.shape)
        for x in example_inputs
    )


def _is_concrete(s) -> bool:
    return not isinstance(s, torch.SymInt) or s.node.expr.is_number


def _refuse_dynamic(gm):
    """Refuse a graph compiled for dynamic shapes. `torch.compile(..., dynamic=True)` reaches a backend
    only as Dynamo's config while the frame is traced: torch._dynamo.optimize(dynamic=True) patches
    `assume_static_by_default=False` around every call of the compiled function (dynamic=False patches
    it True, the default None leaves it as it is), so the request is seen whether or not the graph kept
    a symbol. Setting `torch._dynamo.config.assume_static_by_default = False` by hand is the same
    request and is refused the same way. So is a module compiled with dynamic=False and called by a
    function compiled with dynamic=True: Dynamo inlines it into the caller's frames, traced with the
    caller's settings (its own wrapper never runs). Nothing else sets either: a LoRA hot-swap under
    dynamic=False (peft's padded ranks and tensor scalings) traces nothing again, and an automatic
    recompile is static (dynamic=False) or symbolic without a mark (None: `_PerShape`)."""
    import torch._dynamo.config as dynamo_config

    explicit = not dynamo_config.assume_static_by_default
    marked = _marked_dynamic(gm)
    if explicit or marked:
        # an outer compiled function's dynamic=True reaches a module it calls, inlined into its frames
        why = ("torch.compile(..., dynamic=True) was requested (by this compiled function, or by a compiled "
               "function that calls it: Dynamo traces the callee with the caller's settings)") if explicit else (
            f"dimensions were marked dynamic ({', '.join(marked)})"
        )
        raise StaticShapesRequired(
            f"the neuron backend compiles static shapes only, and {why}. Call "
            f"torch.compile(model, backend='neuron', dynamic=False) (each new input shape then compiles "
            f"once and is reused), and drop torch._dynamo.mark_dynamic on inputs."
        )


def _marked_dynamic(gm) -> list[str]:
    marked = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        arg = node.meta.get("grapharg")
        example = getattr(arg, "example", None) if arg is not None else None
        dims = getattr(example, "_dynamo_dynamic_indices", None) if isinstance(example, torch.Tensor) else None
        if dims:
            marked.append(f"{node.name} dims {sorted(dims)}")
    return marked


def _dynamo_recompile_reason() -> str | None:
    """Why Dynamo compiles this frame again (its guard failure), when it does."""
    try:
        from torch._dynamo.utils import get_metrics_context

        return get_metrics_context()._metrics.get("recompile_reason")
    except Exception:
        return None
