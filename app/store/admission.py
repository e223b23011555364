"""A tenant's admission against its limits and its tokens' charge: ``admit.lua``, ``charge.lua``.

Their Python side is :mod:`app.limits`.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.store.scripts import LuaScript, counted, key


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmitCall:
    """The operands of ``admit.lua``."""

    requests_key: str = key()
    tokens_ledger: str = key()
    in_flight: str = key()
    active: str = key()
    parked: str = key()
    now_ms: int
    window_ms: int
    request_limit: int
    token_limit: int
    in_flight_limit: int
    requests: int
    tokens: int
    response_id: str
    reserve_ms: int
    watches_active: bool = True
    """One Redis: the script reads ``active``; a cluster: the caller passes :attr:`ended`."""
    ended: tuple[str, ...] = counted()
    """A cluster: the tenant's in-flight responses no longer queued or running."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChargeCall:
    """The operands of ``charge.lua``."""

    tokens_ledger: str = key()
    now_ms: int
    window_ms: int
    tokens: int


ADMIT = LuaScript("admit", AdmitCall)
CHARGE = LuaScript("charge", ChargeCall)
