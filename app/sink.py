"""The event sink of a running turn: coalesces deltas, flushes to the store, notices cancels.

The first event after a quiet spell is flushed at once (time to first token stays low), unless
it only announces what comes next (``*.added``: it waits, at most one window, for the content
it announces); events that follow within the window are buffered, consecutive deltas of one part
are merged, and a process-wide flusher thread writes the buffer out when its window has passed.
Every flush is one Redis round trip (``ResponseStore.emit``), and its answer says whether the
response is still active: once it is not (cancelled, deleted), the next :meth:`EventSink.emit`
raises :class:`ResponseInactiveError` and the turn stops — :class:`LeaseLostError` when the
flush was refused because another run took the response's lease (the sink emits under its
run's lease: :mod:`app.store.fence`). What is still buffered when the turn
ends is :meth:`EventSink.take`-n into the turn's final write instead.

The window is ``coalesce_seconds`` while a process streams a few responses, and stretches by
one more of it for every :data:`STREAMS_PER_WINDOW` responses the process streams at once, up to
``max_coalesce_seconds``: a busy worker spends its CPU on more tokens per round trip rather than
on more round trips, and a client sees larger deltas, never later ones than the cap allows.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from dataclasses import dataclass

import redis

from app.protocol.events import Event, try_merge
from app.replay import ReplayGuard
from app.store import NO_FENCE, Fence, ResponseStore
from app.store.once import CallToken, Writer

logger = logging.getLogger(__name__)


class ResponseInactiveError(Exception):
    """The response was cancelled, finished or deleted elsewhere: stop working on it."""

    def __init__(self, status: str):
        super().__init__(f"response is {status or 'gone'}")
        self.status = status


class LeaseLostError(ResponseInactiveError):
    """Another run took the response's lease: it owns the response now; stop, touching nothing."""

    def __init__(self, status: str):
        Exception.__init__(self, f"another run holds the lease (response is {status or 'gone'})")
        self.status = status


STREAMS_PER_WINDOW = 4
"""Responses streamed at once by one process per base window of coalescing."""


