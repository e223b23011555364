"""What a task message carries for observability: when it was sent (the queue wait).

Celery's own sends (chords, links, ``ANTWORT_FAST_PUBLISH=0``) get the header from the
``before_task_publish`` signal; :class:`broker.publish.TaskPublisher` writes it itself.
A worker reads it back as ``task.request.antwort_sent_at`` (protocol 2 headers are the request's
attributes).
"""

from __future__ import annotations

import time
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
