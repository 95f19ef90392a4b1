"""Host buffers for collectives: what Gloo reads and writes in place of a tensor, and the write-back.

On the CPU platform a neuron tensor's device buffer is host memory, and Gloo works on it directly
(`eager.buffers.host_alias`): no copy in, none back. Gloo reads an input's buffer as it is (a later
write of the tensor makes a new buffer, so the collective never sees it) and writes an output's in
place, the storage held until the work is done (`storage.hold`: later reads and writes of it wait).
Where that cannot be (another platform, a view that is not contiguous, a buffer another storage
shares, a dtype Gloo does not carry), the values come to the host once and the result goes back once,
handed to the device without a second copy. A CPU tensor Gloo can take as it is goes to Gloo
directly. Dtypes Gloo does not carry travel as a same-width dtype it does (moves) or in a wider one
that gives the same bits (reductions).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..eager.buffers import host_alias, take_from_host, to_host
from ..runtime import storage
from ..runtime.transfer import host_empty

# what every collective of ProcessGroupGloo carries (measured on torch 2.13's Gloo); complex
# travels as its real view (Gloo's gather has no complex; SUM and AVG are componentwise)
GLOO_DTYPES = frozenset({
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
    torch.int32, torch.int64, torch.bool,
})
# moves: the same bits as a dtype of the same width
_MOVE_AS = {1: torch.uint8, 2: torch.float16, 4: torch.int32, 8: torch.int64}
# reductions: a dtype whose results, cast back, are the reduction's own (integer sums and products
# wrap the same way modulo the narrower width; float8 rounds once, at the end)
_REDUCE_IN = {
    torch.int16: torch.int32, torch.uint16: torch.int32, torch.uint32: torch.int64,
    torch.float8_e4m3fn: torch.float32, torch.float8_e5m2: torch.float32,
    torch.float8_e4m3fnuz: torch.float32, torch.float8_e5m2fnuz: torch.float32,
}
_INT64_MIN = -(2 ** 63)
_ORDER_OPS = (dist.ReduceOp.MIN, dist.ReduceOp.MAX)
_BITWISE_OPS = (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR)


def op_type(op):
    """The RedOpType of a ReduceOp (or of a RedOpType): `ReduceOp in (RedOpType, ...)` is always
    False, as RedOpType's == does not know ReduceOp."""
    return getattr(op, "op", op)


def op_name(op) -> str:
    """'SUM', 'AVG', ... for a ReduceOp or its RedOpType."""
    return str(op_type(op)).rsplit(".", 1)[-1]


def gloo_op(op, dtype: torch.dtype, collective: str):
    """The Gloo reduction that computes `op` (AVG is a SUM divided afterwards), with the error CUDA
    gives for an op the dtype has no meaning for (a RuntimeError, as theirs)."""
    kind = op_type(op)
    if kind == dist.ReduceOp.AVG:
        if dtype == torch.bool:
            raise RuntimeError(f"{collective}: ReduceOp.AVG is not supported for torch.bool")
        return dist.ReduceOp.SUM
    if kind in _BITWISE_OPS and (dtype.is_floating_point or dtype.is_complex):
        raise RuntimeError(f"{collective}: ReduceOp.{op_name(op)} is not supported for {dtype} (bitwise ops need an integer or bool dtype)")
    if kind in (*_ORDER_OPS, dist.ReduceOp.PRODUCT) and dtype.is_complex:
        raise RuntimeError(f"{collective}: ReduceOp.{op_name(op)} is not supported for {dtype}")
    if kind == dist.ReduceOp.PREMUL_SUM:
        raise NotImplementedError(f"{collective}: ReduceOp.PREMUL_SUM is not supported by the neuron backend")
    return op


