"""AOTAutograd's result for an inference graph, kept in the executable cache's folder, so that a new
process running the same model skips AOTAutograd (not only lowering and XLA).

Dynamo hands the backend the same graph in every process that runs the same model, and AOTAutograd
turns it into the same functional ATen graph. When its run-time wrapper does nothing (an inference
graph: no input is mutated, no output aliases an input or another output, no effect tokens, no
duplicated or nested inputs, no parameters held by the graph module, autocast off), that ATen graph
is all the backend needs: it is stored, with its nodes' fake values (torch's GraphPickler), under a
key made of the Dynamo graph's structure digest, each input's layout and grad flags, and the grad
mode. The next process loads it and makes the GraphProgram from it, whose executable comes from the
executable cache. Only a graph that calls torch's own functions and ATen ops qualifies: the code of a
user's custom op is not in the digest.
"""
from __future__ import annotations

import re
import threading

import torch

from .. import cache, metrics
from ..cache import Key
from .graph import structure_digest
from .split import program_for

KIND = "aot"  # the cache namespace of the records
_TORCH_OPS = ("torch.ops.aten", "torch.ops.prims")
_PLAIN_MODULES = ("_operator", "operator", "math", "builtins")
_DEVICE_INDEX = re.compile(r"device\(type='neuron', index=(\d+)\)")


def key_of(gm: torch.fx.GraphModule, example_inputs) -> Key | None:
    """The record key of Dynamo's graph `gm` called on `example_inputs`, or None when the graph
    does not qualify (see the module's docstring)."""
    if cache.executable_cache().disk is None:
        return None
    if next(gm.parameters(), None) is not None or next(gm.buffers(), None) is not None:
        return None
    if torch.is_autocast_enabled() or torch.is_autocast_enabled("cpu"):
        return None
    if not all(_torch_owned(n) for n in gm.graph.nodes):
        return None
    structure = structure_digest(gm)
    if structure is None:
        return None
    # the digest names neuron devices without their index; the graph AOTAutograd makes keeps it (a
    # graph with no tensor input runs on the device its code names)
    devices = tuple(_DEVICE_INDEX.findall(gm.code))
    sig = []
    storages = {}
    for i, x in enumerate(example_inputs):
        if type(x) in (torch.Tensor, torch.nn.Parameter):
            shared = storages.setdefault(x.untyped_storage().data_ptr(), i) if x.device.type == "neuron" else i
            sig.append((x.dtype, tuple(x.shape), tuple(x.stride()), x.storage_offset(), x.requires_grad,
                        x.device.type, shared))
        elif type(x) in (int, bool):
            sig.append(("static", x))
        else:
            return None
    # global state AOTAutograd's result depends on (Dynamo guards on it, but the graph's code does
    # not show it: a factory call without a dtype takes the default dtype)
    state = (torch.is_grad_enabled(), torch.get_default_dtype(), torch.are_deterministic_algorithms_enabled(),
             _functorch_settings())
    # a record is device-free: the devices its code names are part of its value
    return Key(KIND, (structure, devices, tuple(sig), state), None)


def _functorch_settings() -> str:
    import hashlib

    import torch._functorch.config as functorch_config

    text = repr(sorted((k, repr(v)) for k, v in functorch_config.get_config_copy().items()))
    return hashlib.sha256(text.encode()).hexdigest()


def _torch_owned(node) -> bool:
    if node.op in ("placeholder", "output", "get_attr", "call_method"):
        return True
    if node.op != "call_function":
        return False  # a call_module: the module's code is not in the digest
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return target.namespace in ("aten", "prims")
    if isinstance(target, torch._ops.OpOverloadPacket):  # has no `namespace`: any other name is an overload's
        return target._qualified_op_name.split("::")[0] in ("aten", "prims")
    module = getattr(target, "__module__", None) or ""
    return module == "torch" or module.startswith("torch.") or module in _PLAIN_MODULES


def remember(key: tuple, aten_graph: torch.fx.GraphModule, name: str) -> bool:
    """Store AOTAutograd's inference graph for `key`, if its run-time wrapper does nothing.

    Pickling the graph (GraphPickler: every node's fake value) costs as much as a tenth of a cold
    first call, and nothing in this process needs the record: it is written by a thread of its own,
    which runs while the graph's first call lowers it and XLA compiles it (XLA drops the GIL).
    `finish_records()` waits for it; the backend calls it when the graph's first call returns, so a
    record exists once the call that made it has returned (and at the latest when the process
    exits: the thread is not a daemon)."""
    if not _wrapper_does_nothing(aten_graph):
        return False
    thread = threading.Thread(target=_store, args=(key, aten_graph, name), name="torch_neuronx-aot-record")
    with _pending_lock:  # started before another thread's `finish_records` can see (and join) it
        thread.start()
        _pending.append(thread)
    return True


_pending: list[threading.Thread] = []
_pending_lock = threading.Lock()


def _store(key: tuple, aten_graph: torch.fx.GraphModule, name: str) -> bool:
    from torch.fx._graph_pickler import GraphPickler, Options

    try:
        body = GraphPickler.dumps(aten_graph, Options(ops_filter=lambda op: op.startswith(_TORCH_OPS)))
    except Exception:  # an op or a value GraphPickler refuses: AOTAutograd runs again next time
        return False
    return cache.executable_cache().save_record(key, name, body)


def finish_records() -> None:
    """Wait until every record this process started writing is written (or given up)."""
    while True:
        with _pending_lock:
            if not _pending:
                return
            thread = _pending.pop()
        thread.join()


def _wrapper_does_nothing(aten_graph) -> bool:
    from torch._functorch._aot_autograd.schemas import OutputType, PlainTensorMeta

    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None) if context is not None else None
    if meta is None:
        return False
    placeholders = [n for n in aten_graph.graph.nodes if n.op == "placeholder"]
    return (
        len(placeholders) == len(meta.input_info)
        and not any(i.mutates_data or i.mutates_metadata for i in meta.input_info)
        and all(o.output_type == OutputType.non_alias and not o.requires_grad for o in meta.output_info)
        and meta.num_intermediate_bases == 0
        and not meta.tokens
        and not meta.is_rng_op_functionalized
        and all(isinstance(m, (PlainTensorMeta, int)) or m is None for m in meta.subclass_inp_meta)
        and all(isinstance(m, (PlainTensorMeta, int)) or m is None for m in meta.subclass_fw_graph_out_meta)
    )


def load(key: tuple, name: str, reason: str | None):
    """The backend's callable for `key` made from a stored ATen graph, or None on a miss."""
    body = cache.executable_cache().load_record(key, f"{name}_inference")
    if body is None:
        return None
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx._graph_pickler import GraphPickler

    try:
        aten_graph = GraphPickler.loads(body, FakeTensorMode())
        program = program_for(aten_graph, f"{name}_inference", "inference", reason)
    except Exception:  # written by a torch that pickled differently: run AOTAutograd again
        cache.executable_cache().remove_record(key)
        return None
    metrics.aot_autograd_skipped(program.name)

    def forward(*args):
        return program(*args)

    return forward
