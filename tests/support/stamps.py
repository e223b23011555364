"""A task stamp for engine calls made by a test, as a worker sets it (``workers.telemetry``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from app.telemetry import stamps


@contextmanager
def as_task(worker: str, queue: str, *, sent_at: float) -> Iterator[None]:
    """Run the block as a task of ``worker`` taken from ``queue`` now, sent at ``sent_at``."""
    stamp = stamps.TaskStamp(worker=worker, queue=queue, sent_at=sent_at, started_at=time.time())
    token = stamps.push(stamp)
    try:
        yield
    finally:
        stamps.pop(token)
