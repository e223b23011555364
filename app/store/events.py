"""The event log: each response's events in a bounded stream, published live as they go.

``emit.lua`` assigns ``sequence_number`` (INCR), appends to the response's stream (XADD) and
publishes (PUBLISH) — and refuses once the response is no longer active, so nothing is emitted
after a cancel. Writes of the record emit their events the same way (``write.lua``).

The events of one script call are published as one pub/sub message, one line each, so a
gateway takes one message per flush rather than one per event. The line format, written by
``lua/include/events.lua`` and read by ``app.relay``, is defined here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_json

from app.errors import InvalidRequestError
from app.protocol.events import Event
from app.store.base import StoreBase, text
from app.store.fence import NO_FENCE, Fence
from app.store.once import CallToken, this_thread
from app.store.scripts import LuaScript, counted, key
from app.store.status import ACTIVE_STATUSES, ResponseStatus, packed

LINE_SEPARATOR = "\n"
"""Between the lines of one published message (event JSON is one line)."""
LINE_FIELD_SEPARATOR = " "
"""Between a line's fields: ``<sequence_number> <type> <json>``."""
END_EVENT_TYPE = "end"
"""The type of the line published when a response ends (or is deleted)."""
END_LINE = f"-1{LINE_FIELD_SEPARATOR}{END_EVENT_TYPE}{LINE_FIELD_SEPARATOR}-"
"""That line in full: no event, only the news that none will follow."""
WAKE_LINE = f"-1{LINE_FIELD_SEPARATOR}antwort.wake{LINE_FIELD_SEPARATOR}-"
"""Published on a job's channel (:mod:`app.jobs`): its gateway has something to pop."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishedLine:
    """One line of a published message."""

    sequence_number: int
    type: str
    data: str


def publish(client: Any, target: str, payload: str) -> None:
    """Publish ``payload`` as ``include/events.lua`` does (``target``: ``Keys.channel``)."""
    shard_channel, _, response_id = target.partition(" ")
    if response_id:
        client.spublish(shard_channel, f"{response_id}{LINE_SEPARATOR}{payload}")
    else:
        client.publish(target, payload)


def split_sharded(payload: str) -> tuple[str, str]:
    """A sharded channel's message: the response id (its first line) and the lines after."""
    response_id, _, lines = payload.partition(LINE_SEPARATOR)
    return response_id, lines


def parse_published(payload: str) -> list[PublishedLine]:
    """The lines of one published message, in order."""
    lines = []
    for line in payload.split(LINE_SEPARATOR):
        seq, event_type, data = line.split(LINE_FIELD_SEPARATOR, 2)
        lines.append(PublishedLine(sequence_number=int(seq), type=event_type, data=data))
    return lines


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredEvent:
    """One event of a response's log."""

    sequence_number: int
    type: str
    data: str
    """The event as one line of JSON, ``sequence_number`` included."""
    at: float | None = None
    """Epoch seconds it was appended, by Redis's clock (None: logged by an older fleet)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EmitResult:
    """What an emit did: the last sequence number, or why nothing was emitted."""

    last_sequence_number: int
    status: str

    @property
    def refused(self) -> bool:
        """The response is no longer active (cancelled, finished or deleted)."""
        return self.last_sequence_number < 0 and self.status not in ACTIVE_STATUSES

    @property
    def lease_lost(self) -> bool:
        """Another run holds the emitting run's lease (:mod:`app.store.fence`)."""
        return self.last_sequence_number == _LEASE_LOST


class ExpiredCursorError(InvalidRequestError):
    """The events after ``starting_after`` are no longer all in the log."""

    default_code = "cursor_expired"

    def __init__(
        self, message: str, *, param: str | None = "starting_after", code: str | None = None
    ):
        super().__init__(message, param=param, code=code)


