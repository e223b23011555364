"""A tenant's fair share of each tool queue: one tenant's calls cannot hold up another's.

The fair share of :mod:`app.fairness` caps a tenant's responses, not their tool calls: each of
those responses may run ``ANTWORT_MAX_PARALLEL_TOOLS`` calls at once, and a tool queue is first
in, first out, so another tenant's one call waited behind them all. With a cap of N per queue, at
most N calls of one tenant hold a place on a tool queue (queued there or running); the queue's
other threads stay free for the other tenants.

A turn about to dispatch a batch of calls takes places for them (:meth:`ToolShare.take`) and
dispatches the calls that got one. When none did, the response parks for its first call's queue
(:meth:`ToolShare.park`), after it committed its turn and gave its lease back; when one of the
tenant's calls there ends, the place goes to the first response parked, and its turn is queued
again (:meth:`ToolShare.release`): it dispatches that call and whatever else has a place by then,
in batches as before. What gives places back: the tool worker that ends a call, and every sweep
(places of responses that ended, parked responses that can go on). A parked response stays
under the sweeper's watch, so a wake-up that never comes costs a turn sent round again later,
never a response left waiting.

The cap (``ANTWORT_TENANT_MAX_TOOL_CALLS``): a number, 0 for off, or unset for automatic: off
while the fleet has a single tenant, else half the threads of the queue's live workers, at
least 1. The gateway decides when it creates a response and keeps the mode in the response's
extra (:data:`TOOL_SHARE_EXTRA`): a response created without it runs its calls as before, at no
cost. Its turns keep the mode in Redis too, for whoever releases the tenant's places later.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from app.dispatch import Dispatcher
from app.fairness import AUTO, cap_of
from app.store import ResponseStore
from app.store.base import text
from app.store.fair_share import TOOL_SHARE, ToolShareCall, ended_responses

TOOL_SHARE_EXTRA = "tool_share"
"""A response's extra: the tool share its gateway applied (``auto`` or a number; absent: off)."""


def queue_and_tenant(entry: str) -> tuple[str, str]:
    """The queue and the tenant of a member of ``Keys.tool_parked_tenants_of``'s set."""
    queue, tenant = entry.split(" ", 1)
    return queue, tenant


