"""One AOTAutograd graph (functional ATen) -> one jax function -> one XLA executable per input signature.

The graph is interpreted once, while jax traces it: every `call_function` node runs the lowering eager
mode uses for its overload (`ops.LOWERINGS`), its results cast to the dtypes of the node's fake value.
Inputs follow eager mode's calling protocol (`ops.protocol`): each tensor input is a view of a storage,
and the executable takes the storage's buffer and reads the view inside itself (parameters and buffers
enter as they are, views of them at no extra launch). Input mutations (`copy_` into a placeholder, left
in the graph by AOTAutograd's `keep_inference_input_mutations`) are written into the storages inside
the executable too, which returns their new buffers (the old ones donated). So a call runs no eager op.
An op with no lowering runs on the host through a jax callback, counted as a fallback like in eager.
"""
from __future__ import annotations

import functools
import hashlib
import operator
import re
import time
from typing import NamedTuple

import numpy as np
import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import _disable_current_modes

from .. import cache, metrics
from ..cache import Built, Key
from ..eager.buffers import to_host
from ..eager.fallback import check_cpu_fallback
from ..ops import LOWERINGS, layout, normalize, protocol, target_policy
from ..ops.value_checks import CheckedCall, failure_rows
from ..ops.dtypes import UnsupportedDtype, to_numpy_dtype
from ..ops.target_policy import TargetUnsupported
from ..ops.protocol import (FreshOutput, Plan, Return, ReturnKind, StorageInputs, StorageProgram, TensorLayout,
                            call_lowering, fresh_storage, typed)
from ..ops.specs import spec_for
from ..runtime import config, devices, executables, fidelity, profiling, rng, storage, streams, transfer
from ..runtime.lazy_jax import jax, jnp
from . import debug_dumps
from .errors import NEFFCompilationError, NEFFExecutionError

aten = torch.ops.aten

CPU_INPUTS_ENV = "TORCH_NEURONX_CPU_INPUTS"  # "copy" (default) or "error"

_TOKEN = object()  # an effect token (AOTAutograd orders side-effecting ops with them)
# AOTAutograd's functional form of a mutating custom op: auto_functionalized(op, **arguments) gives
# (its results, the new value of each mutated argument); the v2 form writes bases that the mutated
# arguments view (`_all_bases`, each argument's `_<name>_base_index` and how it views its base)
_AUTO_FUNCTIONALIZED = (torch.ops.higher_order.auto_functionalized, torch.ops.higher_order.auto_functionalized_v2)
GRAPH = "graph"  # the cache namespace of graph executables: the value is the structure digest, then the input signature
GRAPH_EXACT = "graph_exact"  # TORCH_NEURONX_TARGET_CHECK=compare: a graph's program with the target's policy off

# Operations on Python ints (sizes) that a static graph may still carry
_PY_OPS = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.neg,
           operator.truediv, operator.pow, operator.eq, operator.ne, operator.lt, operator.le,
           operator.gt, operator.ge}
# Checks AOTAutograd leaves in graphs: fake propagation already proved them for these static shapes
_NO_OPS = {aten._assert_tensor_metadata.default, aten._assert_scalar.default,
           aten.sym_constrain_range_for_size.default}
# ops no executable may hold: collectives talk to other ranks through the process group, on the host
# (a host callback would run one where jax chooses, and copy an asynchronous result out before it
# arrived); compile/split.py runs them between executables
COLLECTIVE_NAMESPACES = frozenset({"_c10d_functional", "_c10d_functional_autograd", "_dtensor", "c10d"})
# Dynamo's stream and event ops (torch/_dynamo/variables/streams.py: fork/join the current stream,
# record/wait events, synchronize), and the control_deps wrapper that orders one after the tensors it
# names: side effects on the device's streams, which must run between executables, in graph order
STREAM_NAMESPACE = "streams"


def is_collective(target) -> bool:
    return isinstance(target, torch._ops.OpOverload) and target.namespace in COLLECTIVE_NAMESPACES


def is_stream_op(target) -> bool:
    if isinstance(target, torch._ops.HigherOrderOperator):
        return target.name() == "control_deps"
    return isinstance(target, torch._ops.OpOverload) and target.namespace == STREAM_NAMESPACE


def runs_between_executables(target) -> bool:
    return is_collective(target) or is_stream_op(target)


# Activation checkpointing in a compiled graph (torch/_functorch/partitioners.py): the forward runs a
# random op through run_and_save_rng_state and returns the state, the backward recomputes it through
# run_with_rng_state with that state, so both draw the same numbers. The state here is the op's PRNG
# key data in the first bytes of a tensor shaped as the partitioner's sample state says.
_RUN_AND_SAVE_RNG_STATE = torch.ops.higher_order.run_and_save_rng_state
_RUN_WITH_RNG_STATE = torch.ops.higher_order.run_with_rng_state


def _is_random(node) -> bool:
    op = node.target
    if op is _RUN_AND_SAVE_RNG_STATE:
        return True
    if not isinstance(op, torch._ops.OpOverload):
        return False
    low = LOWERINGS.get(op)
    if low is not None and low.rng:
        return True
    return any(str(a.type) in ("Generator", "Optional[Generator]") for a in op._schema.arguments)


