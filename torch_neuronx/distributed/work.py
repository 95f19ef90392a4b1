"""The work handle of a neuron collective: Gloo's work on the host buffers, then the write-back.

`wait()` waits for Gloo and writes the results into the tensors (once); `get_future()` does the same
when Gloo's futures complete. A failure is raised as `DistBackendError` naming the collective and
the ranks that are gone, found by asking the store which ranks still answer.
"""
from __future__ import annotations

import datetime
import threading
import time

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Work

from ..runtime import storage

# how long survivors of a failed collective wait for each other before calling a rank lost (at most;
# a group with a short timeout waits a quarter of it)
PROBE_SECONDS = 5.0


class NeuronWork(Work):
    def __init__(self, group, collective: str, seq: int, works: list, staged: list, outputs: list):
        super().__init__()
        self._group = group
        self._collective = collective
        self._seq = seq
        self._works = works
        self._source = None  # a finished recv's source rank
        self._staged = staged
        self._outputs = outputs
        self._lock = threading.Lock()
        self._finished = False
        self._error: BaseException | None = None

    def _finish(self) -> None:
        self._close(lambda s: s.finish())

    def _fail(self, error: BaseException) -> None:
        """The buffers Gloo was writing in place hold no result: their storages raise when used."""
        self._close(lambda s: s.lost(error))

    def _close(self, settle) -> None:
        """Once: `settle` each staged tensor, release the storages it held, and let go of Gloo's works
        (they hold the host tensors, some of them device buffers' own memory: a reference that keeps
        jax from donating those buffers to later launches)."""
        with self._lock:
            if self._finished:
                return
            for s in self._staged:
                settle(s)
                for key in s.holds():
                    storage.release(key)
            if self._collective == "recv" and self._error is None and self._works:
                self._source = self._works[0].source_rank()
            self._works, self._staged = [], []
            self._finished = True

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        if self._error is not None:
            raise self._error
        try:
            for w in list(self._works):
                if timeout is None or timeout == datetime.timedelta(0):
                    w.wait()
                else:
                    w.wait(timeout)
        except Exception as e:
            self._error = self._group._failure(self._collective, self._seq, e)
            self._fail(self._error)
            raise self._error from e
        self._finish()
        return True

    def is_completed(self) -> bool:
        return self._finished or all(w.is_completed() for w in list(self._works))

    def is_success(self) -> bool:
        if self._finished:
            return self._error is None
        return self.is_completed() and self._error is None and all(w.is_success() for w in list(self._works))

    def exception(self):
        return self._error

    def source_rank(self) -> int:
        if self._finished:
            return self._source
        return self._works[0].source_rank()

    # dist.recv(src=None) asks `_source_rank`, whose binding calls C++ Work's (which raises), not ours
    _source_rank = source_rank

    def result(self) -> list:
        return self._outputs

    def synchronize(self) -> None:
        self.wait()

    def get_future(self) -> torch.futures.Future:
        """Completes with the output tensors once their values are written."""
        works = list(self._works)
        if not works:  # finished already
            fut = torch.futures.Future()
            if self._error is not None:
                fut.set_exception(self._error)
            else:
                fut.set_result(self._outputs)
            return fut
        futures = [w.get_future() for w in works]
        done = futures[0] if len(futures) == 1 else torch.futures.collect_all(futures)

        def written(fut):
            try:
                fut.value()  # raises Gloo's error, if any
            except Exception as e:
                if self._error is None:
                    self._error = e
                self._fail(e)
                raise
            self._finish()
            return self._outputs

        return done.then(written)


class CompletedWork(Work):
    """Work with nothing left to do (a collective on one rank, an empty list)."""

    def __init__(self, outputs: list):
        super().__init__()
        self._outputs = outputs

    def wait(self, timeout=None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def result(self) -> list:
        return self._outputs

    def get_future(self) -> torch.futures.Future:
        fut = torch.futures.Future()
        fut.set_result(self._outputs)
        return fut


def lost_ranks(store, group_rank: int, size: int, seq: int, window: float) -> list[int] | None:
    """Group ranks that did not check in for failed collective `seq` within `window` seconds (None:
    the store itself is unreachable). Every survivor of the failure checks in, so the others wait."""
    try:
        store.set(f"neuron_alive/{seq}/{group_rank}", "1")
        deadline = time.monotonic() + window
        missing = [r for r in range(size) if r != group_rank]
        while missing:
            missing = [r for r in missing if not store.check([f"neuron_alive/{seq}/{r}"])]
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        return missing
    except Exception:
        return None


def failure_error(group_desc: str, collective: str, seq: int, cause: BaseException, lost, global_rank,
                  window: float) -> Exception:
    text = str(cause).strip().splitlines()
    detail = text[-1] if text else type(cause).__name__
    if lost is None:
        who = "the rendezvous store does not answer (the process hosting it may be gone)"
    elif lost:
        names = ", ".join(f"rank {global_rank(r)}" for r in lost)
        who = (f"{names} did not answer within {window:g} s: lost (the process exited or was killed), "
               f"or not in this collective")
    else:
        who = "every rank is still alive"
    return dist.DistBackendError(f"neuron process group {group_desc}: {collective} (collective #{seq}) failed: {who}. Gloo: {detail}")
