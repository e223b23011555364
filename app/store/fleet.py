"""Fleet bookkeeping: how often a task was delivered, and which workers are alive."""

from __future__ import annotations

import time

from app.store.base import StoreBase

HEARTBEAT_SECONDS = 1.0
"""How often a worker marks itself alive."""
LIVE_WITHIN_SECONDS = 5.0
"""A worker whose last heartbeat is older than this counts as gone (``/readyz``)."""


class RedeliveredTooOftenError(Exception):
    """A task was delivered more often than ``max_task_deliveries``: it kills its worker."""

    def __init__(self, deliveries: int):
        super().__init__(f"delivered {deliveries} times")
        self.deliveries = deliveries


class Fleet(StoreBase):
    """Delivery counts and worker heartbeats."""

    def count_delivery(self, task_id: str) -> int:
        """Count one more delivery of a task; the count lives as long as a response."""
        return self._count(self.keys.deliveries(task_id))

    def watch_queued(self, response_id: str, *, until: float) -> None:
        """Put a queued response under the sweeper's watch until ``until`` (epoch seconds).

        Its first run's lease replaces the watch; should no run start by then (the turn's
        message was lost), the sweeper queues the turn again (``app.lease.sweep``). A watch
        already there stays (a run that just started has put its lease's).
        """
        self.redis.zadd(self.keys.active, {response_id: until}, nx=True)

    def count_queued_resend(self, response_id: str) -> int:
        """Count one more re-send of a never-started response's turn 0; the new count."""
        return self._count(self.keys.queued_resends(response_id))

    def _count(self, key: str) -> int:
        """Add one to a counter that lives as long as a response; the new count."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, self.ttl_seconds)
        count, _ = pipe.execute()
        return int(count)

    def heartbeat_worker(self, queue: str, hostname: str) -> None:
        """Mark a worker on ``queue`` alive now."""
        self.redis.zadd(self.keys.workers(queue), {hostname: time.time()})

    def live_workers(self, queue: str, *, within_seconds: float = LIVE_WITHIN_SECONDS) -> int:
        """How many workers on ``queue`` sent a heartbeat recently."""
        return int(
            self.redis.zcount(self.keys.workers(queue), time.time() - within_seconds, "+inf")
        )