def _items(node) -> dict:
    """index -> the node that takes that item of `node`'s tuple result (its getitem users)."""
    return {u.args[1]: u for u in node.users if u.target is operator.getitem}


def _concrete_rng_states(nodes) -> None:
    """The partitioner's sample RNG state (`torch.get_rng_state()` made fake) gets a symbolic size
    in a static graph; the state is a value of fixed size, so its nodes get their size's hint."""
    states = [_items(n)[0] for n in nodes if n.target is _RUN_AND_SAVE_RNG_STATE and 0 in _items(n)]
    states += [n.args[0] for n in nodes if n.target is _RUN_WITH_RNG_STATE]
    for node in states:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and not all(isinstance(d, int) for d in val.shape):
            shape = [torch.fx.experimental.symbolic_shapes.guarding_hint_or_throw(d) for d in val.shape]
            node.meta["val"] = torch.empty(shape, dtype=val.dtype, device=val.device)


def _vals(val):
    return list(val) if isinstance(val, (tuple, list)) else [val]


def _traced_device(nodes):
    """The device a graph's values were traced on (a factory's `device="neuron:1"`), for a graph with
    no neuron tensor input; None if none names one (the current device is meant)."""
    for node in nodes:
        for v in _vals(node.meta.get("val")):
            if isinstance(v, torch.Tensor) and v.device.type == "neuron" and v.device.index is not None:
                return v.device
    return None


def _without_offset(lay: TensorLayout) -> TensorLayout:
    """`lay` with offset None (tuple.__new__ directly: NamedTuple._replace costs ~2 us a tensor, and a
    model's call lays out every parameter)."""
    slot, dtype, sizes, strides, _offset, nbytes, lazy = lay
    return tuple.__new__(TensorLayout, (slot, dtype, sizes, strides, None, nbytes, lazy))


class _CallInputs:
    """One call's inputs in the protocol's terms: the storages its tensors view, a layout per tensor
    input (None for a Python value), the tensors themselves (CPU inputs copied to the device).

    A view's offset is not part of the signature: it is passed at run time (`offsets`), so a graph
    called on `timesteps[i]` for every i compiles once."""

    def __init__(self, program, args, device):
        self.storages = StorageInputs()
        self.tensors = []  # per input: the neuron tensor, or None
        self.layouts = []  # per input: its TensorLayout (offset None), or None
        self.statics = []  # per input: None for a tensor, else its Python value
        offsets = []
        sig = []
        for ph, a in zip(program.placeholders, args):
            if isinstance(a, torch.Tensor):
                t = program.on_device(ph, a, device)
                lay = self.storages.of_tensor(t)
                offsets.append(lay.offset)
                lay = _without_offset(lay)
                self.tensors.append(t)
                self.layouts.append(lay)
                self.statics.append(None)
                sig.append(lay)
            else:  # an int, or None for an effect token
                self.tensors.append(None)
                self.layouts.append(None)
                self.statics.append(a)
                sig.append(("static", a))
        # neuron tensors the graph holds as constants are read from their storages too
        self.constant_layouts = []
        for c in program.device_constants:
            lay = self.storages.of_tensor(c) if c is not None else None
            if lay is not None:
                offsets.append(lay.offset)
                lay = _without_offset(lay)
            self.constant_layouts.append(lay)
        sig.extend(self.constant_layouts)
        self.offsets = np.array(offsets, np.int64)
        self.buffers, state = self.storages.buffers_and_state()
        sig.append(state)
        self.sig = tuple(sig)  # the input signature (the device is the key's own field)

    def arrays(self) -> list:
        """The executable's inputs, but for a random graph's draw: buffers, then the offsets."""
        return [b for b in self.buffers if b is not None] + [self.offsets]


