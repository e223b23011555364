"""The console's timeline from what the store records: event times, task stamps, call ends."""

from __future__ import annotations

import time

from app.store import ResponseStore
from app.timeline import build_bars
from tests.app.store.support import delta, new_response
from tests.support.stamps import as_task


def test_timeline_events_carry_redis_time(store: ResponseStore) -> None:
    before = time.time()
    rid = new_response(store)
    store.emit(rid, [delta("a"), delta("b")])
    events = store.events_after(rid, -1)
    assert [e.type for e in events] == ["response.output_text.delta"] * 2
    for event in events:
        assert event.at is not None and before - 1 <= event.at <= time.time() + 1


def test_timeline_of_a_running_response_shows_the_running_tool_call(store: ResponseStore) -> None:
    rid = new_response(store)
    with as_task("infer@a", "inference", sent_at=time.time() - 0.5):
        store.open_turn(rid, 0)
    added = {"type": "response.output_item.added", "output_index": 0, "item": {}}
    store.emit(rid, [added, delta("x")])
    with as_task("mcp@b", "tools.mcp", sent_at=time.time()):
        assert store.open_tool_call(rid, "mcp_1", token="t", claim_seconds=5).claim == "claimed"
    output = [{"type": "mcp_call", "id": "mcp_1", "name": "search", "server_label": "docs"}]

    turn, model, tool = build_bars(store.timeline_facts(rid), output)

    assert (turn.type, turn.worker, turn.queue) == ("turn", "infer@a", "inference")
    assert turn.queued_at is not None and turn.started_at is not None
    assert turn.started_at - turn.queued_at >= 0.5  # its wait in the queue
    assert turn.ended_at == tool.queued_at  # it ended sending the call
    assert model.first_output_at is not None and model.ended_at is not None
    assert turn.started_at <= model.first_output_at <= model.ended_at
    assert (tool.label, tool.worker, tool.turn) == ("mcp · docs.search", "mcp@b", 0)
    assert tool.started_at is not None and tool.ended_at is None  # still running


def test_timeline_without_stamps_falls_back_to_event_times(store: ResponseStore) -> None:
    rid = new_response(store)
    store.open_turn(rid, 0)  # no task: a test or an older worker
    store.emit(rid, [delta("x")])
    [turn, model] = build_bars(store.timeline_facts(rid), [])
    assert turn.worker is None and turn.queued_at is None
    assert turn.started_at is not None and turn.ended_at is None  # running, no end yet
    assert model.started_at == turn.started_at
