"""Fair dispatch: one tenant's flood waits in Redis, not in the shared ``inference`` queue.

With a cap of N, at most N responses of one tenant are on the fleet at once (queued on Celery or
running). A tenant's further responses are stored ``queued`` as always, but parked in a
per-tenant sorted set in arrival order; each starts when one of that tenant's responses ends.
Another tenant's response therefore waits behind at most N of the flooding tenant's turns per
worker slot, never behind its whole backlog.

The cap (``ANTWORT_TENANT_MAX_RUNNING``): a number, 0 for off, or unset for automatic: off while
the fleet has a single tenant (auth off, or all keys one tenant's: nobody to starve, nothing to
cap), else half the threads of the live inference workers (their heartbeats say how many), at
least 1. The cap holds even while a tenant is alone on the fleet: a turn queued on Celery cannot
be overtaken, so a cap applied only once another tenant shows up would come too late for the
newcomer's first response (it would wait behind the whole backlog already queued).

The gateways decide, at each create: they know the keys. Each call keeps the gateway's mode
(``auto`` or its number) in Redis, and whoever starts parked responses later uses it, with the
live threads read then: :func:`cap_of`, the same computation on every process.

What starts parked responses: the worker that ends a response (its turn task), a cancel at the
gateway, and every sweep (each inference worker's sweeper, once a second by default), which
also catches a response deleted or expired without an end.

A job a request waits for (a compaction, a token count: :mod:`app.jobs`) is a model call on the
same fleet: it takes one of its tenant's places too (:meth:`FairShare.submit_job`), or parks in
the same order. Its place is held while its gateway waits (renewed: :meth:`FairShare.hold_job`;
it lapses :data:`JOB_PLACE_SECONDS` after a gateway that died) and freed when it is answered
(:meth:`FairShare.end_job`). A parked job that gets a place is handed to its gateway (a push on
its ``placed`` list, and a wake-up on its channel), which queues it.
"""

from __future__ import annotations

from app.config import Settings
from app.dispatch import Dispatcher
from app.protocol.response import ResponseStatus
from app.store import ResponseStore
from app.store.base import text
from app.store.events import WAKE_LINE, publish
from app.store.fair_share import FAIR_SHARE, FairShareCall, ended_responses

JOB_PLACE_SECONDS = 30.0
"""How long a job's place outlasts its gateway's last renewal (renewed every few seconds)."""
_JOB = "job:"

AUTO = "auto"
"""The mode of an unset ``ANTWORT_TENANT_MAX_RUNNING`` on a fleet of several tenants."""
INFERENCE = "inference"


def mode_of(setting: int | None, tenants: int) -> str | None:
    """What a gateway applies to a new response: a number, :data:`AUTO`, or None (off).

    ``setting``: ``ANTWORT_TENANT_MAX_RUNNING`` (None: unset); ``tenants``: how many the fleet
    has (auth off: one, the open tenant).
    """
    if setting is None:
        return AUTO if tenants > 1 else None
    return str(setting) if setting > 0 else None


