"""Streams and events over the asynchronous executor: what the device guard asks (csrc/device.cpp
forwards every stream and event call here through `_C._set_runtime_hooks`).

Every launch returns at once; the platform runs it when its inputs are ready, so what one launch
reads is fixed by data (the buffers as they were when it was launched, in program order), never by
timing. What a stream adds is completion: an event recorded on a stream completes only when every
launch made on that stream before it has finished (work on one stream completes in order), and when
every event that stream waited on (`wait_event`, `wait_stream`) has completed (waiting orders across
streams). A launch is remembered by a weak reference to its first output: a result nobody holds
any more has no effect left to wait for.

Timing (`Event(enable_timing=True)`): an event is stamped when it completes, by a timer thread that
waits for it (an event already complete when recorded is stamped at once); `elapsed_time` waits for
both stamps. The stamp is a host clock read when the platform reports the work done, so it includes
that wake-up (tens of microseconds; more when another thread holds the GIL).
"""
from __future__ import annotations

import collections
import threading
import time
import weakref

from .. import _C
from . import storage

_PRUNE_AT = 256  # a stream's launch list drops the launches whose outputs died when it grows past this


class _Event:
    __slots__ = ("launches", "after", "timing", "stamp", "stamped", "done")

    def __init__(self, launches, after, timing):
        self.launches = launches  # weak references to launches' first outputs
        self.after = after  # events that must complete first
        self.timing = timing
        self.stamp = None  # perf_counter_ns at completion (timing events)
        self.stamped = threading.Event() if timing else None
        self.done = False


class _Stream:
    __slots__ = ("launches", "after", "prune_at")

    def __init__(self):
        self.launches = []
        self.after = []  # the last event recorded here, and events this stream waited on
        self.prune_at = _PRUNE_AT


_streams: dict[tuple[int, int], _Stream] = {}
_events: dict[int, _Event] = {}
_lock = threading.Lock()
_prune_lock = threading.Lock()


def _stream(device: int, stream_id: int) -> _Stream:
    st = _streams.get((device, stream_id))
    if st is None:
        st = _streams.setdefault((device, stream_id), _Stream())
    return st


def _finished(ref) -> bool:
    # deleted: donated to a later launch, which is remembered in its own right
    arr = ref()
    return arr is None or arr.is_deleted() or arr.is_ready()


def current_stream(device: int) -> int:
    """The id of the calling thread's current stream of `device`."""
    return _C._current_stream(device)


def launched(device: int, output, stream_id: int | None = None) -> None:
    """Note a launch on `stream_id` of `device` (default: the calling thread's current stream) by
    one of its outputs."""
    st = _stream(device, _C._current_stream(device) if stream_id is None else stream_id)
    launches = st.launches
    launches.append(weakref.ref(output))
    if len(launches) > st.prune_at and _prune_lock.acquire(blocking=False):
        try:  # in place, up to what was there: other threads may append meanwhile (the default stream)
            n = len(launches)
            launches[:n] = [r for r in launches[:n] if r() is not None]
            # what stays is alive (held in storages): look again when the list has doubled
            st.prune_at = max(_PRUNE_AT, 2 * len(launches))
        finally:
            _prune_lock.release()


def _unfinished(ev: _Event) -> list[_Event]:
    """`ev` and the events it must wait for that are not done yet, each once, every event after
    the ones it waits for."""
    order, seen, stack = [], set(), [(ev, False)]
    while stack:
        e, expanded = stack.pop()
        if expanded:
            order.append(e)
        elif not e.done and id(e) not in seen:
            seen.add(id(e))
            stack.append((e, True))
            stack.extend((a, False) for a in e.after)
    return order


def _complete(ev: _Event) -> bool:
    """Whether `ev` has completed, without waiting (finished launches are dropped as found)."""
    parts = _unfinished(ev)
    for e in parts:
        e.launches = [r for r in e.launches if not _finished(r)]
        if e.launches:
            return False
    for e in parts:
        _mark_done(e)
    return True


def _mark_done(e: _Event) -> None:
    e.done, e.launches, e.after = True, [], []
    if e.timing and e.stamp is None:
        e.stamp = time.perf_counter_ns()
        e.stamped.set()


def _wait(ev: _Event) -> None:
    for e in _unfinished(ev):  # what it waits for first, each stamped as it completes
        for r in e.launches:
            arr = r()
            if arr is not None and not arr.is_deleted():
                arr.block_until_ready()
        _mark_done(e)


# ---- the timer: stamps timing events when they complete


_timer_queue: collections.deque = collections.deque()
_timer_wake = threading.Condition()
_timer_thread: threading.Thread | None = None


def _timer() -> None:
    while True:
        with _timer_wake:
            while not _timer_queue:
                _timer_wake.wait()
            ev = _timer_queue.popleft()
        _wait(ev)


def _stamp_later(ev: _Event) -> None:
    global _timer_thread
    with _timer_wake:
        if _timer_thread is None or not _timer_thread.is_alive():
            _timer_thread = threading.Thread(target=_timer, name="neuron-event-timer", daemon=True)
            _timer_thread.start()
        _timer_queue.append(ev)
        _timer_wake.notify()


# ---- what the guard calls (RuntimeHooks)


def record_event(event_id: int, device: int, stream_id: int, timing: bool) -> None:
    storage.sync("event")  # queued ops are launched: the event comes after them
    with _lock:
        st = _stream(device, stream_id)
        ev = _Event(st.launches, [e for e in st.after if not e.done], timing)
        st.launches, st.after = [], [ev]
        _events[event_id] = ev
    if not _complete(ev) and timing:
        _stamp_later(ev)


def block_event(event_id: int, device: int, stream_id: int) -> None:
    ev = _events.get(event_id)
    if ev is None or ev.done:
        return
    with _lock:
        _stream(device, stream_id).after.append(ev)


def query_event(event_id: int) -> bool:
    ev = _events.get(event_id)
    return ev is None or _complete(ev)


def synchronize_event(event_id: int) -> None:
    ev = _events.get(event_id)
    if ev is not None:
        _wait(ev)


def elapsed_time(start_id: int, end_id: int) -> float:
    start, end = _events.get(start_id), _events.get(end_id)
    if start is None or end is None:
        raise RuntimeError("Both events must be recorded before calculating elapsed time.")
    if not (start.timing and end.timing):
        raise ValueError("Both events must be created with argument 'enable_timing=True'.")
    for ev in (start, end):
        _wait(ev)
        ev.stamped.wait()
    return (end.stamp - start.stamp) / 1e6


def destroy_event(event_id: int) -> None:
    _events.pop(event_id, None)


def _stream_event(device: int, stream_id: int) -> _Event:
    """Everything launched on the stream so far, and what it waited on, as one (unrecorded) event."""
    with _lock:
        st = _stream(device, stream_id)
        return _Event(list(st.launches), list(st.after), False)


def query_stream(device: int, stream_id: int) -> bool:
    storage.sync("stream query")
    return _complete(_stream_event(device, stream_id))


def synchronize_stream(device: int, stream_id: int) -> None:
    from . import devices

    devices.check_not_forked()
    storage.sync("synchronize")
    _wait(_stream_event(device, stream_id))


def synchronize_device(device: int) -> None:
    storage.synchronize(None if device < 0 else device)


def empty_cache() -> None:
    storage.apply_events()
