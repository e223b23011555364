"""A run's first step: take its lease, count its start, read its turn — one script.

``load_turn.lua`` serves both :meth:`Turns.load_turn` (no lease, no count) and the lease
keeper's acquire (``app.lease``), which asks for both. The read starts a ``queued`` response on
the way: the :data:`~app.store.status.START` transition, which no other write makes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from app.store.base import StoreBase, json_items
from app.store.fence import NO_FENCE, Fence
from app.store.records import StoredResponse, stored_with_owner
from app.store.scripts import LuaScript, key
from app.store.status import START, packed
from app.store.timeline import turn_mark_field, turn_run_field
from app.telemetry import stamps

INLINE_INPUTS = 100
"""A turn's read brings at most this many input items in its script's reply; more are read
after it with a plain LRANGE (``load_turn.lua`` says why)."""

[_START_STATUS] = START.target
_START_EVENT = "response.in_progress"
"""The event of the start, after the turn's mark (its ``response`` is the started object)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedTurn:
    """What a run reads first (:meth:`Turns.load_turn`)."""

    stored: StoredResponse | None
    inputs: list[dict[str, Any]]
    start_sequence_number: int
    """The last sequence number before the turn first started (-1: none)."""
    is_rerun: bool
    """The turn was started before (its mark was there): a redelivery or a sweep."""
    steered: bool = False
    """A WebSocket client steered the response (:meth:`~app.store.fleet.Fleet.mark_steered`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseRequest:
    """The lease a run asks to take with its first read."""

    token: str
    """What the lease key holds: proof that the lease is still ours."""
    milliseconds: int
    """How long the lease lasts unless renewed."""
    deadline: float
    """Epoch seconds: when the sweeper should look at the response should the lease lapse."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenedTurn:
    """What :meth:`Turns.open_turn` did."""

    taken: bool
    """The lease was taken (always, when none was asked for)."""
    starts: int
    """Runs of the turn started one after another without ending, this one included (0: none
    counted, or the lease is held elsewhere)."""
    loaded: LoadedTurn | None
    """The turn's first read; None when the lease is held elsewhere."""
    fence: Fence = NO_FENCE
    """The lease taken, for the run's writes (:mod:`app.store.fence`); none when none was."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadTurnCall:
    """The operands of ``load_turn.lua``."""

    record: str = key()
    inputs_key: str = key()
    sequence: str = key()
    stream: str = key()
    lease: str = key()
    active: str = key()
    starts: str = key()
    steered: str = key()
    turn_field: str
    """The record's field that marks where the turn's events begin."""
    channel: str
    maxlen: int
    ttl: int
    """Of the events, and of the start count."""
    start_sources: str
    """Packed: the statuses the read starts a response from."""
    start_target: str
    start_event_type: str
    lease_token: str
    """"": take no lease."""
    lease_ms: int
    lease_deadline: float | None
    response_id: str
    counts_start: bool
    run_field: str
    """The record's field that keeps the run's task stamp (:mod:`app.store.timeline`)."""
    run_stamp: str
    """The run's task stamp (:func:`app.telemetry.stamps.current_json`; "": none)."""
    inline_inputs: int = INLINE_INPUTS
    """The most input items the reply carries; more are counted, and read after."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RenewLeaseCall:
    """The operands of ``renew_lease.lua``: a run's lease, or a tool call's claim."""

    lease: str = key()
    watch: str = key()
    """The sorted set the sweeper reads (``Keys.active``, ``Keys.running_calls``)."""
    token: str
    lease_ms: int
    deadline: float
    """Epoch seconds: the sweeper's next look, should the lease lapse."""
    member: str
    """What the watch holds for this lease (a response id, ``Keys.running_call``)."""


LOAD_TURN = LuaScript("load_turn", LoadTurnCall)
RENEW_LEASE = LuaScript("renew_lease", RenewLeaseCall)


class Turns(StoreBase):
    """The first read of a run."""

    def load_turn(self, response_id: str, turn: int) -> LoadedTurn:
        """What a run of ``turn`` reads first, in one step.

        The record, its input items, and where the turn's events begin: the last sequence number
        when the turn first started; a re-run finds the first run's mark, so it knows which of
        the turn's events are out already. A ``queued`` response is started on the way. Call it
        holding the response's lease: it marks the turn's start.
        """
        loaded = self.open_turn(response_id, turn).loaded
        assert loaded is not None  # no lease asked for: always read
        return loaded

    def open_turn(
        self,
        response_id: str,
        turn: int,
        *,
        lease: LeaseRequest | None = None,
        counts_start: bool = False,
        on_taken: Callable[[], None] | None = None,
    ) -> OpenedTurn:
        """Take ``lease`` (when asked), count the turn's start, and :meth:`load_turn`.

        One round trip (more when the input holds more than :data:`INLINE_INPUTS` items). When
        the lease is held elsewhere, the turn is neither read nor counted. ``on_taken`` is called
        once the lease is taken, before a long input is read: its holder starts renewing it (a
        read of 450,000 items outlasted a 3 s lease, and the sweeper ran the turn again).
        With ``counts_start`` the run counts against the turn's starts: per response and turn,
        however the turn was delivered (a sweep sends it under a new task id), reset when a run
        of it gives its lease back (:meth:`app.lease.LeaseKeeper.release`).
        """
        raw = self.script(LOAD_TURN)(
            LoadTurnCall(
                record=self.keys.record(response_id),
                inputs_key=self.keys.inputs(response_id),
                sequence=self.keys.sequence(response_id),
                stream=self.keys.events(response_id),
                lease=self.keys.lease(response_id),
                active=self.keys.active_of(response_id),
                starts=self.keys.turn_starts(response_id, turn),
                steered=self.keys.steered(response_id),
                turn_field=turn_mark_field(turn),
                channel=self.keys.channel(response_id),
                maxlen=self.stream_maxlen,
                ttl=self.ttl_seconds,
                start_sources=packed(START.source),
                start_target=_START_STATUS,
                start_event_type=_START_EVENT,
                lease_token="" if lease is None else lease.token,
                lease_ms=0 if lease is None else lease.milliseconds,
                lease_deadline=None if lease is None else lease.deadline,
                response_id=response_id,
                counts_start=counts_start,
                run_field=turn_run_field(turn),
                run_stamp=stamps.current_json(),
            )
        )
        taken, starts = bool(raw[0]), int(raw[1])
        if not taken:
            return OpenedTurn(taken=False, starts=starts, loaded=None)
        fence = (
            NO_FENCE
            if lease is None
            else Fence(token=lease.token, milliseconds=lease.milliseconds, turn=turn)
        )
        if on_taken is not None:
            on_taken()
        loaded = _loaded_turn(raw[2])
        count = raw[2][1]
        if isinstance(count, int) and loaded.stored is not None:  # counted, not read
            inputs = json_items(self.read_list(self.keys.inputs(response_id), count))
            if len(inputs) < count:  # deleted since (the list never changes otherwise)
                loaded = replace(loaded, stored=None)
            loaded = replace(loaded, inputs=inputs)
        return OpenedTurn(taken=True, starts=starts, loaded=loaded, fence=fence)


def _loaded_turn(raw: list[Any]) -> LoadedTurn:
    fields, inputs, start, rerun, steered = raw
    return LoadedTurn(
        stored=stored_with_owner(fields),
        inputs=[] if isinstance(inputs, int) else json_items(inputs),
        start_sequence_number=int(start),
        is_rerun=bool(rerun),
        steered=bool(steered),
    )
