"""The Redis keyspace: every key the fleet writes is built here, and only here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Keys:
    """Key builders under one prefix (``ANTWORT_KEY_PREFIX``; tests use their own)."""

    prefix: str

    def record(self, response_id: str) -> str:
        """Hash: status, version, the response object (JSON), run bookkeeping."""
        return f"{self.prefix}r:{response_id}"

    def inputs(self, response_id: str) -> str:
        """List: the response's own input items (JSON), in order."""
        return f"{self.prefix}r:{response_id}:in"

    def events(self, response_id: str) -> str:
        """Stream: every event of the response, entry id ``1-<sequence_number>``."""
        return f"{self.prefix}r:{response_id}:ev"

    def sequence(self, response_id: str) -> str:
        """Counter: the next ``sequence_number``."""
        return f"{self.prefix}r:{response_id}:seq"

    def history(self, chain_id: str, list_id: str) -> str:
        """List: a chain's items (JSON), append-only, shared along it (:mod:`app.store.history`).

        ``chain_id``: the response whose create began the chain's first list; every list of the
        chain (``list_id``: the response whose create began it, a branch) lives beside it.
        """
        return f"{self.prefix}r:{chain_id}:hist:{list_id}"

    def channel(self, response_id: str) -> str:
        """Pub/sub channel of the response's live events."""
        return f"{self.prefix}ev:{response_id}"

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
        return f"{self.prefix}r:{response_id}:t{turn}:starts"

    def queued_resends(self, response_id: str) -> str:
        """Counter: how often the sweeper queued turn 0 of a never-started response again."""
        return f"{self.prefix}r:{response_id}:t0:resends"

    def lease(self, response_id: str) -> str:
        """String with TTL: the worker currently running the response's turn."""
        return f"{self.prefix}r:{response_id}:lease"

    def sweep_claim(self, response_id: str) -> str:
        """String with TTL: one sweeper is re-enqueuing the response's lapsed turn."""
        return f"{self.lease(response_id)}:sweep"

    @property
    def active(self) -> str:
        """Sorted set: active responses by the time their lease lapses (for the sweeper)."""
        return f"{self.prefix}active"

    def workers(self, queue: str) -> str:
        """Sorted set: live worker hostnames on a queue, by last heartbeat."""
        return f"{self.prefix}workers:{queue}"

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
        return f"{self.prefix}r:{response_id}:cancelled-at"

    def tool_claim(self, response_id: str, call_id: str) -> str:
        """String with TTL: a tool task is executing this call right now."""
        return f"{self.prefix}r:{response_id}:tool:{call_id}:claim"

    def call_starts(self, response_id: str, call_id: str) -> str:
        """Counter: how often a delivery took the call's claim and started it (poison guard)."""
        return f"{self.tool_claim(response_id, call_id)}:starts"

    @property
    def running_calls(self) -> str:
        """Sorted set: running tool calls by when their claim lapses unless renewed.

        Members are :meth:`running_call`; the sweeper reads it.
        """
        return f"{self.prefix}calls:running"

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
        return f"{self.prefix}r:{response_id}:results"

    def compaction_job(self, compaction_id: str) -> str:
        """String with TTL: what a compaction task summarises (JSON)."""
        return f"{self.prefix}compaction:{compaction_id}"

    def compaction_result(self, compaction_id: str) -> str:
        """List with TTL: the compaction task's answer, popped by the waiting gateway."""
        return f"{self.prefix}compaction:{compaction_id}:result"

    def container_files(self, container_id: str) -> str:
        """String with TTL: a code interpreter container's work directory (``tar.gz``)."""
        return f"{self.prefix}container:{container_id}:files"

    def container_lock(self, container_id: str) -> str:
        """String with TTL: a sandbox run holds the container (one run at a time)."""
        return f"{self.prefix}container:{container_id}:lock"

    def conversation(self, conversation_id: str) -> str:
        """Hash: the conversation object (JSON) and the position of its next item."""
        return f"{self.prefix}conv:{conversation_id}"

    def conversation_items(self, conversation_id: str) -> str:
        """Hash: item id → the conversation's item (JSON)."""
        return f"{self.prefix}conv:{conversation_id}:items"

    def conversation_order(self, conversation_id: str) -> str:
        """Sorted set: the conversation's item ids by position (the order they were added)."""
        return f"{self.prefix}conv:{conversation_id}:order"

    @property
    def api_keys(self) -> str:
        """Hash: SHA-256 of an API key (hex) → the key's record (JSON: id, tenant, hint, time)."""
        return f"{self.prefix}apikeys"

    @property
    def auth_on(self) -> str:
        """String: set by the first stored key and never removed.

        Auth stays on after the last key is revoked; deleting this by hand opens a fleet
        without env keys again.
        """
        return f"{self.prefix}auth:on"

    def tenant_limits(self, tenant: str) -> str:
        """Hash: a tenant's own limits (``antwort keys limits``), over the fleet's defaults."""
        return f"{self.prefix}tenant:{tenant}:limits"

    def rate_window(self, tenant: str, unit: str, window: int) -> str:
        """Counter with TTL: a tenant's ``unit`` (requests, tokens) in one minute's window."""
        return f"{self.prefix}tenant:{tenant}:rate:{unit}:{window}"

    def in_flight(self, tenant: str) -> str:
        """Sorted set: the tenant's responses that may still be running (rate limits)."""
        return f"{self.prefix}tenant:{tenant}:inflight"

    def container_owner(self, container_id: str) -> str:
        """String with TTL: the tenant that owns a code interpreter container."""
        return f"{self.prefix}container:{container_id}:owner"

    def tenant_running(self, tenant: str) -> str:
        """Sorted set: the tenant's responses on the fleet now (fair share, ``app.fairness``)."""
        return f"{self.prefix}tenant:{tenant}:running"

    def tenant_parked(self, tenant: str) -> str:
        """Sorted set: the tenant's responses waiting for a place, by arrival (fair share)."""
        return f"{self.prefix}tenant:{tenant}:parked"

    def tenant_arrivals(self, tenant: str) -> str:
        """Counter: the arrival order of the tenant's parked responses (fair share)."""
        return f"{self.prefix}tenant:{tenant}:arrivals"

    @property
    def parked_tenants(self) -> str:
        """Set: tenants with parked responses (the sweeper starts what it can of them)."""
        return f"{self.prefix}tenants:parked"
