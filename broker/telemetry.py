"""What a task message carries for observability: when it was sent, and its trace.

The send time gives the queue wait; the trace context (:func:`instrument_celery`) the task's
place in the response's trace. :func:`read_message` reads a waiting message (``antwort status``).

Celery's own sends (chords, links, ``ANTWORT_FAST_PUBLISH=0``) get the header from the
``before_task_publish`` signal; :class:`broker.publish.TaskPublisher` writes it itself.
A worker reads it back as ``task.request.antwort_sent_at`` (protocol 2 headers are the request's
attributes).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from celery import signals

from app.telemetry import tracing

SENT_AT = "antwort_sent_at"
"""Header: when the message was sent (epoch seconds, on the fleet's clock: :func:`now`)."""

_clock: Callable[[], float] = time.time


def use_clock(clock: Callable[[], float]) -> None:
    """Stamp sends and task starts by ``clock`` from now on: the fleet's, Redis's.

    A gateway's and a worker's entry point give their store's (``ResponseStore.now``,
    :mod:`app.store.clock`): a message sent on one host and taken on another is then timed on
    one clock, whatever the hosts' own say. Unset (tests, tools): the host's.
    """
    global _clock
    _clock = clock


def now() -> float:
    """Epoch seconds on the clock stamps use (:func:`use_clock`).

    The host's own while Redis's time cannot be read: a stamp is for watching (the queue wait,
    a message's age), and must never fail a send or a task.
    """
    try:
        return _clock()
    except redis.RedisError:
        return time.time()


def stamp(headers: dict[str, Any]) -> None:
    """Mark a message's headers with the time of its send."""
    headers[SENT_AT] = now()


def _before_publish(headers: dict[str, Any] | None = None, **_: Any) -> None:
    if headers is not None and SENT_AT not in headers:
        stamp(headers)


def install() -> None:
    """Stamp every message Celery itself sends from this process (idempotent)."""
    signals.before_task_publish.connect(_before_publish, weak=False, dispatch_uid="antwort.sent_at")


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedTask:
    """What a waiting task message says: the task, its response, when it was sent."""

    task: str
    response_id: str | None
    sent_at: float | None
    """Epoch seconds (None: a message sent without the header, by an older sender)."""


def read_message(raw: str) -> QueuedTask | None:
    """A task message as kombu's Redis transport stores it; None when it is not one."""
    try:
        message = json.loads(raw)
        headers = message["headers"]
        args = json.loads(base64.b64decode(message["body"]))[0]
    except (ValueError, KeyError, TypeError, IndexError):
        return None
    sent_at = headers.get(SENT_AT)
    return QueuedTask(
        task=str(headers.get("task")),
        response_id=str(args[0]) if args and isinstance(args[0], str) else None,
        sent_at=float(sent_at) if isinstance(sent_at, int | float) else None,
    )


def _carry_trace(headers: dict[str, Any] | None = None, **_: Any) -> None:
    if headers is not None:
        headers.update(tracing.carrier())


def instrument_celery() -> None:
    """Carry the current trace context in every message Celery itself sends from this process.

    Those are a chord's callback, a link, every send with ``ANTWORT_FAST_PUBLISH=0``;
    :mod:`broker.publish` does the same in ours. A worker's task runs in a span under it
    (:class:`workers.telemetry.TaskRecorder`).
    """
    signals.before_task_publish.connect(_carry_trace, weak=False, dispatch_uid="antwort.trace")


def uninstrument_celery() -> None:
    """Stop carrying the trace context in Celery's sends (tests)."""
    signals.before_task_publish.disconnect(dispatch_uid="antwort.trace")
