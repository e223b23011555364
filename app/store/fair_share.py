"""A tenant's fair share of the fleet: the operands of ``fair_share.lua`` and ``tool_share.lua``.

(``app.fairness``.) On a cluster, :func:`ended_responses` is read first (and by ``app.limits``
too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.store.base import text
from app.store.scripts import LuaScript, counted, key
from app.store.status import ACTIVE_STATUSES

if TYPE_CHECKING:
    from app.keys import Keys


@dataclass(frozen=True, slots=True, kw_only=True)
class FairShareCall:
    """The operands of ``fair_share.lua``."""

    running: str = key()
    active: str = key()
    parked: str = key()
    parked_tenants: str = key()
    arrivals: str = key()
    """Counter: the order of the tenant's parked responses."""
    cap_key: str = key()
    """String with TTL: the mode the gateways last applied (``app.fairness``)."""
    jobs: str = key()
    """Sorted set: the tenant's jobs that have a place, by when it lapses (ms)."""
    cap: int
    now_ms: int
    watch_until: float
    """When the sweeper queues a dispatched response's first turn again (as ``watch_queued``)."""
    job_until: int
    """When the place of a job that gets one here lapses unless renewed (ms)."""
    response_id: str
    """A new response, or a job (``job:<kind>:<id>``); "": only start parked ones."""
    tenant: str
    mode: str = ""
    """A gateway's: ``auto`` or its configured number, kept in ``cap_key`` ("": leave it)."""
    watches_active: bool = True
    """One Redis: the script reads and watches ``active``; a cluster: the caller does."""
    ended: tuple[str, ...] = counted()
    """A cluster: the running responses the caller found ended."""


FAIR_SHARE = LuaScript("fair_share", FairShareCall)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolShareCall:
    """The operands of ``tool_share.lua``: a tenant's places on one tool queue."""

    running: str = key()
    """Sorted set: the places, ``<response id> <call id>``."""
    active: str = key()
    parked: str = key()
    """Sorted set: the responses waiting, ``<response id> <turn> <call id>``, by arrival."""
    parked_tenants: str = key()
    arrivals: str = key()
    mode_key: str = key()
    action: str
    """``take``, ``park`` or ``release``."""
    cap: int
    mode: str = ""
    now_ms: int
    response_id: str = ""
    turn: int = 0
    entry: str
    """The tenant and queue as a member of ``parked_tenants`` (``app.fairness``)."""
    watches_active: bool = True
    calls: tuple[str, ...] = counted()
    ended: tuple[str, ...] = counted()


TOOL_SHARE = LuaScript("tool_share", ToolShareCall)


def ended_responses(client: Any, keys: Keys, response_ids: list[str]) -> tuple[str, ...]:
    """Those of ``response_ids`` no longer queued or running (or gone): one round trip.

    What a cluster's fair share and in-flight count go by, where ``active`` is in other slots
    than the tenant's keys (an ended response never runs again, so the answer cannot go stale).
    """
    if not response_ids:
        return ()
    pipe = client.pipeline(transaction=False)
    for response_id in response_ids:
        pipe.hget(keys.record(response_id), "status")
    statuses = pipe.execute()
    return tuple(
        response_id
        for response_id, status in zip(response_ids, statuses, strict=True)
        if status is None or text(status) not in ACTIVE_STATUSES
    )