class GraphProgram:
    """A compiled FX graph: callable with the graph's real inputs, returns its outputs."""

    def __init__(self, gm: torch.fx.GraphModule, name: str, kind: str, reason: str | None = None):
        self.gm = gm
        self.name = name
        self.kind = kind
        self.first_reason = reason
        self.nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.constants = [n for n in gm.graph.nodes if n.op == "get_attr"]
        for n in self.constants:
            value = getattr(gm, n.target, None)
            if isinstance(value, torch.Tensor) and value.device.type == "neuron" and not _typed_whole_storage(value):
                setattr(gm, n.target, _retyped(value))
        values = [getattr(gm, n.target, None) for n in self.constants]
        self.device_constants = [v if isinstance(v, torch.Tensor) and v.device.type == "neuron" else None for v in values]
        self.output = next(n for n in gm.graph.nodes if n.op == "output")
        _concrete_rng_states(self.nodes)
        self.random = any(_is_random(n) for n in self.nodes)
        self.structure = structure_digest(gm)
        # input signatures this graph was called with; the executables themselves live in the
        # process's executable cache, but for a graph that cannot be shared (no structure digest)
        self.signatures: set[tuple] = set()
        self.unshared: dict[tuple, "_Executable"] = {}
        self.unshared_exact: dict[tuple, "_Executable"] = {}
        self.host_failures = []  # (node, exception) of host-run ops that raised during a launch
        self.traced_device = _traced_device(self.nodes)
        index = {ph: i for i, ph in enumerate(self.placeholders)}
        # the inputs the graph writes (AOTAutograd's `copy_` into a placeholder)
        self.mutated_inputs = frozenset(index[n.args[0]] for n in self.nodes
                                        if n.target is aten.copy_.default and n.args[0].op == "placeholder")
        self.range_name = f"neuron::graph {name}"  # its call's range in a profile

    # ------------------------------------------------------------------------------------------
    # Calling

    def __call__(self, *args):
        devices.check_not_forked()  # a cached executable reaches the device without asking `devices`
        storage.sync("compiled graph")
        device = self._device(args)
        inputs = _CallInputs(self, args, device)
        exe = self._executable(inputs, device)
        exact = self._exact_executable(inputs, device) if fidelity.comparing() else None
        arrays = inputs.arrays()
        if self.random:
            arrays.append(rng.draw(None, device.index))
        metrics.graph_executed(self.name)
        self.host_failures.clear()
        try:
            with profiling.range(self.range_name):
                if exact is not None:  # compare: the exact program first, on the same inputs (no donation)
                    exact_outs = executables.launch(exact.fn, arrays, f"graph {self.name} (exact)", device.index,
                                                    None, NEFFExecutionError)
                outs = executables.launch(exe.fn, arrays, f"graph {self.name}", device.index,
                                          (profiling.RECORD_GRAPH, self.name), NEFFExecutionError)
        except Exception:
            if self.host_failures:  # an op run on the host raised: name it, with its own error
                node, err = self.host_failures.pop()
                raise NEFFExecutionError(
                    f"graph {self.name}: op {node.target} (node '{node.name}'): {type(err).__name__}: {err}"
                ) from err
            raise
        if outs:
            streams.launched(device.index, outs[0])
        if exact is not None:
            self._compare(inputs, exe.meta.plan, exact_outs, outs)
        return exe.finish(self, args, inputs, outs, device)

    def _compare(self, inputs: _CallInputs, plan: Plan, exact_outs, outs) -> None:
        """Where the target's policy changed the graph's results: its fresh outputs and mutated inputs."""
        n = len(plan.fresh) + len(plan.write_slots)

        def label(i):
            if i < len(plan.fresh):
                position = [r for r, (kind, what) in enumerate(plan.returns) if kind == ReturnKind.FRESH and what == i]
                return f"output {position[0]}" if position else f"result {i}"
            slot = plan.write_slots[i - len(plan.fresh)]
            mutated = [j for j, lay in enumerate(inputs.layouts) if lay is not None and lay.slot == slot]
            return f"mutated input {', '.join(map(str, mutated))}"

        fidelity.compare(f"graph {self.name}", exact_outs[:n], outs[:n], label, stacklevel=3)

    def _device(self, args) -> torch.device:
        for a in args:
            if isinstance(a, torch.Tensor) and a.device.type == "neuron":
                return a.device
        return self.traced_device or torch.device("neuron", torch.neuron.current_device())

    def on_device(self, ph, a: torch.Tensor, device) -> torch.Tensor:
        """Input `a` for placeholder `ph` as a neuron tensor on `device` (a CPU input is copied)."""
        if a.device.type != "neuron":
            if config.settings.cpu_inputs == "error":
                raise NEFFExecutionError(
                    f"graph {self.name}: input '{ph.name}' is on {a.device}, not on neuron "
                    f"({CPU_INPUTS_ENV}=error forbids copying it): move it with .to('neuron')"
                )
            return a.to(device)
        if a.device != device:
            raise NEFFExecutionError(f"graph {self.name}: input '{ph.name}' is on {a.device}, the graph runs on {device}")
        return a

    # ------------------------------------------------------------------------------------------
    # Finding or compiling the executable

    def _executable(self, inputs: _CallInputs, device) -> "_Executable":
        sig = inputs.sig
        if (sig not in self.signatures and self.structure is not None
                and cache.executable_cache().get(self._key(GRAPH, sig, device)) is not None):
            # the same graph (same code, same constants) compiled before for these inputs: a graph
            # Dynamo traced again (a guard failed, a block of a repeated class) reuses that executable
            metrics.graph_reused(self.name)

        def compile_graph():
            with profiling.range(f"neuron::compile_graph {self.name}"):
                return self._compile(inputs, device, self._reason(sig))

        exe = self._held(GRAPH, self.unshared, inputs, device, compile_graph)
        self.signatures.add(sig)
        return exe

    def _exact_executable(self, inputs: _CallInputs, device) -> "_Executable":
        """TORCH_NEURONX_TARGET_CHECK=compare: the graph's program traced with the target's policy off and
        compiled without donation (it runs first, on the inputs the target's program then takes)."""
        def compile_exact():
            with profiling.range(f"neuron::compile_graph {self.name}"), target_policy.exact():
                return self._compile(inputs, device, None, exact=True)

        return self._held(GRAPH_EXACT, self.unshared_exact, inputs, device, compile_exact)

    def _key(self, namespace: str, sig, device) -> Key:
        return Key(namespace, (self.structure,) + sig, device.index)

    def _held(self, namespace: str, unshared: dict, inputs: _CallInputs, device, compile) -> "_Executable":
        """The executable of these inputs in `namespace`: the process's executable cache's (memory, disk,
        else `compile()`), or for a graph that cannot be shared (no structure digest) this graph's own."""
        sig = inputs.sig
        if self.structure is None:
            exe = unshared.get(sig)
            if exe is None:
                exe = unshared[sig] = compile()
            return exe

        def build():
            exe = compile()
            return Built(exe, exe.fn, exe.meta)

        return cache.executable_cache().acquire(self._key(namespace, sig, device), self.name, build,
                                                lambda found: _Executable(found.executable, found.meta))

    def _reason(self, sig) -> str | None:
        return self.first_reason if not self.signatures else f"new input signature: {_describe_sig(sig)}"

    def _compile(self, inputs: _CallInputs, device, reason, exact: bool = False):
        """The graph's executable for these inputs; `exact`: compare's exact program (no donation, and
        not counted as a compile of the graph)."""
        tracer = _Tracer(self, inputs)
        arrays = inputs.arrays()
        extra = [rng.PROBE_WORDS] if self.random else []
        written = [i for i, lay in enumerate(inputs.layouts) if lay is not None and i in self.mutated_inputs]
        donate = () if exact else StorageInputs.donated(inputs.buffers, [inputs.layouts[i].slot for i in written])
        start = time.perf_counter()
        try:
            with devices.on_device(device.index):
                lowered = jax.jit(tracer.run, donate_argnums=donate).lower(*arrays, *extra)
        except NEFFCompilationError:
            raise
        except TargetUnsupported as e:  # complex under a target: the op and dtype, then where in the graph
            node = tracer.current
            where = f" (graph {self.name}, node '{node.name}')" if node is not None else f" (graph {self.name})"
            raise TargetUnsupported(f"{e}{where}") from None
        except Exception as e:
            node = tracer.current
            where = f"op {node.target} (node '{node.name}')" if node is not None else "the graph"
            kind = "NotImplementedError" if isinstance(e, UnsupportedDtype) else type(e).__name__
            raise NEFFCompilationError(f"graph {self.name}: {where} could not be lowered: {kind}: {e}") from e
        traced = time.perf_counter()
        try:
            fn = executables.compile_lowered(lowered, small=False)
        except Exception as e:
            raise NEFFCompilationError(f"graph {self.name}: XLA could not compile it: {type(e).__name__}: {e}") from e
        seconds = time.perf_counter() - start
        exe = _Executable(fn, tracer.meta())
        if not exact:
            metrics.graph_compiled(self.name, self.kind, len(self.nodes), seconds, traced - start, reason,
                                   tracer.fallbacks)
            debug_dumps.save(self.name, len(self.signatures), self.gm, lowered, fn)
        return exe


