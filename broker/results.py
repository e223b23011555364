"""The fleet's result backend: Celery's Redis one, minus the subscriptions a chord leaves behind.

A worker sends a chord when a turn asks for several tool calls at once (:mod:`broker.dispatch`).
Celery's Redis backend, as it records the chord, builds a ``GroupResult`` of the members only
to see whether one is a group itself; that result's ready barrier subscribes the process to
every member's result channel and keeps the members' results pending. Nobody ever waits on
them (tool tasks store no result), so neither is ever let go (celery/celery#4824): measured,
4.3 KB and two Redis pub/sub channels for every two-call chord, for the life of the worker.
:meth:`apply_chord` here looks at the members without building that result.
"""

from __future__ import annotations

from typing import Any

from celery.backends.redis import RedisBackend, SentinelBackend
from celery.result import GroupResult

from app.redis_url import KOMBU_SENTINEL_SCHEME, KOMBU_SOCKET_SCHEME


class _ChordsLeaveNothing:
    """Celery's ``apply_chord``, called only when it has work to do (a member is a group)."""

    def apply_chord(self, header_result_args: Any, body: Any, **kwargs: Any) -> None:
        """Save the header's structure when a member is a group, as Celery does; else nothing.

        ``header_result_args``: the group's id and its members' results: a list, or a lazy
        one (a list subclass) that Celery skips and so is handed on unread.
        """
        members = header_result_args[1]
        if type(members) is list and not any(isinstance(m, GroupResult) for m in members):
            return  # what Celery's would do, without subscribing to each member
        super().apply_chord(header_result_args, body, **kwargs)  # type: ignore[misc]


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