@dataclass(frozen=True, slots=True, kw_only=True)
class EncodedEvents:
    """Events as the scripts take them: types, and each event's JSON up to its sequence number.

    A script completes each JSON prefix with the number it assigns and the closing brace. An
    empty prefix is a response event of the object the script writes (``response_json``): the
    script composes it (:data:`RESPONSE_EVENT_PREFIX`), so a response object, megabytes maybe
    (a schema, tools, instructions it echoes), goes to Redis once for the record and its events.
    """

    types: tuple[str, ...]
    json_prefixes: tuple[str, ...]
    response_json: str = ""
    """The JSON of the response the events' writer stores ("": none of them carries it)."""


_SEQUENCE_NUMBER_FIELD = ',"sequence_number":'
RESPONSE_EVENT_PREFIX = ""
"""The prefix of an event ``{"type": …, "response": <the written object>}``, composed by the
script that writes the object (``lua/include/events.lua``), as :func:`response_event_json` does."""


def encode_events(events: Iterable[Event], *, written: BaseModel | None = None) -> EncodedEvents:
    """``events`` for a script that emits them.

    ``written``: the response object the script writes with them; an event carrying it
    (:func:`app.protocol.events.response_event`) is left to the script to compose from it.
    """
    types: list[str] = []
    prefixes: list[str] = []
    response_json = ""
    for event in events:
        types.append(event["type"])
        if len(event) == 2 and event.get("response") is written and written is not None:
            response_json = response_json or written.model_dump_json()
            prefixes.append(RESPONSE_EVENT_PREFIX)
            continue
        body = to_json(event).decode()  # a response object in it, straight to JSON
        prefixes.append(body[:-1] + _SEQUENCE_NUMBER_FIELD)  # drops the closing brace
    return EncodedEvents(
        types=tuple(types), json_prefixes=tuple(prefixes), response_json=response_json
    )


def _response_event_around(event_type: str, sequence_number: int) -> tuple[str, str]:
    """A response event's JSON before and after its object (``lua/include/events.lua``'s)."""
    return (
        f'{{"type":"{event_type}","response":',
        f"{_SEQUENCE_NUMBER_FIELD}{sequence_number}}}",
    )


def response_event_json(event_type: str, response_json: str, sequence_number: int) -> str:
    """A response event's JSON, as ``lua/include/events.lua`` composes it from the object."""
    head, tail = _response_event_around(event_type, sequence_number)
    return f"{head}{response_json}{tail}"


def response_json_of(event: StoredEvent) -> str | None:
    """The response object's JSON in a response event as the store logs it (None: not one).

    A response event is ``{"type": …, "response": <object>, "sequence_number": N}``, compact
    (:func:`response_event_json`, ``encode_events``): the object is the text between, taken
    without decoding and encoding megabytes again (a schema, tools, instructions it echoes).
    """
    head, tail = _response_event_around(event.type, event.sequence_number)
    data = event.data
    if len(data) > len(head) + len(tail) and data.startswith(head) and data.endswith(tail):
        return data[len(head) : -len(tail)]
    return None


def logged_events(encoded: EncodedEvents, first: int) -> list[StoredEvent]:
    """``encoded`` as the log holds them once a script appended them from ``first`` on.

    The scripts complete each JSON prefix with its sequence number and ``}`` (``events.lua``),
    and compose each response event from the object written: whoever wrote the events knows
    them as stored without reading them back.
    """
    logged = []
    for index, (event_type, prefix) in enumerate(
        zip(encoded.types, encoded.json_prefixes, strict=True)
    ):
        number = first + index
        if prefix == RESPONSE_EVENT_PREFIX:
            data = response_event_json(event_type, encoded.response_json, number)
        else:
            data = f"{prefix}{number}}}"
        logged.append(StoredEvent(sequence_number=number, type=event_type, data=data))
    return logged


@dataclass(frozen=True, slots=True, kw_only=True)
class EmitCall:
    """The operands of ``emit.lua``."""

    record: str = key()
    sequence: str = key()
    stream: str = key()
    lease: str = key()
    active: str = key()
    channel: str
    maxlen: int
    ttl: int
    active_statuses: str
    """Packed (:func:`app.store.status.packed`)."""
    lease_token: str
    """The emitting run's (:class:`~app.store.fence.Fence`; "": no run's, not checked)."""
    lease_ms: int
    lease_deadline: float
    response_id: str
    once_field: str
    """The emitting writer's field of the record (:mod:`app.store.once`)."""
    once_token: str
    """The call's token: a call whose token the field holds already is a replay."""
    event_types: tuple[str, ...] = counted()
    event_json_prefixes: tuple[str, ...] = counted()


