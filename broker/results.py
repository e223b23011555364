"""The fleet's result backend: Celery's Redis one, minus the subscriptions a chord leaves behind.

A worker sends a chord when a turn asks for several tool calls at once (:mod:`broker.dispatch`).
Nobody ever waits on a member's Celery result (tool tasks store none; the store holds what they
did), but Celery's Redis backend follows them twice, each time subscribing the sender to every
member's result channel:

- as it records the chord, it builds a ``GroupResult`` of the members only to see whether one
  is a group itself, and that result's ready barrier keeps the members' results pending, for
  the life of the worker (celery/celery#4824: 4.3 KB and two channels a two-call chord).
  :meth:`apply_chord` here looks at the members without building that result;
- as it sends the members, the group's own barrier follows each one weakly
  (``AsyncResult.then(…, weak=True)``). The result goes with the send and unsubscribes, but
  nobody reads the pub/sub connection's replies, so redis-py keeps each channel as subscribed
  and as leaving (474 B a two-call chord, each thread's connection its own) while the replies
  pile up on the socket. :meth:`add_pending_result` here follows no weak result.
"""

from __future__ import annotations

from typing import Any

from celery.backends.redis import RedisBackend, SentinelBackend
from celery.result import GroupResult

from app.redis_url import KOMBU_SENTINEL_SCHEME, KOMBU_SOCKET_SCHEME


class _ChordsLeaveNothing:
    """Celery's ``apply_chord`` and ``add_pending_result``, minus the follows nobody waits on."""

    def apply_chord(self, header_result_args: Any, body: Any, **kwargs: Any) -> None:
        """Save the header's structure when a member is a group, as Celery does; else nothing.

        ``header_result_args``: the group's id and its members' results: a list, or a lazy
        one (a list subclass) that Celery skips and so is handed on unread.
        """
        members = header_result_args[1]
        if type(members) is list and not any(isinstance(m, GroupResult) for m in members):
            return  # what Celery's would do, without subscribing to each member
        super().apply_chord(header_result_args, body, **kwargs)  # type: ignore[misc]

    def add_pending_result(
        self, result: Any, weak: bool = False, start_drainer: bool = True
    ) -> Any:
        """Follow ``result`` as Celery does, unless ``weak``.

        A weak result is one nobody holds (a group's barrier as it sends its members), so
        nobody will wait on it or read its channel.
        """
        if weak:
            return result
        return super().add_pending_result(  # type: ignore[misc]
            result, weak=weak, start_drainer=start_drainer
        )


class FleetRedisBackend(_ChordsLeaveNothing, RedisBackend):
    """``redis://``, ``rediss://`` and ``socket://`` (a Unix socket's)."""


class FleetSentinelBackend(_ChordsLeaveNothing, SentinelBackend):
    """``sentinel://`` (a Sentinel master's, as :func:`app.redis_url.celery_url` writes it)."""


def result_backend(url: str) -> str:
    """``url`` (the broker's) as Celery's ``backend`` argument: the backend class for its scheme.

    A Unix socket's URL loses its ``redis+``: the backend reads ``socket://``.
    """
    sentinel = url.startswith(f"{KOMBU_SENTINEL_SCHEME}://")
    backend = FleetSentinelBackend if sentinel else FleetRedisBackend
    if url.startswith(f"{KOMBU_SOCKET_SCHEME}://"):
        url = url.removeprefix("redis+")
    return f"{__name__}:{backend.__name__}+{url}"
