"""A graph with collectives or stream ops, cut into segments: each run of computation between them is
compiled as its own GraphProgram (its own executable, keyed by value and cached like any graph), and
the collectives run through the process group between them, eagerly, as the ops themselves on neuron
tensors; so do Dynamo's stream and event ops (`streams::fork`, `join`, `record_event`, `wait_event`,
`synchronize_*`, ...), which act on the device's streams. Nodes Dynamo traced under a stream context
(`with stream:`, meta `custom.stream`) run on that stream: where the annotation changes along the
graph, a step makes that stream current (the stream current at the call, for unannotated nodes).

A collective cannot live inside an executable here: the process group stages tensors on the host and
talks to the other ranks through Gloo, and a host callback inside the executable would run it where
jax chooses (the functional collectives are asynchronous: the callback would copy the result out
before it arrived). So the ATen graph AOTAutograd produced is partitioned:

- host nodes are the ops of the collective namespaces (`_c10d_functional`, `_c10d_functional_autograd`,
  `_dtensor`, `c10d`: each collective, its `wait_tensor`), the stream ops, and `getitem`s of their
  results; they run in graph order, so every rank issues its collectives in the same order;
- every other node goes to the earliest segment its inputs allow (segment i runs after host node i),
  and never before a stream op that precedes it in the graph (a stream op orders by position, not by
  data: what follows `fork` runs on the forked stream); an input mutation (`copy_` into a placeholder)
  to the last, after every read of the old value;
- each non-empty segment becomes a GraphModule whose nodes are named as a fresh trace names them
  (placeholders `arg0..`, constants `c0..`), so a segment repeated in the graph (a transformer block
  between its all-reduces) has one structure digest and compiles once.

`program_for(gm, ...)` gives a GraphProgram for a graph without host nodes, else a SplitProgram.
"""
from __future__ import annotations

import operator

import torch

from .. import metrics
from .errors import NEFFExecutionError
from .graph import GraphProgram, is_collective, is_stream_op, runs_between_executables

aten = torch.ops.aten


def _is_host(node, host: set) -> bool:
    if node.op != "call_function":
        return False
    if runs_between_executables(node.target):
        return True
    # an item of a collective's tuple result (the coalesced collectives) stays with it
    return node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node) and node.args[0] in host


def _stream_index(node):
    """The stream (an index among Dynamo's graph objects) a node was traced under, or None."""
    return (node.meta.get("custom") or {}).get("stream")


class _StreamSwitch:
    """A step that makes the stream of the nodes after it current (None: the call's own)."""

    all_input_nodes = ()
    target = None

    def __init__(self, index):
        self.index = index


def program_for(gm: torch.fx.GraphModule, name: str, kind: str, reason: str | None = None):
    """The callable that runs AOTAutograd graph `gm`: one GraphProgram, or a SplitProgram when the
    graph calls collectives or stream ops or runs nodes on a stream of its own."""
    if any(n.op == "call_function" and (runs_between_executables(n.target) or _stream_index(n) is not None)
           for n in gm.graph.nodes):
        return SplitProgram(gm, name, kind, reason)
    return GraphProgram(gm, name, kind, reason)