class ToolShare:
    """Per-tenant places on the tool queues."""

    def __init__(self, store: ResponseStore):
        self.store = store

    def take(
        self, tenant: str, response_id: str, turn: int, calls: Sequence[tuple[str, str]], mode: str
    ) -> list[str]:
        """Places for ``(call_id, queue)`` calls of a response at ``turn``; the calls that got one.

        A call gets a place when its queue has one free for the tenant and none of the tenant's
        responses waits for that queue before this one; a call holding one keeps it.
        """
        queues = list(dict.fromkeys(queue for _, queue in calls))
        caps = self._caps(mode, queues)
        ended = self._ended(tenant, queues)
        pipe = self.store.redis.pipeline(transaction=False)
        for queue in queues:
            call_ids = tuple(call_id for call_id, q in calls if q == queue)
            self._run(
                tenant,
                queue,
                action="take",
                cap=caps[queue],
                mode=mode,
                response_id=response_id,
                turn=turn,
                calls=call_ids,
                ended=ended,
                client=pipe,
            )
        granted = {text(call_id) for reply in pipe.execute() for call_id in reply}
        return [call_id for call_id, _ in calls if call_id in granted]

    def park(
        self,
        dispatcher: Dispatcher,
        tenant: str,
        response_id: str,
        turn: int,
        call_id: str,
        queue: str,
    ) -> list[str]:
        """The response waits for a place on ``queue`` for ``call_id`` (its turn ``turn``).

        One parked there already keeps its place in the line. A place freed since its
        :meth:`take` goes to the first parked response at once (this one, perhaps): the ids of
        the responses whose turns were queued again.
        """
        return self._release(dispatcher, tenant, queue, "park", response_id, turn, call_id)

    def end(
        self, dispatcher: Dispatcher, tenant: str, queue: str, response_id: str, call_id: str
    ) -> list[str]:
        """A call ended: its place goes to the tenant's first parked response; ids queued."""
        return self._release(dispatcher, tenant, queue, "release", response_id, 0, call_id)

    def release(self, dispatcher: Dispatcher, tenant: str, queue: str) -> list[str]:
        """Queue again the turns of the tenant's responses parked for ``queue`` that got a place.

        The cap is that of the mode the gateways last applied (kept in Redis; none kept:
        automatic). Returns the ids of the responses whose turns were queued.
        """
        return self._release(dispatcher, tenant, queue, "release", "", 0, "")

    def _release(  # noqa: PLR0913 - the script's operands, by name
        self,
        dispatcher: Dispatcher,
        tenant: str,
        queue: str,
        action: str,
        response_id: str,
        turn: int,
        call_id: str,
    ) -> list[str]:
        kept = self.store.redis.get(self.store.keys.tool_share_mode_of(tenant))
        mode = AUTO if kept is None else text(kept)
        started = self._run(
            tenant,
            queue,
            action=action,
            cap=self._caps(mode, [queue])[queue],
            response_id=response_id,
            turn=turn,
            calls=(call_id,) if call_id else (),
            ended=self._ended(tenant, [queue]),
        )
        queued: list[str] = []
        for member in started:
            parked_id, parked_turn, _ = text(member).split(" ", 2)
            dispatcher.enqueue_turn(parked_id, int(parked_turn))
            queued.append(parked_id)
        return queued

    def release_all(self, dispatcher: Dispatcher) -> list[str]:
        """:meth:`release` for every tenant and queue with parked responses (each sweep)."""
        pipe = self.store.redis.pipeline(transaction=False)
        for parked_tenants in self.store.keys.tool_parked_tenant_sets:
            pipe.smembers(parked_tenants)
        entries = sorted({text(entry) for members in pipe.execute() for entry in members})
        queued: list[str] = []
        for entry in entries:
            queue, tenant = queue_and_tenant(entry)
            queued += self.release(dispatcher, tenant, queue)
        return queued

    def _caps(self, mode: str, queues: Iterable[str]) -> dict[str, int]:
        """The cap ``mode`` means on each queue now (automatic: its live threads read)."""
        queues = list(queues)
        if mode != AUTO:
            return dict.fromkeys(queues, cap_of(mode, 0))
        return {queue: cap_of(mode, self.store.live_threads(queue)) for queue in queues}

    def _ended(self, tenant: str, queues: Sequence[str]) -> tuple[str, ...]:
        """A cluster: the responses with places or parked on ``queues`` that ended (else none).

        On one Redis the script reads the sweeper's ``active`` set itself; on a cluster that set
        is in other slots than the tenant's keys.
        """
        keys, redis = self.store.keys, self.store.redis
        if not keys.is_sharded:
            return ()
        pipe = redis.pipeline(transaction=False)
        for queue in queues:
            pipe.zrange(keys.tenant_tool_places(tenant, queue), 0, -1)
            pipe.zrange(keys.tenant_tool_parked(tenant, queue), 0, -1)
        ids = sorted(
            {text(member).split(" ", 1)[0] for found in pipe.execute() for member in found}
        )
        return ended_responses(redis, keys, ids)

    def _run(  # noqa: PLR0913 - the script's operands, by name
        self,
        tenant: str,
        queue: str,
        *,
        action: str,
        cap: int,
        mode: str = "",
        response_id: str = "",
        turn: int = 0,
        calls: tuple[str, ...] = (),
        ended: tuple[str, ...] = (),
        client: object = None,
    ) -> Any:
        """Run the script on the tenant's places on ``queue``: its reply (a pipeline: queued)."""
        keys = self.store.keys
        return self.store.script(TOOL_SHARE)(
            ToolShareCall(
                running=keys.tenant_tool_places(tenant, queue),
                active=keys.tenant_tool_places(tenant, queue) if keys.is_sharded else keys.active,
                parked=keys.tenant_tool_parked(tenant, queue),
                parked_tenants=keys.tool_parked_tenants_of(tenant),
                arrivals=keys.tenant_arrivals(tenant),
                mode_key=keys.tool_share_mode_of(tenant),
                action=action,
                cap=cap,
                mode=mode,
                now_ms=int(self.store.now() * 1000),
                response_id=response_id,
                turn=turn,
                entry=f"{queue} {tenant}",
                watches_active=not keys.is_sharded,
                calls=calls,
                ended=ended,
            ),
            client=client,
        )
