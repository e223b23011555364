"""Fleet bookkeeping: how often a task was delivered, and which workers are alive."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import redis

from app.refusals import described
from app.store.base import StoreBase, text

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 1.0
"""How often a worker marks itself alive."""
LIVE_WITHIN_SECONDS = 5.0
"""A worker whose last heartbeat is older than this counts as gone (``/readyz``)."""
FAILURES_KEPT = 200
"""How many recent failures ``antwort status`` can show."""


class RedeliveredTooOftenError(Exception):
    """A task was delivered more often than ``max_task_deliveries``: it kills its worker."""

    def __init__(self, deliveries: int):
        super().__init__(f"delivered {deliveries} times")
        self.deliveries = deliveries


class Fleet(StoreBase):
    """Delivery counts and worker heartbeats."""

    def count_delivery(self, task_id: str, *, ttl_seconds: int) -> int:
        """Count one more delivery of a task; the new count.

        The count lives ``ttl_seconds``, its job's life: kept as long as a response, it was a
        key per token count for 30 days.
        """
        return self._count(self.keys.deliveries(task_id), ttl_seconds=ttl_seconds)

    def watch_queued(self, response_id: str, *, until: float) -> None:
        """Put a queued response under the sweeper's watch until ``until`` (epoch seconds).

        Its first run's lease replaces the watch; should no run start by then (the turn's
        message was lost), the sweeper queues the turn again (``app.lease.sweep``). A watch
        already there stays (a run that just started has put its lease's).
        """
        self.redis.zadd(self.keys.active_of(response_id), {response_id: until}, nx=True)

    def count_queued_resend(self, response_id: str) -> int:
        """Count one more re-send of a never-started response's turn 0; the new count."""
        return self._count(self.keys.queued_resends(response_id))

    def _count(self, key: str, *, ttl_seconds: int | None = None) -> int:
        """Add one to a counter that lives ``ttl_seconds`` (None: a response's); the new count."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, self.ttl_seconds if ttl_seconds is None else ttl_seconds)
        count, _ = pipe.execute()
        return int(count)

    def heartbeat_worker(self, queue: str, hostname: str, *, threads: int = 0) -> None:
        """Mark a worker on ``queue`` alive now, with its ``threads`` (0: not said)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(self.keys.workers(queue), {hostname: self.now()})
        if threads:
            pipe.hset(self.keys.worker_threads(queue), hostname, threads)
        pipe.execute()

    def live_threads(self, queue: str, *, within_seconds: float = LIVE_WITHIN_SECONDS) -> int:
        """The threads of ``queue``'s live workers, together (one that said none counts 1)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrangebyscore(self.keys.workers(queue), self.now() - within_seconds, "+inf")
        pipe.hgetall(self.keys.worker_threads(queue))
        alive, threads = pipe.execute()
        counts = {text(name): int(count) for name, count in threads.items()}
        return sum(counts.get(text(name), 1) for name in alive)

    def live_workers(self, queue: str, *, within_seconds: float = LIVE_WITHIN_SECONDS) -> int:
        """How many workers on ``queue`` sent a heartbeat recently."""
        return int(self.redis.zcount(self.keys.workers(queue), self.now() - within_seconds, "+inf"))

    def register_metrics_url(self, process: str, url: str) -> None:
        """Say where a worker process serves its metrics (``process``: hostname[/child pid])."""
        self.redis.hset(self.keys.worker_metrics, process, url)

    def forget_metrics_urls(self, queues: Sequence[str]) -> int:
        """Drop the URLs of worker processes whose worker is gone; how many were dropped."""
        alive = {name for queue in queues for name in self.workers_alive(queue)}
        stale = [key for key in self.metrics_urls() if key.split("/")[0] not in alive]
        if stale:
            self.redis.hdel(self.keys.worker_metrics, *stale)
        return len(stale)

    def forget_worker_threads(self, queues: Sequence[str]) -> int:
        """Drop the thread counts of workers that are gone; how many were dropped."""
        dropped = 0
        for queue in queues:
            alive = self.workers_alive(queue)
            known = map(text, self.redis.hkeys(self.keys.worker_threads(queue)))
            stale = [name for name in known if name not in alive]
            if stale:
                dropped += int(self.redis.hdel(self.keys.worker_threads(queue), *stale))
        return dropped

    def metrics_urls(self) -> dict[str, str]:
        """Every registered worker process's metrics URL (stale ones too: filter by liveness)."""
        raw = self.redis.hgetall(self.keys.worker_metrics)
        return {text(key): text(value) for key, value in raw.items()}

    def workers_alive(
        self, queue: str, *, within_seconds: float = LIVE_WITHIN_SECONDS
    ) -> dict[str, float]:
        """The hostnames of ``queue``'s live workers → their last heartbeat (epoch seconds)."""
        raw = self.redis.zrangebyscore(
            self.keys.workers(queue), self.now() - within_seconds, "+inf", withscores=True
        )
        return {text(entry[0]): float(entry[1]) for entry in raw if isinstance(entry, tuple)}

    def queue_depths(self, queues: Sequence[str]) -> dict[str, int]:
        """Messages waiting in each of ``queues`` (one round trip)."""
        pipe = self.queues.pipeline(transaction=False)
        for queue in queues:
            pipe.llen(self.keys.queue(queue))
        return {queue: int(depth) for queue, depth in zip(queues, pipe.execute(), strict=True)}

    def oldest_queued(self, queue: str) -> str | None:
        """The raw message that waited longest in ``queue`` (workers take from the tail)."""
        raw = self.queues.lindex(self.keys.queue(queue), -1)
        return None if raw is None else text(raw)

    def in_flight(self) -> int:
        """Responses under the sweeper's watch: queued or running (their lease or a watch)."""
        pipe = self.redis.pipeline(transaction=False)
        for active in self.keys.active_sets:
            pipe.zcard(active)
        return sum(int(count) for count in pipe.execute())

    def record_failure(self, kind: str, code: str) -> None:
        """Remember a failure for ``antwort status`` (the newest :data:`FAILURES_KEPT`).

        Best effort: a failure already stored is not undone by its count's write failing (a
        Redis out of memory refuses the ``LPUSH`` that the failure's own script got past).
        """
        entry = json.dumps({"at": self.now(), "kind": kind, "code": code})
        pipe = self.redis.pipeline(transaction=False)
        pipe.lpush(self.keys.failures, entry)
        pipe.ltrim(self.keys.failures, 0, FAILURES_KEPT - 1)
        try:
            pipe.execute()
        except redis.RedisError as exc:
            logger.warning("a %s failure (%s) was not recorded: %s", kind, code, described(exc))

    def recent_failures(self) -> list[dict[str, Any]]:
        """The failures remembered, newest first."""
        return [json.loads(text(raw)) for raw in self.redis.lrange(self.keys.failures, 0, -1)]

    def mark_cancelled(self, response_id: str) -> None:
        """Note when a client cancelled the response (for the cancel latency metric)."""
        self.redis.set(self.keys.cancelled_at(response_id), repr(self.now()), ex=3600)

    def mark_steered(self, response_id: str) -> None:
        """Ask the response to stop before its next model call (``response.steer``).

        The run of its next turn reads the mark (:meth:`~app.store.turns.Turns.load_turn`).
        """
        self.redis.set(self.keys.steered(response_id), "1", ex=self.ttl_seconds)

    def cancelled_since(self, response_id: str) -> float | None:
        """Seconds since the client's cancel, when one was noted."""
        raw = self.redis.get(self.keys.cancelled_at(response_id))
        return None if raw is None else max(0.0, self.now() - float(text(raw)))
