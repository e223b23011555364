"""The response store and event log in Redis.

Lua scripts hold every invariant that spans keys:

* ``_EMIT`` assigns ``sequence_number`` (INCR), appends to the response's bounded stream (XADD)
  and publishes (PUBLISH) — and refuses when the response is no longer active, so nothing is
  emitted after a cancel.
* ``_WRITE`` is the compare-and-set of the response record: it checks the status (and optionally
  the version) before it writes, and emits the events that go with the write in the same step,
  so ``response.completed`` exists exactly when the stored status says ``completed``.
* ``_LOAD_TURN`` reads what a run needs and marks where its turn's events begin, once.
* ``_OPEN_CALL`` claims a tool call only while its response is active and no result is stored;
  ``_FINISH_CALL`` stores the result only while the response is still active (a result that
  arrives after a cancel is discarded) and gives the claim back.
* Deletion removes record, inputs, events, counters and tool results together.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import redis

from app.errors import InvalidRequestError, NotFoundError
from app.keys import Keys
from app.protocol.events import Event
from app.protocol.response import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    ResponseObject,
    ResponseStatus,
)

# The events of one call are published together, one line each (``seq type json``; the JSON
# is one line), so a gateway takes one pub/sub message per flush rather than one per event.
_APPEND_EVENT_LUA = """
local function append(seq_key, stream_key, maxlen, event_type, json, lines)
  local seq = redis.call('INCR', seq_key) - 1
  local body = string.sub(json, 1, -2) .. ',"sequence_number":' .. seq .. '}'
  redis.call('XADD', stream_key, 'MAXLEN', '~', maxlen, '1-' .. seq, 't', event_type, 'd', body)
  lines[#lines + 1] = seq .. ' ' .. event_type .. ' ' .. body
  return seq
end
local function publish(channel, lines)
  if #lines > 0 then redis.call('PUBLISH', channel, table.concat(lines, '\\n')) end
end
"""
_EMIT_EVENTS_LUA = (
    _APPEND_EVENT_LUA
    + """
local function emit(first_arg, lines)
  local last = -1
  for i = first_arg, #ARGV, 2 do
    last = append(KEYS[2], KEYS[3], ARGV[2], ARGV[i], ARGV[i + 1], lines)
  end
  redis.call('EXPIRE', KEYS[2], ARGV[3])
  redis.call('EXPIRE', KEYS[3], ARGV[3])
  return last
end
"""
)

# KEYS: record, seq, stream. ARGV: channel, maxlen, ttl, then (type, json) pairs.
_EMIT = (
    _EMIT_EVENTS_LUA
    + """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {-2, ''} end
if status ~= 'queued' and status ~= 'in_progress' then return {-1, status} end
local lines = {}
local last = emit(4, lines)
publish(ARGV[1], lines)
return {last, status}
"""
)

# KEYS: record, seq, stream, inputs, lease, active. ARGV: channel, maxlen, ttl, expected statuses
# ("|a|b|" or "*new*"), expected version ("" = any), new status, object json, turn ("" = keep),
# is_terminal ("1"/"0"), record ttl, response id, extra json ("" = keep), the object as it will
# start ("" = none; see LOAD_TURN_LUA), n input items, the n items (stored when the record is
# new), then (type, json) pairs. A terminal write sets the inputs' ttl too, and frees the
# response's lease (no run of it is needed any more).
_WRITE = (
    _EMIT_EVENTS_LUA
    + """
local status = redis.call('HGET', KEYS[1], 'status')
if ARGV[4] == '*new*' then
  if status then return {-1, status, -1} end
else
  if not status then return {-2, '', -1} end
  if not string.find(ARGV[4], '|' .. status .. '|', 1, true) then return {-1, status, -1} end
  if ARGV[5] ~= '' and redis.call('HGET', KEYS[1], 'ver') ~= ARGV[5] then
    return {-3, status, -1}
  end
end
local n = tonumber(ARGV[14])
if ARGV[4] == '*new*' then
  redis.call('DEL', KEYS[4])
  for i = 15, 14 + n, 1000 do
    redis.call('RPUSH', KEYS[4], unpack(ARGV, i, math.min(i + 999, 14 + n)))
  end
  redis.call('EXPIRE', KEYS[4], ARGV[10])
end
if ARGV[12] ~= '' then redis.call('HSET', KEYS[1], 'extra', ARGV[12]) end
if ARGV[13] ~= '' then
  redis.call('HSET', KEYS[1], 'started', ARGV[13])
elseif status == 'queued' and ARGV[6] ~= 'queued' then
  redis.call('HDEL', KEYS[1], 'started')
end
redis.call('HSET', KEYS[1], 'status', ARGV[6], 'object', ARGV[7])
local ver = redis.call('HINCRBY', KEYS[1], 'ver', 1)
if ARGV[8] ~= '' then redis.call('HSET', KEYS[1], 'turn', ARGV[8]) end
redis.call('EXPIRE', KEYS[1], ARGV[10])
local lines = {}
local last = emit(15 + n, lines)
if ARGV[9] == '1' then
  redis.call('EXPIRE', KEYS[4], ARGV[10])
  redis.call('DEL', KEYS[5])
  redis.call('ZREM', KEYS[6], ARGV[11])
  lines[#lines + 1] = '-1 end -'
end
publish(ARGV[1], lines)
return {ver, ARGV[6], last}
"""
)

# A run's first read: the record, its input items, and where the turn's events begin — the last
# sequence number when the turn first started (a re-run finds the mark of the first run). The
# mark is only set on a record that exists: a deleted one is not brought back as a stub. A
# ``queued`` record is started on the way: the object its creator stored for that moment
# (``started``, the same object ``in_progress``) becomes the object, with ``response.in_progress``
# after the mark. Returns {record fields, inputs, mark start, 1 when a re-run}. A function, so
# that the lease's script can take the lease and read the turn in one step (app/lease.py).
LOAD_TURN_LUA = (
    _APPEND_EVENT_LUA
    + """
local function start(record, seq, stream, channel, maxlen, ttl, fields)
  local started = fields[6]
  redis.call('HSET', record, 'status', 'in_progress', 'object', started)
  redis.call('HDEL', record, 'started')
  fields[1] = started
  fields[2] = redis.call('HINCRBY', record, 'ver', 1)
  local lines = {}
  local event = '{"type":"response.in_progress","response":' .. started .. '}'
  append(seq, stream, maxlen, 'response.in_progress', event, lines)
  redis.call('EXPIRE', seq, ttl)
  redis.call('EXPIRE', stream, ttl)
  publish(channel, lines)
end
local function load_turn(record, inputs_key, seq, stream, field, channel, maxlen, ttl)
  local fields = redis.call('HMGET', record, 'object', 'ver', 'turn', 'extra', 'status', 'started')
  local inputs = redis.call('LRANGE', inputs_key, 0, -1)
  if not fields[1] then return {{fields[1], fields[2], fields[3], fields[4]}, inputs, -1, 0} end
  local raw = redis.call('GET', seq)
  local last = -1
  if raw then last = tonumber(raw) - 1 end
  local mark, rerun = last, 0
  if redis.call('HSETNX', record, field, last) == 0 then
    mark, rerun = tonumber(redis.call('HGET', record, field)) or last, 1
  end
  if fields[5] == 'queued' and fields[6] then
    start(record, seq, stream, channel, maxlen, ttl, fields)
  end
  return {{fields[1], fields[2], fields[3], fields[4]}, inputs, mark, rerun}
end
"""
)
# KEYS: record, inputs, sequence counter, events. ARGV: the turn's field, channel, maxlen, ttl.
_LOAD_TURN = (
    LOAD_TURN_LUA
    + "return load_turn(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4])"
)
# KEYS: claim. ARGV: token. Deletes the claim only when the token is still the one stored.
_RELEASE_CLAIM = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# KEYS: record, results, claim, deliveries. ARGV: token, claim ttl ms, deliveries ttl, "1" to
# count this delivery, active statuses ("|a|b|"), call id. Returns {deliveries (0: not
# counted), claim (0 held elsewhere, 1 claimed, 2 result stored, 3 response inactive or gone),
# record fields}.
_OPEN_CALL = """
local deliveries = 0
if ARGV[4] == '1' then
  deliveries = redis.call('INCR', KEYS[4])
  redis.call('EXPIRE', KEYS[4], ARGV[3])
end
local fields = redis.call('HMGET', KEYS[1], 'object', 'ver', 'turn', 'extra', 'status')
if redis.call('HEXISTS', KEYS[2], ARGV[6]) == 1 then return {deliveries, 2, fields} end
local status = fields[5]
if not status or not string.find(ARGV[5], '|' .. status .. '|', 1, true) then
  return {deliveries, 3, fields}
end
if redis.call('SET', KEYS[3], ARGV[1], 'NX', 'PX', ARGV[2]) then return {deliveries, 1, fields} end
return {deliveries, 0, fields}
"""
# KEYS: claim. ARGV: token, ttl ms.
_EXTEND_CLAIM = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
# KEYS: record, results, claim. ARGV: result json, ttl, token, active statuses ("|a|b|"), call
# id. Stores the result while the response is active (a result after a cancel is discarded),
# and gives the claim back either way. Returns {1 when stored, the status}.
_FINISH_CALL = """
local status = redis.call('HGET', KEYS[1], 'status') or ''
local stored = 0
if status ~= '' and string.find(ARGV[4], '|' .. status .. '|', 1, true) then
  stored = redis.call('HSETNX', KEYS[2], ARGV[5], ARGV[1])
  redis.call('EXPIRE', KEYS[2], ARGV[2])
end
if redis.call('GET', KEYS[3]) == ARGV[3] then redis.call('DEL', KEYS[3]) end
return {stored, status}
"""


# KEYS: record. ARGV: extra json. A deleted record is not brought back as a stub.
_SET_EXTRA = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'extra', ARGV[1]) end
return 0
"""


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


@dataclass(frozen=True, slots=True, kw_only=True)
class _NewRecord:
    """What a response's first write stores beside the object: request fields, input items."""

    extra: str
    inputs: list[str]
    started: str
    """The object as its first run will start it (``in_progress``), or "" (no such start)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredEvent:
    """One event of a response's log."""

    sequence_number: int
    type: str
    data: str
    """The event as one line of JSON, ``sequence_number`` included."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteResult:
    """What a compare-and-set write did."""

    ok: bool
    status: str
    """The status now stored (the new one when ``ok``, else the one that blocked the write)."""
    conflict: bool = False
    """The version moved under us: reload and try again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedTurn:
    """What a run reads first (:meth:`ResponseStore.load_turn`)."""

    stored: StoredResponse | None
    inputs: list[dict[str, Any]]
    start_sequence_number: int
    """The last sequence number before the turn first started (-1: none)."""
    is_rerun: bool
    """The turn was started before (its mark was there): a redelivery or a sweep."""


class RedeliveredTooOftenError(Exception):
    """A task was delivered more often than ``max_task_deliveries``: it kills its worker."""

    def __init__(self, deliveries: int):
        super().__init__(f"delivered {deliveries} times")
        self.deliveries = deliveries


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenedCall:
    """What a tool task reads first (:meth:`ResponseStore.open_tool_call`)."""

    deliveries: int
    """This delivery's count (0 when none was counted)."""
    claim: ClaimOutcome
    """``claimed`` by this delivery; ``held`` by another; ``stored``: its result is in already;
    ``inactive``: the response is gone or no longer active."""
    stored: StoredResponse | None


ClaimOutcome = Literal["held", "claimed", "stored", "inactive"]
_CLAIM_OUTCOMES: tuple[ClaimOutcome, ...] = ("held", "claimed", "stored", "inactive")
_ACTIVE_ARG = "|" + "|".join(sorted(ACTIVE_STATUSES)) + "|"


@dataclass(frozen=True, slots=True, kw_only=True)
class EmitResult:
    """What an emit did: the last sequence number, or why nothing was emitted."""

    last_sequence_number: int
    status: str

    @property
    def refused(self) -> bool:
        """The response is no longer active (cancelled, finished or deleted)."""
        return self.last_sequence_number < 0 and self.status not in ACTIVE_STATUSES


class ExpiredCursorError(InvalidRequestError):
    """The events after ``starting_after`` are no longer all in the log."""

    default_code = "cursor_expired"

    def __init__(
        self, message: str, *, param: str | None = "starting_after", code: str | None = None
    ):
        super().__init__(message, param=param, code=code)


def _event_args(events: Iterable[Event]) -> list[str]:
    args: list[str] = []
    for event in events:
        args.append(event["type"])
        args.append(json.dumps(event, separators=(",", ":"), ensure_ascii=False))
    return args


def _started(response: ResponseObject) -> str:
    """A queued response's object as its first run starts it (the run's first read does it)."""
    if response.status != ResponseStatus.QUEUED:
        return ""
    return response.model_copy(update={"status": ResponseStatus.IN_PROGRESS}).model_dump_json()


def loaded_turn(raw: list[Any]) -> LoadedTurn:
    """What ``LOAD_TURN_LUA``'s ``load_turn`` returned."""
    fields, inputs, start, rerun = raw
    return LoadedTurn(
        stored=_stored(fields),
        inputs=[json.loads(item) for item in inputs],
        start_sequence_number=int(start),
        is_rerun=bool(rerun),
    )


_RECORD_FIELDS = ("object", "ver", "turn", "extra")


def _stored(fields: list[Any]) -> StoredResponse | None:
    """A record's ``_RECORD_FIELDS`` as read by HMGET; None when there is no record."""
    raw, ver, turn, extra = fields
    if raw is None:
        return None
    return StoredResponse(
        response=ResponseObject.model_validate_json(raw),
        version=int(ver or 0),
        turn=int(turn or 0),
        extra=json.loads(extra) if extra else {},
    )


class ResponseStore:
    """Responses, their input items and their event logs, in one Redis database."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        keys: Keys,
        ttl_seconds: int,
        unstored_ttl_seconds: int = 300,
        stream_maxlen: int = 20_000,
    ):
        self.redis = client
        self.keys = keys
        self.ttl_seconds = ttl_seconds
        self.unstored_ttl_seconds = unstored_ttl_seconds
        self.stream_maxlen = stream_maxlen
        self._emit = client.register_script(_EMIT)
        self._write = client.register_script(_WRITE)
        self._release_claim = client.register_script(_RELEASE_CLAIM)
        self._open_call = client.register_script(_OPEN_CALL)
        self._extend_claim = client.register_script(_EXTEND_CLAIM)
        self._finish_call = client.register_script(_FINISH_CALL)
        self._load_turn = client.register_script(_LOAD_TURN)

    # -- writing -------------------------------------------------------------------------------

    def create(
        self,
        response: ResponseObject,
        *,
        inputs: Sequence[dict[str, Any]],
        extra: dict[str, Any],
        events: Sequence[Event],
    ) -> None:
        """Store a new response with its input items and emit its first events (one script)."""
        result = self._put(
            response,
            expected=None,
            version=None,
            turn=0,
            events=events,
            new=_NewRecord(
                extra=json.dumps(extra),
                inputs=[json.dumps(item) for item in inputs],
                started=_started(response),
            ),
        )
        if not result.ok:  # pragma: no cover - ids are random; a clash is a bug
            raise RuntimeError(f"response {response.id} already exists")

    def write(
        self,
        response: ResponseObject,
        *,
        expected: frozenset[str] | None,
        version: int | None = None,
        turn: int | None = None,
        events: Sequence[Event] = (),
    ) -> WriteResult:
        """Compare-and-set the record; emit ``events`` with the write, atomically.

        Args:
            response: The new response object (its ``status`` is the status written).
            expected: Statuses the record must have now; ``None``: it must not exist yet.
            version: The version the record must have now (``None``: any).
            turn: New count of committed turns (``None``: unchanged).
            events: Events emitted only if the write happens.
        """
        return self._put(response, expected=expected, version=version, turn=turn, events=events)

    def _put(
        self,
        response: ResponseObject,
        *,
        expected: frozenset[str] | None,
        version: int | None,
        turn: int | None,
        events: Sequence[Event],
        new: _NewRecord | None = None,
    ) -> WriteResult:
        """:meth:`write`; a record created by it (``expected=None``) gets ``new``'s fields."""
        extra, started, inputs = (new.extra, new.started, new.inputs) if new else ("", "", [])
        rid = response.id
        status = str(response.status)
        is_terminal = status in TERMINAL_STATUSES
        ttl = self.ttl_seconds if response.store or not is_terminal else self.unstored_ttl_seconds
        expected_arg = "*new*" if expected is None else "|" + "|".join(sorted(expected)) + "|"
        args: list[str | int] = [
            self.keys.channel(rid),
            self.stream_maxlen,
            ttl,
            expected_arg,
            "" if version is None else str(version),
            status,
            response.model_dump_json(),
            "" if turn is None else str(turn),
            "1" if is_terminal else "0",
            ttl,
            rid,
            extra,
            started,
            len(inputs),
            *inputs,
            *_event_args(events),
        ]
        code, now_status, _last = self._write(
            keys=[
                self.keys.record(rid),
                self.keys.sequence(rid),
                self.keys.events(rid),
                self.keys.inputs(rid),
                self.keys.lease(rid),
                self.keys.active,
            ],
            args=args,
        )
        now = now_status.decode() if isinstance(now_status, bytes) else str(now_status)
        return WriteResult(ok=code > 0, status=now, conflict=code == -3)

    def emit(self, response_id: str, events: Sequence[Event]) -> EmitResult:
        """Append events to an active response's log; refused once it is no longer active."""
        if not events:
            return EmitResult(last_sequence_number=-1, status="in_progress")
        last, status = self._emit(
            keys=[
                self.keys.record(response_id),
                self.keys.sequence(response_id),
                self.keys.events(response_id),
            ],
            args=[
                self.keys.channel(response_id),
                self.stream_maxlen,
                self.ttl_seconds,
                *_event_args(events),
            ],
        )
        text = status.decode() if isinstance(status, bytes) else str(status)
        return EmitResult(last_sequence_number=int(last), status=text)

    def set_extra(self, response_id: str, extra: dict[str, Any]) -> None:
        """Replace the request's ``extra`` fields (no-op once the response is gone)."""
        self.redis.eval(_SET_EXTRA, 1, self.keys.record(response_id), json.dumps(extra))

    def delete(self, response_id: str) -> bool:
        """Remove a response, its input items and its events; False if it did not exist."""
        removed = self.redis.delete(
            self.keys.record(response_id),
            self.keys.inputs(response_id),
            self.keys.events(response_id),
            self.keys.sequence(response_id),
            self.keys.lease(response_id),
            self.keys.tool_results(response_id),
        )
        self.redis.zrem(self.keys.active, response_id)
        if removed:
            self.redis.publish(self.keys.channel(response_id), "-1 end -")
        return bool(removed)

    # -- reading -------------------------------------------------------------------------------

    def load(self, response_id: str) -> StoredResponse | None:
        """The record, or None when unknown, expired or deleted."""
        fields = self.redis.hmget(self.keys.record(response_id), *_RECORD_FIELDS)
        return _stored(fields)

    def load_turn(self, response_id: str, turn: int) -> LoadedTurn:
        """What a run of ``turn`` reads first, in one step.

        The record, its input items, and where the turn's events begin: the last sequence number
        when the turn first started; a re-run finds the first run's mark, so it knows which of
        the turn's events are out already. Call it holding the response's lease: it marks the
        turn's start.
        """
        keys, args = self.load_turn_operands(response_id, turn)
        return loaded_turn(self._load_turn(keys=keys, args=args))

    def load_turn_operands(self, response_id: str, turn: int) -> tuple[list[str], list[str]]:
        """The keys and arguments of ``LOAD_TURN_LUA``'s ``load_turn`` (in that order)."""
        keys = [
            self.keys.record(response_id),
            self.keys.inputs(response_id),
            self.keys.sequence(response_id),
            self.keys.events(response_id),
        ]
        args = [
            f"turn{turn}_seq",
            self.keys.channel(response_id),
            str(self.stream_maxlen),
            str(self.ttl_seconds),
        ]
        return keys, args

    def get(self, response_id: str) -> StoredResponse:
        """Like :meth:`load`, but a missing response is a ``NotFoundError``."""
        stored = self.load(response_id)
        if stored is None:
            raise NotFoundError(f"No response found with id '{response_id}'.", param="response_id")
        return stored

    def status(self, response_id: str) -> str | None:
        """The stored status alone (cheap)."""
        raw = self.redis.hget(self.keys.record(response_id), "status")
        return None if raw is None else _text(raw)

    def inputs(self, response_id: str) -> list[dict[str, Any]]:
        """The response's own input items, in order."""
        return [json.loads(raw) for raw in self.redis.lrange(self.keys.inputs(response_id), 0, -1)]

    def events_after(self, response_id: str, after: int, *, count: int = 1000) -> list[StoredEvent]:
        """Events with ``sequence_number > after``, oldest first (at most ``count``).

        Raises:
            ExpiredCursorError: when trimming removed events the caller has not seen.
        """
        key = self.keys.events(response_id)
        entries: list[Any] = (
            self.redis.xrange(key, min=f"1-{after + 1}", max="+", count=count) or []
        )
        return self._checked_events(response_id, after, entries)

    def events_and_status(
        self, response_id: str, after: int, *, count: int = 1000
    ) -> tuple[list[StoredEvent], str | None]:
        """:meth:`events_after`, then :meth:`status`, in one round trip (a relay's start).

        Raises:
            ExpiredCursorError: when trimming removed events the caller has not seen.
        """
        pipe = self.redis.pipeline(transaction=False)
        pipe.xrange(self.keys.events(response_id), min=f"1-{after + 1}", max="+", count=count)
        pipe.hget(self.keys.record(response_id), "status")
        entries, status = pipe.execute()
        events = self._checked_events(response_id, after, entries or [])
        return events, None if status is None else _text(status)

    def _checked_events(
        self, response_id: str, after: int, entries: list[Any]
    ) -> list[StoredEvent]:
        key = self.keys.events(response_id)
        if after >= 0:
            first: list[Any] = entries[:1] or self.redis.xrange(key, count=1) or []
            if first and _sequence_of(first[0][0]) > after + 1:
                raise ExpiredCursorError(_expired_message(response_id, after))
        return [_stored_event(entry_id, fields) for entry_id, fields in entries]

    def last_sequence_number(self, response_id: str) -> int:
        """The highest sequence number assigned so far (-1: none)."""
        raw = self.redis.get(self.keys.sequence(response_id))
        return int(raw) - 1 if raw is not None else -1

    def tool_results(self, response_id: str, call_ids: Sequence[str]) -> list[str | None]:
        """Stored results of the calls, None where a call has none yet."""
        if not call_ids:
            return []
        raw = self.redis.hmget(self.keys.tool_results(response_id), list(call_ids))
        return [None if value is None else _text(value) for value in raw]

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
        delivery: str | None = None,
    ) -> OpenedCall:
        """Everything a tool task does first, in one step.

        Counts the delivery (when ``delivery`` names the task delivery to count), reads the
        record, and claims the call's execution for ``claim_seconds`` under ``token`` unless
        its result is stored already, the response is no longer active, or another delivery
        holds the claim. The claim lapses after its time (the tool's deadline plus a grace), so
        a delivery that died mid-call blocks the call no longer than the call could have run.
        """
        deliveries, claim, fields = self._open_call(
            keys=[
                self.keys.record(response_id),
                self.keys.tool_results(response_id),
                self.keys.tool_claim(response_id, call_id),
                self.keys.deliveries(delivery or ""),
            ],
            args=[
                token,
                max(1, int(claim_seconds * 1000)),
                self.ttl_seconds,
                "1" if delivery is not None else "0",
                _ACTIVE_ARG,
                call_id,
            ],
        )
        return OpenedCall(
            deliveries=int(deliveries),
            claim=_CLAIM_OUTCOMES[int(claim)],
            stored=_stored(fields[:4]),
        )

    def extend_tool_claim(
        self, response_id: str, call_id: str, *, token: str, ttl_seconds: float
    ) -> None:
        """Set a claim we hold to lapse ``ttl_seconds`` from now."""
        self._extend_claim(
            keys=[self.keys.tool_claim(response_id, call_id)],
            args=[token, max(1, int(ttl_seconds * 1000))],
        )

    def finish_tool_call(
        self, response_id: str, call_id: str, result_json: str, *, token: str
    ) -> bool:
        """Store a claimed call's result and give the claim back, in one step.

        Returns False when nothing was stored: the response is no longer active (a result that
        arrives after a cancel is discarded) or a result was stored already.
        """
        stored, _status = self._finish_call(
            keys=[
                self.keys.record(response_id),
                self.keys.tool_results(response_id),
                self.keys.tool_claim(response_id, call_id),
            ],
            args=[result_json, self.ttl_seconds, token, _ACTIVE_ARG, call_id],
        )
        return bool(stored)

    def release_tool_claim(self, response_id: str, call_id: str, *, token: str) -> None:
        """Give a claim back, if it is still ours."""
        self._release_claim(keys=[self.keys.tool_claim(response_id, call_id)], args=[token])

    def is_tool_call_claimed(self, response_id: str, call_id: str) -> bool:
        """Whether some delivery holds the call's claim right now."""
        return bool(self.redis.exists(self.keys.tool_claim(response_id, call_id)))

    # -- fleet bookkeeping ---------------------------------------------------------------------

    def count_delivery(self, task_id: str) -> int:
        """Count one more delivery of a task; the count lives as long as a response."""
        key = self.keys.deliveries(task_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, self.ttl_seconds)
        count, _ = pipe.execute()
        return int(count)

    def heartbeat_worker(self, queue: str, hostname: str) -> None:
        """Mark a worker on ``queue`` alive now."""
        self.redis.zadd(self.keys.workers(queue), {hostname: time.time()})

    def live_workers(self, queue: str, *, within_seconds: float = 30.0) -> int:
        """How many workers on ``queue`` sent a heartbeat recently."""
        return int(
            self.redis.zcount(self.keys.workers(queue), time.time() - within_seconds, "+inf")
        )


def _expired_message(response_id: str, after: int) -> str:
    return (
        f"Events of response '{response_id}' after sequence_number {after} are no longer "
        "available; retrieve the response instead."
    )


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


def _sequence_of(entry_id: bytes | str) -> int:
    return int(_text(entry_id).split("-")[1])


def _stored_event(entry_id: bytes, fields: dict[bytes, bytes]) -> StoredEvent:
    return StoredEvent(
        sequence_number=_sequence_of(entry_id),
        type=fields[b"t"].decode(),
        data=fields[b"d"].decode(),
    )
