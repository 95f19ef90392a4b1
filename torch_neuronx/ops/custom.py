"""Custom kernels: a user's jax function as the lowering of a torch.library op.

`add(op, fn)` puts `fn` into the lowering table as `op`'s lowering, in the table's convention
(`_registry`): it is called with every schema argument positionally (defaults filled in), tensors as
jax arrays, and returns the op's returns (a jax array each, a list for a Tensor[] return; a bare array
or a tuple), then the new value of each argument the op mutates, in schema order (None for one given
None). From there every caller of a lowering runs it as it runs the package's own: an eager op, a
fused run, a compiled graph's node, and a mutating op's `auto_functionalized` node in a graph.

What differs from the package's own lowerings:

- **The key.** The package's lowerings are keyed by the package's sources (the disk cache's
  environment); a user's code is not in them, so the Lowering carries a digest of it (`kernel_digest`:
  the function's code, constants, defaults, closure and the user code it calls, recursively), which
  the op's `OpSpec.name` (`protocol.KernelName`) spells into every op, run and plan key, and which a
  graph's structure digest takes in (`compile/graph.py`). An edited kernel is a new key; the same
  kernel in a new process is the same key.
- **Errors name the op.** An exception the kernel raises, and a result whose dtype or shape differs
  from what the op's fake (meta) kernel says, raise `CustomKernelError` naming the op (at trace time,
  once per signature), where a package lowering's result would be cast (`protocol.typed`).
- **A fake kernel can come from the kernel itself** (`fake_from_kernel`: `jax.eval_shape`).
"""
from __future__ import annotations

import functools
import hashlib
import sys
import types

import numpy as np
import torch

from ..runtime.lazy_jax import jax
from ..runtime.numpy_dtypes import to_numpy_dtype, to_torch_dtype
from . import specs, target_policy
from ._registry import LOWERINGS, Lowering, normalize


class CustomKernelError(RuntimeError):
    """A custom kernel raised, or returned what its op's fake kernel does not say; the message names the op."""


def add(op: torch._ops.OpOverload, fn, *, static=(), dynamic=()) -> Lowering:
    """Make jax function `fn` the lowering of `op` (a custom op, or any overload the package does not
    lower itself); `static`/`dynamic` as in `_registry.lower`. Registering again replaces the kernel."""
    check_op(op)
    previous = LOWERINGS.get(op)
    if previous is not None and previous.digest is None:
        raise ValueError(f"{op} is lowered by torch_neuronx itself; a custom kernel cannot replace its lowering")
    unknown = (set(static) | set(dynamic)) - {a.name for a in op._schema.arguments}
    if unknown:
        raise ValueError(f"custom kernel of {op}: {sorted(unknown)} are not arguments of it")
    digest = kernel_digest(fn, (sorted(static), sorted(dynamic)))
    lowering = Lowering(op, _checked(op, fn), frozenset(static), frozenset(dynamic), digest=digest)
    LOWERINGS[op] = lowering
    specs.forget(op)  # a spec of the old kernel would keep its lowering and its key
    return lowering


def check_op(op) -> None:
    """What a jax kernel can implement: tensor returns, mutated arguments that are tensors."""
    if not isinstance(op, torch._ops.OpOverload):
        raise TypeError(f"a custom kernel is registered for an OpOverload, not a {type(op).__name__} ({op!r})")
    schema = op._schema
    for a in schema.arguments:
        if a.alias_info is not None and a.alias_info.is_write and str(a.type) not in ("Tensor", "Optional[Tensor]"):
            raise NotImplementedError(f"{op}: argument '{a.name}' is a mutated {a.type}; a jax kernel can mutate "
                                      f"Tensor arguments only")
    for r in schema.returns:
        if r.alias_info is not None and not r.alias_info.is_write:
            raise NotImplementedError(f"{op} returns a view of an input; a jax kernel returns new values only")
        if str(r.type) not in ("Tensor", "List[Tensor]"):
            raise NotImplementedError(f"{op} returns {r.type}; a jax kernel returns tensors only")
    if _list_return(schema) and _written(schema):
        raise NotImplementedError(f"{op}: a Tensor[] return beside mutated arguments is not supported")


def _written(schema) -> list:
    return [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]


def own_returns(schema) -> list:
    """The returns the kernel computes (an in-place op's return of its mutated argument is not one)."""
    return [r for r in schema.returns if r.alias_info is None]