class Staged:
    """One tensor of a collective and its host stand-in (`host`, what Gloo gets, once `load()`ed).

    `read`: Gloo reads the tensor's values; `write`: Gloo's result is written back by `finish()`.
    `reduce`: the reduction applied to it, if any (decides how an odd dtype travels). `scratch`: Gloo
    writes the host buffer though the result is not kept (a non-root rank of Gloo's reduce): it never
    aliases the tensor. `held`: the storage key Gloo writes in place, held until `finish()`."""

    def __init__(self, tensor: torch.Tensor, *, read: bool, write: bool, reduce=None, group_size: int = 1,
                 scratch: bool = False):
        self.tensor = tensor
        self.write = write
        self.average = reduce is not None and op_type(reduce) == dist.ReduceOp.AVG
        self.group_size = group_size
        self._reduce = reduce
        self._scratch = scratch
        direct = (tensor.device.type == "cpu" and tensor.dtype in GLOO_DTYPES and tensor.is_contiguous()
                  and not self.average)
        self._read = read and not direct
        self.staged = self.host = self._restore = None
        self.aliased = False
        self.held = 0
        if direct:
            self.host = tensor

    def load(self) -> None:
        """Give Gloo the device buffer itself where it can take it; else copy the tensor's values to
        the host if Gloo reads them (the process group overlaps this with the signature check's round
        trip), or make the host buffer it writes."""
        if self.host is not None:
            return
        t = self.tensor
        if t.device.type == "neuron" and t.dtype in GLOO_DTYPES and not self._scratch:
            alias = host_alias(t, write=self.write)
            if alias is not None:
                self.host, self.aliased = alias, True
                if self.write:
                    self.held = storage.storage_key(t)
                return
        if self._read:
            self._stage(to_host(t) if t.device.type != "cpu" else t.contiguous().clone())
        else:
            self._stage(host_empty(t.shape, t.dtype))

    def _stage(self, host: torch.Tensor) -> None:
        self.staged = host
        self.host, self._restore = _for_gloo(host, self._reduce)

    def finish(self) -> None:
        """Bring Gloo's result into the tensor (once the work is done)."""
        if self.aliased:
            if self.average:  # Gloo summed into the buffer: the mean goes there too
                self.host.copy_(_average(self.host, self.group_size, self.tensor.dtype))
            self.host = None  # the buffer's external reference: jax may donate it again
            return
        if not self.write:
            return
        result = self._restore(self.host) if self._restore is not None else self.host
        if self.average:
            result = _average(result, self.group_size, self.tensor.dtype)
        if self.staged is None:
            return  # Gloo wrote the tensor itself
        if result.dtype != self.tensor.dtype:
            result = result.to(self.tensor.dtype)
        if self.tensor.device.type == "neuron":
            take_from_host(self.tensor, result.contiguous())
        else:
            self.tensor.copy_(result)

    def holds(self) -> list[int]:
        """The storage keys Gloo writes in place (held until `finish()`)."""
        return [self.held] if self.held else []

    def lost(self, error: BaseException) -> None:
        """The work failed: a buffer Gloo was writing in place holds no result (any later use raises)."""
        if self.aliased and self.held:
            buf = storage.buffer(self.held)
            if buf is not None and not isinstance(buf, storage.Pending):
                storage.set_buffer(self.held, storage.Lost(buf.aval, f"{type(error).__name__}: {error}",
                                                           "the collective writing them"))
        self.host = None


class Unpacked:
    """Staged outputs that Gloo fills as one flat host buffer (`flat`), each its run of elements in
    order: `finish()` copies the runs into the outputs' host buffers, then writes them back."""

    def __init__(self, outputs: list[Staged]):
        self.outputs = outputs
        self.flat = None

    def load(self) -> None:
        for s in self.outputs:
            s.load()
        dtype = self.outputs[0].host.dtype if self.outputs else torch.uint8
        self.flat = torch.empty(sum(s.host.numel() for s in self.outputs), dtype=dtype)

    def finish(self) -> None:
        for s, run in zip(self.outputs, self.flat.split([s.host.numel() for s in self.outputs])):
            s.host.view(-1).copy_(run)
            s.finish()

    def lost(self, error: BaseException) -> None:
        for s in self.outputs:
            s.lost(error)

    def holds(self) -> list[int]:
        return [k for s in self.outputs for k in s.holds()]


def _for_gloo(host: torch.Tensor, reduce):
    """(the tensor Gloo gets, how to turn its result back into `host`'s dtype) for a host tensor."""
    dtype = host.dtype
    if dtype in GLOO_DTYPES:
        return host, None
    if dtype.is_complex:
        return torch.view_as_real(host), torch.view_as_complex
    if reduce is None:
        width = host.element_size()
        as_dtype = _MOVE_AS[width]
        view = host.view(as_dtype) if host.dim() else host.reshape(1).view(as_dtype).reshape(())
        return view, lambda r: r.view(dtype) if r.dim() else r.reshape(1).view(dtype).reshape(())
    if dtype == torch.uint64:
        signed = host.view(torch.int64)
        if op_type(reduce) in _ORDER_OPS:  # unsigned order is signed order with the top bit flipped
            flipped = signed ^ _INT64_MIN
            return flipped, lambda r: (r ^ _INT64_MIN).view(torch.uint64)
        return signed, lambda r: r.view(torch.uint64)
    wide = _REDUCE_IN.get(dtype)
    if wide is None:
        raise TypeError(f"collectives do not support {dtype} on the neuron backend")
    return host.to(wide), lambda r: r.to(dtype)


def _average(total: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_floating_point or dtype.is_complex:
        return (total.to(torch.float32) / n).to(dtype) if dtype.itemsize < 4 else total / n
    if not dtype.is_signed:  # torch has no integer division for uint16/32/64; numpy has
        return torch.from_numpy(total.numpy() // n)
    return torch.div(total, n, rounding_mode="trunc").to(dtype)
