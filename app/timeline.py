"""A response's timeline for the console: its turns, model calls and tool calls as bars.

Everything comes from what the fleet records anyway (:mod:`app.store.timeline`): each event's
time, where each turn's events begin (its mark), and the task stamp of each turn and tool call
(the worker, when its message was sent, when the worker took it). A bar whose end is not
recorded yet is still running (``ended_at`` null).

A turn ends when it sends its tool calls (the first call's send) or, for the last turn, with the
response's terminal event; its model call ends with the last event it streamed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

from app.protocol.events import TERMINAL_EVENT_TYPES
from app.responses import retrieve_response
from app.store import ResponseStore, StoredEvent, TimelineFacts

BarType = Literal["turn", "model", "tool"]

_TOOL_EVENT_PREFIXES = ("response.mcp_", "response.code_interpreter_")
_MODEL_OUTPUT_TYPES = frozenset(
    {"response.output_item.added", "response.output_text.delta", "response.reasoning.delta"}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Bar:
    """One row of the waterfall (times in epoch seconds)."""

    type: BarType
    label: str
    turn: int
    worker: str | None = None
    queue: str | None = None
    queued_at: float | None = None
    """When its task message was sent (the queue wait runs from here to ``started_at``)."""
    started_at: float | None = None
    ended_at: float | None = None
    first_output_at: float | None = None
    """A model call's first streamed output."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Stamp:
    worker: str | None
    queue: str | None
    sent_at: float | None
    started_at: float | None


def response_timeline(store: ResponseStore, response_id: str, *, tenant: str) -> dict[str, Any]:
    """The console's timeline of a response ``tenant`` owns (and may retrieve).

    Raises:
        NotFoundError: no such response, another tenant's, or a finished ``store: false`` one.
    """
    response = retrieve_response(store, response_id, tenant=tenant)
    facts = store.timeline_facts(response_id)
    bars = build_bars(facts, response.wire()["output"])
    started = next((e.at for e in facts.events if e.at is not None), float(response.created_at))
    return {
        "object": "console.timeline",
        "response_id": response_id,
        "status": response.status,
        "model": response.model,
        "started_at": started,
        "now": store.now(),
        "events": len(facts.events),
        "bars": [asdict(bar) for bar in bars],
    }


def build_bars(facts: TimelineFacts, output: list[dict[str, Any]]) -> list[Bar]:
    """The waterfall's rows: each turn, its model call, then the tool calls it sent."""
    tools = sorted(_tool_bars(facts, output), key=lambda b: b.queued_at or b.started_at or 0)
    turns = sorted(facts.marks)
    bars: list[Bar] = []
    for index, turn in enumerate(turns):
        upper = facts.marks[turns[index + 1]] if index + 1 < len(turns) else None
        events = [
            e
            for e in facts.events
            if e.sequence_number > facts.marks[turn]
            and (upper is None or e.sequence_number <= upper)
        ]
        stamp = _stamp(facts.turn_runs.get(turn))
        start = stamp.started_at or _first_time(events)
        own_tools = [t for t in tools if _is_sent_in(t, start, turns, index, facts)]
        bars += _turn_bars(turn, stamp, events, own_tools)
        bars += [_with_turn(t, turn) for t in own_tools]
    return bars


def _turn_bars(turn: int, stamp: _Stamp, events: list[StoredEvent], tools: list[Bar]) -> list[Bar]:
    start = stamp.started_at or _first_time(events)
    terminal = next((e.at for e in events if e.type in TERMINAL_EVENT_TYPES), None)
    sent = [t.queued_at for t in tools if t.queued_at is not None]
    end = min(sent) if sent else terminal
    model_events = [
        e
        for e in events
        if e.at is not None
        and not e.type.startswith(_TOOL_EVENT_PREFIXES)
        and e.type not in TERMINAL_EVENT_TYPES
        and (end is None or e.at <= end)
    ]
    first_output = next((e.at for e in model_events if e.type in _MODEL_OUTPUT_TYPES), None)
    model_end = model_events[-1].at if model_events and end is not None else None
    worker = stamp.worker
    return [
        Bar(
            type="turn",
            label=f"turn {turn}",
            turn=turn,
            worker=worker,
            queue=stamp.queue,
            queued_at=stamp.sent_at,
            started_at=start,
            ended_at=end,
        ),
        Bar(
            type="model",
            label="model call",
            turn=turn,
            worker=worker,
            started_at=start,
            ended_at=model_end,
            first_output_at=first_output,
        ),
    ]


def _tool_bars(facts: TimelineFacts, output: list[dict[str, Any]]) -> list[Bar]:
    names = _call_names(output)
    bars = []
    for call_id, raw in facts.call_runs.items():
        stamp = _stamp(raw)
        kind = (stamp.queue or "tools.?").removeprefix("tools.")
        bars.append(
            Bar(
                type="tool",
                label=f"{kind} · {names.get(call_id, call_id)}",
                turn=-1,
                worker=stamp.worker,
                queue=stamp.queue,
                queued_at=stamp.sent_at,
                started_at=stamp.started_at,
                ended_at=facts.call_ends.get(call_id),
            )
        )
    return bars


def _call_names(output: list[dict[str, Any]]) -> dict[str, str]:
    """Call id (or item id) → the tool's name, from the response's output items."""
    names: dict[str, str] = {}
    for item in output:
        name = item.get("name")
        if not isinstance(name, str):
            continue
        if isinstance(item.get("server_label"), str):
            name = f"{item['server_label']}.{name}"
        for key in ("call_id", "id"):
            if isinstance(item.get(key), str):
                names[item[key]] = name
    return names


def _is_sent_in(
    tool: Bar, start: float | None, turns: list[int], index: int, facts: TimelineFacts
) -> bool:
    """Whether ``tool`` was sent by the turn at ``index`` (after it began, before the next)."""
    sent = tool.queued_at or tool.started_at
    if sent is None or start is None or sent < start:
        return False
    if index + 1 == len(turns):
        return True
    following = _stamp(facts.turn_runs.get(turns[index + 1])).started_at
    return following is None or sent <= following


def _with_turn(bar: Bar, turn: int) -> Bar:
    return Bar(**{**asdict(bar), "turn": turn})


def _stamp(raw: str | None) -> _Stamp:
    data: dict[str, Any] = json.loads(raw) if raw else {}
    return _Stamp(
        worker=data.get("worker"),
        queue=data.get("queue"),
        sent_at=data.get("sent_at"),
        started_at=data.get("started_at"),
    )


def _first_time(events: list[StoredEvent]) -> float | None:
    return next((e.at for e in events if e.at is not None), None)
