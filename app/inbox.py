"""A live follower's inbox: the messages the event hub hands it, and news of a quiet spell."""

from __future__ import annotations

import queue
import threading
import time
from collections import deque

from app.store.events import PublishedLine


class Inbox:
    """A listener's queue of live messages: one event flag, no per-wait locks or timers.

    Lighter than ``queue.Queue`` (whose every wait allocates a lock) and than a wait with a
    timeout (a timer each): a gateway holds one per open stream, thousands at once. Its
    follower learns of a quiet spell from the hub's ticker (:meth:`wake_if_quiet`).
    """

    __slots__ = ("_is_quiet", "_items", "_quiet_at", "_ready", "keepalive_seconds")

    def __init__(self, keepalive_seconds: float) -> None:
        self._items: deque[PublishedLine] = deque()
        self._ready = threading.Event()
        self._is_quiet = False
        self.keepalive_seconds = keepalive_seconds  # without a message: take() says quiet
        self._quiet_at = time.monotonic() + keepalive_seconds

    def put(self, messages: list[PublishedLine]) -> None:
        """Deliver messages, in order: the publishes the hub read together (from its thread)."""
        self._items.extend(messages)
        self._ready.set()

    def wake_if_quiet(self, now: float) -> bool:
        """Wake a follower that waited a keepalive long for nothing; whether it was woken."""
        if self._is_quiet or now < self._quiet_at:
            return False
        self._is_quiet = True
        self._ready.set()
        return True

    def take(self) -> list[PublishedLine]:
        """Every message waiting, in order (at least one), once there is one.

        All at once, so that a follower woken with several relays them as one write.

        Raises:
            queue.Empty: nothing came for ``keepalive_seconds`` (as the hub's ticker saw it).
        """
        self._quiet_at = time.monotonic() + self.keepalive_seconds
        while True:
            self._ready.clear()  # before looking: a put after this sets it again
            if self._items:
                self._is_quiet = False
                # One popleft each, not a copy and a clear: a put may land in between.
                return [self._items.popleft() for _ in range(len(self._items))]
            if self._is_quiet:
                self._is_quiet = False
                raise queue.Empty
            self._ready.wait()
