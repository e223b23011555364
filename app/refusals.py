"""Redis refusing writes for a while: why, in words a client may read.

A Redis that is up may still refuse every write that would change its data until an operator
(or time) fixes its state, each with its own error:

- ``OOM``: at its ``maxmemory`` with ``noeviction``, every write that would grow it (deletes and
  expiries make room);
- ``MISCONF``: it could not save to its disk (an RDB snapshot or the AOF failed: a full or
  failing disk), every write (``stop-writes-on-bgsave-error``);
- ``NOREPLICAS``: fewer replicas in reach than ``min-replicas-to-write``, every write;
- ``READONLY``: a replica (a URL that names a demoted master), every write;
- ``MASTERDOWN``: a replica that lost its master (``replica-serve-stale-data no``), everything.

None is the request's fault or the fleet's code's: the client is told to retry (503), a worker's
consumer connects again (``broker_channel_error_retry``), and the fleet carries on when Redis
takes writes again.
"""

from __future__ import annotations

import logging
import re

import redis

from app.errors import ServiceUnavailableError, retry_later

logger = logging.getLogger(__name__)

_CODES = re.compile(r"(?:^|caused error: )(MISCONF|NOREPLICAS) ")
"""A refusal redis-py has no class for, by its code: first, or after a pipeline's preamble
("Command # 1 (…) of pipeline caused error: ")."""

_WHY = {
    "OOM": "is out of memory",
    "MISCONF": "cannot save to its disk",
    "NOREPLICAS": "has too few replicas in reach",
    "READONLY": "is a read-only replica",
    "MASTERDOWN": "has lost its master",
}


def described(exc: BaseException) -> str:
    """A Redis error for a log line: its kind and its message.

    redis-py's ``repr`` of an error is its kind alone ("network:ConnectionError"), which never
    says why; a traceback a second says it thirty lines at a time.
    """
    return f"{type(exc).__name__}: {exc}"


def refusal_of(exc: BaseException) -> str | None:
    """Why Redis refused the command, as "The server's store …" goes on; None: not a refusal."""
    if isinstance(exc, redis.OutOfMemoryError):
        return _WHY["OOM"]
    if isinstance(exc, redis.ReadOnlyError):
        return _WHY["READONLY"]
    if isinstance(exc, redis.exceptions.MasterDownError):
        return _WHY["MASTERDOWN"]
    if isinstance(exc, redis.ResponseError) and (found := _CODES.search(str(exc))):
        return _WHY[found.group(1)]
    return None


STORE_UNAVAILABLE_MESSAGE = "The server cannot reach its store right now; please retry."
"""What a client is told (503) when Redis stayed away past the outage a command rides out."""


def store_error(exc: BaseException) -> ServiceUnavailableError | None:
    """The 503 to retry a store error means (Redis away, or refusing), logged in one line.

    None: any other error, a bug of ours. The gateway answers the 503 over HTTP, a WebSocket
    session as an ``error`` event.
    """
    why = refusal_of(exc)
    if why is not None:
        logger.warning("answered 503, the store %s: %s", why, described(exc))
        return retry_later(store_message(why))
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        # or no pooled connection in time (app.fleet's pools wait 30 s for one)
        logger.warning("answered 503, the store is unavailable: %s", described(exc))
        return retry_later(STORE_UNAVAILABLE_MESSAGE)
    return None


def store_message(why: str) -> str:
    """What a client is told (503) when the store refused its request's write."""
    return f"The server's store {why} right now; please retry later."


def queue_message(why: str) -> str:
    """What a client is told (503) when the broker refused its request's work."""
    return f"The server's task queue {why} right now; please retry later."
