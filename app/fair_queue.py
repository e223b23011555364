"""A connection pool's queue that serves those waiting in the order they came.

redis-py's ``BlockingConnectionPool`` keeps its free connections in a ``queue.LifoQueue``. A
connection given back wakes the longest waiter, but a request arriving before that waiter runs
takes the connection first: under a flood of arrivals (10,000 clients connecting at once to one
gateway process) the oldest waiters were passed over again and again until their 30 s wait ran
out, while newer ones were served. Here a connection given back while someone has waited
``patience`` goes to the first of them, and an arrival then waits behind those already waiting.
Before that, a connection given back wakes the first waiter to take it as a newcomer would:
strict order from the first instant cost every request a wake-up where, out of order, the one
running anyway goes on (`/healthz` p99 56 ms against 40-47 ms at 5 s, 10,000 SSE streams
opening at once; ``bench/results/streams-scale.md``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from typing import Any


class _Waiter:
    """One ``get`` waiting: what it was handed, and the event that says so."""

    __slots__ = ("handed", "item", "ready", "since")

    def __init__(self) -> None:
        self.ready = threading.Event()  # gevent's, where gevent patched threading
        self.handed = False
        self.item: Any = None
        self.since = time.monotonic()


class FairLifoQueue:
    """Last in, first out for the items; first come, first served for those waiting.

    Passed as ``queue_class`` to ``redis.BlockingConnectionPool`` (a parameter of its own),
    which uses ``get(block=True, timeout=...)``, ``put_nowait`` and the items in ``queue``. Not a
    ``queue.LifoQueue`` subclass: under gevent's patching that name is gevent's queue, whose
    insides differ. Its locks and events are ``threading``'s, which gevent patches.

    ``put`` never waits: a full queue raises ``queue.Full`` (a pool puts back only what it took).
    ``patience`` 0: strictly in order.
    """

    def __init__(self, maxsize: int = 0, patience: float = 0.0) -> None:
        self.maxsize = maxsize
        self.patience = patience
        self.queue: list[Any] = []
        self.mutex = threading.Lock()
        self._waiters: deque[_Waiter] = deque()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """The last item put, unless someone waited past ``patience``: then wait behind."""
        with self.mutex:
            if self.queue and not self._overdue():
                return self.queue.pop()
            if not block:
                raise queue.Empty
            waiter = _Waiter()
            self._waiters.append(waiter)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            waiter.ready.wait(left)
            with self.mutex:
                if waiter.handed:
                    return waiter.item
                waiter.ready.clear()
                if self.queue:  # woken to take one as a newcomer would
                    self._waiters.remove(waiter)
                    item = self.queue.pop()
                    self._wake_for_kept()
                    return item
        with self.mutex:
            if waiter.handed:  # also when it was handed over just as the wait ran out
                return waiter.item
            self._waiters.remove(waiter)
            self._wake_for_kept()
        raise queue.Empty

    def _overdue(self) -> bool:
        """Whether the first waiter has waited ``patience`` (then nobody may pass it)."""
        return bool(self._waiters) and time.monotonic() - self._waiters[0].since >= self.patience

    def _wake_for_kept(self) -> None:
        """Wake the first waiter while an item is kept: it may take it (under ``mutex``)."""
        if self.queue and self._waiters:
            self._waiters[0].ready.set()

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """To the first waiter once it waited ``patience``; else kept, and that waiter woken."""
        with self.mutex:
            if self._overdue():
                waiter = self._waiters.popleft()
                waiter.item = item
                waiter.handed = True
                waiter.ready.set()
            elif 0 < self.maxsize <= len(self.queue):
                raise queue.Full
            else:
                self.queue.append(item)
            self._wake_for_kept()  # one kept, now or earlier: the first waiter may take it

    def put_nowait(self, item: Any) -> None:
        self.put(item, block=False)

    def qsize(self) -> int:
        return len(self.queue)

    def empty(self) -> bool:
        return not self.queue

    def full(self) -> bool:
        return 0 < self.maxsize <= len(self.queue)

    def waiting(self) -> int:
        """How many ``get`` calls wait for an item now."""
        with self.mutex:
            return len(self._waiters)


POOL_PATIENCE_SECONDS = 5.0
"""How long a request waits for a pooled connection before none may pass it."""


class PoolQueue(FairLifoQueue):
    """The fleet's pools' queue (``queue_class``): in order once a waiter has waited 5 s."""

    def __init__(self, maxsize: int = 0) -> None:
        super().__init__(maxsize, patience=POOL_PATIENCE_SECONDS)