def clear_cache() -> None:
    """Forget every compiled graph executable this process holds (the disk cache keeps its entries)."""
    cache.clear_memory(keep=lambda key: key.namespace not in (GRAPH, GRAPH_EXACT))


def compiled_keys() -> list[tuple]:
    """The value key of every graph executable this process holds (a graph with a constant that
    cannot be read has none: it is never shared)."""
    return [key.value for key in cache.executable_cache().memory.keys() if key.namespace == GRAPH]


_NEURON_DEVICE = re.compile(r"device\(type='neuron', index=\d+\)")


def _typed_whole_storage(t: torch.Tensor) -> bool:
    """Whether `t` is its whole storage, held in a buffer of its own dtype (what a constant made by an
    op is; one unpickled from an AOTAutograd record holds its storage's bytes)."""
    key = storage.whole_storage_key(t)
    buf = storage.buffer(key) if key else None
    return buf is not None and buf.dtype == transfer.to_numpy_dtype(t.dtype)


def _retyped(t: torch.Tensor) -> torch.Tensor:
    """`t`'s values in a storage of their own dtype, by a host round trip (no program to compile): a
    graph's key describes each held constant's buffer, so the process that made the constant by an op
    and one that unpickled it key the graph alike."""
    with _disable_current_modes():  # the backend runs under AOTAutograd's fake and functional modes
        return to_host(t).to(t.device)


def structure_digest(gm) -> str | None:
    """A digest of what the graph computes: its code (a neuron device named without its index: the
    graph runs on its inputs' device), every value's dtype and layout as its fake value says (the
    program casts to them, and code can leave them implicit: a factory without a dtype takes the
    default one), and the values of its constants (None when a constant cannot be read: such a graph
    is never shared)."""
    h = hashlib.sha256(_NEURON_DEVICE.sub("device(type='neuron')", gm.code).encode())
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = getattr(gm, node.target, None)
            if not isinstance(value, torch.Tensor):
                return None
            h.update(f"{node.target}:{value.dtype}:{tuple(value.shape)}".encode())
            try:
                # AOTAutograd calls the backend under its fake and functional modes: the host copy of a
                # constant made under them would be one of theirs, with no data to read
                with _disable_current_modes():
                    host = to_host(value) if value.device.type == "neuron" else value
                    h.update(transfer.torch_to_numpy(host.contiguous()).tobytes())
            except Exception:
                return None
    for node in gm.graph.nodes:
        for v in _vals(node.meta.get("val")):
            if isinstance(v, torch.Tensor):
                h.update(f"{node.name}:{v.dtype}{tuple(v.shape)}{tuple(v.stride())}{v.device.type};".encode())
        digest = _kernel_digest(node)
        if digest is not None:  # a user's custom kernel: its code is not in the package's sources
            h.update(f"{node.name}:kernel {digest};".encode())
    return h.hexdigest()