def cap_of(mode: str, live_threads: int) -> int:
    """The cap a mode means: its number, or half the live inference threads (at least 1)."""
    return max(1, live_threads // 2) if mode == AUTO else int(mode)


class FairShare:
    """Per-tenant caps on the responses the fleet runs at once."""

    def __init__(self, store: ResponseStore, settings: Settings, *, tenants: int = 1):
        """``tenants``: how many the fleet has (a gateway's create; the rest need not say)."""
        self.store = store
        self.mode = mode_of(settings.tenant_max_running, tenants)
        self.grace_seconds = settings.queued_grace_seconds

    @property
    def is_on(self) -> bool:
        """Whether a new response is capped per tenant (a create's question)."""
        return self.mode is not None

    def submit(self, dispatcher: Dispatcher, tenant: str, response_id: str) -> bool:
        """Queue a new (stored, ``queued``) response, or park it; whether it was queued now.

        With the cap off, the response is queued as it always was (its create put it under the
        sweeper's watch).
        """
        if self.mode is None:
            dispatcher.enqueue_turn(response_id, 0)
            return True
        started = self._take_places(tenant, response_id, self.mode)
        self._enqueue(dispatcher, tenant, [id_ for id_ in started if id_ != response_id])
        if response_id in started:
            dispatcher.enqueue_turn(response_id, 0)
        return response_id in started

    def submit_job(self, tenant: str, kind: str, job_id: str) -> bool:
        """Take a place for a stored job, or park it; whether it may be queued now.

        With the cap off, always. A parked job's gateway waits for its ``placed`` push.
        """
        if self.mode is None:
            return True
        member = _job_member(kind, job_id)
        return member in self._take_places(tenant, member, self.mode)

    def is_parked(self, tenant: str, kind: str, job_id: str) -> bool:
        """Whether the job waits for a place (its gateway then queues it once it has one)."""
        parked = self.store.keys.tenant_parked(tenant)
        return self.store.redis.zscore(parked, _job_member(kind, job_id)) is not None

    def holds_job(self, tenant: str, kind: str, job_id: str) -> bool:
        """Whether the job is parked or has a place (False: it was dropped, or has ended).

        A process of an older fleet, releasing the tenant's parked work, pops a parked job as
        if it were a response and drops it, never handing it over.
        """
        keys, member = self.store.keys, _job_member(kind, job_id)
        pipe = self.store.redis.pipeline(transaction=False)
        pipe.zscore(keys.tenant_parked(tenant), member)
        pipe.zscore(keys.tenant_jobs(tenant), member)
        return any(score is not None for score in pipe.execute())

    def hold_job(self, tenant: str, kind: str, job_id: str) -> None:
        """The job is still waited for: its place (if it has one) is kept another while."""
        until = int((self.store.now() + JOB_PLACE_SECONDS) * 1000)
        member = _job_member(kind, job_id)
        self.store.redis.zadd(self.store.keys.tenant_jobs(tenant), {member: until}, xx=True)

    def end_job(self, tenant: str, kind: str, job_id: str) -> None:
        """The job was answered (or given up): its place, or its turn parked, is no more.

        :meth:`release` gives the place to the tenant's next parked work.
        """
        keys, member = self.store.keys, _job_member(kind, job_id)
        pipe = self.store.redis.pipeline(transaction=False)
        pipe.zrem(keys.tenant_jobs(tenant), member)
        pipe.zrem(keys.tenant_parked(tenant), member)
        pipe.execute()

    def release(self, dispatcher: Dispatcher, tenant: str) -> list[str]:
        """Start the tenant's parked responses that fit now; their ids.

        With the cap the gateways last applied (kept in Redis; none kept, yet responses parked:
        automatic), whatever this process's own setting.
        """
        keys = self.store.keys
        pipe = self.store.redis.pipeline(transaction=False)
        pipe.sismember(keys.parked_tenants_of(tenant), tenant)
        pipe.get(keys.fair_share_cap_of(tenant))
        has_parked, kept = pipe.execute()
        if not has_parked:
            return []
        started = self._take_places(tenant, "", AUTO if kept is None else text(kept))
        return self._enqueue(dispatcher, tenant, started)

    def release_owner_of(self, dispatcher: Dispatcher, response_id: str) -> list[str]:
        """:meth:`release` for the tenant of a response that just ended."""
        keys = self.store.keys
        if not keys.is_sharded and not self.store.redis.scard(keys.parked_tenants):
            return []  # nobody waits (a fleet without the fair share: this one call)
        stored = self.store.load(response_id)
        return [] if stored is None else self.release(dispatcher, stored.owner)

    def release_all(self, dispatcher: Dispatcher) -> list[str]:
        """:meth:`release` for every tenant with parked responses (the sweeper's round)."""
        pipe = self.store.redis.pipeline(transaction=False)
        for parked_tenants in self.store.keys.parked_tenant_sets:
            pipe.smembers(parked_tenants)
        tenants = sorted({text(tenant) for members in pipe.execute() for tenant in members})
        return [rid for tenant in tenants for rid in self.release(dispatcher, tenant)]

    def _take_places(self, tenant: str, response_id: str, mode: str) -> list[str]:
        """Run the script with the cap ``mode`` means now (a create's keeps its mode)."""
        keys, redis = self.store.keys, self.store.redis
        live_threads = self.store.live_threads(INFERENCE) if mode == AUTO else 0
        now = self.store.now()
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
                cap_key=keys.fair_share_cap_of(tenant),
                jobs=keys.tenant_jobs(tenant),
                cap=cap_of(mode, live_threads),
                now_ms=int(now * 1000),
                watch_until=now + self.grace_seconds,
                job_until=int((now + JOB_PLACE_SECONDS) * 1000),
                response_id=response_id,
                tenant=tenant,
                mode=mode if response_id else "",
                watches_active=not keys.is_sharded,
                ended=ended,
            )
        )
        ids = [text(raw) for raw in started]
        responses = [id_ for id_ in ids if not id_.startswith(_JOB)]
        if keys.is_sharded and responses:  # the sweeper's watch, as the script does on one Redis
            pipe = redis.pipeline(transaction=False)
            for id_ in responses:
                pipe.zadd(keys.active_of(id_), {id_: now + self.grace_seconds})
            pipe.execute()
        return ids

    def _enqueue(self, dispatcher: Dispatcher, tenant: str, started: list[str]) -> list[str]:
        """Queue the first turns of parked responses that got a place; those still queued."""
        queued: list[str] = []
        for response_id in started:
            if response_id.startswith(_JOB):  # its gateway queues it (gone: the place lapses)
                self._hand_over(response_id)
                queued.append(response_id)
            elif self.store.status(response_id) == ResponseStatus.QUEUED:
                dispatcher.enqueue_turn(response_id, 0)
                queued.append(response_id)
            else:  # cancelled or deleted while parked: its place goes to the next
                self.store.redis.zrem(self.store.keys.active_of(response_id), response_id)
                self.store.redis.zrem(self.store.keys.tenant_running(tenant), response_id)
        if len(queued) < len(started):
            queued += self.release(dispatcher, tenant)
        return queued

    def _hand_over(self, member: str) -> None:
        """Tell a parked job's gateway that it has its place now."""
        _, kind, job_id = member.split(":", 2)
        placed = self.store.keys.job_placed(kind, job_id)
        pipe = self.store.redis.pipeline(transaction=True)
        pipe.rpush(placed, 1)
        pipe.expire(placed, int(JOB_PLACE_SECONDS))
        pipe.execute()
        publish(self.store.redis, self.store.keys.channel(job_id), WAKE_LINE)


def _job_member(kind: str, job_id: str) -> str:
    """A job among the tenant's responses (``fair_share.lua`` tells them apart by the prefix)."""
    return f"{_JOB}{kind}:{job_id}"
