"""The Redis keyspace: every key the fleet writes is built here, and only here.

On a Redis Cluster (``shards`` > 1) the keys that one script or transaction touches share a
hash tag, so they live in one slot: every key of a response carries ``{<shard>}``, the shard of
its id (:meth:`Keys.shard_of`), and so do the fleet-wide sets the response's scripts update
(the sweeper's ``active`` and ``calls:running``, one per shard) and its event channel (one
sharded pub/sub channel per shard, ``SPUBLISH``). A conversation's keys carry its own id's
shard; a response of a conversation gets an id of the same shard
(:meth:`Keys.new_id_with_shard_of`), so its final write appends to the conversation in one
step. On one Redis (``shards`` = 1) no key has a tag: the keyspace is the same as ever.
"""

from __future__ import annotations

import binascii
import secrets
from dataclasses import dataclass

CLUSTER_SHARDS = 64
"""Default shards of the keyspace on a Redis Cluster (``ANTWORT_REDIS_CLUSTER_SHARDS``)."""


@dataclass(frozen=True, slots=True)
class Keys:
    """Key builders under one prefix (``ANTWORT_KEY_PREFIX``; tests use their own)."""

    prefix: str
    shards: int = 1
    """Hash-tag shards (1: one Redis, no tags; a cluster: :data:`CLUSTER_SHARDS`)."""

    @property
    def is_sharded(self) -> bool:
        """Whether keys carry hash tags (the store is a Redis Cluster)."""
        return self.shards > 1

    def shard_of(self, id_: str) -> int:
        """The shard of a response's (conversation's, tenant's …) keys: CRC16 of the id."""
        if self.shards == 1:
            return 0
        return binascii.crc_hqx(id_.encode(), 0) % self.shards

    def _tag(self, id_: str) -> str:
        return f"{{{self.shard_of(id_)}}}" if self.shards > 1 else ""

    def new_id_with_shard_of(self, prefix: str, other_id: str) -> str:
        """A fresh id (``prefix`` + 48 hex digits) in the same shard as ``other_id``."""
        while True:
            candidate = prefix + secrets.token_hex(24)
            if self.shard_of(candidate) == self.shard_of(other_id):
                return candidate

    def _r(self, response_id: str) -> str:
        return f"{self.prefix}{self._tag(response_id)}r:{response_id}"

    def record(self, response_id: str) -> str:
        """Hash: status, version, the response object (JSON), run bookkeeping."""
        return f"{self._r(response_id)}"

    def inputs(self, response_id: str) -> str:
        """List: the response's own input items (JSON), in order."""
        return f"{self._r(response_id)}:in"

    def staged_inputs(self, response_id: str) -> str:
        """List: a new response's input items staged before its create renames it to ``inputs``."""
        return f"{self._r(response_id)}:in:staged"

    def events(self, response_id: str) -> str:
        """Stream: every event of the response, entry id ``1-<sequence_number>``."""
        return f"{self._r(response_id)}:ev"

    def sequence(self, response_id: str) -> str:
        """Counter: the next ``sequence_number``."""
        return f"{self._r(response_id)}:seq"

    def history(self, chain_id: str, list_id: str) -> str:
        """List: a chain's items (JSON), append-only, shared along it (:mod:`app.store.history`).

        ``chain_id``: the response whose create began the chain's first list; every list of the
        chain (``list_id``: the response whose create began it, a branch) lives beside it.
        """
        return f"{self._r(chain_id)}:hist:{list_id}"  # in the slot of the chain's responses

    def conversation_history(self, conversation_id: str) -> str:
        """List: a conversation's items, as a history list whose items change only by a delete.

        Its chain and list are the conversation's id (in the conversation's slot); the list as
        it was before a delete is kept (:meth:`conversation_history_at`).
        """
        return self.history(conversation_id, conversation_id)

    def conversation_history_at(self, conversation_id: str, generation: int) -> str:
        """List: :meth:`conversation_history` as it was at ``generation`` (kept at a delete)."""
        return self.history(conversation_id, f"{conversation_id}.{generation}")

    def conversation_generation(self, conversation_id: str) -> str:
        """Counter: the deletes :meth:`conversation_history` has seen (none: it has no list)."""
        return f"{self.conversation_history(conversation_id)}:gen"

    def conversation_history_staged(self, conversation_id: str, token: str) -> str:
        """List: :meth:`conversation_history` being built afresh, before it takes its place."""
        return self.history(conversation_id, f"{conversation_id}.staged.{token}")

    def conversation_referenced(self, conversation_id: str) -> str:
        """Flag: a reference into :meth:`conversation_history` was made since the last delete."""
        return f"{self.conversation_history(conversation_id)}:referenced"

    def channel(self, response_id: str) -> str:
        """Where the response's live events are published (``include/events.lua``).

        One Redis: the response's channel (``PUBLISH``). A cluster: ``<shard channel>
        <response id>``, published with ``SPUBLISH`` to the shard's channel with the response
        id as the message's first line.
        """
        if self.shards > 1:
            return f"{self.shard_channel(self.shard_of(response_id))} {response_id}"
        return f"{self.prefix}ev:{response_id}"

    def shard_channel(self, shard: int) -> str:
        """A shard's sharded pub/sub channel (a cluster's; every gateway subscribes to all)."""
        return f"{self.prefix}{{{shard}}}ev"

    @property
    def shard_channels(self) -> list[str]:
        """Every shard's channel."""
        return [self.shard_channel(shard) for shard in range(self.shards)]

    @property
    def channel_pattern(self) -> str:
        """Pattern one gateway process subscribes to for every response's events."""
        return f"{self.prefix}ev:*"

    def response_id_of_channel(self, channel: str) -> str:
        """Inverse of :meth:`channel`."""
        return channel[len(self.prefix) + 3 :]

    def deliveries(self, task_id: str) -> str:
        """Counter: how often a task was delivered (poison-message guard)."""
        return f"{self.prefix}deliveries:{task_id}"

    def turn_starts(self, response_id: str, turn: int) -> str:
        """Counter: runs of the turn that took the lease and died (poison-turn guard)."""
        return f"{self._r(response_id)}:t{turn}:starts"

    def queued_resends(self, response_id: str) -> str:
        """Counter: how often the sweeper queued turn 0 of a never-started response again."""
        return f"{self._r(response_id)}:t0:resends"

    def lease(self, response_id: str) -> str:
        """String with TTL: the worker currently running the response's turn."""
        return f"{self._r(response_id)}:lease"

    def sweep_claim(self, response_id: str) -> str:
        """String with TTL: one sweeper is re-enqueuing the response's lapsed turn."""
        return f"{self.lease(response_id)}:sweep"

    @property
    def active(self) -> str:
        """Sorted set: active responses by the time their lease lapses (for the sweeper).

        One Redis has one; a cluster one per shard (:meth:`active_of`, :attr:`active_sets`).
        """
        self._unsharded("active")
        return f"{self.prefix}active"

    def _unsharded(self, name: str) -> None:
        if self.shards > 1:
            raise ValueError(f"a cluster has one {name} set per shard: ask for the response's")

    def active_of(self, response_id: str) -> str:
        """The :attr:`active` set the response belongs in (its shard's on a cluster)."""
        if self.shards > 1:
            return f"{self.prefix}{self._tag(response_id)}active"
        return self.active

    @property
    def active_sets(self) -> list[str]:
        """Every :attr:`active` set (the sweeper reads them all)."""
        if self.shards > 1:
            return [f"{self.prefix}{{{shard}}}active" for shard in range(self.shards)]
        return [self.active]

    def workers(self, queue: str) -> str:
        """Sorted set: live worker hostnames on a queue, by last heartbeat."""
        return f"{self.prefix}workers:{queue}"

    def worker_threads(self, queue: str) -> str:
        """Hash: worker hostname on a queue → its threads (live ones: :meth:`workers`)."""
        return f"{self.prefix}workers:{queue}:threads"

    @property
    def worker_metrics(self) -> str:
        """Hash: worker process (hostname, or hostname/child pid) → its metrics URL."""
        return f"{self.prefix}workers:metrics"

    def queue(self, queue: str) -> str:
        """List: a Celery queue's waiting messages (kombu's ``global_keyprefix`` + name)."""
        return f"{self.celery_prefix}{queue}"

    @property
    def celery_prefix(self) -> str:
        """Where Celery's keys live (``broker_transport_options['global_keyprefix']``)."""
        return f"{self.prefix}celery:"

    @property
    def failures(self) -> str:
        """List (capped, newest first): recent failures as JSON ``{at, kind, code}``."""
        return f"{self.prefix}failures"

    def cancelled_at(self, response_id: str) -> str:
        """String with TTL: when a client cancelled the response (epoch seconds)."""
        return f"{self._r(response_id)}:cancelled-at"

    def steered(self, response_id: str) -> str:
        """String with TTL: a WebSocket client steered the response (its next turn stops it)."""
        return f"{self._r(response_id)}:steered"

    def tool_claim(self, response_id: str, call_id: str) -> str:
        """String with TTL: a tool task is executing this call right now."""
        return f"{self._r(response_id)}:tool:{call_id}:claim"

    def call_starts(self, response_id: str, call_id: str) -> str:
        """Counter: how often a delivery took the call's claim and started it (poison guard)."""
        return f"{self.tool_claim(response_id, call_id)}:starts"

    @property
    def running_calls(self) -> str:
        """Sorted set: running tool calls by when their claim lapses unless renewed.

        Members are :meth:`running_call`; the sweeper reads it. One Redis has one; a cluster
        one per shard (:meth:`running_calls_of`, :attr:`running_call_sets`).
        """
        self._unsharded("calls:running")
        return f"{self.prefix}calls:running"

    def running_calls_of(self, response_id: str) -> str:
        """The :attr:`running_calls` set of the response's calls (its shard's on a cluster)."""
        if self.shards > 1:
            return f"{self.prefix}{self._tag(response_id)}calls:running"
        return self.running_calls

    @property
    def running_call_sets(self) -> list[str]:
        """Every :attr:`running_calls` set (the sweeper reads them all)."""
        if self.shards > 1:
            return [f"{self.prefix}{{{shard}}}calls:running" for shard in range(self.shards)]
        return [self.running_calls]

    @staticmethod
    def running_call(response_id: str, call_id: str) -> str:
        """A member of :attr:`running_calls` (response ids hold no space)."""
        return f"{response_id} {call_id}"

    @staticmethod
    def running_call_of(member: str) -> tuple[str, str]:
        """Inverse of :meth:`running_call`: the response id and the call id."""
        response_id, _, call_id = member.partition(" ")
        return response_id, call_id

    def tool_results(self, response_id: str) -> str:
        """Hash: call id → the stored result of that tool call (idempotent tool tasks)."""
        return f"{self._r(response_id)}:results"

    def job(self, kind: str, job_id: str) -> str:
        """String with TTL: what a job's task does (JSON; :mod:`app.jobs`)."""
        return f"{self.prefix}{self._tag(job_id)}{kind}:{job_id}"

    def job_lease(self, kind: str, job_id: str) -> str:
        """String with TTL: the worker running the job holds it (``app.jobs.held_job``)."""
        return f"{self.prefix}{self._tag(job_id)}{kind}:{job_id}:lease"

    def job_started(self, kind: str, job_id: str) -> str:
        """String with TTL: a worker took the job's lease and has not answered yet."""
        return f"{self.prefix}{self._tag(job_id)}{kind}:{job_id}:started"

    def job_placed(self, kind: str, job_id: str) -> str:
        """List with TTL: pushed when a parked job got its place (its gateway then queues it)."""
        return f"{self.prefix}{self._tag(job_id)}{kind}:{job_id}:placed"

    def job_result(self, kind: str, job_id: str) -> str:
        """List with TTL: the job's answer, popped by the waiting gateway."""
        return f"{self.prefix}{self._tag(job_id)}{kind}:{job_id}:result"

    def container_files(self, container_id: str) -> str:
        """String with TTL: a code interpreter container's work directory (``tar.gz``)."""
        return f"{self.prefix}{self._tag(container_id)}container:{container_id}:files"

    def container_lock(self, container_id: str) -> str:
        """String with TTL: a sandbox run holds the container (one run at a time)."""
        return f"{self.prefix}{self._tag(container_id)}container:{container_id}:lock"

    def conversation(self, conversation_id: str) -> str:
        """Hash: the conversation object (JSON) and the position of its next item."""
        return f"{self.prefix}{self._tag(conversation_id)}conv:{conversation_id}"

    def conversation_items(self, conversation_id: str) -> str:
        """Hash: item id → the conversation's item (JSON)."""
        return f"{self.prefix}{self._tag(conversation_id)}conv:{conversation_id}:items"

    def conversation_order(self, conversation_id: str) -> str:
        """Sorted set: the conversation's item ids by position (the order they were added)."""
        return f"{self.prefix}{self._tag(conversation_id)}conv:{conversation_id}:order"

    def conversation_pending(self, conversation_id: str) -> str:
        """List: the blocks (:meth:`conversation_block` keys) waiting to be appended, in order."""
        return f"{self.prefix}{self._tag(conversation_id)}conv:{conversation_id}:pending"

    def conversation_block(self, conversation_id: str, response_id: str) -> str:
        """List: a response's items waiting, on :meth:`conversation_pending`, to be appended."""
        return f"{self.conversation(conversation_id)}:block:{response_id}"

    @property
    def api_keys(self) -> str:
        """Hash: SHA-256 of an API key (hex) → the key's record (JSON: id, tenant, hint, time)."""
        return f"{self.prefix}{self._tag('auth')}apikeys"

    @property
    def auth_on(self) -> str:
        """String: set by the first stored key and never removed.

        Auth stays on after the last key is revoked; deleting this by hand opens a fleet
        without env keys again.
        """
        return f"{self.prefix}{self._tag('auth')}auth:on"

    def tenant_limits(self, tenant: str) -> str:
        """Hash: a tenant's own limits (``antwort keys limits``), over the fleet's defaults."""
        return f"{self.prefix}{self._tag(tenant)}tenant:{tenant}:limits"

    def rate_window(self, tenant: str, unit: str, window: int) -> str:
        """Counter with TTL: a tenant's requests (``unit``) in one minute's window."""
        return f"{self.prefix}{self._tag(tenant)}tenant:{tenant}:rate:{unit}:{window}"

    def token_ledger(self, tenant: str) -> str:
        """Hash with TTL: a tenant's tokens per minute, what passed its limit carried on.

        ``window`` (the minute last counted in), ``used`` (its tokens there, with what earlier
        minutes carried into it), ``limit`` (the limit then); ``lua/include/token_ledger.lua``.
        """
        return f"{self.prefix}{self._tag(tenant)}tenant:{tenant}:tokens"

    def in_flight(self, tenant: str) -> str:
        """Sorted set: the tenant's responses that may still be running (rate limits)."""
        return f"{self.prefix}{self._tag(tenant)}tenant:{tenant}:inflight"

    def container_owner(self, container_id: str) -> str:
        """String with TTL: the tenant that owns a code interpreter container."""
        return f"{self.prefix}{self._tag(container_id)}container:{container_id}:owner"

    def tenant_running(self, tenant: str) -> str:
        """Sorted set: the tenant's responses on the fleet now (fair share, ``app.fairness``)."""
        return f"{self.prefix}{self._tag(tenant)}tenant:{tenant}:running"

    def tenant_parked(self, tenant: str) -> str:
        """Sorted set: the tenant's responses waiting for a place, by arrival (fair share)."""
        return f"{self.prefix}{self._tag(tenant)}tenant:{tenant}:parked"

    def tenant_jobs(self, tenant: str) -> str:
        """Sorted set: the tenant's jobs with a place on the fleet, by when it lapses (ms)."""
        return f"{self.prefix}{self._tag(tenant)}tenant:{tenant}:jobs"

    def tenant_arrivals(self, tenant: str) -> str:
        """Counter: the arrival order of the tenant's parked responses (fair share)."""
        return f"{self.prefix}{self._tag(tenant)}tenant:{tenant}:arrivals"

    @property
    def parked_tenants(self) -> str:
        """Set: tenants with parked responses (the sweeper starts what it can of them).

        One Redis has one; a cluster one per shard (:meth:`parked_tenants_of`).
        """
        self._unsharded("tenants:parked")
        return f"{self.prefix}tenants:parked"

    def parked_tenants_of(self, tenant: str) -> str:
        """The :attr:`parked_tenants` set the tenant belongs in (its shard's on a cluster)."""
        if self.shards > 1:
            return f"{self.prefix}{self._tag(tenant)}tenants:parked"
        return self.parked_tenants

    @property
    def parked_tenant_sets(self) -> list[str]:
        """Every :attr:`parked_tenants` set (the sweeper reads them all)."""
        if self.shards > 1:
            return [f"{self.prefix}{{{shard}}}tenants:parked" for shard in range(self.shards)]
        return [self.parked_tenants]

    def fair_share_cap_of(self, tenant: str) -> str:
        """String with TTL: the fair share the gateways last applied, ``auto`` or a number.

        One Redis has one; a cluster one per shard, in the slot of the tenant's other keys.
        """
        return f"{self.prefix}{self._tag(tenant)}tenants:cap"

    @property
    def fair_share_caps(self) -> list[str]:
        """Every :meth:`fair_share_cap_of` key (``antwort status`` reads them all)."""
        if self.shards > 1:
            return [f"{self.prefix}{{{shard}}}tenants:cap" for shard in range(self.shards)]
        return [self.fair_share_cap_of("")]

    def tenant_tool_places(self, tenant: str, queue: str) -> str:
        """Sorted set: the tenant's tool calls with a place on ``queue`` (``app.fairness``)."""
        return f"{self.prefix}{self._tag(tenant)}tenant:{tenant}:tools:{queue}:running"

    def tenant_tool_parked(self, tenant: str, queue: str) -> str:
        """Sorted set: the tenant's responses waiting for a place on ``queue``, by arrival."""
        return f"{self.prefix}{self._tag(tenant)}tenant:{tenant}:tools:{queue}:parked"

    def tool_parked_tenants_of(self, tenant: str) -> str:
        """Set: ``<queue> <tenant>`` of tenants with responses parked for a tool queue's place.

        One Redis has one; a cluster one per shard, in the slot of the tenant's other keys
        (:attr:`tool_parked_tenant_sets`: the sweeper reads them all).
        """
        return f"{self.prefix}{self._tag(tenant)}tenants:tools:parked"

    @property
    def tool_parked_tenant_sets(self) -> list[str]:
        """Every :meth:`tool_parked_tenants_of` set."""
        if self.shards > 1:
            return [f"{self.prefix}{{{s}}}tenants:tools:parked" for s in range(self.shards)]
        return [self.tool_parked_tenants_of("")]

    def tool_share_mode_of(self, tenant: str) -> str:
        """String with TTL: the tool share the gateways last applied, ``auto`` or a number."""
        return f"{self.prefix}{self._tag(tenant)}tenants:toolcap"
