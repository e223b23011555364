"""Fair dispatch: one tenant's flood waits in Redis, not in the shared ``inference`` queue.

With ``ANTWORT_TENANT_MAX_RUNNING`` = N (> 0), at most N responses of one tenant are on the
fleet at once (queued on Celery or running). A tenant's further responses are stored
``queued`` as always, but parked in a per-tenant sorted set in arrival order; each starts when
one of that tenant's responses ends. Another tenant's response therefore waits behind at most
N of the flooding tenant's turns per worker slot, never behind its whole backlog.

What starts parked responses: the worker that ends a response (its turn task), a cancel at the
gateway, and every sweep (each inference worker's sweeper, once a second by default), which
also catches a response deleted or expired without an end.
"""

from __future__ import annotations

import time

from app.config import Settings
from app.dispatch import Dispatcher
from app.protocol.response import ResponseStatus
from app.store import ResponseStore
from app.store.base import text
from app.store.fair_share import FAIR_SHARE, FairShareCall, ended_responses


class FairShare:
    """Per-tenant caps on the responses the fleet runs at once (0: off)."""

    def __init__(self, store: ResponseStore, settings: Settings):
        self.store = store
        self.cap = settings.tenant_max_running
        self.grace_seconds = settings.queued_grace_seconds

    @property
    def is_on(self) -> bool:
        """Whether responses are capped per tenant."""
        return self.cap > 0

    def submit(self, dispatcher: Dispatcher, tenant: str, response_id: str) -> bool:
        """Queue a new (stored, ``queued``) response, or park it; whether it was queued now.

        With the cap off, the response is queued as it always was (its create put it under the
        sweeper's watch).
        """
        if not self.is_on:
            dispatcher.enqueue_turn(response_id, 0)
            return True
        started = self._take_places(tenant, response_id)
        self._enqueue(dispatcher, tenant, [id_ for id_ in started if id_ != response_id])
        if response_id in started:
            dispatcher.enqueue_turn(response_id, 0)
        return response_id in started

    def release(self, dispatcher: Dispatcher, tenant: str) -> list[str]:
        """Start the tenant's parked responses that fit now; their ids."""
        if not self.is_on:
            return []
        started = self._take_places(tenant, "")
        return self._enqueue(dispatcher, tenant, started)

    def release_owner_of(self, dispatcher: Dispatcher, response_id: str) -> list[str]:
        """:meth:`release` for the tenant of a response that just ended."""
        if not self.is_on:
            return []
        stored = self.store.load(response_id)
        return [] if stored is None else self.release(dispatcher, stored.owner)

    def release_all(self, dispatcher: Dispatcher) -> list[str]:
        """:meth:`release` for every tenant with parked responses (the sweeper's round)."""
        if not self.is_on:
            return []
        pipe = self.store.redis.pipeline(transaction=False)
        for parked_tenants in self.store.keys.parked_tenant_sets:
            pipe.smembers(parked_tenants)
        tenants = sorted({text(tenant) for members in pipe.execute() for tenant in members})
        return [rid for tenant in tenants for rid in self.release(dispatcher, tenant)]

    def _take_places(self, tenant: str, response_id: str) -> list[str]:
        keys, redis = self.store.keys, self.store.redis
        now = time.time()
        running = keys.tenant_running(tenant)
        ended: tuple[str, ...] = ()
        if keys.is_sharded:  # the responses' `active` sets are in other slots: ask them first
            members = [
                text(member)
                for member in redis.zrange(running, 0, -1)
                if isinstance(member, bytes | str)
            ]
            ended = ended_responses(redis, keys, members)
        started = self.store.script(FAIR_SHARE)(
            FairShareCall(
                running=running,
                active=running if keys.is_sharded else keys.active,  # a cluster: unused
                parked=keys.tenant_parked(tenant),
                parked_tenants=keys.parked_tenants_of(tenant),
                arrivals=keys.tenant_arrivals(tenant),
                cap=self.cap,
                now_ms=int(now * 1000),
                watch_until=now + self.grace_seconds,
                response_id=response_id,
                tenant=tenant,
                watches_active=not keys.is_sharded,
                ended=ended,
            )
        )
        ids = [text(raw) for raw in started]
        if keys.is_sharded and ids:  # under the sweeper's watch, as the script does on one Redis
            pipe = redis.pipeline(transaction=False)
            for id_ in ids:
                pipe.zadd(keys.active_of(id_), {id_: now + self.grace_seconds})
            pipe.execute()
        return ids

    def _enqueue(self, dispatcher: Dispatcher, tenant: str, started: list[str]) -> list[str]:
        """Queue the first turns of parked responses that got a place; those still queued."""
        queued: list[str] = []
        for response_id in started:
            if self.store.status(response_id) == ResponseStatus.QUEUED:
                dispatcher.enqueue_turn(response_id, 0)
                queued.append(response_id)
            else:  # cancelled or deleted while parked: its place goes to the next
                self.store.redis.zrem(self.store.keys.active_of(response_id), response_id)
                self.store.redis.zrem(self.store.keys.tenant_running(tenant), response_id)
        if len(queued) < len(started):
            queued += self.release(dispatcher, tenant)
        return queued