def _list_return(schema) -> bool:
    return len(schema.returns) == 1 and str(schema.returns[0].type) == "List[Tensor]"


def _outputs(schema, out) -> tuple:
    """The kernel's outputs as `protocol.call_lowering` takes them: one per own return, then one per
    mutated argument (a bare value is the one output; a Tensor[] return's list is one output)."""
    if not isinstance(out, (tuple, list)) or _list_return(schema):
        return (out,)
    return tuple(out)


def qualified_name(fn) -> str:
    return f"{getattr(fn, '__module__', None)}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def _checked(op, fn):
    """`fn` as `op`'s lowering: an exception it raises, and an output PyTorch would not give (its fake
    kernel says), become a CustomKernelError naming the op."""
    name = qualified_name(fn)
    schema = op._schema

    @functools.wraps(fn)
    def lowering(*args):
        try:
            out = fn(*args)
        except Exception as e:
            raise CustomKernelError(f"{op}: its jax kernel {name} raised {type(e).__name__}: {e}") from e
        _check_outputs(op, name, args, _outputs(schema, out))
        return out

    return lowering


# ---- the outputs against the op's fake kernel


def _meta(value):
    """A traced argument as the op's meta call takes it."""
    if isinstance(value, jax.Array):
        return torch.empty(tuple(value.shape), dtype=to_torch_dtype(value.dtype), device="meta")
    if isinstance(value, (list, tuple)):
        return type(value)(_meta(v) for v in value)
    if isinstance(value, torch.device):
        return torch.device("meta")
    if isinstance(value, torch.Generator):
        return None
    return value


def _expected(op, args) -> list:
    """Per kernel output: (what, numpy dtype, shape), a list of them for a Tensor[] return, or None
    (a mutated argument given None): the op's returns as its meta call gives them, then each mutated
    argument as it came in."""
    schema = op._schema
    positional, keywords = [], {}
    for a, v in zip(schema.arguments, args):
        if isinstance(v, jax.Array) and "Tensor" not in str(a.type):
            # a traced number (a Scalar, a `dynamic` float): its kind is what the meta call reads
            v = {"f": 1.0, "c": 1j, "b": True}.get(np.dtype(v.dtype).kind, 1)
        else:
            v = _meta(v)
        if a.kwarg_only:
            keywords[a.name] = v
        else:
            positional.append(v)
    with torch.no_grad():
        out = op(*positional, **keywords)
    outs = [out] if len(schema.returns) == 1 else list(out or ())
    expected = []
    for i, (r, o) in enumerate(zip(schema.returns, outs)):
        if r.alias_info is not None:
            continue  # an in-place op's return is its mutated argument, below
        if isinstance(o, (list, tuple)):
            expected.append([(f"result {i}[{j}]", to_numpy_dtype(t.dtype), tuple(t.shape)) for j, t in enumerate(o)])
        else:
            expected.append((f"result {i}", to_numpy_dtype(o.dtype), tuple(o.shape)))
    by_name = dict(zip([a.name for a in schema.arguments], args))
    for name in _written(schema):
        v = by_name[name]
        expected.append(None if v is None else (f"the new value of '{name}'", np.dtype(v.dtype), tuple(v.shape)))
    return expected


def _spell(dtype, shape) -> str:
    return f"{str(to_torch_dtype(dtype)).removeprefix('torch.')}{list(shape)}"


def _check_outputs(op, name, args, outs) -> None:
    expected = _expected(op, args)
    if len(outs) != len(expected):
        n_own = len(own_returns(op._schema))
        raise CustomKernelError(
            f"{op}: its jax kernel {name} returned {len(outs)} values, where the op has {len(expected)} "
            f"({n_own} results, then the new value of each mutated argument: {_written(op._schema)})")
    # under a Trainium target 64-bit values run as 32-bit ones (target_policy): the kernel's are too
    narrowed = target_policy.active() is not None

    def check(got, want):
        what, dtype, shape = want
        if narrowed:
            dtype = target_policy.NARROWED.get(dtype, dtype)
        if not (hasattr(got, "shape") and hasattr(got, "dtype")):
            raise CustomKernelError(f"{op}: its jax kernel {name} returned a {type(got).__name__} for {what}, "
                                    f"not a jax array")
        if tuple(got.shape) != shape or np.dtype(got.dtype) != dtype:
            raise CustomKernelError(
                f"{op}: its jax kernel {name} returned {_spell(got.dtype, got.shape)} for {what}, where the op's "
                f"fake (meta) kernel says {_spell(dtype, shape)}")

    for got, want in zip(outs, expected):
        if want is None:
            continue
        if isinstance(want, list):
            if not isinstance(got, (list, tuple)) or len(got) != len(want):
                raise CustomKernelError(f"{op}: its jax kernel {name} returned {type(got).__name__} for a Tensor[] "
                                        f"return of {len(want)} tensors")
            for g, w in zip(got, want):
                check(g, w)
        else:
            check(got, want)


