"""A Redis client that loses replies on purpose: the command ran, its answer never came back.

That is what a Redis stop does to a call in flight. With retries (``app.fleet.outage_retry``)
the client sends the very same call again, as it does after a restart; without, the caller
gets the ``ConnectionError`` and must decide whether the call landed.
"""

from __future__ import annotations

from typing import Any

import redis

from app.fleet import outage_retry
from app.keys import Keys
from app.store import ResponseStore


class ReplyLosingConnection(redis.Connection):
    """A connection that drops the replies it is told to, after Redis ran the command."""

    replies_to_lose = 0

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        reply = super().read_response(*args, **kwargs)
        if ReplyLosingConnection.replies_to_lose > 0:
            ReplyLosingConnection.replies_to_lose -= 1
            raise redis.ConnectionError("the reply was lost (Redis stopped)")
        return reply


def lose_next_reply() -> None:
    """The next reply any :class:`ReplyLosingConnection` reads is lost."""
    ReplyLosingConnection.replies_to_lose = 1


def lossy_store(redis_url: str, key_prefix: str, *, retries: bool) -> ResponseStore:
    """A store over a client of :class:`ReplyLosingConnection` (close its ``redis`` after).

    ``retries``: the client rides out outages as the fleet's do (a lost reply sends the call
    again); else it raises at once.
    """
    retry = outage_retry(5) if retries else redis.retry.Retry(redis.backoff.NoBackoff(), 0)
    pool = redis.ConnectionPool.from_url(
        redis_url, connection_class=ReplyLosingConnection, retry=retry
    )
    client = redis.Redis.from_pool(pool)
    ReplyLosingConnection.replies_to_lose = 0
    return ResponseStore(client, keys=Keys(key_prefix), ttl_seconds=3600, stream_maxlen=1000)
