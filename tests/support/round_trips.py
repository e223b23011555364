"""A Redis client that counts its round trips (commands or pipelines sent).

A connection's upkeep is not counted: a new connection's handshake (``CLIENT SETINFO``,
``SELECT`` …) and a health-check PING come with the pool, whenever a thread finds no idle
connection, not with what a test measures.
"""

from __future__ import annotations

from typing import Any

import redis


class CountingConnection(redis.Connection):
    """A connection that counts what it sends: one command, or one pipeline, a round trip."""

    sent = 0
    _in_upkeep = False

    def send_packed_command(self, *args: Any, **kwargs: Any) -> None:
        if not self._in_upkeep:
            CountingConnection.sent += 1
        super().send_packed_command(*args, **kwargs)

    def on_connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        outer, self._in_upkeep = self._in_upkeep, True  # the handshake checks health too
        try:
            super().on_connect_check_health(*args, **kwargs)
        finally:
            self._in_upkeep = outer

    def check_health(self) -> None:
        outer, self._in_upkeep = self._in_upkeep, True
        try:
            super().check_health()
        finally:
            self._in_upkeep = outer


def counting_client(redis_url: str) -> redis.Redis:
    """A client over :class:`CountingConnection` (close it after)."""
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
    return redis.Redis(connection_pool=pool)
