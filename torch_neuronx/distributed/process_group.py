"""`ProcessGroupNeuron`: the c10d process group of backend `neuron`, written in Python over Gloo.

Each collective stages its tensors on the host (`staging.Staged`), checks that every rank called the
same collective on the same shapes and dtypes (one small Gloo all-gather; TORCH_NEURONX_DIST_CHECKS=0
skips it), runs Gloo's collective asynchronously and returns a `NeuronWork` that writes the results
back when waited on. CPU tensors in the group go to Gloo as they are. Method names and arguments are
c10d's (`torch.distributed` calls them from Python, the functional collectives from C++).
"""
from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

from ..runtime import config, costs, storage
from .staging import Staged, Unpacked, gloo_op, op_name
from .work import PROBE_SECONDS, CompletedWork, NeuronWork, failure_error, lost_ranks

CHECKS_ENV = "TORCH_NEURONX_DIST_CHECKS"
_SIGNATURE_BYTES = 256
_INCARNATIONS: dict[str, int] = {}  # group name -> how many groups of that name this process made


def _nbytes(tensors) -> int:
    """The bytes of tensors given as a list (of lists)."""
    return sum(_nbytes(t) if isinstance(t, (list, tuple)) else t.numel() * t.element_size() for t in tensors)


class MismatchError(RuntimeError):
    """The ranks did not call the same collective on the same shapes and dtypes."""


def _reduce_op(opts):
    """The reduction c10d's options ask for (SUM when there are none)."""
    return opts.reduceOp if opts is not None else dist.ReduceOp.SUM


def checks_enabled() -> bool:
    return config.settings.dist_checks


def _sig(tensors) -> str:
    return ",".join(f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}" for t in tensors)


class _NoSplitting:
    """What c10d reads of a bound device's backend: whether it splits (`supports_splitting`)."""

    supports_splitting = False