class EventSink:
    """Buffered, ordered event emission for one response."""

    def __init__(
        self,
        store: ResponseStore,
        response_id: str,
        *,
        coalesce_seconds: float,
        max_coalesce_seconds: float | None = None,
        guard: ReplayGuard | None = None,
        fence: Fence = NO_FENCE,
    ):
        self._store = store
        self._fence = fence
        self._guard = guard
        self._response_id = response_id
        self._base_window = coalesce_seconds
        self._max_window = max(coalesce_seconds, max_coalesce_seconds or 0.0)
        self._buffer: list[Event] = []
        self._writer = Writer()
        self._unsent: _Batch | None = None
        """A flush that failed, kept with its token: it may have landed (a lost reply)."""
        self._lock = threading.Lock()
        self._last_flush = 0.0
        self.inactive_status: str | None = None
        """Set once a flush was refused; the status that refused it."""
        self.lease_lost = False
        """Set (with :attr:`inactive_status`) when the refusal was another run's lease."""
        _LIVE.add(self)

    def window(self) -> float:
        """The coalescing window now: the base one, stretched while the process is busy."""
        load = len(_LIVE) / STREAMS_PER_WINDOW
        return min(self._max_window, self._base_window * max(1.0, load))

    def emit(self, event: Event) -> None:
        """Queue one event (a copy: merging mutates the buffered one)."""
        if self._guard is not None:
            filtered = self._guard.filter(event)
            if filtered is None:
                return
            event = filtered
        with self._lock:
            self._raise_if_inactive()
            was_empty = not self._buffer
            if was_empty or not try_merge(self._buffer[-1], event):
                self._buffer.append(dict(event))
            now, window = time.monotonic(), self.window()
            is_due = now - self._last_flush >= window
            if is_due and not _announces(event):
                self._flush_locked()
            elif was_empty:  # the flusher writes out the whole buffer: one wake-up is enough
                _FLUSHER.schedule(self, now + window if is_due else self._last_flush + window)
        self._raise_if_inactive()

    def take(self) -> list[Event]:
        """Hand over what is buffered, for a write that carries it (the turn's last write).

        A flush that failed is sent first, on its own (its events may have landed already).

        Raises:
            ResponseInactiveError: a flush was refused; the response is no longer active.
            redis.RedisError: that failed flush failed again.
        """
        with self._lock:
            self._send_unsent()
            self._raise_if_inactive()
            events, self._buffer = self._buffer, []
        return events

    def flush(self) -> None:
        """Write out everything buffered now."""
        with self._lock:
            self._flush_locked()
        self._raise_if_inactive()

    def flush_quietly(self) -> None:
        """Flush from the background flusher: never raises, records inactivity instead."""
        with self._lock:
            try:
                self._flush_locked()
            except redis.RedisError:
                logger.warning("background flush of %s failed; retried later", self._response_id)

    def _flush_locked(self) -> None:
        self._last_flush = time.monotonic()
        self._send_unsent()
        if not self._buffer or self.inactive_status is not None:
            self._buffer.clear()
            return
        self._unsent = _Batch(call=self._writer.next_call(), events=self._buffer)
        self._buffer = []
        self._send_unsent()

    def _send_unsent(self) -> None:
        """Send the batch not known to be written; on a Redis error it stays for the next try.

        The retry carries the failed call's token: if the call landed and only its reply was
        lost, the store appends nothing again (:mod:`app.store.once`).
        """
        batch = self._unsent
        if batch is None or self.inactive_status is not None:
            self._unsent = None
            return
        result = self._store.emit(
            self._response_id, batch.events, fence=self._fence, call=batch.call
        )
        self._unsent = None
        if result.lease_lost:
            self.lease_lost = True
            self.inactive_status = result.status
        elif result.refused or result.last_sequence_number == -2:
            self.inactive_status = result.status

    def _raise_if_inactive(self) -> None:
        if self.lease_lost:
            raise LeaseLostError(self.inactive_status or "")
        if self.inactive_status is not None:
            raise ResponseInactiveError(self.inactive_status)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Batch:
    """Events of one flush and the token of their call."""

    call: CallToken
    events: list[Event]


def _announces(event: Event) -> bool:
    """``output_item.added``, ``content_part.added`` …: worth no round trip of their own."""
    return str(event["type"]).endswith(".added")


class _Flusher:
    """One daemon thread per process that flushes sinks when their window has passed.

    It is woken only when a sink is due before the time it already means to look again: a
    busy worker schedules sinks all the time, and most of them fall due after the next one
    already planned, so a thread switch per schedule would be a wake-up for nothing.
    """

    def __init__(self) -> None:
        self._due: weakref.WeakKeyDictionary[EventSink, float] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._wakeup = threading.Event()
        self._thread: threading.Thread | None = None
        self._looks_at = math.inf
        """When the thread looks at the due times next (``time.monotonic()``): -inf while it
        flushes (it looks again right after), +inf while it waits for a schedule."""
        self.wakeups = 0
        """How often :meth:`schedule` woke the thread (tests)."""

    def schedule(self, sink: EventSink, due: float) -> None:
        """Flush ``sink`` at ``due`` (``time.monotonic()``), or earlier if asked earlier."""
        with self._lock:
            self._due[sink] = min(due, self._due.get(sink, due))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="event-flusher", daemon=True)
                self._thread.start()
                self._looks_at = math.inf  # a new thread: nothing planned yet
            if due >= self._looks_at:
                return  # the thread looks before this one is due anyway
            self._looks_at = due
            self.wakeups += 1
        self._wakeup.set()

    def _run(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                due = [sink for sink, at in self._due.items() if at <= now]
                for sink in due:
                    del self._due[sink]
                next_at = min(self._due.values(), default=math.inf)
                self._looks_at = -math.inf if due else next_at
                self._wakeup.clear()
            for sink in due:
                sink.flush_quietly()
            if not due:
                self._wakeup.wait(None if next_at == math.inf else max(0.0, next_at - now))


_LIVE: weakref.WeakSet[EventSink] = weakref.WeakSet()
"""The sinks of this process's running turns (a sink goes with its turn)."""
_FLUSHER = _Flusher()
