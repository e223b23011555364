"""Tool results and the claims that keep a call from running twice at once.

``open_tool_call.lua`` claims a tool call only while its response is active and no result is
stored; ``finish_tool_call.lua`` stores the result only while the response is still active (a
result that arrives after a cancel is discarded) and gives the claim back. A claim is short (a
lease) and renewed by its holder while the call runs (``renew_lease.lua``); each running
call is under the sweeper's watch (``Keys.running_calls``) until it ends or its claim lapses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from app.store.base import StoreBase, text
from app.store.records import StoredResponse, stored_with_owner
from app.store.scripts import LuaScript, key
from app.store.status import ACTIVE_STATUSES, packed
from app.store.timeline import call_end_field, call_run_field
from app.store.turns import RENEW_LEASE, RenewLeaseCall
from app.telemetry import stamps

ClaimOutcome = Literal["held", "claimed", "stored", "inactive"]
_CLAIM_OUTCOMES: tuple[ClaimOutcome, ...] = ("held", "claimed", "stored", "inactive")
_ACTIVE = packed(ACTIVE_STATUSES)


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenedCall:
    """What a tool task reads first (:meth:`ToolCalls.open_tool_call`)."""

    starts: int
    """The call's starts, this one included (0 when none was counted or none was claimed)."""
    claim: ClaimOutcome
    """``claimed`` by this delivery; ``held`` by another; ``stored``: its result is in already;
    ``inactive``: the response is gone or no longer active."""
    stored: StoredResponse | None


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenCallCall:
    """The operands of ``open_tool_call.lua``."""

    record: str = key()
    results: str = key()
    claim: str = key()
    starts: str = key()
    running: str = key()
    token: str
    claim_ms: int
    deadline: float
    """Epoch seconds: when the sweeper looks at the call, should its claim lapse."""
    starts_ttl: int
    counts_start: bool
    active_statuses: str
    call_id: str
    member: str
    run_field: str
    """The record's field that keeps the call's task stamp (:mod:`app.store.timeline`)."""
    run_stamp: str
    """The call's task stamp (:func:`app.telemetry.stamps.current_json`; "": none)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishCallCall:
    """The operands of ``finish_tool_call.lua``."""

    record: str = key()
    results: str = key()
    claim: str = key()
    running: str = key()
    starts: str = key()
    """The call's count of starts (``Keys.call_starts``): it goes once the result is stored."""
    result_json: str
    ttl: int
    token: str
    active_statuses: str
    call_id: str
    member: str
    end_field: str
    """The record's field that keeps when the call ended (:mod:`app.store.timeline`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseClaimCall:
    """The operands of ``release_tool_claim.lua``."""

    claim: str = key()
    running: str = key()
    token: str
    member: str


OPEN_TOOL_CALL = LuaScript("open_tool_call", OpenCallCall)
FINISH_TOOL_CALL = LuaScript("finish_tool_call", FinishCallCall)
RELEASE_TOOL_CLAIM = LuaScript("release_tool_claim", ReleaseClaimCall)


class ToolCalls(StoreBase):
    """Claiming tool calls and storing their results."""

    def tool_results(self, response_id: str, call_ids: Sequence[str]) -> list[str | None]:
        """Stored results of the calls, None where a call has none yet."""
        if not call_ids:
            return []
        raw = self.redis.hmget(self.keys.tool_results(response_id), list(call_ids))
        return [None if value is None else text(value) for value in raw]

    def has_tool_result(self, response_id: str, call_id: str) -> bool:
        """Whether the call's result is stored."""
        return bool(self.redis.hexists(self.keys.tool_results(response_id), call_id))

    def open_tool_call(
        self,
        response_id: str,
        call_id: str,
        *,
        token: str,
        claim_seconds: float,
        counts_start: bool = False,
    ) -> OpenedCall:
        """Everything a tool task does first, in one step.

        Reads the record, and claims the call's execution for ``claim_seconds`` under ``token``
        unless its result is stored already, the response is no longer active, or another
        delivery holds the claim. The claim lapses after its time unless renewed
        (:meth:`renew_tool_claim`), so a delivery that died mid-call blocks the call no longer
        than that; the sweeper watches the call meanwhile. With ``counts_start`` a claim taken
        counts as one more start of the call (per response and call, whatever task delivered
        it).
        """
        starts, claim, fields = self.script(OPEN_TOOL_CALL)(
            OpenCallCall(
                record=self.keys.record(response_id),
                results=self.keys.tool_results(response_id),
                claim=self.keys.tool_claim(response_id, call_id),
                starts=self.keys.call_starts(response_id, call_id),
                running=self.keys.running_calls_of(response_id),
                token=token,
                claim_ms=_milliseconds(claim_seconds),
                deadline=self.now() + claim_seconds,
                starts_ttl=self.ttl_seconds,
                counts_start=counts_start,
                active_statuses=_ACTIVE,
                call_id=call_id,
                member=self.keys.running_call(response_id, call_id),
                run_field=call_run_field(call_id),
                run_stamp=stamps.current_json(),
            )
        )
        return OpenedCall(
            starts=int(starts),
            claim=_CLAIM_OUTCOMES[int(claim)],
            stored=stored_with_owner([*fields[:4], *fields[5:7]]),
        )

    def renew_tool_claim(
        self, response_id: str, call_id: str, *, token: str, ttl_seconds: float
    ) -> bool:
        """Set a claim we hold to lapse ``ttl_seconds`` from now; False when it is not ours."""
        renewal = self._claim_renewal(response_id, call_id, token=token, ttl_seconds=ttl_seconds)
        return bool(self.script(RENEW_LEASE)(renewal))

    def status_renewing_claim(
        self, response_id: str, call_id: str, *, token: str, ttl_seconds: float
    ) -> tuple[str | None, bool]:
        """The response's status, and :meth:`renew_tool_claim`'s answer: one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(self.keys.record(response_id), "status")
        renewal = self._claim_renewal(response_id, call_id, token=token, ttl_seconds=ttl_seconds)
        self.script(RENEW_LEASE)(renewal, client=pipe)
        status, renewed = pipe.execute()
        return (None if status is None else text(status)), bool(renewed)

    def _claim_renewal(
        self, response_id: str, call_id: str, *, token: str, ttl_seconds: float
    ) -> RenewLeaseCall:
        return RenewLeaseCall(
            lease=self.keys.tool_claim(response_id, call_id),
            watch=self.keys.running_calls_of(response_id),
            token=token,
            lease_ms=_milliseconds(ttl_seconds),
            deadline=self.now() + ttl_seconds,
            member=self.keys.running_call(response_id, call_id),
        )

    def finish_tool_call(
        self, response_id: str, call_id: str, result_json: str, *, token: str
    ) -> bool:
        """Store a claimed call's result and give the claim back, in one step.

        Returns False when nothing was stored: the response is no longer active (a result that
        arrives after a cancel is discarded) or a result was stored already.
        """
        stored, _status = self.script(FINISH_TOOL_CALL)(
            FinishCallCall(
                record=self.keys.record(response_id),
                results=self.keys.tool_results(response_id),
                claim=self.keys.tool_claim(response_id, call_id),
                running=self.keys.running_calls_of(response_id),
                starts=self.keys.call_starts(response_id, call_id),
                result_json=result_json,
                ttl=self.ttl_seconds,
                token=token,
                active_statuses=_ACTIVE,
                call_id=call_id,
                member=self.keys.running_call(response_id, call_id),
                end_field=call_end_field(call_id),
            )
        )
        return bool(stored)

    def release_tool_claim(self, response_id: str, call_id: str, *, token: str) -> None:
        """Give a claim back, if it is still ours."""
        self.script(RELEASE_TOOL_CLAIM)(
            ReleaseClaimCall(
                claim=self.keys.tool_claim(response_id, call_id),
                running=self.keys.running_calls_of(response_id),
                token=token,
                member=self.keys.running_call(response_id, call_id),
            )
        )

    def is_tool_call_claimed(self, response_id: str, call_id: str) -> bool:
        """Whether some delivery holds the call's claim right now."""
        return bool(self.redis.exists(self.keys.tool_claim(response_id, call_id)))


def _milliseconds(seconds: float) -> int:
    return max(1, int(seconds * 1000))