class ProcessGroupNeuron(dist.ProcessGroup):
    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta, global_ranks=None, group_id=""):
        super().__init__(rank, size)
        self._store = store
        self._timeout = timeout
        self._global_ranks = list(global_ranks) if global_ranks else list(range(size))
        self._group_id = group_id
        # A group made again under the same name (init after destroy, an elastic restart) meets in the same
        # store, where the last one's addresses still sit: each incarnation rendezvous under its own prefix.
        # Every rank creates and destroys groups in the same order, so the count agrees across ranks.
        incarnation = _INCARNATIONS[group_id] = _INCARNATIONS.get(group_id, 0) + 1
        restart = config.settings.torchelastic_restart_count
        gloo_store = dist.PrefixStore(f"gloo/{restart}/{incarnation}/", store)
        # Gloo's own deadline leaves room, within the group's timeout, to find out who is gone
        self._probe_seconds = min(PROBE_SECONDS, timeout.total_seconds() / 4)
        gloo_timeout = timeout - datetime.timedelta(seconds=self._probe_seconds)
        self._gloo = dist.ProcessGroupGloo(gloo_store, rank, size, gloo_timeout)
        # the group's CPU backend: gives the group its name and serves `monitored_barrier`
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, self._gloo)
        self._seq = 0
        self._checks = checks_enabled()

    # -- identity ---------------------------------------------------------------------------
    def getBackendName(self) -> str:
        return "neuron"

    def name(self) -> str:
        return "neuron"

    def _get_backend(self, device):
        """c10d asks a group bound to a device (`init_process_group(device_id=...)`, `new_group` under
        it) for that device's backend, to split communicators from it: this group's neuron side is
        itself, and it does not split (new groups rendezvous on their own)."""
        if torch.device(device).type == "neuron":
            return _NoSplitting()
        return super()._get_backend(device)

    def _describe(self) -> str:
        return f"{self._group_id or '0'!r} (ranks {self._global_ranks})"

    def _global_rank(self, group_rank: int) -> int:
        return self._global_ranks[group_rank]

    # -- the common path --------------------------------------------------------------------
    def _start(self, collective: str, signature: str | None, staged: list, outputs: list, launch) -> NeuronWork:
        """Read the inputs to the host while checking agreement, then start Gloo's work (`launch()`
        -> a Gloo work or a list of them)."""
        self._seq += 1
        seq = self._seq
        check = None
        if self._checks and signature is not None and self.size() > 1:
            check = self._agree_start(collective, signature)
        for s in staged:  # the host copies overlap the check's round trip
            s.load()
        if check is not None:
            try:
                self._agree_finish(*check)
            except MismatchError:
                raise
            except RuntimeError as e:  # the round trip failed: say which ranks are gone
                raise self._failure(collective, seq, e) from e
        # Gloo checks its arguments as it enqueues (its errors pass as they are) and talks to the
        # other ranks later, in the work: NeuronWork.wait names lost ranks
        works = launch()
        costs.collective(collective, _nbytes(outputs), self.size())  # what it would take on the target
        works = works if isinstance(works, list) else [works]
        if not works:
            for s in staged:
                s.finish()
            return CompletedWork(outputs)
        work = NeuronWork(self, collective, seq, works, staged, outputs)
        for s in staged:  # device buffers Gloo writes in place: their storages wait for it
            for key in s.holds():
                storage.hold(key, work.wait)
        return work

    def _agree_start(self, collective: str, signature: str):
        """Start gathering every rank's signature: (the work, this rank's, everyone's)."""
        text = f"{collective} {signature}".encode()[: _SIGNATURE_BYTES - 2]
        mine = torch.zeros(_SIGNATURE_BYTES, dtype=torch.uint8)
        mine[:2] = torch.tensor([len(text) >> 8, len(text) & 0xFF], dtype=torch.uint8)
        mine[2:2 + len(text)] = torch.frombuffer(bytearray(text), dtype=torch.uint8)
        everyone = torch.empty(self.size() * _SIGNATURE_BYTES, dtype=torch.uint8)
        return self._gloo._allgather_base(everyone, mine), mine, everyone

    def _agree_finish(self, work, mine, everyone) -> None:
        """Raise on every rank when the ranks did not call the same collective on the same shapes."""
        work.wait()
        rows = everyone.view(self.size(), _SIGNATURE_BYTES)
        if bool((rows == mine).all()):
            return
        seen = []
        for r in range(self.size()):
            n = (int(rows[r, 0]) << 8) | int(rows[r, 1])
            seen.append(f"rank {self._global_rank(r)}: {bytes(rows[r, 2:2 + n].tolist()).decode(errors='replace')}")
        raise MismatchError(
            f"neuron process group {self._describe()}: the ranks called different collectives or passed "
            f"different shapes or dtypes: {'; '.join(seen)}"
        )

    def _failure(self, collective: str, seq: int, cause: BaseException) -> Exception:
        lost = lost_ranks(self._store, self.rank(), self.size(), seq, self._probe_seconds)
        return failure_error(self._describe(), collective, seq, cause, lost, self._global_rank, self._probe_seconds)

    def _stage(self, tensors, *, read: bool, write: bool, reduce=None, scratch: bool = False) -> list[Staged]:
        return [Staged(t, read=read, write=write, reduce=reduce, group_size=self.size(), scratch=scratch)
                for t in tensors]

    @staticmethod
    def _gloo_opts(kind, **fields):
        opts = kind()
        for k, v in fields.items():
            setattr(opts, k, v)
        return opts

    # -- reductions ---------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        op = _reduce_op(opts)
        staged = self._stage(tensors, read=True, write=True, reduce=op)
        ops = [gloo_op(op, t.dtype, "all_reduce") for t in tensors]

        def launch():
            return [self._gloo.allreduce([s.host], self._gloo_opts(dist.AllreduceOptions, reduceOp=o))
                    for s, o in zip(staged, ops)]

        return self._start("all_reduce", f"{op_name(op)} {_sig(tensors)}", staged, list(tensors), launch)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def reduce(self, tensors, opts):
        op, root = opts.reduceOp, opts.rootRank
        # Gloo's reduce leaves partial sums in a non-root rank's buffer: it gets a copy
        staged = self._stage(tensors, read=True, write=self.rank() == root, reduce=op, scratch=self.rank() != root)
        gop = gloo_op(op, tensors[0].dtype, "reduce")

        def launch():
            return self._gloo.reduce([s.host for s in staged],
                                     self._gloo_opts(dist.ReduceOptions, reduceOp=gop, rootRank=root, rootTensor=0))

        return self._start("reduce", f"{op_name(op)} root={root} {_sig(tensors)}", staged, list(tensors), launch)

    def reduce_scatter_single(self, output, inp, opts=None):
        return self.reduce_scatter_single_coalesced([output], [inp], opts)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        op = _reduce_op(opts)
        for o, i in zip(outputs, inputs):
            if i.numel() != o.numel() * self.size() or o.dtype != i.dtype:
                raise ValueError(
                    f"reduce_scatter_tensor: the input must hold {self.size()} x the output "
                    f"({o.numel()} {o.dtype} elements), got {i.numel()} {i.dtype}"
                )
        # before launching: a refused op is the caller's error, not a failed collective
        gops = [gloo_op(op, i.dtype, "reduce_scatter") for i in inputs]
        staged_out = self._stage(outputs, read=False, write=True, reduce=op)
        staged_in = self._stage(inputs, read=True, write=False, reduce=op)

        def launch():
            # flat: Gloo wants the input as the outputs concatenated along dim 0, NCCL any shape
            return [self._gloo._reduce_scatter_base(so.host.view(-1), si.host.view(-1),
                                                    self._gloo_opts(dist.ReduceScatterOptions, reduceOp=gop))
                    for so, si, gop in zip(staged_out, staged_in, gops)]

        return self._start("reduce_scatter_tensor", f"{op_name(op)} {_sig(inputs)}", staged_out + staged_in,
                           list(outputs), launch)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def reduce_scatter(self, outputs, input_lists, opts=None):
        """Each output gets the reduction of the ranks' inputs at this rank's position: one Gloo
        reduce-scatter per output, of its inputs concatenated on the host."""
        op = _reduce_op(opts)
        for o, inputs in zip(outputs, input_lists):
            for t in inputs:
                if t.shape != o.shape or t.dtype != o.dtype:
                    raise ValueError(f"reduce_scatter: every input must have the output's shape {list(o.shape)} "
                                     f"and dtype {o.dtype}, got {list(t.shape)} {t.dtype}")
        gops = [gloo_op(op, o.dtype, "reduce_scatter") for o in outputs]
        staged_out = self._stage(outputs, read=False, write=True, reduce=op)
        staged_in = [self._stage(inputs, read=True, write=False, reduce=op) for inputs in input_lists]

        def launch():
            return [self._gloo._reduce_scatter_base(so.host.view(-1), torch.cat([s.host.reshape(-1) for s in ins]),
                                                    self._gloo_opts(dist.ReduceScatterOptions, reduceOp=gop))
                    for so, ins, gop in zip(staged_out, staged_in, gops)]

        flat_in = [s for ins in staged_in for s in ins]
        return self._start("reduce_scatter", f"{op_name(op)} {_sig(outputs)}", staged_out + flat_in, list(outputs), launch)

    # -- moves ------------------------------------------------------------------------------
    def broadcast(self, tensors, opts):
        root = opts.rootRank
        is_root = self.rank() == root
        staged = self._stage(tensors, read=is_root, write=not is_root)

        def launch():
            return [self._gloo.broadcast([s.host], self._gloo_opts(dist.BroadcastOptions, rootRank=root, rootTensor=0))
                    for s in staged]

        return self._start("broadcast", f"root={root} {_sig(tensors)}", staged, list(tensors), launch)

    def all_gather_single(self, output, inp, opts=None):
        return self.all_gather_single_coalesced([output], [inp], opts)

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            if o.numel() != i.numel() * self.size() or o.dtype != i.dtype:
                raise ValueError(
                    f"all_gather_into_tensor: the output must hold {self.size()} x the input "
                    f"({i.numel()} {i.dtype} elements), got {o.numel()} {o.dtype}"
                )
        staged_out = self._stage(outputs, read=False, write=True)
        staged_in = self._stage(inputs, read=True, write=False)

        def launch():
            # flat: Gloo wants the output as the inputs concatenated along dim 0, NCCL any shape
            return [self._gloo._allgather_base(so.host.view(-1), si.host.view(-1)) for so, si in zip(staged_out, staged_in)]

        return self._start("all_gather_into_tensor", _sig(inputs), staged_out + staged_in, list(outputs), launch)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def allgather(self, output_lists, inputs, opts=None):
        staged_in = self._stage(inputs, read=True, write=False)
        staged_out = [self._stage(outs, read=False, write=True) for outs in output_lists]

        def launch():
            return self._gloo.allgather([[s.host for s in outs] for outs in staged_out], [s.host for s in staged_in])

        flat = [s for outs in staged_out for s in outs]
        # the work's result is the output tensors in one list, as Gloo's
        return self._start("all_gather", _sig(inputs), flat + staged_in, [s.tensor for s in flat], launch)

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        staged_in = self._stage(inputs, read=True, write=False)
        staged_out = [self._stage(outs, read=False, write=True) for outs in output_lists]
        n = len(inputs)

        def launch():
            # output_lists[r][i]: rank r's input i
            return [self._gloo.allgather([[staged_out[r][i].host for r in range(len(staged_out))]], [staged_in[i].host])
                    for i in range(n)]

        flat = [s for outs in staged_out for s in outs]
        return self._start("all_gather_coalesced", _sig(inputs), flat + staged_in, [s.tensor for s in flat], launch)

    def gather(self, output_lists, inputs, opts):
        root = opts.rootRank
        staged_in = self._stage(inputs, read=True, write=False)
        staged_out = [self._stage(outs, read=False, write=True) for outs in output_lists]

        def launch():
            return self._gloo.gather([[s.host for s in outs] for outs in staged_out], [s.host for s in staged_in],
                                     self._gloo_opts(dist.GatherOptions, rootRank=root))

        flat = [s for outs in staged_out for s in outs]
        return self._start("gather", f"root={root} {_sig(inputs)}", flat + staged_in, [s.tensor for s in flat], launch)

    def scatter(self, outputs, input_lists, opts):
        root = opts.rootRank
        staged_out = self._stage(outputs, read=False, write=True)
        staged_in = [self._stage(ins, read=True, write=False) for ins in input_lists]

        def launch():
            return self._gloo.scatter([s.host for s in staged_out], [[s.host for s in ins] for ins in staged_in],
                                      self._gloo_opts(dist.ScatterOptions, rootRank=root))

        flat = [s for ins in staged_in for s in ins]
        return self._start("scatter", f"root={root} {_sig(outputs)}", staged_out + flat, list(outputs), launch)

    def all_to_all_single(self, output, inp, output_split_sizes, input_split_sizes, opts=None):
        out_splits, in_splits = list(output_split_sizes), list(input_split_sizes)
        size = self.size()
        for name, t, splits in (("input", inp, in_splits), ("output", output, out_splits)):
            if splits and (len(splits) != size or sum(splits) != t.shape[0]):
                raise ValueError(f"all_to_all_single: {name} split sizes {splits} must be {size} sizes summing to "
                                 f"the {name}'s first dimension {t.shape[0]}")
            if not splits and t.dim() and t.shape[0] % size:
                raise ValueError(f"all_to_all_single: the {name}'s first dimension {t.shape[0]} must divide evenly "
                                 f"among {size} ranks when no split sizes are given")
        if self._checks and size > 1 and (out_splits or in_splits):
            self._agree_splits(inp, output, in_splits, out_splits)
        (staged_out,) = self._stage([output], read=False, write=True)
        (staged_in,) = self._stage([inp], read=True, write=False)

        def launch():
            return self._gloo.alltoall_base(staged_out.host, staged_in.host, out_splits, in_splits, dist.AllToAllOptions())

        sig = f"{str(inp.dtype).removeprefix('torch.')}{list(inp.shape[1:])}"
        return self._start("all_to_all_single", sig, [staged_out, staged_in], [output], launch)

    alltoall_base = all_to_all_single

    def _agree_splits(self, inp, output, in_splits, out_splits) -> None:
        """What each rank sends to this one must be what this one expects from it."""
        size = self.size()
        rows = inp.shape[0] // size if inp.dim() else 0
        sends = torch.tensor(in_splits or [rows] * size, dtype=torch.int64)
        got = torch.empty(size, dtype=torch.int64)
        self._gloo.alltoall_base(got, sends, [], [], dist.AllToAllOptions()).wait()
        expect = torch.tensor(out_splits or [output.shape[0] // size] * size, dtype=torch.int64)
        bad = [r for r in range(size) if int(got[r]) != int(expect[r])]
        if bad:
            r = bad[0]
            raise MismatchError(
                f"neuron process group {self._describe()}: all_to_all_single: rank {self._global_rank(r)} sends "
                f"{int(got[r])} rows to rank {self._global_rank(self.rank())}, which expects {int(expect[r])} "
                f"(output split sizes {expect.tolist()})"
            )

    def alltoall(self, outputs, inputs, opts=None):
        """One flat all_to_all_single split by element counts: Gloo's list all_to_all takes only
        tensors of one shape, NCCL's any."""
        staged_out = Unpacked(self._stage(outputs, read=False, write=True))
        staged_in = self._stage(inputs, read=True, write=False)

        def launch():
            flat_in = torch.cat([s.host.reshape(-1) for s in staged_in])
            return self._gloo.alltoall_base(staged_out.flat, flat_in, [s.host.numel() for s in staged_out.outputs],
                                            [s.host.numel() for s in staged_in], dist.AllToAllOptions())

        dtypes = ",".join(sorted({str(t.dtype) for t in inputs}))
        return self._start("all_to_all", dtypes, [staged_out, *staged_in], list(outputs), launch)

    # -- point to point and barrier ------------------------------------------------------------
    def send(self, tensors, dst: int, tag: int = 0):
        staged = self._stage(tensors, read=True, write=False)
        return self._start("send", None, staged, list(tensors), lambda: self._gloo.send([s.host for s in staged], dst, tag))

    def recv(self, tensors, src: int, tag: int = 0):
        staged = self._stage(tensors, read=False, write=True)
        return self._start("recv", None, staged, list(tensors), lambda: self._gloo.recv([s.host for s in staged], src, tag))

    def recv_anysource(self, tensors, tag: int = 0):
        staged = self._stage(tensors, read=False, write=True)
        return self._start("recv", None, staged, list(tensors), lambda: self._gloo.recv_anysource([s.host for s in staged], tag))

    def barrier(self, opts=None):
        # like CUDA's, a barrier also waits for this rank's queued device work
        from ..runtime import storage

        storage.synchronize()
        return self._start("barrier", None, [], [], lambda: self._gloo.barrier(opts or dist.BarrierOptions()))

    def shutdown(self) -> None:
        self._gloo.shutdown()

    def abort(self) -> None:
        self._gloo.abort()

