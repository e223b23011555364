"""What the console's timeline reads: the record's stamps and the event log, with their times.

The stamps ride on writes that happen anyway: a turn's first read (``load_turn.lua``) stores
its task stamp (:mod:`app.telemetry.stamps`) in :func:`turn_run_field`, a tool call's claim
(``open_tool_call.lua``) in :func:`call_run_field`, and the store of its result
(``finish_tool_call.lua``) the time it ended in :func:`call_end_field`. Every event carries the
time it was appended (``include/events.lua``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from app.store.base import StoreBase, text
from app.store.events import StoredEvent, stored_event

_TURN_MARK_SUFFIX = "_seq"
_TURN_RUN_SUFFIX = "_run"
_CALL_PREFIX = "call:"


def turn_mark_field(turn: int) -> str:
    """The record's field marking the last sequence number before the turn's events."""
    return f"turn{turn}{_TURN_MARK_SUFFIX}"


def turn_run_field(turn: int) -> str:
    """The record's field holding the task stamp of the turn's (last) run."""
    return f"turn{turn}{_TURN_RUN_SUFFIX}"


def call_run_field(call_id: str) -> str:
    """The record's field holding the task stamp of the tool call's (last) run."""
    return f"{_CALL_PREFIX}{call_id}:run"


def call_end_field(call_id: str) -> str:
    """The record's field holding when the tool call's result was stored (epoch seconds)."""
    return f"{_CALL_PREFIX}{call_id}:end"


def turns_and_calls(field_names: Iterable[str]) -> tuple[set[int], set[str]]:
    """The turns and the tool calls a record's field names mark (the runs' stamps and marks)."""
    facts = TimelineFacts(marks={}, turn_runs={}, call_runs={}, call_ends={}, events=[])
    for name in field_names:
        _sort_field(facts, name, "0")
    return {*facts.marks, *facts.turn_runs}, {*facts.call_runs, *facts.call_ends}


@dataclass(frozen=True, slots=True, kw_only=True)
class TimelineFacts:
    """A response's stamps and events, as stored."""

    marks: dict[int, int]
    """Turn → the last sequence number before its events."""
    turn_runs: dict[int, str]
    """Turn → its run's task stamp (JSON)."""
    call_runs: dict[str, str]
    """Call id → its run's task stamp (JSON)."""
    call_ends: dict[str, float]
    """Call id → when its result was stored (epoch seconds)."""
    events: list[StoredEvent]


class Timelines(StoreBase):
    """Reading what a response's timeline is made of."""

    def timeline_facts(self, response_id: str, *, count: int = 20_000) -> TimelineFacts:
        """The record's stamps and the response's events (at most ``count``), one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.keys.record(response_id))
        pipe.xrange(self.keys.events(response_id), min="-", max="+", count=count)
        fields, entries = pipe.execute()
        facts = TimelineFacts(marks={}, turn_runs={}, call_runs={}, call_ends={}, events=[])
        for raw_name, raw_value in (fields or {}).items():
            _sort_field(facts, text(raw_name), text(raw_value))
        facts.events.extend(stored_event(entry_id, f) for entry_id, f in entries or [])
        return facts


def _sort_field(facts: TimelineFacts, name: str, value: str) -> None:
    if name.startswith(_CALL_PREFIX):
        call_id, _, what = name[len(_CALL_PREFIX) :].rpartition(":")
        if what == "run":
            facts.call_runs[call_id] = value
        elif what == "end":
            facts.call_ends[call_id] = float(value)
    elif name.startswith("turn") and name[4:].partition("_")[0].isdigit():
        number, _, suffix = name[4:].partition("_")
        _sort_turn_field(facts, int(number), "_" + suffix, value)


def _sort_turn_field(facts: TimelineFacts, turn: int, suffix: str, value: Any) -> None:
    if suffix == _TURN_MARK_SUFFIX:
        facts.marks[turn] = int(value)
    elif suffix == _TURN_RUN_SUFFIX:
        facts.turn_runs[turn] = value
