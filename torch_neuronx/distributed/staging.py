"""Host buffers for collectives: what Gloo reads and writes in place of a tensor, and the write-back.

A neuron tensor's values come to the host once (the copy Gloo needs: it works on host memory) and the
result goes back once, handed to the device without a second copy. A CPU tensor Gloo can take as it
is goes to Gloo directly. Dtypes Gloo does not carry travel as a same-width dtype it does (moves) or
in a wider one that gives the same bits (reductions).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..eager.buffers import take_from_host, to_host
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
    `reduce`: the reduction applied to it, if any (decides how an odd dtype travels)."""

    def __init__(self, tensor: torch.Tensor, *, read: bool, write: bool, reduce=None, group_size: int = 1):
        self.tensor = tensor
        self.write = write
        self.average = reduce is not None and op_type(reduce) == dist.ReduceOp.AVG
        self.group_size = group_size
        self._reduce = reduce
        direct = (tensor.device.type == "cpu" and tensor.dtype in GLOO_DTYPES and tensor.is_contiguous()
                  and not self.average)
        self._read = read and not direct
        self.staged = self.host = self._restore = None
        if direct:
            self.host = tensor
        elif not read:
            self._stage(host_empty(tensor.shape, tensor.dtype))

    def load(self) -> None:
        """Copy the tensor's values to the host if Gloo reads them (the process group overlaps this
        with the signature check's round trip)."""
        if self._read and self.staged is None:
            t = self.tensor
            self._stage(to_host(t) if t.device.type != "cpu" else t.contiguous().clone())

    def _stage(self, host: torch.Tensor) -> None:
        self.staged = host
        self.host, self._restore = _for_gloo(host, self._reduce)

    def finish(self) -> None:
        """Bring Gloo's result into the tensor (once the work is done)."""
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


class Unpacked:
    """Staged outputs that Gloo fills as one flat host buffer (`flat`), each its run of elements in
    order: `finish()` copies the runs into the outputs' host buffers, then writes them back."""

    def __init__(self, outputs: list[Staged]):
        self.outputs = outputs
        dtype = outputs[0].host.dtype if outputs else torch.uint8
        self.flat = torch.empty(sum(s.host.numel() for s in outputs), dtype=dtype)

    def load(self) -> None:
        """Nothing to read: the outputs are written only."""

    def finish(self) -> None:
        for s, run in zip(self.outputs, self.flat.split([s.host.numel() for s in self.outputs])):
            s.host.view(-1).copy_(run)
            s.finish()


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