# ---- a fake kernel from the jax function


def fake_from_kernel(op, fn):
    """A fake (meta) kernel of `op` from jax function `fn` (the user's, unchecked): its outputs'
    shapes and dtypes by `jax.eval_shape`, as new contiguous tensors on the first tensor argument's
    device. Non-tensor arguments reach `fn` as Python values."""
    schema = op._schema
    n_own = len(own_returns(schema))

    def fake(*args, **kwargs):
        values = normalize(op, args, kwargs)
        structs, device = [], None

        def abstract(v):
            nonlocal device
            if isinstance(v, torch.Tensor):
                device = device or v.device
                structs.append(jax.ShapeDtypeStruct(tuple(v.shape), to_numpy_dtype(v.dtype)))
                return _Slot(len(structs) - 1)
            if isinstance(v, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in v):
                return [abstract(x) for x in v]
            return v

        template = [abstract(v) for v in values]

        def call(*arrays):
            def fill(v):
                if type(v) is _Slot:
                    return arrays[v.index]
                return [fill(x) for x in v] if isinstance(v, list) else v

            return fn(*[fill(v) for v in template])

        shapes = _outputs(schema, jax.eval_shape(call, *structs))[:n_own]
        device = device or next((v for v in values if isinstance(v, torch.device)), None)

        def empty(s):
            return torch.empty(tuple(s.shape), dtype=to_torch_dtype(s.dtype), device=device)

        results = [[empty(s) for s in out] if isinstance(out, (list, tuple)) else empty(out) for out in shapes]
        if not schema.returns:
            return None
        return results[0] if len(schema.returns) == 1 else tuple(results)

    return fake


class _Slot:
    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index


# ---- the digest of a kernel's code

# modules whose code is versioned already (the disk cache's environment names torch, jax, jaxlib and
# this package; numpy and the standard library change with them or with Python): functions from them
# are spelled by name, everything else (the user's code) by its code
_LIBRARIES = frozenset({"jax", "jaxlib", "numpy", "ml_dtypes", "torch", "torch_neuronx", "opt_einsum", "scipy",
                        "builtins"})
_MAX_OBJECT_DEPTH = 6  # objects the code reaches are spelled by their attributes this deep


def _is_library(module: str | None) -> bool:
    root = (module or "").partition(".")[0]
    return root in _LIBRARIES or root in sys.stdlib_module_names


def kernel_digest(fn, extra=()) -> str:
    """A digest of what `fn` computes, the same in every process for the same code: its code objects
    (bytecode, constants, names; not file names or line numbers), defaults, closure, the globals its
    code names (user functions recursively, values by value), and `extra`."""
    spelling = _Spelling()
    spelling.value(fn)
    spelling.value(extra)
    return hashlib.sha256("\x1f".join(spelling.out).encode()).hexdigest()[:32]