def _kernel_digest(node) -> str | None:
    """The digest of the custom kernel (`ops.custom`) a node runs, directly or auto-functionalized."""
    if node.op != "call_function":
        return None
    op = node.args[0] if node.target in _AUTO_FUNCTIONALIZED else node.target
    lowering = LOWERINGS.get(op) if isinstance(op, torch._ops.OpOverload) else None
    return None if lowering is None else lowering.digest


def _describe_sig(sig) -> str:
    parts = []
    for s in sig[:-1]:
        if s is None:
            continue
        if isinstance(s, tuple) and s and s[0] == "static":
            parts.append(repr(s[1]))
        else:
            parts.append(f"{str(s.dtype).removeprefix('torch.')}{list(s.sizes)}")
    return "(" + ", ".join(parts) + ")"


class GraphMeta(NamedTuple):
    """What an executable's caller needs besides the executable (kept beside it in the disk cache)."""

    plan: Plan  # the fresh outputs, returns, storages written and value checks
    post_checks: list  # (node name, api name, is_matrix) of each linalg error code returned


class _Executable:
    def __init__(self, fn, meta: GraphMeta):
        self.fn = fn
        self.meta = meta

    def finish(self, program, args, inputs: _CallInputs, outs, device):
        plan, post_checks = self.meta

        def own_outputs(infos):
            for i, t in enumerate(inputs.tensors):  # a CPU input the graph mutated gets its new values
                if t is not None and t is not args[i] and inputs.layouts[i].slot in plan.write_slots:
                    args[i].copy_(t)
            for (node_name, api_name, is_matrix), info in zip(post_checks, infos):
                host = np.asarray(info)
                if host.any():
                    try:
                        aten._linalg_check_errors(torch.from_numpy(host.astype(np.int32)), api_name, is_matrix=is_matrix)
                    except RuntimeError as e:
                        raise NEFFExecutionError(f"graph {program.name}: op {api_name} (node '{node_name}'): {e}") from e

        return protocol.finish(plan, outs, inputs.storages, args.__getitem__, device, f"graph {program.name}", own_outputs)