EMIT = LuaScript("emit", EmitCall)
_ACTIVE = packed(ACTIVE_STATUSES)
_LEASE_LOST = -3
"""``emit.lua``'s sequence number when the lease is another run's."""


class EventLog(StoreBase):
    """Emitting a response's events and reading them back."""

    def emit(
        self,
        response_id: str,
        events: Sequence[Event],
        *,
        fence: Fence = NO_FENCE,
        call: CallToken | None = None,
    ) -> EmitResult:
        """Append events to an active response's log; refused once it is no longer active.

        ``fence``: the emitting run's lease; refused, too, when another run holds it.
        ``call``: the call's token (:mod:`app.store.once`; default: the next of this thread's
        writer); a call made again with its token appends nothing and returns its first result.
        """
        if not events:
            return EmitResult(last_sequence_number=-1, status=ResponseStatus.IN_PROGRESS)
        encoded = encode_events(events)
        call = call or this_thread().next_call()
        last, status = self.script(EMIT)(
            EmitCall(
                record=self.keys.record(response_id),
                sequence=self.keys.sequence(response_id),
                stream=self.keys.events(response_id),
                lease=self.keys.lease(response_id),
                active=self.keys.active_of(response_id),
                channel=self.keys.channel(response_id),
                maxlen=self.stream_maxlen,
                ttl=self.ttl_seconds,
                active_statuses=_ACTIVE,
                lease_token=fence.token,
                lease_ms=fence.milliseconds,
                lease_deadline=fence.deadline(self.now()),
                response_id=response_id,
                once_field=call.field,
                once_token=call.token,
                event_types=encoded.types,
                event_json_prefixes=encoded.json_prefixes,
            )
        )
        return EmitResult(last_sequence_number=int(last), status=text(status))

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
        """:meth:`events_after`, then the stored status, in one round trip.

        A relay's start, and its look at the stream when a message came out of line.

        Raises:
            ExpiredCursorError: when trimming removed events the caller has not seen.
        """
        pipe = self.redis.pipeline(transaction=False)
        pipe.xrange(self.keys.events(response_id), min=f"1-{after + 1}", max="+", count=count)
        pipe.hget(self.keys.record(response_id), "status")
        entries, status = pipe.execute()
        events = self._checked_events(response_id, after, entries or [])
        return events, None if status is None else text(status)

    def _checked_events(
        self, response_id: str, after: int, entries: list[Any]
    ) -> list[StoredEvent]:
        # Trimming took events the caller has not seen when the first one after ``after`` is
        # not ``after + 1``. Nothing read means nothing after ``after`` is left to have lost one
        # before it: the stream's first entry, were it past ``after``, would have been read.
        if after >= 0 and entries and _sequence_of(entries[0][0]) > after + 1:
            raise ExpiredCursorError(_expired_message(response_id, after))
        return [stored_event(entry_id, fields) for entry_id, fields in entries]

    def last_sequence_number(self, response_id: str) -> int:
        """The highest sequence number assigned so far (-1: none)."""
        raw = self.redis.get(self.keys.sequence(response_id))
        return int(raw) - 1 if raw is not None else -1


def _expired_message(response_id: str, after: int) -> str:
    return (
        f"Events of response '{response_id}' after sequence_number {after} are no longer "
        "available; retrieve the response instead."
    )


def _sequence_of(entry_id: bytes | str) -> int:
    return int(text(entry_id).split("-")[1])


def stored_event(entry_id: bytes, fields: dict[bytes, bytes]) -> StoredEvent:
    """A stream entry as an event."""
    return StoredEvent(
        sequence_number=_sequence_of(entry_id),
        type=fields[b"t"].decode(),
        data=fields[b"d"].decode(),
        at=float(fields[b"at"]) if b"at" in fields else None,
    )
