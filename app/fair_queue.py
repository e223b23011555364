"""A connection pool's queue that serves those waiting in the order they came.

redis-py's ``BlockingConnectionPool`` keeps its free connections in a ``queue.LifoQueue``. A
connection given back wakes the longest waiter, but a request arriving before that waiter runs
takes the connection first: under a flood of arrivals (10,000 clients connecting at once to one
gateway process) the oldest waiters were passed over again and again until their 30 s wait ran
out, while newer ones were served. Here a connection given back while someone waits goes to the
first of them, and an arrival waits behind those already waiting.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Any


class _Waiter:
    """One ``get`` waiting: what it was handed, and the event that says so."""

    __slots__ = ("handed", "item", "ready")

    def __init__(self) -> None:
        self.ready = threading.Event()  # gevent's, where gevent patched threading
        self.handed = False
        self.item: Any = None


class FairLifoQueue:
    """Last in, first out for the items; first come, first served for those waiting.

    Passed as ``queue_class`` to ``redis.BlockingConnectionPool`` (a parameter of its own),
    which uses ``get(block=True, timeout=...)``, ``put_nowait`` and the items in ``queue``. Not a
    ``queue.LifoQueue`` subclass: under gevent's patching that name is gevent's queue, whose
    insides differ. Its locks and events are ``threading``'s, which gevent patches.

    ``put`` never waits: a full queue raises ``queue.Full`` (a pool puts back only what it took).
    """

    def __init__(self, maxsize: int = 0) -> None:
        self.maxsize = maxsize
        self.queue: list[Any] = []
        self.mutex = threading.Lock()
        self._waiters: deque[_Waiter] = deque()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """The last item put, unless others wait for one: then wait behind them."""
        with self.mutex:
            if not self._waiters and self.queue:
                return self.queue.pop()
            if not block:
                raise queue.Empty
            waiter = _Waiter()
            self._waiters.append(waiter)
        waiter.ready.wait(timeout)
        with self.mutex:
            if waiter.handed:  # also when it was handed over just as the wait ran out
                return waiter.item
            self._waiters.remove(waiter)
        raise queue.Empty

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """Hand ``item`` to the first waiter, or keep it when nobody waits."""
        with self.mutex:
            if self._waiters:  # someone waits only while the queue is empty
                waiter = self._waiters.popleft()
                waiter.item = item
                waiter.handed = True
                waiter.ready.set()
            elif 0 < self.maxsize <= len(self.queue):
                raise queue.Full
            else:
                self.queue.append(item)

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
