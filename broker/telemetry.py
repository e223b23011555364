"""What a task message carries for observability: when it was sent (the queue wait).

:func:`read_message` reads it back from a waiting message (``antwort status``).

Celery's own sends (chords, links, ``ANTWORT_FAST_PUBLISH=0``) get the header from the
``before_task_publish`` signal; :class:`broker.publish.TaskPublisher` writes it itself.
A worker reads it back as ``task.request.antwort_sent_at`` (protocol 2 headers are the request's
attributes).
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass
from typing import Any

from celery import signals

SENT_AT = "antwort_sent_at"
"""Header: when the message was sent (epoch seconds)."""


def stamp(headers: dict[str, Any]) -> None:
    """Mark a message's headers with the time of its send."""
    headers[SENT_AT] = time.time()


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


def instrument_celery() -> None:
    """Trace Celery's sends and task runs (opentelemetry-instrumentation-celery).

    Its ``before_task_publish`` hook puts the current context in the headers of every message
    Celery sends (a chord's callback, a link); its ``task_prerun`` hook starts each task's span
    under the context its message carries, ours (:mod:`broker.publish`) included.
    """
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    instrumentor = CeleryInstrumentor()  # type: ignore[no-untyped-call]
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument()