class _Tracer:
    """Runs the graph's nodes on jax values (called by jax.jit while it traces). What it learns while
    tracing (the outputs' plan, the storages written, the value checks) is read off it afterwards."""

    def __init__(self, program: GraphProgram, inputs: _CallInputs):
        self.program = program
        self.inputs = inputs
        self.current = None
        self.fresh = []
        self.returns = []
        self.write_slots = []
        self.checks = []
        self.post_checks = []  # (node, info array, api name, is_matrix): linalg error codes
        self.fallbacks = []

    def meta(self) -> GraphMeta:
        """What tracing learned, as plain values (it outlives the graph, in the disk cache)."""
        checks = [(NEFFExecutionError, f"graph {self.program.name}: op {node.target} (node '{node.name}'): "
                                       f"{error.__name__}: {message}") for node, error, message in self.checks]
        plan = Plan(list(self.fresh), list(self.returns), list(self.write_slots), checks)
        return GraphMeta(plan, [(node.name, api, is_matrix) for node, _info, api, is_matrix in self.post_checks])

    def run(self, *flat):
        program, inputs = self.program, self.inputs
        key = None
        if program.random:
            key = rng.prng_key(flat[-1])
            flat = flat[:-1]
        offsets = flat[-1]
        bufs = iter(flat[:-1])
        storages = StorageProgram(inputs.storages.nbytes, [next(bufs) if b is not None else None for b in inputs.buffers])
        env = {}
        index_of = {}
        offset_of = {}  # input or constant index -> its position in `offsets`
        for i, lay in enumerate(inputs.layouts):
            if lay is not None:
                offset_of[i] = len(offset_of)
        for i, (ph, lay) in enumerate(zip(program.placeholders, inputs.layouts)):
            if lay is not None:
                env[ph] = storages.read(lay, offsets[offset_of[i]])
            else:
                s = inputs.statics[i]
                env[ph] = _TOKEN if s is None else s
            index_of[ph] = i
        n_inputs = len(offset_of)
        for node, lay in zip(program.constants, inputs.constant_layouts):  # tensors the graph holds
            if lay is not None:
                env[node] = storages.read(lay, offsets[n_inputs])
                n_inputs += 1
            else:
                value = getattr(program.gm, node.target)
                env[node] = jnp.asarray(transfer.torch_to_numpy(value.contiguous()))
        mutated = set()
        check_values = []
        for n_node, node in enumerate(program.nodes):
            self.current = node
            if node.target is aten.copy_.default and node.args[0].op == "placeholder":
                dst = node.args[0]
                meta = dst.meta["val"]
                value = typed(jnp.broadcast_to(env[node.args[1]], tuple(meta.shape)), meta.dtype, meta.shape)
                storages.write(inputs.layouts[index_of[dst]], value, offsets[offset_of[index_of[dst]]])
                mutated.add(index_of[dst])
                env[node] = value
                continue
            node_key = None if key is None else jax.random.fold_in(key, n_node)
            with CheckedCall() as checked:
                env[node] = self._eval(node, env, node_key)
            for ok, error, message, values in checked.checks:
                self.checks.append((node, error, message))
                check_values.append((ok, values))
        self.current = None
        results = []
        for out in _vals(self.program.output.args[0]):
            if isinstance(out, torch.fx.Node) and env[out] is _TOKEN:
                self.returns.append(Return(ReturnKind.CONSTANT, None))
            elif isinstance(out, torch.fx.Node):
                if out.op == "placeholder" and index_of[out] not in mutated:
                    self.returns.append(Return(ReturnKind.ARGUMENT, index_of[out]))
                    continue
                fake = out.meta["val"]
                r = typed(env[out], fake.dtype, fake.shape)
                # an output PyTorch returns as a lazy conjugate / negative view (ifft of a real input
                # ends in _conj) gets that bit too (`finish`): its storage holds the values before it
                if fake.is_conj():
                    r = jnp.conj(r)
                if fake.is_neg():
                    r = -r
                results.append(fresh_storage(r, tuple(fake.shape), tuple(fake.stride())))
                self.returns.append(Return(ReturnKind.FRESH, len(self.fresh)))
                self.fresh.append(FreshOutput(tuple(fake.shape), tuple(fake.stride()), fake.dtype,
                                              bool(fake.is_neg()), bool(fake.is_conj()), fake.device.type == "cpu"))
            else:
                self.returns.append(Return(ReturnKind.CONSTANT, out))
        self.write_slots = sorted({inputs.layouts[i].slot for i in mutated})
        results.extend(storages.written(self.write_slots))
        for _node, info, _api, _is_matrix in self.post_checks:
            results.append(info)
        if check_values:
            results.append(failure_rows(check_values))
        return tuple(results)

    def _eval(self, node, env, key):
        target = node.target
        args = torch.fx.node.map_arg(node.args, lambda n: env[n])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
        if target is operator.getitem:
            return args[0][args[1]]
        if target is torch.ops.higher_order.with_effects:
            return self._with_effects(node, args[1], args[2:], kwargs)
        if target in _AUTO_FUNCTIONALIZED:
            return self._auto_functionalized(node, args[0], kwargs, key)
        if target in _PY_OPS:
            return target(*args)
        if target is _RUN_AND_SAVE_RNG_STATE:
            return self._run_and_save_rng_state(node, args, kwargs, key)
        if target is _RUN_WITH_RNG_STATE:
            return self._run_with_rng_state(node, args, kwargs)
        if not isinstance(target, torch._ops.OpOverload):
            raise NEFFCompilationError(
                f"graph {self.program.name}: node '{node.name}' calls {target}, which the neuron backend "
                f"cannot compile (only ATen operators reach it after AOTAutograd)"
            )
        if target in _NO_OPS:
            return None
        if target in (aten.as_strided.default, aten.as_strided_scatter.default):
            base = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
            if isinstance(base, torch.Tensor) and not _dense_from_zero(base):
                return self._as_strided_on_storage(node, target, args, kwargs, base)
        return self._call(node, target, args, kwargs, key, node.meta.get("val"))

    def _as_strided_on_storage(self, node, target, args, kwargs, base):
        """as_strided indexes its input's storage, not its logical layout: lay the value out in a
        storage as the fake base says (strides, offset), apply the lowering there, read back."""
        a = normalize(target, args, kwargs)
        itemsize = base.element_size() or 1
        length = base.untyped_storage().nbytes() // itemsize
        sizes, strides, offset = tuple(base.shape), tuple(base.stride()), base.storage_offset()
        flat = layout.write(jnp.zeros((length,), a[0].dtype), a[0], sizes, strides, offset)
        a[0] = flat
        result = self._call(node, target, a, {}, None, node.meta.get("val"))
        if target is aten.as_strided_scatter.default:  # the new storage, seen through the base's view
            result = layout.read(result.reshape(-1), sizes, strides, offset)
        return result

    def _call(self, node, target, args, kwargs, key, val):
        """`target` on jax values: its lowering, or the host when it has none; `val` is the fake result."""
        lowering = LOWERINGS.get(target)
        if lowering is None:
            twin = _aten_twin(target)
            if twin is not None:
                return self._call(node, twin, args, kwargs, key, val)
            if target is torch.ops.prims.convert_element_type.default:
                return _cast_one(args[0], val)
            return self._host_call(node, target, args, kwargs, val)
        spec = spec_for(target)
        outs = call_lowering(spec, list(args), dict(kwargs), key)
        return _cast_like(outs[0] if spec.single_return else outs, val)

    def _run_and_save_rng_state(self, node, args, kwargs, key):
        """(the state, the random op's result drawn with `key`)."""
        op = args[0]
        items = _items(node)
        state_val = items[0].meta.get("val") if 0 in items else None
        result_val = items[1].meta.get("val") if 1 in items else None
        data = jax.random.key_data(key).reshape(-1)
        state = jax.lax.bitcast_convert_type(data, jnp.uint8).reshape(-1)
        if state_val is not None:  # a CPU generator's state, as the partitioner's sample says
            pad = int(state_val.numel()) - int(state.shape[0])
            state = typed(jnp.concatenate([state, jnp.zeros((max(pad, 0),), jnp.uint8)]), state_val.dtype,
                          state_val.shape)
        return state, self._call(node, op, list(args[1:]), dict(kwargs), key, result_val)

    def _run_with_rng_state(self, node, args, kwargs):
        """The random op again, with the key its forward run saved."""
        state, op = args[0], args[1]
        words = jax.lax.bitcast_convert_type(state.reshape(-1)[:8].reshape(2, 4), jnp.uint32)
        key = jax.random.wrap_key_data(words, impl="threefry2x32")
        val = node.meta.get("val")
        if val is None:  # the partitioner's node has none: its users (getitem per result) have them
            items = _items(node)
            if items:
                val = tuple(items[i].meta.get("val") if i in items else None for i in range(max(items) + 1))
        return self._call(node, op, list(args[2:]), dict(kwargs), key, val)

    def _with_effects(self, node, op, args, kwargs):
        """A side-effecting op, ordered by a token: (new token, *its results)."""
        if op is aten._linalg_check_errors.default:
            info, api_name = args[0], args[1]
            is_matrix = kwargs.get("is_matrix", args[2] if len(args) > 2 else True)
            # the info codes leave the executable; PyTorch's own check raises its message on the host
            self.post_checks.append((node, info, api_name, is_matrix))
            return (_TOKEN,)
        val = _vals(node.meta.get("val"))[1:]
        out = self._call(node, op, list(args), dict(kwargs), None, tuple(val) if len(val) != 1 else val[0])
        return (_TOKEN, *(out if isinstance(out, (tuple, list)) else (out,)))

    def _auto_functionalized(self, node, op, kwargs, key):
        """A mutating op, functionalized: its lowering on the arguments (v2: each mutated argument read
        from its base as it views it), then (its results, the new value of each mutated argument (v1) or
        of each base (v2)), as the HOP returns them."""
        lowering = LOWERINGS.get(op)
        if lowering is None:
            raise NEFFCompilationError(
                f"graph {self.program.name}: node '{node.name}' mutates its arguments through {op}, which has no "
                f"lowering: give it a jax kernel (torch_neuronx.register_jax_kernel)")
        schema = op._schema
        mutated = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        kwargs = dict(kwargs)
        kwargs.pop("_only_clone_these_tensors", None)
        bases = views = None
        if node.target is torch.ops.higher_order.auto_functionalized_v2:
            bases = list(kwargs.pop("_all_bases"))
            fakes = [n.meta["val"] for n in node.kwargs["_all_bases"]]
            views = {name: _BaseView.pop_from(kwargs, name, fakes) for name in mutated}
            for name, view in views.items():
                kwargs[name] = None if view is None else view.read(bases)
        arguments = {a.name: kwargs[a.name] for a in schema.arguments if a.name in kwargs}
        outs = call_lowering(spec_for(op), [], arguments, key)
        n_returns = len(schema.returns)
        val = _vals(node.meta.get("val"))
        results = [_cast_one(r, v) for r, v in zip(outs[:n_returns], val)]
        head = results if n_returns > 1 else [results[0] if results else None]
        new_values = list(outs[n_returns:])
        if bases is None:
            return (*head, *(None if v is None else _cast_one(v, f) for v, f in zip(new_values, val[len(head):])))
        for name, value in zip(mutated, new_values):
            view = views[name]
            if view is not None and value is not None:
                bases[view.index] = view.write(bases, value)
        return (*head, *(_cast_one(b, f) for b, f in zip(bases, val[len(head):])))

    def _host_call(self, node, op, args, kwargs, val):
        """An op with no lowering: run it on the host's CPU from inside the executable."""
        name = str(op)
        if runs_between_executables(op):
            raise NEFFCompilationError(
                f"graph {self.program.name}: op {name} (node '{node.name}') is a collective or a stream "
                f"op, which runs between executables (compile/split.py cuts a graph there), never inside one"
            )
        check_cpu_fallback(name, self.program.name, node.name, NEFFCompilationError, stacklevel=2)
        self.fallbacks.append(name)
        # torch's pytree: FX hands Tensor[] arguments and kwargs over as immutable_list/immutable_dict,
        # which jax's pytree takes for leaves (their tensors would reach the host as tracers)
        leaves, treedef = pytree.tree_flatten((args, kwargs))
        arr_pos = [i for i, x in enumerate(leaves) if isinstance(x, jax.Array)]
        vals = _vals(val)
        specs = [jax.ShapeDtypeStruct(tuple(v.shape), to_numpy_dtype(v.dtype)) for v in vals]

        program = self.program

        def on_host(*host_arrays):
            metrics.fell_back(name)
            filled = list(leaves)
            for i, a in zip(arr_pos, host_arrays):
                filled[i] = transfer.numpy_to_torch(np.array(a))
            cargs, ckwargs = pytree.tree_unflatten(filled, treedef)
            ckwargs = {k: (torch.device("cpu") if isinstance(v, torch.device) else v) for k, v in ckwargs.items()}
            try:
                out = op(*cargs, **ckwargs)
            except Exception as e:  # jax reports it as a callback failure; the caller names the op
                program.host_failures.append((node, e))
                raise
            return tuple(transfer.torch_to_numpy(o.contiguous()) for o in _vals(out))

        outs = jax.pure_callback(on_host, tuple(specs), *[leaves[i] for i in arr_pos])
        return outs if isinstance(val, (tuple, list)) else outs[0]


