"""The CPU's argument checks for a compiled graph: what eager mode checks before its meta call
(`ops.argument_checks`, the one table both modes use), for the ATen calls of a Dynamo graph.

Dynamo traces with fake tensors, so an error a meta kernel raises reaches the user from the trace
(Dynamo's own TorchRuntimeError, the CPU's compiled mode raises the same). The CPU kernels' other
checks (matmul dtypes, convolution parameters, multinomial's sizes, out= dtypes and overlaps, a
number the dtype cannot hold) are not in any meta kernel: unchecked, a graph computed a wrong
answer or failed in jax. `first_error` runs the Dynamo graph once more on fake copies of its
inputs, as eager mode would dispatch it (before AOTAutograd's functionalization turns out= and
in-place calls into copies, and before its decompositions), and returns the first call the table
rejects. The graph's values are constants of the graph or part of Dynamo's guards, so the answer
holds for every call of the compiled graph: `Raises` stands in for it and raises the CPU's error,
the op named, when called, as the CPU's compiled graph raises from its kernel.
"""
from __future__ import annotations

import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..ops import argument_checks, out_checks


class _Rejected(Exception):
    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


class _Checking(TorchDispatchMode):
    """Every ATen call of the run checked as eager mode checks it, then run (on the fakes below); the
    graph node running (`node`) whose out= call computes in its out tensor's dtype is noted (`out_dtypes`)."""

    def __init__(self):
        super().__init__()
        self.node = None
        self.out_dtypes = {}  # node -> the dtype its out= call computes in

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            argument_checks.check(func, args, kwargs)
        except Exception as e:
            raise _Rejected(e) from None
        node = self.node
        if node is not None and "out" in node.kwargs and getattr(node.target, "__name__", None) == \
                func.overloadpacket.__name__:
            dtype = out_checks.dtype_from_out(func, args, kwargs)
            if dtype is not None:
                self.out_dtypes[node] = dtype
        return func(*args, **kwargs)


class _Run(torch.fx.Interpreter):
    def __init__(self, gm, checking: _Checking):
        super().__init__(gm)
        self.checking = checking

    def run_node(self, n):
        self.checking.node = n
        return super().run_node(n)


def first_error(gm: torch.fx.GraphModule, example_inputs) -> Exception | None:
    """The CPU's error for the first call of `gm` the argument checks reject, or None. A run that
    fails otherwise (an op fake tensors cannot run) stops the search: the graph compiles as before.

    A call `torch.sum(x, 0, out=y)` with `y` of another dtype than the sum's computes in `y`'s dtype on
    the CPU (`out_checks.dtype_from_out`), where AOTAutograd's functionalization would compute the
    functional sum and copy it into `y`: such a node of `gm` is given `dtype=y.dtype` (in place)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)  # a fresh one: the run's writes touch no value of Dynamo's
    inputs = [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in example_inputs]
    checking = _Checking()
    try:
        with mode, checking, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the graph's own warnings come from its real run
            _Run(gm, checking).run(*inputs)
    except _Rejected as rejected:
        return rejected.error
    except Exception:
        return None
    if checking.out_dtypes:
        for node, dtype in checking.out_dtypes.items():
            node.kwargs = {**node.kwargs, "dtype": dtype}
        gm.recompile()
    return None


class Raises:
    """The compiled graph of a call the CPU rejects: raises its error each time it is called."""

    def __init__(self, error: Exception):
        self.error_type, self.message = type(error), str(error)

    def __call__(self, *args):
        raise self.error_type(self.message)
