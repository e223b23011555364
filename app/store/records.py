"""Response records and their compare-and-set writes.

A record is a hash (``Keys.record``): the response object, its status, a version bumped by
every write, the committed turn count, the request's ``extra`` fields and a reference to the
items before its input (:mod:`~app.store.history`), with the response's input items in a list
beside it. ``write.lua`` is the one way to change a record: it checks the
status against the write's :class:`~app.store.status.Transition` (and optionally the version)
and emits the write's events in the same step; the final write of a response that belongs to a
conversation adds its input and output items to it in that step too
(:mod:`~app.store.conversations`). Deletion removes record, inputs, events,
counters and tool results together.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import redis
from pydantic_core import to_json

from app import cooperation
from app.errors import NotFoundError
from app.protocol.events import Event
from app.protocol.response import ResponseObject
from app.store.base import json_items, text
from app.store.conversations import BLOCK_BATCH, ConversationBlocks, encode_items
from app.store.events import (
    END_LINE,
    EncodedEvents,
    StoredEvent,
    encode_events,
    logged_events,
    publish,
)
from app.store.fence import NO_FENCE, Fence
from app.store.history import HistoryRef
from app.store.once import this_thread
from app.store.scripts import LuaScript, counted, key
from app.store.status import APPENDING_STATUSES, START, TERMINAL_STATUSES, Transition, packed
from app.store.timeline import turns_and_calls
from app.telemetry import metrics


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredResponse:
    """A response record as read from Redis."""

    response: ResponseObject
    """The response object clients see."""
    version: int
    """Bumped by every write; the compare-and-set token."""
    turn: int
    """Model turns committed so far."""
    extra: dict[str, Any]
    """Request fields that are not part of the response object (``include``, ``user`` …)."""
    owner: str = ""
    """The tenant that created it (:mod:`app.ownership`; read by :meth:`Records.load` and a
    run's first read)."""
    history: HistoryRef | None = None
    """The items before its input, in its chain's list (None: none, or a record of before the
    lists, whose ``extra`` holds them as ``context``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteResult:
    """What a compare-and-set write did."""

    ok: bool
    status: str
    """The status now stored (the new one when ``ok``, else the one that blocked the write)."""
    conflict: bool = False
    """The version moved under us: reload and try again."""
    lease_lost: bool = False
    """Another run holds the writing run's lease (:mod:`app.store.fence`): it owns the response."""


RECORD_FIELDS = ("object", "ver", "turn", "extra", "history")
"""The record's fields that make a :class:`StoredResponse`, in :func:`stored_response`'s order."""


def stored_response(fields: Sequence[Any]) -> StoredResponse | None:
    """A record's :data:`RECORD_FIELDS` as read by HMGET; None when there is no record."""
    raw, ver, turn, extra, history = fields
    if raw is None:
        return None
    return StoredResponse(
        response=ResponseObject.model_validate_json(raw),
        version=int(ver or 0),
        turn=int(turn or 0),
        extra=json.loads(extra) if extra else {},
        history=HistoryRef.decode(history),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteCall:
    """The operands of ``write.lua``."""

    record: str = key()
    sequence: str = key()
    stream: str = key()
    inputs_key: str = key()
    lease: str = key()
    active: str = key()
    conversation: str = key()
    conversation_items_key: str = key()
    conversation_order: str = key()
    results: str = key()
    own_history: str = key()
    """The history list the response's create began (``Keys.history(id, id)``)."""
    staged_inputs: str = key()
    """A create's input items staged by ``append_batch.lua`` (``is_staged``)."""
    conversation_history: str = key()
    """The conversation's items as a history list (``Keys.conversation_history``)."""
    conversation_generation: str = key()
    conversation_pending: str = key()
    """The blocks waiting to be appended to the conversation (``Keys.conversation_pending``)."""
    conversation_block: str = key()
    """Where a block this write queues waits (``Keys.conversation_block``)."""
    starts: str = key()
    """The count of starts of the turn a run is on (``Keys.turn_starts``): a terminal write
    removes it (no run is needed any more; it would outlive a ``store: false`` record)."""
    steered: str = key()
    """A WebSocket client's steer (``Keys.steered``): a terminal write removes it."""
    channel: str
    maxlen: int
    ttl: int
    """Of the record, its inputs and its events."""
    is_create: bool
    """The record must not exist yet."""
    source_statuses: str
    """Packed: the statuses the record must have now (ignored by a create)."""
    expected_version: int | None
    new_status: str
    object: str
    turn: int | None
    """New count of committed turns (None: unchanged)."""
    extra: str
    """``extra`` as JSON ("": unchanged)."""
    started: str
    """The object as its first run will start it ("": none)."""
    is_terminal: bool
    end_line: str
    response_id: str
    lease_token: str
    """The writing run's (:class:`~app.store.fence.Fence`; "": no run's, not checked)."""
    lease_ms: int
    lease_deadline: float
    appends_to_conversation: bool
    """A terminal write adds the inputs and ``conversation_items`` to the conversation."""
    conversation_ttl: int
    owner: str
    """The creating tenant, stored by a create ("": none)."""
    once_field: str
    """The writer's field of the record (:mod:`app.store.once`)."""
    once_token: str
    """The call's token: a call whose token the field holds already is a replay."""
    watch_until: float | None
    """A create: the sweeper's watch of the new response until then (epoch seconds)."""
    history: str
    """A create: the new response's :class:`HistoryRef`, encoded ("": none)."""
    is_forgotten: bool
    """A terminal write of a ``store: false`` response: its tool results and the history list
    its create began (the context a WebSocket connection gave it) take the record's ``ttl``."""
    is_staged: bool
    """A create whose input items are on ``staged_inputs``: the list becomes ``inputs_key``."""
    history_ttl: int
    """Of ``conversation_history``, from an append to it."""
    inline_items: int
    """A longer block is queued for ``append_block.lua``, not appended by the write."""
    inputs: tuple[str, ...] = counted()
    """Stored by a create (after the staged ones)."""
    event_types: tuple[str, ...] = counted()
    event_json_prefixes: tuple[str, ...] = counted()
    conversation_items: tuple[str, ...] = counted()
    """The response's output items, when it appends to its conversation."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SetExtraCall:
    """The operands of ``set_extra.lua``."""

    record: str = key()
    lease: str = key()
    active: str = key()
    extra: str
    lease_token: str
    """The writing run's (:class:`~app.store.fence.Fence`; "": no run's, not checked)."""
    lease_ms: int
    lease_deadline: float
    response_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class _Checks:
    """What a write (not a create) checks before it writes."""

    source: Transition
    """The record must have one of its source statuses."""
    version: int | None
    fence: Fence


@dataclass(frozen=True, slots=True, kw_only=True)
class _NewRecord:
    """What a response's create stores beside the object."""

    inputs: tuple[str, ...]
    extra: str
    started: str
    is_staged: bool = False
    """The input items are on the staged list (:meth:`Records._stage`), not in ``inputs``."""
    owner: str = ""
    watch_until: float | None = None
    history: HistoryRef | None = None


WRITE = LuaScript("write", WriteCall)
STAGED_SECONDS = 3600
"""How long staged input items wait for their create (which follows within seconds)."""
SET_EXTRA = LuaScript("set_extra", SetExtraCall)
_CREATED = ""  # a create checks no source status (the record must not exist)
_VERSION_MOVED, _LEASE_LOST = -3, -4
"""``write.lua``'s codes of those refusals."""
_log = logging.getLogger(__name__)


class Records(ConversationBlocks):
    """Creating, writing, reading and deleting response records."""

    def create(  # noqa: PLR0913 - the record's parts, each a keyword
        self,
        response: ResponseObject,
        *,
        inputs: Sequence[dict[str, Any]],
        extra: dict[str, Any],
        events: Sequence[Event],
        owner: str = "",
        watch_until: float | None = None,
        history: HistoryRef | None = None,
    ) -> list[StoredEvent]:
        """Store a new response with its input items and emit its first events (one script).

        Returns the events as logged (numbered from 0), so its creator can relay them without
        reading them back.

        ``owner``: the tenant creating it (:mod:`app.ownership`). ``history``: the items before
        its input (:meth:`~app.store.history.Histories.extend_history` made it).

        A ``queued`` response is stored with the object its first run starts it as
        (``in_progress``): the run's first read makes that move (``load_turn.lua``).
        ``watch_until`` (epoch seconds): the sweeper's watch, in the same step; should no run
        start by then (the first turn's message was lost), it queues the turn again
        (``app.lease.sweep``).
        """
        encoded = encode_events(events, written=response)
        items = cooperation.json_texts(inputs)
        is_staged = len(items) > cooperation.BATCH
        if is_staged:
            self._stage(response.id, items)
        result = self._put(
            response,
            checks=None,
            events=encoded,
            new=_NewRecord(
                inputs=() if is_staged else tuple(items),
                extra=to_json(extra).decode(),
                started=_started(response),
                is_staged=is_staged,
                owner=owner,
                watch_until=watch_until,
                history=history,
            ),
        )
        if not result.ok:  # ids are random; a clash is a bug
            raise RuntimeError(f"response {response.id} already exists")
        return logged_events(encoded, first=0)

    def _stage(self, response_id: str, items: Sequence[str]) -> None:
        """Put a new response's input items on its staged list, a batch a call.

        Many items in the create's one call held Redis for everyone while it ran (450,000: 0.77
        s), and the gateway while it packed them; a batch is a few milliseconds of either, with
        the gateway's other work between two (:mod:`app.cooperation`). Should the create never
        come (the gateway failed), the list goes after :data:`STAGED_SECONDS`.

        Raises:
            RuntimeError: the list did not grow by the batch (it went away meanwhile).
        """
        staged = self.keys.staged_inputs(response_id)
        if not self.append_list(staged, items, before=0, ttl=STAGED_SECONDS):
            raise RuntimeError(f"the input items of {response_id} were not staged")

    def write(  # noqa: PLR0913 - the object, then keywords: what the write checks and carries
        self,
        response: ResponseObject,
        *,
        transition: Transition,
        version: int | None = None,
        turn: int | None = None,
        events: Sequence[Event] = (),
        fence: Fence = NO_FENCE,
        running_turn: int = 0,
    ) -> WriteResult:
        """Compare-and-set the record; emit ``events`` with the write, atomically.

        Args:
            response: The new response object (its ``status`` is the status written).
            transition: The move this write makes; the record must have one of its sources.
            version: The version the record must have now (``None``: any).
            turn: New count of committed turns (``None``: unchanged).
            events: Events emitted only if the write happens.
            fence: The writing run's lease: the write is refused when another run holds it.
            running_turn: A terminal write without a run's lease (a cancel, a failure at the
                task boundary): the turn a run may be on, the stored count of committed turns.
                Its count of starts goes with the write, as the turn of ``fence`` does.

        Raises:
            ValueError: ``transition`` is not a write's, or does not lead to the response's
                status (a bug, not a race).
        """
        if not transition.is_write:
            raise ValueError(f"no write makes the {transition.name} transition")
        if response.status not in transition.target:
            raise ValueError(f"a {transition.name} write cannot store {response.status}")
        checks = _Checks(source=transition, version=version, fence=fence)
        encoded = encode_events(events, written=response)
        running = running_turn if fence.turn is None else fence.turn
        return self._put(response, checks=checks, turn=turn, events=encoded, running=running)

    def _put(
        self,
        response: ResponseObject,
        *,
        checks: _Checks | None,
        events: EncodedEvents,
        turn: int | None = None,
        new: _NewRecord | None = None,
        running: int = 0,
    ) -> WriteResult:
        """A write after ``checks``, or (``checks=None``) the create of ``new``.

        ``running``: the turn whose count of starts a terminal write removes.
        """
        fence = NO_FENCE if checks is None else checks.fence
        new = new or _NewRecord(inputs=(), extra="", started="")
        rid = response.id
        is_terminal = response.status in TERMINAL_STATUSES
        ttl = self.ttl_seconds if response.store or not is_terminal else self.unstored_ttl_seconds
        conversation_id = response.conversation.id if response.conversation else ""
        appends = bool(conversation_id) and response.status in APPENDING_STATUSES
        # a response of no conversation names keys in its own slot (one slot per script call)
        conversation_keys_id = conversation_id or rid
        call = this_thread().next_call()  # a replay after a lost reply writes nothing (once.py)
        code, now_status, _last, *queued = self.script(WRITE)(
            WriteCall(
                record=self.keys.record(rid),
                sequence=self.keys.sequence(rid),
                stream=self.keys.events(rid),
                inputs_key=self.keys.inputs(rid),
                lease=self.keys.lease(rid),
                active=self.keys.active_of(rid),
                conversation=self.keys.conversation(conversation_keys_id),
                conversation_items_key=self.keys.conversation_items(conversation_keys_id),
                conversation_order=self.keys.conversation_order(conversation_keys_id),
                results=self.keys.tool_results(rid),
                own_history=self.keys.history(rid, rid),
                staged_inputs=self.keys.staged_inputs(rid),
                conversation_history=self.keys.conversation_history(conversation_keys_id),
                conversation_generation=self.keys.conversation_generation(conversation_keys_id),
                conversation_pending=self.keys.conversation_pending(conversation_keys_id),
                conversation_block=self.keys.conversation_block(conversation_keys_id, rid),
                starts=self.keys.turn_starts(rid, running),
                steered=self.keys.steered(rid),
                channel=self.keys.channel(rid),
                maxlen=self.stream_maxlen,
                ttl=ttl,
                is_create=checks is None,
                source_statuses=_CREATED if checks is None else packed(checks.source.source),
                expected_version=None if checks is None else checks.version,
                new_status=response.status,
                object=events.response_json or response.model_dump_json(),
                turn=turn,
                extra=new.extra,
                started=new.started,
                is_terminal=is_terminal,
                end_line=END_LINE,
                response_id=rid,
                lease_token=fence.token,
                lease_ms=fence.milliseconds,
                lease_deadline=fence.deadline(self.now()),
                appends_to_conversation=appends,
                conversation_ttl=self.ttl_seconds,
                owner=new.owner,
                once_field=call.field,
                once_token=call.token,
                watch_until=new.watch_until,
                history="" if new.history is None else new.history.encode(),
                is_forgotten=is_terminal and not response.store,
                is_staged=new.is_staged,
                history_ttl=self.history_ttl,
                inline_items=BLOCK_BATCH,
                inputs=new.inputs,
                event_types=events.types,
                event_json_prefixes=events.json_prefixes,
                conversation_items=encode_items(response.output) if appends else (),
            )
        )
        if code > 0:
            _count(response, is_create=checks is None, owner=new.owner)
        if code > 0 and queued and queued[0]:
            self._append_queued_block(conversation_id)
        return WriteResult(
            ok=code > 0,
            status=text(now_status),
            conflict=code == _VERSION_MOVED,
            lease_lost=code == _LEASE_LOST,
        )

    def _append_queued_block(self, conversation_id: str) -> None:
        """Append the block the write queued, a batch a call.

        Should Redis fail meanwhile, the write stands: the next to read or change the
        conversation appends the rest.
        """
        try:
            self.settle_conversation(conversation_id)
        except redis.RedisError:
            _log.warning(
                "conversation %s: its waiting block is left to the next reader",
                conversation_id,
                exc_info=True,
            )

    def set_extra(
        self, response_id: str, extra: dict[str, Any], *, fence: Fence = NO_FENCE
    ) -> WriteResult:
        """Replace the request's ``extra`` fields (no-op once the response is gone).

        ``fence``: the writing run's lease; refused (``lease_lost``) when another run holds it.
        """
        code, status = self.script(SET_EXTRA)(
            SetExtraCall(
                record=self.keys.record(response_id),
                lease=self.keys.lease(response_id),
                active=self.keys.active_of(response_id),
                extra=to_json(extra).decode(),
                lease_token=fence.token,
                lease_ms=fence.milliseconds,
                lease_deadline=fence.deadline(self.now()),
                response_id=response_id,
            )
        )
        return WriteResult(ok=code > 0, status=text(status), lease_lost=code == _LEASE_LOST)

    def delete(self, response_id: str) -> bool:
        """Remove a response and everything kept for it; False if it did not exist.

        That is its record, input items, events and tool results, and the counters its runs
        and tool calls kept (the poison guards): the record's marks and the results name them.
        """
        pipe = self.redis.pipeline(transaction=False)
        pipe.hkeys(self.keys.record(response_id))
        pipe.hkeys(self.keys.tool_results(response_id))
        fields, results = pipe.execute()
        turns, calls = turns_and_calls(text(name) for name in fields)
        calls.update(text(call_id) for call_id in results)
        removed = self.redis.unlink(  # freed outside Redis's main thread (a long input's)
            self.keys.record(response_id),
            self.keys.inputs(response_id),
            self.keys.events(response_id),
            self.keys.sequence(response_id),
            self.keys.lease(response_id),
            self.keys.tool_results(response_id),
            self.keys.queued_resends(response_id),
            self.keys.steered(response_id),
            self.keys.cancelled_at(response_id),
            *(self.keys.turn_starts(response_id, turn) for turn in turns),
            *(self.keys.tool_claim(response_id, call_id) for call_id in calls),
            *(self.keys.call_starts(response_id, call_id) for call_id in calls),
        )
        self.redis.zrem(self.keys.active_of(response_id), response_id)
        if removed:
            publish(self.redis, self.keys.channel(response_id), END_LINE)
        return bool(removed)

    def load(self, response_id: str) -> StoredResponse | None:
        """The record with its owner, or None when unknown, expired or deleted."""
        return stored_with_owner(
            self.redis.hmget(self.keys.record(response_id), *RECORD_FIELDS, "owner")
        )

    def load_many(self, response_ids: Sequence[str]) -> list[StoredResponse | None]:
        """:meth:`load` of each of ``response_ids``, in one round trip (one a node on a cluster)."""
        pipe = self.redis.pipeline(transaction=False)
        for response_id in response_ids:
            pipe.hmget(self.keys.record(response_id), *RECORD_FIELDS, "owner")
        return [stored_with_owner(fields) for fields in cooperation.each(pipe.execute())]

    def get(self, response_id: str) -> StoredResponse:
        """Like :meth:`load`, but a missing response is a ``NotFoundError``."""
        stored = self.load(response_id)
        if stored is None:
            raise NotFoundError(f"No response found with id '{response_id}'.", param="response_id")
        return stored

    def status(self, response_id: str) -> str | None:
        """The stored status alone (cheap)."""
        raw = self.redis.hget(self.keys.record(response_id), "status")
        return None if raw is None else text(raw)

    def inputs(self, response_id: str) -> list[dict[str, Any]]:
        """The response's own input items, in order (a batch a call, a batch a parse)."""
        return json_items(self.read_list(self.keys.inputs(response_id)))

    def input_items(self, places: Sequence[tuple[str, int]]) -> list[dict[str, Any] | None]:
        """The input item at each place (a response and an index), None where there is none.

        One round trip (one a node on a cluster).
        """
        pipe = self.redis.pipeline(transaction=False)
        for response_id, index in places:
            pipe.lindex(self.keys.inputs(response_id), index)
        return [None if raw is None else json.loads(raw) for raw in pipe.execute()]


def stored_with_owner(fields: Sequence[Any]) -> StoredResponse | None:
    """A record's :data:`RECORD_FIELDS` and its owner as read by HMGET (None: no record)."""
    *recorded, owner = fields
    stored = stored_response(recorded)
    if stored is None or owner is None:  # no owner: created while the fleet was open
        return stored
    return replace(stored, owner=text(owner))


def _started(response: ResponseObject) -> str:
    """A queued response's object as its first run starts it (:data:`START`; "": not queued)."""
    if response.status not in START.source:
        return ""
    [status] = START.target
    return response.model_copy(update={"status": status}).model_dump_json()


def _count(response: ResponseObject, *, is_create: bool, owner: str) -> None:
    """A write that happened: a response created (by its tenant), or one that ended."""
    if is_create:
        metrics.RESPONSES_CREATED.labels(metrics.tenant_label(owner)).inc()
    elif response.status in TERMINAL_STATUSES:
        metrics.RESPONSES_ENDED.labels(response.status.value).inc()
