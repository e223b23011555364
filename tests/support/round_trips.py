"""A Redis client that counts its round trips (commands or pipelines sent)."""

from __future__ import annotations

from typing import Any

import redis


class CountingConnection(redis.Connection):
    """A connection that counts what it sends: one command, or one pipeline, a round trip."""

    sent = 0

    def send_packed_command(self, *args: Any, **kwargs: Any) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(*args, **kwargs)


def counting_client(redis_url: str) -> redis.Redis:
    """A client over :class:`CountingConnection` (close it after)."""
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
    return redis.Redis(connection_pool=pool)