class _BaseView(NamedTuple):
    """How an auto_functionalized_v2 argument views its base: the base itself (or an alias), a slice
    along one dim, or as_strided on the base's storage (laid out as the base's fake value says)."""

    index: int  # which of `_all_bases`
    fake: torch.Tensor  # the base's fake value
    slice: tuple | None  # (dim, start, end)
    strided: tuple | None  # (size, stride, storage offset)

    @classmethod
    def pop_from(cls, kwargs, name, fakes) -> "_BaseView | None":
        if f"_{name}_length" in kwargs:
            raise NotImplementedError(f"a mutated Tensor[] argument ('{name}') of an auto-functionalized op")
        index = kwargs.pop(f"_{name}_base_index")
        kwargs.pop(f"_{name}_alias", None)
        if index is None:
            return None
        if f"_{name}_storage_offset" in kwargs:
            size, stride, offset = (kwargs.pop(f"_{name}_{k}") for k in ("size", "stride", "storage_offset"))
            return cls(index, fakes[index], None, (tuple(size), tuple(stride), offset))
        if f"_{name}_slice_dim" in kwargs:
            sliced = tuple(kwargs.pop(f"_{name}_slice_{k}") for k in ("dim", "start", "end"))
            return cls(index, fakes[index], sliced, None)
        return cls(index, fakes[index], None, None)

    def _bounds(self):
        dim, start, end = self.slice
        dim = dim % self.fake.dim()
        start, end, _ = slice(start, end).indices(self.fake.shape[dim])
        return dim, start, max(end, start)

    def _storage(self, base):
        """The base's value laid out in a storage as its fake value is, and that layout."""
        f = self.fake
        sizes, strides, offset = tuple(f.shape), tuple(f.stride()), f.storage_offset()
        length = f.untyped_storage().nbytes() // (f.element_size() or 1)
        return layout.write(jnp.zeros((length,), base.dtype), base, sizes, strides, offset), (sizes, strides, offset)

    def read(self, bases):
        base = bases[self.index]
        if self.slice is not None:
            dim, start, end = self._bounds()
            return jax.lax.slice_in_dim(base, start, end, axis=dim)
        if self.strided is not None:
            flat, _ = self._storage(base)
            return layout.read(flat, *self.strided)
        return base

    def write(self, bases, value):
        """The base with `value` written through this view."""
        base = bases[self.index]
        if self.slice is not None:
            dim, start, _end = self._bounds()
            return jax.lax.dynamic_update_slice_in_dim(base, value.astype(base.dtype), start, axis=dim)
        if self.strided is not None:
            flat, base_layout = self._storage(base)
            return layout.read(layout.write(flat, value, *self.strided), *base_layout)
        return value