class SplitProgram:
    """AOTAutograd graph `gm` run as segments (GraphPrograms) and host nodes (collectives, stream ops)
    in turn."""

    def __init__(self, gm: torch.fx.GraphModule, name: str, kind: str, reason: str | None = None):
        self.gm = gm
        self.name = name
        self.kind = kind
        graph = gm.graph
        self.placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        self.constants = {n: _get_attr(gm, n.target) for n in graph.nodes if n.op == "get_attr"}
        self.output = next(n for n in graph.nodes if n.op == "output")
        host: set = set()
        host_order = []
        switch_before = {}  # node -> the stream switch right before it
        stream = None
        for n in graph.nodes:
            if _is_host(n, host):
                host.add(n)
                host_order.append(n)
            elif n.op == "call_function" and _stream_index(n) != stream:
                stream = _stream_index(n)
                switch_before[n] = _StreamSwitch(stream)
                host_order.append(switch_before[n])
        self.switches = bool(switch_before)
        position = {n: i + 1 for i, n in enumerate(host_order)}  # host node i runs before segment i
        level = {}
        last = len(host_order)
        barrier = 0  # the last stream op so far: nothing after it may run before it
        for n in graph.nodes:
            if n.op in ("placeholder", "get_attr"):
                level[n] = 0
            elif n in host:
                level[n] = position[n]
                if is_stream_op(n.target):
                    barrier = position[n]
            elif n.op == "call_function":
                if n in switch_before:
                    barrier = position[switch_before[n]]
                if n.target is aten.copy_.default and n.args[0].op == "placeholder":
                    level[n] = last  # the input's old value may be read until the end
                    continue
                deps = [level[a] for a in n.all_input_nodes]
                level[n] = max(deps + [barrier])
        # what each step runs: segment i (its nodes, in graph order), then host node i + 1
        seg_nodes = [[] for _ in range(last + 1)]
        for n in graph.nodes:
            if n.op == "call_function" and n not in host:
                seg_nodes[level[n]].append(n)
        used_later = _users_outside(graph, seg_nodes, host)
        self.steps = []  # ("segment", _SegmentRun) or ("host", node)
        self.segments = []
        for i, nodes in enumerate(seg_nodes):
            if nodes:
                seg = _SegmentRun(gm, nodes, used_later, f"{name}_seg{len(self.segments)}", kind, reason)
                self.segments.append(seg)
                self.steps.append(("segment", seg))
            if i < last:
                self.steps.append(("host", host_order[i]))
        self.collectives = sum(1 for n in host_order if n.target is not None and is_collective(n.target)
                               and n.target.name() != "_c10d_functional::wait_tensor")
        # when each value may be dropped: after the last step that reads it
        self._drop_after = _last_reads(self.steps, self.output)
        metrics.graph_split(name, kind, len(self.segments), self.collectives)

    def __call__(self, *args):
        env = dict(self.constants)  # a collective may read a constant the graph holds
        env.update(zip(self.placeholders, args))
        ambient = torch.accelerator.current_stream() if self.switches else None
        try:
            for i, (what, step) in enumerate(self.steps):
                if what == "segment":
                    outs = step.program(*[env[n] for n in step.inputs])
                    env.update(zip(step.outputs, outs))
                elif isinstance(step, _StreamSwitch):
                    torch.accelerator.set_stream(ambient if step.index is None else _graph_object(step.index))
                else:
                    env[step] = self._run_host(step, env)
                for n in self._drop_after.get(i, ()):
                    env.pop(n, None)
        finally:
            if ambient is not None:
                torch.accelerator.set_stream(ambient)
        return [env[o] if isinstance(o, torch.fx.Node) else o for o in _outputs(self.output)]

    def _run_host(self, node, env):
        args = torch.fx.node.map_arg(node.args, lambda n: env[n])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
        if node.target is operator.getitem:
            return args[0][args[1]]
        try:
            return node.target(*args, **kwargs)
        except Exception as e:
            what = "collective" if is_collective(node.target) else "stream op"
            raise NEFFExecutionError(
                f"graph {self.name}: {what} {node.target} (node '{node.name}'): {type(e).__name__}: {e}"
            ) from e


def _graph_object(index: int):
    """The object (a stream) Dynamo registered for the graph under `index`, as its stream ops read it."""
    from torch._dynamo.graph_bytecode_inputs import get_external_object_by_index

    return get_external_object_by_index(index)


def _outputs(output_node) -> list:
    out = output_node.args[0]
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _users_outside(graph, seg_nodes, host) -> set:
    """Nodes of a segment that something outside it reads (a host node, a later segment, the output)."""
    segment_of = {n: i for i, nodes in enumerate(seg_nodes) for n in nodes}
    needed = set()
    for n in graph.nodes:
        if n.op == "output":
            needed.update(a for a in n.all_input_nodes if a in segment_of)
            continue
        for a in n.all_input_nodes:
            if a in segment_of and (n in host or segment_of.get(n) != segment_of[a]):
                needed.add(a)
    return needed


def _last_reads(steps, output_node) -> dict:
    """step index -> the values no step after it (nor the output) reads."""
    last = {}
    for i, (what, step) in enumerate(steps):
        reads = step.inputs if what == "segment" else step.all_input_nodes
        for n in reads:
            last[n] = i
    kept = set(output_node.all_input_nodes)
    drop: dict = {}
    for n, i in last.items():
        if n not in kept:
            drop.setdefault(i, []).append(n)
    return drop


class _SegmentRun:
    """One segment: a GraphModule of its nodes (named afresh) and the GraphProgram that runs it."""

    def __init__(self, gm, nodes, used_later, name, kind, reason):
        mine = set(nodes)
        graph = torch.fx.Graph()
        new = {}
        self.inputs = []  # nodes of the whole graph this segment reads, in placeholder order
        holder = torch.nn.Module()
        constants = 0

        def value_of(a):
            nonlocal constants
            if a in new:
                return new[a]
            if a.op == "get_attr":  # a constant the graph holds: the segment holds it too
                attr = f"c{constants}"
                constants += 1
                setattr(holder, attr, _get_attr(gm, a.target))
                p = graph.get_attr(attr)
            else:
                p = graph.placeholder(f"arg{len(self.inputs)}")
                self.inputs.append(a)
            p.meta = dict(a.meta)
            new[a] = p
            return p

        for n in nodes:
            for a in n.all_input_nodes:
                if a not in mine:
                    value_of(a)
            args = torch.fx.node.map_arg(n.args, lambda a: new[a])
            kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: new[a])
            copy = graph.create_node(n.op, n.target, args, kwargs)
            copy.meta = dict(n.meta)
            new[n] = copy
        self.outputs = [n for n in nodes if n in used_later]
        graph.output(tuple(new[n] for n in self.outputs))
        self.gm = torch.fx.GraphModule(holder, graph)
        self.program = GraphProgram(self.gm, name, kind, reason)


def _get_attr(gm, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj
