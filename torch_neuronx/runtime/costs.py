"""What each executable would cost on a Trainium core: XLA's cost analysis, kept with the executable,
turned into a time by the target's roofline.

At compile time (`analyze`, from `executables.compile_lowered`) an executable gets a `Cost`: its
product FLOPs by dtype (every dot and convolution of the optimized program, counted in the dtype its
operands came in, and the products and attention that run as torch's CPU kernels through custom
calls, which XLA's analysis cannot see),
the rest of XLA's FLOPs (elementwise work), its transcendentals and the bytes it reads and writes. The
`Cost` travels with the serialized executable (`executables.serialize`), so a warm start has it too.

Each launch adds one to its executable's count (`launched`); with TORCH_NEURONX_ESTIMATE=1 the launch is
also timed here (the launch waits for its outputs). A collective adds its own estimate (`collective`).
`estimate(cost, target)` is the roofline: the products at the tensor engines' dense rate for their dtype,
the elementwise FLOPs and transcendentals at the vector engines' rate, the bytes at the core's HBM
bandwidth; the larger of compute and memory, plus a fixed cost per launch. It ignores what overlaps and
what neuronx-cc fuses differently from XLA (docs/targets.md): read it as a lower bound.
"""
from __future__ import annotations

import dataclasses
import math
import re
import threading

from . import targets

DEFAULT_TARGET = "trn2"  # what estimates assume when TORCH_NEURONX_TARGET is unset


@dataclasses.dataclass
class Cost:
    """One executable's work (from its compiled program) and what was launched of it in this process."""

    products: dict  # dtype name -> FLOPs of its dots, convolutions, attention
    other_flops: float  # XLA's FLOPs that are not products (elementwise, reductions)
    transcendentals: float
    bytes: float  # bytes accessed, as XLA's analysis counts them (its fusions)
    name: str = ""  # what ran (an op, "a fused run of ...", "graph ..."), set at its first launch
    launches: int = 0
    measured_s: float = 0.0  # with TORCH_NEURONX_ESTIMATE=1: wall time of its launches here
    timed: int = 0  # launches timed

    @property
    def flops(self) -> float:
        return sum(self.products.values()) + self.other_flops

    def stored(self) -> tuple:
        """What the disk cache keeps of it (the work, not this process's launches)."""
        return (tuple(sorted(self.products.items())), self.other_flops, self.transcendentals, self.bytes)

    @classmethod
    def from_stored(cls, stored) -> "Cost":
        products, other, transcendentals, nbytes = stored
        return cls(dict(products), other, transcendentals, nbytes)


class Estimate:
    """A roofline time: compute and memory seconds, and the larger plus the fixed cost."""

    __slots__ = ("compute_s", "memory_s", "fixed_s")

    def __init__(self, compute_s: float, memory_s: float, fixed_s: float):
        self.compute_s, self.memory_s, self.fixed_s = compute_s, memory_s, fixed_s

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.memory_s) + self.fixed_s

    @property
    def compute_bound(self) -> bool:
        return self.compute_s >= self.memory_s


def estimate_target() -> targets.Target:
    """The target estimates are for: TORCH_NEURONX_TARGET, else a Trn2 logical core."""
    target = targets.current()
    if target is None:
        target = targets.target_named(DEFAULT_TARGET)
    return target


def estimate(cost: Cost, target: targets.Target | None = None) -> Estimate:
    target = target or estimate_target()
    compute = sum(flops / target.peak_flops(dtype) for dtype, flops in cost.products.items())
    compute += (cost.other_flops + cost.transcendentals) / target.vector_flops
    return Estimate(compute, cost.bytes / target.hbm_bandwidth, target.chip.launch_seconds)


# ---- the analysis

_KIND = re.compile(r"\s([a-z][a-z0-9\-]*)\(")  # an instruction's opcode, after its shape
_SHAPE = re.compile(r"([a-z]+[0-9a-z]*)\[([0-9,]*)\]")
_PARAMETER = re.compile(r"([\w.\-]+):\s*[a-z]+[0-9a-z]*\[")
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_TARGET = re.compile(r'custom_call_target="([^"]+)"')
_CONTRACTING = re.compile(r"lhs_contracting_dims=\{([0-9,]*)\}")
_DIM_LABELS = re.compile(r"dim_labels=[^_]+_([^-]+)->")

# XLA's element type names -> numpy's
_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "f64": "float64", "s8": "int8", "u8": "uint8",
           "s16": "int16", "s32": "int32", "s64": "int64", "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}
# what hands its first operand's values on (for where a product's operand came from)
_PASS_THROUGH = ("convert", "reshape", "transpose", "broadcast", "copy", "bitcast", "slice", "dynamic-slice", "pad",
                 "fusion")  # a fusion: its first operand (a view read out of a storage, a cast, a softmax)
_NARROW = ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")


def _shapes(text: str) -> list:
    """(dtype name, element count, dims) of each array shape in `text`, in order."""
    out = []
    for t, d in _SHAPE.findall(text):
        dims = [int(x) for x in d.split(",") if x]
        out.append((_DTYPES.get(t, t), math.prod(dims), dims))
    return out


def _operands(rest: str) -> list:
    """The operand names of an instruction (what follows its opcode's parenthesis)."""
    inside = rest.split(")", 1)[0]
    return [part.rsplit(" ", 1)[-1].lstrip("%") for part in inside.split(", ") if part] if inside else []


class _Module:
    """An HLO module's text, read once: each instruction's shape (parsed when asked), where values come
    from (through converts and layout ops, and from a fused computation's parameters to its caller's
    operands), and its products."""

    def __init__(self, text: str):
        self.shape_text: dict = {}
        self.sources: dict = {}
        self.params: dict = {}  # computation -> its parameter names in order
        self.products: list = []  # (opcode, name, rest)
        calls = []
        computation = None
        for line in text.splitlines():
            head, eq, rhs = line.partition(" = ")
            if not eq:
                if line.endswith("{") and "->" in line and "(" in line:  # a computation's header
                    computation = line.split("(", 1)[0].split()[-1].lstrip("%")
                    self.params[computation] = _PARAMETER.findall(line.split("->", 1)[0])
                continue
            m = _KIND.search(rhs)
            if m is None:
                continue
            name = head.strip().removeprefix("ROOT ").lstrip("%")
            kind, rest = m.group(1), rhs[m.end():]
            self.shape_text[name] = rhs[:m.start()]
            if kind in ("dot", "convolution", "custom-call"):
                self.products.append((kind, name, rest))
            if kind in _PASS_THROUGH:
                operands = _operands(rest)
                if operands:
                    self.sources[name] = operands[0]
            if kind in ("fusion", "call"):
                called = _CALLS.search(rest)
                if called:
                    calls.append((called.group(1), _operands(rest)))
        for called, operands in calls:
            for param, operand in zip(self.params.get(called, ()), operands):
                self.sources[param] = operand

    def shapes(self, name: str) -> list:
        return _shapes(self.shape_text.get(name, ""))

    def source_dtype(self, name: str) -> str | None:
        """A product operand's dtype as the model gave it: a 16-bit (or 8-bit) value converted to
        float32 to be multiplied (a lowering that accumulates in float32, XLA's CPU backend upcasting
        a bf16 dot) counts in its own dtype, at the rate a Trainium core multiplies it."""
        shapes = self.shapes(name)
        if not shapes:
            return None
        dtype = shapes[0][0]
        for _ in range(16):
            name = self.sources.get(name)
            if name is None:
                break
            shapes = self.shapes(name)
            if shapes and shapes[0][0] in _NARROW:
                return shapes[0][0]
        return dtype


def product_flops(hlo_text: str) -> tuple[dict, float]:
    """(FLOPs by operand dtype of every product in an HLO module's text, the part of them XLA's own
    analysis counts). A dot is 2 x its output's elements x its contracted size; a convolution 2 x
    output elements x the kernel's elements per output feature; the custom calls of
    `runtime.native_kernels` (torch's CPU kernels) by their own shapes. A product's dtype is the
    narrowest its two operands come from (a float32 softmax times bf16 values is a bf16 product on a
    Trainium core, which multiplies in its inputs' dtype)."""
    module = _Module(hlo_text)
    products: dict = {}
    counted_by_xla = 0.0
    for kind, name, rest in module.products:
        outputs = module.shapes(name)
        names = _operands(rest)
        operands = [(module.shapes(n) or [None])[0] for n in names]
        if not outputs or not operands or any(o is None for o in operands):
            continue
        sourced = [module.source_dtype(n) for n in names[:2]]
        dtype = next((d for d in sourced if d in _NARROW), operands[0][0])
        if kind == "dot":
            contracting = _CONTRACTING.search(rest)
            dims = operands[0][2]
            k = math.prod(dims[int(i)] for i in contracting.group(1).split(",") if i) if contracting else 1
            flops = 2.0 * outputs[0][1] * k
            counted_by_xla += flops
        elif kind == "convolution":
            labels = _DIM_LABELS.search(rest)
            kernel = operands[1]
            o = labels.group(1).index("o") if labels and "o" in labels.group(1) else len(kernel[2]) - 1
            flops = 2.0 * outputs[0][1] * (kernel[1] / max(kernel[2][o], 1))
            counted_by_xla += flops
        else:
            target = _TARGET.search(rest)
            flops = _custom_call_flops(target.group(1) if target else "", outputs, operands, rest)
            if not flops:
                continue
        products[dtype] = products.get(dtype, 0.0) + flops
    return products, counted_by_xla


def _custom_call_flops(target: str, outputs, operands, rest: str) -> float:
    """FLOPs of a native kernel's custom call (its operands may be read through a transpose: element
    counts, not dimensions, are what these use)."""
    if target in ("torch_neuronx_matmul", "torch_neuronx_addmatmul"):
        a, b = operands[-2], operands[-1]
        out = outputs[0]
        batch = math.prod(out[2][:-2]) if len(out[2]) > 2 else 1
        k = math.sqrt(a[1] * b[1] / max(out[1] * batch, 1))
        return 2.0 * out[1] * k
    if target == "torch_neuronx_attention":
        q, k = operands[0], operands[1]
        out, lse = outputs[0], outputs[1]  # (B, L, H, Dv), (B, H, L)
        length = lse[2][-1]
        head = q[1] / max(lse[1], 1)  # D
        keys = k[1] * length / max(q[1], 1)  # S
        head_v = out[1] / max(lse[1], 1)  # Dv
        return 2.0 * lse[1] * keys * (head + head_v)
    if target == "torch_neuronx_convolution":
        x, w = operands[0], operands[1]
        if re.search(r"transposed\s*=\s*true", rest):
            return 2.0 * x[1] * (w[1] / max(w[2][0], 1))
        return 2.0 * outputs[0][1] * (w[1] / max(w[2][0], 1))
    return 0.0


def analyze(compiled, hlo: str | None) -> Cost | None:
    """The Cost of a jax `Compiled` (None where the platform has no cost analysis), from its optimized
    program (`hlo`, its text: None where the platform gives none): XLA's analysis, and the products
    read off the program's text (every call inlined, so each product appears as often as it runs)."""
    if hlo is None:
        return None
    try:
        analysis = compiled.cost_analysis()
        if isinstance(analysis, (list, tuple)):  # older jax: one dict per program
            analysis = analysis[0] if analysis else {}
    except Exception:  # noqa: BLE001 (a platform without one: the executable has no estimate)
        return None
    products, counted = product_flops(hlo or "")
    flops = float(analysis.get("flops", 0.0) or 0.0)
    return Cost(products, max(flops - counted, 0.0), float(analysis.get("transcendentals", 0.0) or 0.0),
                float(analysis.get("bytes accessed", 0.0) or 0.0))


# ---- launches

_lock = threading.Lock()
_costs: list = []  # every Cost launched in this process, in order of first launch


def launched(cost: Cost, what: str, seconds: float | None) -> None:
    """One launch of `cost`'s executable (`seconds`: its wall time, where it was timed)."""
    if not cost.launches:
        cost.name = what
        with _lock:
            _costs.append(cost)
    cost.launches += 1
    if seconds is not None:
        cost.measured_s += seconds
        cost.timed += 1


@dataclasses.dataclass
class Collective:
    kind: str
    world: int
    bytes: float  # its outputs' bytes on this rank
    launches: int = 0
    measured_s: float = 0.0


_collectives: dict = {}


def collective_estimate(kind: str, nbytes: float, world: int, target: targets.Target | None = None) -> float:
    """Seconds for a collective over `world` logical cores of one chip, given the bytes of its outputs on
    this rank: what each core sends and receives in a ring (all-reduce 2(n-1)/n of its tensor, all-gather
    and all-to-all (n-1)/n of what it ends with, reduce-scatter (n-1) times its shard, broadcast and
    the rest their tensor) at the core's share of the chip's DMA bandwidth, plus a fixed cost."""
    target = target or estimate_target()
    n = max(world, 1)
    if kind.startswith("all_reduce"):
        moved = 2 * (n - 1) / n * nbytes
    elif kind.startswith(("all_gather", "all_to_all")):  # their _into_tensor, _coalesced, _single forms too
        moved = (n - 1) / n * nbytes
    elif kind.startswith("reduce_scatter"):
        moved = (n - 1) * nbytes
    else:  # broadcast, reduce, gather, scatter, send/recv, barrier
        moved = nbytes if n > 1 else 0.0
    return moved / target.collective_bandwidth + target.chip.collective_seconds


def collective(kind: str, nbytes: float, world: int, seconds: float | None = None) -> None:
    """One collective on this rank (`nbytes`: its outputs' bytes on this rank)."""
    key = (kind, world, nbytes)
    with _lock:
        entry = _collectives.get(key)
        if entry is None:
            entry = _collectives[key] = Collective(kind, world, nbytes)
        entry.launches += 1
        if seconds is not None:
            entry.measured_s += seconds


def launched_costs() -> list:
    with _lock:
        return list(_costs)


def collectives() -> list:
    with _lock:
        return list(_collectives.values())


def clear() -> None:
    """Forget the launches counted so far (the executables keep their analyses)."""
    with _lock:
        for cost in _costs:
            cost.launches, cost.measured_s, cost.timed, cost.name = 0, 0.0, 0, ""
        _costs.clear()
        _collectives.clear()
