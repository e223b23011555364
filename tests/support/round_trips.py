"""A Redis client that counts its round trips (commands or pipelines sent).

A connection's upkeep is not counted: a new connection's handshake (``CLIENT SETINFO``,
``SELECT`` …) and a health-check PING come with the pool, whenever a thread finds no idle
connection, not with what a test measures.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import redis

UPKEEP_METHODS = ("on_connect_check_health", "check_health")
"""What a connection sends for itself: a new connection's handshake, a health-check PING."""


class Upkeep(threading.local):
    """Whether this thread is inside a connection's upkeep, where nothing sent is counted."""

    on = False

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        outer, self.on = self.on, True  # nested: the handshake checks health
        try:
            yield
        finally:
            self.on = outer


_UPKEEP = Upkeep()


class CountingConnection(redis.Connection):
    """A connection that counts what it sends: one command, or one pipeline, a round trip."""

    sent = 0

    def send_packed_command(self, *args: Any, **kwargs: Any) -> None:
        if not _UPKEEP.on:
            CountingConnection.sent += 1
        super().send_packed_command(*args, **kwargs)

    def on_connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        with _UPKEEP.held():
            super().on_connect_check_health(*args, **kwargs)

    def check_health(self) -> None:
        with _UPKEEP.held():
            super().check_health()


def counting_client(redis_url: str) -> redis.Redis:
    """A client over :class:`CountingConnection` (close it after)."""
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
    return redis.Redis.from_pool(pool)