class _Spelling:
    def __init__(self):
        self.out: list[str] = []
        self.seen: dict[int, int] = {}  # id -> order: functions and objects spelled once (shared, cycles)
        self.alive: list = []  # what `seen` names stays alive, so no id is reused while spelling

    def _once(self, v) -> bool:
        """True the first time `v` is met; later meetings spell a reference to it."""
        if id(v) in self.seen:
            self.out.append(f"ref:{self.seen[id(v)]}")
            return False
        self.seen[id(v)] = len(self.seen)
        self.alive.append(v)
        return True

    def value(self, v, depth: int = 0) -> None:
        out, t = self.out, type(v)
        if v is None or t in (bool, int, float, complex, str, bytes):
            out.append(f"{t.__name__}:{v!r}")
        elif t in (tuple, list):
            out.append(f"{t.__name__}[{len(v)}]")
            for x in v:
                self.value(x, depth)
        elif t in (set, frozenset):
            out.append(f"{t.__name__}:{sorted(repr(x) for x in v)!r}")
        elif t is dict:
            out.append(f"dict[{len(v)}]")
            for k, x in v.items():
                self.value(k, depth)
                self.value(x, depth)
        elif isinstance(v, types.CodeType):
            self.code(v)
        elif isinstance(v, types.FunctionType):
            self.function(v)
        elif isinstance(v, functools.partial):
            out.append("partial")
            self.value(v.func, depth)
            self.value(v.args, depth)
            self.value(v.keywords, depth)
        elif isinstance(v, types.MethodType):
            out.append("method")
            self.value(v.__func__, depth)
            self.value(v.__self__, depth + 1)
        elif isinstance(v, types.ModuleType):
            out.append(f"module:{v.__name__}")
        elif isinstance(v, type):
            out.append(f"type:{v.__module__}.{v.__qualname__}")
        elif isinstance(v, (torch.dtype, torch.device, np.dtype)):
            out.append(f"{type(v).__name__}:{v}")
        elif isinstance(v, torch.Tensor):
            host = v.detach().to("cpu").contiguous().view(-1).view(torch.uint8)
            self.array(host.numpy(), f"{v.dtype}{list(v.shape)}")
        elif isinstance(v, (np.ndarray, np.generic, jax.Array)):
            a = np.asarray(v)
            self.array(a, f"{a.dtype.name}{list(a.shape)}")
        elif callable(v) and _is_library(getattr(v, "__module__", None)) and not hasattr(v, "__wrapped__"):
            out.append(f"library:{qualified_name(v)}")  # a builtin, a ufunc, a jax primitive's function
        else:
            self.obj(v, depth)

    def array(self, a: np.ndarray, what: str) -> None:
        self.out.append(f"array:{what}:{hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()}")

    def code(self, c: types.CodeType) -> None:
        self.out.append(f"code:{c.co_name}:{c.co_argcount}:{c.co_posonlyargcount}:{c.co_kwonlyargcount}:{c.co_flags}:"
                        f"{c.co_code.hex()}:{c.co_names!r}:{c.co_varnames!r}:{c.co_freevars!r}:{c.co_cellvars!r}")
        for const in c.co_consts:
            self.value(const)

    def function(self, fn: types.FunctionType) -> None:
        if _is_library(fn.__module__):
            self.out.append(f"library:{qualified_name(fn)}")
            return
        if not self._once(fn):
            return
        self.out.append(f"def:{qualified_name(fn)}")
        code = fn.__code__
        self.code(code)
        self.value(fn.__defaults__)
        self.value(fn.__kwdefaults__)
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            self.out.append(f"free:{name}")
            try:
                contents = cell.cell_contents
            except ValueError:  # a cell not filled yet
                self.out.append("empty")
                continue
            self.value(contents)
        names = _names(code)
        for name in sorted(names):
            if name in fn.__globals__:
                self.out.append(f"global:{name}")
                self.global_value(fn.__globals__[name], names)

    def global_value(self, v, names) -> None:
        """A global the code names; of a user module, the attributes the code names too (helpers.rms)."""
        if isinstance(v, types.ModuleType) and not _is_library(v.__name__):
            self.out.append(f"module:{v.__name__}")
            for attr in sorted(names):
                if hasattr(v, attr):
                    self.out.append(f".{attr}")
                    self.value(getattr(v, attr))
        else:
            self.value(v)

    def obj(self, v, depth: int) -> None:
        t = type(v)
        self.out.append(f"object:{t.__module__}.{t.__qualname__}")
        wrapped = getattr(v, "__wrapped__", None)
        if wrapped is not None:  # jax.jit(f), functools.wraps: the function inside
            self.value(wrapped, depth)
            return
        text = repr(v)
        if " at 0x" not in text:  # a repr that shows the value, not the address
            self.out.append(text)
            return
        attributes = getattr(v, "__dict__", None)
        if attributes is not None and depth < _MAX_OBJECT_DEPTH and self._once(v):
            self.value(dict(attributes), depth + 1)


def _names(code: types.CodeType) -> set:
    """Every name `code` and the code nested in it (lambdas, inner functions) look up."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names
