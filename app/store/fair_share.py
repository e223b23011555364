"""A tenant's fair share of the fleet: the operands of ``fair_share.lua`` (``app.fairness``)."""

from __future__ import annotations

from dataclasses import dataclass

from app.store.scripts import LuaScript, key


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
    cap: int
    now_ms: int
    watch_until: float
    """When the sweeper queues a dispatched response's first turn again (as ``watch_queued``)."""
    response_id: str
    """A new response ("": only start parked ones)."""
    tenant: str
    mode: str = ""
    """A gateway's: ``auto`` or its configured number, kept in ``cap_key`` ("": leave it)."""


FAIR_SHARE = LuaScript("fair_share", FairShareCall)
