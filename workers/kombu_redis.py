"""kombu's Redis transport, with one Redis client per channel rather than one per operation.

kombu builds a new ``redis.Redis`` for every publish, ack and queue operation
(``Channel.conn_or_acquire``); redis-py 8's client constructor is costly enough that this shows
as several percent of a worker's and the gateway's CPU. A client only borrows a connection from
the channel's pool per command, so one per channel is safe across threads. It is rebuilt when
kombu replaces the channel's pool (after a connection error).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    """A channel that keeps its client."""

    _shared_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        """The given client, else the channel's own (built once per pool)."""
        if client:
            yield client
            return
        shared = self._shared_client
        if shared is None or shared.connection_pool is not self.pool:
            shared = self._shared_client = self._create_client()  # type: ignore[attr-defined]
        yield shared


class Transport(kombu_redis.Transport):
    """``redis://`` with :class:`Channel`."""

    Channel = Channel
