"""The fleet's one clock: its Redis's (``TIME``), not each host's own.

Times one process sets and another compares with its own "now" are all read off this clock: the
sweeper's watches (a lease's, a queued response's, a tool call's claim), a tenant's places and
rate-limit minutes, a worker's heartbeat, a response's ``created_at`` and ``completed_at``. A host
whose clock is off would otherwise set them that far off for everyone: a worker minutes ahead
that died mid-turn had its turn sent round again only minutes later (its lease's watch lay in
its own future); one minutes behind beat as if long dead. Event times are Redis's already
(``include/events.lua``).

Redis's time is read at most every :data:`SYNC_SECONDS` (one round trip) and carried on by the
monotonic clock in between, so a step of the host's own clock changes nothing either. Every
caller is about to send Redis a command of its own anyway.
"""

from __future__ import annotations

import time

import redis

SYNC_SECONDS = 30.0
"""How often the clock reads Redis's time again (the monotonic clock drifts far less)."""


class RedisClock:
    """Epoch seconds as Redis's ``TIME`` has them, read every :data:`SYNC_SECONDS`."""

    def __init__(self, client: redis.Redis, *, sync_seconds: float = SYNC_SECONDS):
        self._client = client
        self._sync_seconds = sync_seconds
        self._synced: tuple[float, float] | None = None
        """The monotonic time of the last reading, and Redis's epoch seconds then."""

    def now(self) -> float:
        """Epoch seconds, Redis's.

        Raises:
            redis.RedisError: Redis's time could not be read (the caller's next command to
                Redis would meet the same error).
        """
        synced = self._synced
        if synced is None or time.monotonic() - synced[0] >= self._sync_seconds:
            synced = self._sync()
        return synced[1] + (time.monotonic() - synced[0])

    def _sync(self) -> tuple[float, float]:
        before = time.monotonic()
        seconds, microseconds = self._client.time()
        # TIME was read halfway through the round trip, give or take half of it
        self._synced = ((before + time.monotonic()) / 2, seconds + microseconds / 1_000_000)
        return self._synced