def _dense_from_zero(t: torch.Tensor) -> bool:
    """`t` is its whole storage, row-major: its logical values are its storage."""
    return (t.storage_offset() == 0 and t.is_contiguous()
            and t.numel() * t.element_size() == t.untyped_storage().nbytes())


@functools.cache
def _aten_twin(op):
    """The lowered ATen op a `prims` op equals (same name, same positional arguments): PyTorch's
    decompositions leave a few prims (where, ...) in graphs."""
    if not isinstance(op, torch._ops.OpOverload) or op.namespace != "prims":
        return None
    packet = getattr(aten, op.__name__.split(".")[0], None)
    for overload in ("default", "self", "Tensor"):
        twin = getattr(packet, overload, None) if packet is not None else None
        if twin in LOWERINGS:
            mine = [str(a.type) for a in op._schema.arguments]
            theirs = [str(a.type) for a in twin._schema.arguments if not a.kwarg_only][: len(mine)]
            if mine == theirs:
                return twin
    return None


def _cast_like(results, val):
    """Each lowering result as the dtype (and, for a skipped output, the zeros) the fake value says."""
    if isinstance(val, (tuple, list)):
        if not isinstance(results, (tuple, list)):
            results = (results,)
        return tuple(_cast_one(r, v) for r, v in zip(results, val)) + tuple(results[len(val):])
    if isinstance(results, (tuple, list)):
        results = results[0]
    return _cast_one(results, val)


def _cast_one(r, v):
    if not isinstance(v, torch.Tensor):
        return r
    return typed(r, v.dtype, v.shape)
