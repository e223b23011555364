import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from app.keys import Keys
from app.protocol.events import Event
from app.protocol.response import ResponseObject, ResponseStatus
from app.store import ExpiredCursorError, ResponseStore


def make_response(status: str = "queued", **fields: Any) -> ResponseObject:
    values: dict[str, Any] = {
        "id": f"resp_{uuid.uuid4().hex}",
        "created_at": int(time.time()),
        "status": status,
        "model": "test-model",
    }
    values.update(fields)
    return ResponseObject(**values)


def delta(text: str) -> Event:
    return {"type": "response.output_text.delta", "item_id": "msg_1", "delta": text}


def created(response: ResponseObject) -> Event:
    return {"type": "response.created", "response": response.wire()}


def new_response(store: ResponseStore, status: str = "in_progress", **fields: Any) -> str:
    response = make_response(status, **fields)
    store.create(response, inputs=[], extra={}, events=[])
    return response.id


@contextlib.contextmanager
def published(
    store: ResponseStore, redis_client: redis.Redis, response: ResponseObject
) -> Iterator[redis.client.PubSub]:
    """A subscription to the response's channel, after the response is created."""
    store.create(response, inputs=[], extra={}, events=[])
    pubsub = redis_client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    pubsub.subscribe(store.keys.channel(response.id))
    try:
        yield pubsub
    finally:
        pubsub.close()


def next_message(pubsub: redis.client.PubSub) -> str:
    """The next published payload (subscribe confirmations skipped)."""
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
        if message is not None:
            return str(message["data"].decode())
    raise AssertionError("no pub/sub message arrived")


def test_store_create_stores_record_inputs_extra_and_first_events(store: ResponseStore) -> None:
    response = make_response()
    inputs = [{"type": "message", "id": "msg_a", "role": "user", "content": "hi"}]

    store.create(response, inputs=inputs, extra={"user": "u1"}, events=[created(response)])

    stored = store.get(response.id)
    assert stored.response == response
    assert (stored.version, stored.turn, stored.extra) == (1, 0, {"user": "u1"})
    assert store.status(response.id) == "queued"
    assert store.inputs(response.id) == inputs
    [event] = store.events_after(response.id, -1)
    assert (event.sequence_number, event.type) == (0, "response.created")


def test_store_create_stores_thousands_of_inputs_in_order(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    response = make_response()
    inputs = [{"type": "message", "role": "user", "content": str(i)} for i in range(2500)]

    store.create(response, inputs=inputs, extra={}, events=[])

    assert store.inputs(response.id) == inputs
    assert 0 < redis_client.ttl(store.keys.inputs(response.id)) <= store.ttl_seconds


def test_store_terminal_write_frees_the_lease(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    rid = new_response(store)
    redis_client.set(store.keys.lease(rid), "a-worker")
    redis_client.zadd(store.keys.active, {rid: time.time() + 60})
    stored = store.get(rid)

    store.write(stored.response, expected=frozenset({"in_progress"}))  # not terminal: kept
    assert redis_client.exists(store.keys.lease(rid)) == 1
    assert redis_client.zscore(store.keys.active, rid) is not None

    done = stored.response.model_copy(update={"status": ResponseStatus.COMPLETED})
    assert store.write(done, expected=frozenset({"in_progress"})).ok
    assert redis_client.exists(store.keys.lease(rid)) == 0
    assert redis_client.zscore(store.keys.active, rid) is None


def test_store_write_requires_an_expected_status(store: ResponseStore) -> None:
    response = make_response("queued")
    store.create(response, inputs=[], extra={}, events=[])
    completed = response.model_copy(update={"status": ResponseStatus.COMPLETED})

    refused = store.write(completed, expected=frozenset({"in_progress"}))
    assert (refused.ok, refused.status, refused.conflict) == (False, "queued", False)
    assert store.status(response.id) == "queued"

    accepted = store.write(completed, expected=frozenset({"queued", "in_progress"}), turn=1)
    assert (accepted.ok, accepted.status) == (True, "completed")
    stored = store.get(response.id)
    assert (stored.response.status, stored.version, stored.turn) == ("completed", 2, 1)


def test_store_write_refuses_a_stale_version(store: ResponseStore) -> None:
    response = make_response("in_progress")
    store.create(response, inputs=[], extra={}, events=[])
    version = store.get(response.id).version
    store.write(response, expected=frozenset({"in_progress"}), version=version)

    stale = store.write(
        response.model_copy(update={"status": ResponseStatus.FAILED}),
        expected=frozenset({"in_progress"}),
        version=version,
        events=[{"type": "response.failed", "response": {}}],
    )

    assert (stale.ok, stale.conflict, stale.status) == (False, True, "in_progress")
    assert store.get(response.id).version == version + 1
    assert store.events_after(response.id, -1) == []


def test_store_write_of_an_unknown_response_is_refused(store: ResponseStore) -> None:
    result = store.write(make_response("completed"), expected=frozenset({"in_progress"}))

    assert (result.ok, result.status, result.conflict) == (False, "", False)


def test_store_write_new_refuses_an_existing_id(store: ResponseStore) -> None:
    response = make_response("queued")
    store.create(response, inputs=[], extra={}, events=[])

    again = store.write(
        response.model_copy(update={"status": ResponseStatus.COMPLETED}),
        expected=None,
        events=[created(response)],
    )

    assert (again.ok, again.status) == (False, "queued")
    assert store.status(response.id) == "queued"
    assert store.events_after(response.id, -1) == []


def test_store_emit_assigns_increasing_sequence_numbers_from_zero(store: ResponseStore) -> None:
    rid = new_response(store)

    first = store.emit(rid, [delta("a"), delta("b"), delta("c")])
    second = store.emit(rid, [delta("d")])

    assert (first.last_sequence_number, first.refused) == (2, False)
    assert second.last_sequence_number == 3
    assert store.last_sequence_number(rid) == 3
    events = store.events_after(rid, -1)
    assert [e.sequence_number for e in events] == [0, 1, 2, 3]
    payloads = [json.loads(e.data) for e in events]
    assert [p["sequence_number"] for p in payloads] == [0, 1, 2, 3]
    assert [p["delta"] for p in payloads] == ["a", "b", "c", "d"]
    assert all(p["type"] == e.type for p, e in zip(payloads, events, strict=True))


def test_store_emit_of_nothing_is_a_no_op(store: ResponseStore) -> None:
    rid = new_response(store)

    result = store.emit(rid, [])

    assert (result.last_sequence_number, result.refused) == (-1, False)
    assert store.last_sequence_number(rid) == -1


def test_store_emit_is_refused_once_cancelled(store: ResponseStore) -> None:
    response = make_response("in_progress")
    store.create(response, inputs=[], extra={}, events=[])
    store.emit(response.id, [delta("a")])
    cancelled = response.model_copy(update={"status": ResponseStatus.CANCELLED})
    assert store.write(cancelled, expected=frozenset({"in_progress"})).ok

    result = store.emit(response.id, [delta("late")])

    assert result.refused
    assert result.status == "cancelled"
    assert [e.sequence_number for e in store.events_after(response.id, -1)] == [0]
    assert store.last_sequence_number(response.id) == 0


def test_store_emit_is_refused_after_delete(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    rid = new_response(store)
    store.emit(rid, [delta("a")])
    assert store.delete(rid)

    result = store.emit(rid, [delta("late")])

    assert result.refused
    assert result.last_sequence_number == -2
    assert redis_client.exists(store.keys.sequence(rid), store.keys.events(rid)) == 0


def test_store_events_after_returns_events_past_the_cursor(store: ResponseStore) -> None:
    rid = new_response(store)
    store.emit(rid, [delta(str(i)) for i in range(6)])

    assert [e.sequence_number for e in store.events_after(rid, 2)] == [3, 4, 5]
    assert [e.sequence_number for e in store.events_after(rid, 2, count=2)] == [3, 4]
    assert store.events_after(rid, 5) == []
    assert store.events_after(rid, 99) == []


def test_store_events_and_status_reads_both(store: ResponseStore) -> None:
    rid = new_response(store)
    store.emit(rid, [delta(str(i)) for i in range(4)])

    events, status = store.events_and_status(rid, 1)

    assert [e.sequence_number for e in events] == [2, 3]
    assert status == "in_progress"
    assert store.events_and_status("resp_gone", -1) == ([], None)


def test_store_events_after_raises_when_the_stream_was_trimmed(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    small = ResponseStore(redis_client, keys=Keys(key_prefix), ttl_seconds=60, stream_maxlen=10)
    rid = new_response(small)
    for start in range(0, 1000, 50):
        small.emit(rid, [delta(str(i)) for i in range(start, start + 50)])
    assert redis_client.xlen(small.keys.events(rid)) < 1000

    with pytest.raises(ExpiredCursorError):
        small.events_and_status(rid, 0)
    with pytest.raises(ExpiredCursorError) as caught:
        small.events_after(rid, 0)
    assert caught.value.param == "starting_after"
    assert caught.value.code == "cursor_expired"
    assert caught.value.status == 400

    # From the start (no cursor) what is left is served; a recent cursor still works.
    remaining = small.events_after(rid, -1)
    assert remaining[-1].sequence_number == 999
    assert [e.sequence_number for e in small.events_after(rid, 997)] == [998, 999]


def test_store_delete_removes_every_key(store: ResponseStore, redis_client: redis.Redis) -> None:
    response = make_response("in_progress")
    store.create(response, inputs=[{"type": "message"}], extra={"a": 1}, events=[created(response)])
    store.emit(response.id, [delta("a")])
    redis_client.set(store.keys.lease(response.id), "worker-1")
    redis_client.zadd(store.keys.active, {response.id: time.time()})
    for call_id in ("call_1", "call_2"):  # tool results (what the tools answered) go too
        store.open_tool_call(response.id, call_id, token="t", claim_seconds=30)
        assert store.finish_tool_call(response.id, call_id, '{"output": "secret"}', token="t")

    assert store.delete(response.id) is True

    assert redis_client.keys(f"{store.keys.record(response.id)}*") == []
    assert redis_client.zscore(store.keys.active, response.id) is None
    assert store.load(response.id) is None
    assert store.inputs(response.id) == []
    assert store.delete(response.id) is False


def test_store_sets_ttl_on_record_inputs_and_events(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    response = make_response("queued")
    store.create(response, inputs=[{"type": "message"}], extra={}, events=[created(response)])
    store.emit(response.id, [delta("a")])

    for key in (
        store.keys.record(response.id),
        store.keys.inputs(response.id),
        store.keys.events(response.id),
        store.keys.sequence(response.id),
    ):
        assert 3500 < redis_client.ttl(key) <= 3600, key


def test_store_shortens_ttl_of_a_finished_unstored_response(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    response = make_response("in_progress", store=False)
    store.create(response, inputs=[{"type": "message"}], extra={}, events=[])
    store.emit(response.id, [delta("a")])

    done = response.model_copy(update={"status": ResponseStatus.COMPLETED})
    assert store.write(done, expected=frozenset({"in_progress"})).ok

    for key in (
        store.keys.record(response.id),
        store.keys.inputs(response.id),
        store.keys.events(response.id),
    ):
        assert 0 < redis_client.ttl(key) <= store.unstored_ttl_seconds, key


def test_store_publishes_seq_type_json_and_an_end_marker(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    response = make_response("in_progress")
    with published(store, redis_client, response) as pubsub:
        store.emit(response.id, [delta("a")])
        done = response.model_copy(update={"status": ResponseStatus.COMPLETED})
        store.write(
            done,
            expected=frozenset({"in_progress"}),
            events=[{"type": "response.completed", "response": done.wire()}],
        )

        seq, event_type, body = next_message(pubsub).split(" ", 2)
        assert (seq, event_type) == ("0", "response.output_text.delta")
        assert json.loads(body) == {**delta("a"), "sequence_number": 0}
        completed, end = next_message(pubsub).split("\n")  # one message per call, a line each
        seq, event_type, body = completed.split(" ", 2)
        assert (seq, event_type) == ("1", "response.completed")
        assert json.loads(body)["sequence_number"] == 1
        assert json.loads(body)["response"]["status"] == "completed"
        assert end == "-1 end -"


def test_store_publishes_the_events_of_one_call_in_one_message(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    response = make_response("in_progress")
    with published(store, redis_client, response) as pubsub:
        store.emit(response.id, [delta("a\nb"), delta("c")])
        store.emit(response.id, [delta("d")])

        lines = next_message(pubsub).split("\n")
        assert [line.split(" ", 2)[:2] for line in lines] == [
            ["0", "response.output_text.delta"],
            ["1", "response.output_text.delta"],
        ]
        assert json.loads(lines[0].split(" ", 2)[2])["delta"] == "a\nb"  # escaped in the JSON
        assert next_message(pubsub).startswith("2 response.output_text.delta ")


def test_store_non_terminal_write_publishes_no_end_marker(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    response = make_response("queued")
    with published(store, redis_client, response) as pubsub:
        started = response.model_copy(update={"status": ResponseStatus.IN_PROGRESS})
        store.write(started, expected=frozenset({"queued"}))
        store.emit(response.id, [delta("a")])

        assert next_message(pubsub).startswith("0 response.output_text.delta ")


def test_store_count_delivery_counts_per_task_with_ttl(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    assert [store.count_delivery("resp_a:t0:infer") for _ in range(3)] == [1, 2, 3]
    assert store.count_delivery("resp_b:t0:infer") == 1
    assert 0 < redis_client.ttl(store.keys.deliveries("resp_a:t0:infer")) <= 3600


def test_store_live_workers_counts_recent_heartbeats_per_queue(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    store.heartbeat_worker("inference", "worker-a")
    store.heartbeat_worker("inference", "worker-b")
    store.heartbeat_worker("inference", "worker-a")
    store.heartbeat_worker("tools.mcp", "worker-c")
    redis_client.zadd(store.keys.workers("inference"), {"worker-old": time.time() - 120})

    assert store.live_workers("inference") == 2
    assert store.live_workers("inference", within_seconds=300) == 3
    assert store.live_workers("tools.mcp") == 1
    assert store.live_workers("tools.sandbox") == 0


def test_store_load_turn_remembers_where_a_turn_began_for_its_reruns(
    store: ResponseStore,
) -> None:
    rid = new_response(store)

    def mark(turn: int) -> tuple[int, bool]:
        loaded = store.load_turn(rid, turn)
        return loaded.start_sequence_number, loaded.is_rerun

    assert mark(0) == (-1, False)  # the first run, before any event
    store.emit(rid, [delta("a"), delta("b")])

    # A re-run of turn 0 (its worker died) learns where the first run's events began.
    assert mark(0) == (-1, True)
    # Turn 1 starts fresh after them; its own re-run finds the same mark.
    assert mark(1) == (1, False)
    store.emit(rid, [delta("c")])
    assert mark(1) == (1, True)


def test_store_open_tool_call_counts_reads_and_claims_in_one_step(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    rid = new_response(store)

    first = store.open_tool_call(rid, "c1", token="a", claim_seconds=30, delivery="t:c1")
    assert (first.deliveries, first.claim) == (1, "claimed")
    assert first.stored is not None and first.stored.response.id == rid
    assert redis_client.get(store.keys.tool_claim(rid, "c1")) == b"a"
    assert 29_000 < redis_client.pttl(store.keys.tool_claim(rid, "c1")) <= 30_000

    again = store.open_tool_call(rid, "c1", token="b", claim_seconds=30, delivery="t:c1")
    assert (again.deliveries, again.claim) == (2, "held")  # counted; the claim stays a's
    store.extend_tool_claim(rid, "c1", token="b", ttl_seconds=1)  # not b's to extend
    assert redis_client.pttl(store.keys.tool_claim(rid, "c1")) > 1_000
    store.extend_tool_claim(rid, "c1", token="a", ttl_seconds=2)
    assert redis_client.pttl(store.keys.tool_claim(rid, "c1")) <= 2_000

    assert store.finish_tool_call(rid, "c1", '{"output": "x"}', token="a")
    assert not redis_client.exists(store.keys.tool_claim(rid, "c1"))  # given back
    done = store.open_tool_call(rid, "c1", token="c", claim_seconds=30)
    assert (done.deliveries, done.claim) == (0, "stored")  # no delivery named: none counted
    assert not store.finish_tool_call(rid, "c1", '{"output": "y"}', token="c")  # stored once
    assert store.tool_results(rid, ["c1"]) == ['{"output": "x"}']


def test_store_open_tool_call_claims_nothing_of_an_inactive_or_missing_response(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    rid = new_response(store, status="cancelled")
    gone = f"resp_{uuid.uuid4().hex}"
    for response_id in (rid, gone):
        opened = store.open_tool_call(response_id, "c1", token="a", claim_seconds=30)
        assert opened.claim == "inactive"
        assert not redis_client.exists(store.keys.tool_claim(response_id, "c1"))
    assert store.open_tool_call(gone, "c1", token="a", claim_seconds=30).stored is None


def test_store_finish_tool_call_discards_a_result_after_a_cancel(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    rid = new_response(store)
    assert store.open_tool_call(rid, "c1", token="a", claim_seconds=30).claim == "claimed"
    stored = store.get(rid)
    cancelled = stored.response.model_copy(update={"status": ResponseStatus.CANCELLED})
    assert store.write(cancelled, expected=frozenset({"in_progress"})).ok

    assert not store.finish_tool_call(rid, "c1", '{"output": "late"}', token="a")
    assert store.tool_results(rid, ["c1"]) == [None]
    assert not redis_client.exists(store.keys.tool_claim(rid, "c1"))  # given back all the same


def test_store_load_turn_reads_record_and_inputs_and_marks_the_turn(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    response = make_response("queued")
    inputs = [{"type": "message", "role": "user", "content": "hi"}]
    store.create(response, inputs=inputs, extra={"u": 1}, events=[created(response)])

    first = store.load_turn(response.id, 0)
    started = response.model_copy(update={"status": ResponseStatus.IN_PROGRESS})
    assert first.stored is not None and first.stored.response == started  # started on the way
    assert first.stored.version == 2
    assert first.stored.extra == {"u": 1} and first.inputs == inputs
    assert (first.start_sequence_number, first.is_rerun) == (0, False)  # after response.created
    store.emit(response.id, [delta("a")])
    again = store.load_turn(response.id, 0)  # a redelivery finds the first run's mark
    assert (again.start_sequence_number, again.is_rerun) == (0, True)
    assert again.stored is not None and again.stored.version == 2  # started once
    assert store.load_turn(response.id, 1).start_sequence_number == 2


def test_store_load_turn_starts_a_queued_response_once(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    response = make_response("queued", metadata={"status": "queued"})
    with published(store, redis_client, response) as pubsub:
        store.load_turn(response.id, 0)
        store.load_turn(response.id, 0)

        started = response.model_copy(update={"status": ResponseStatus.IN_PROGRESS})
        assert store.get(response.id).response == started
        assert store.status(response.id) == "in_progress"
        [event] = store.events_after(response.id, -1)
        assert event.type == "response.in_progress"
        assert json.loads(event.data) == {
            "type": "response.in_progress",
            "response": started.wire(),
            "sequence_number": 0,
        }
        assert next_message(pubsub).startswith("0 response.in_progress ")
    assert not redis_client.hexists(store.keys.record(response.id), "started")


def test_store_load_turn_leaves_a_response_cancelled_while_queued(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    response = make_response("queued")
    store.create(response, inputs=[], extra={}, events=[])
    cancelled = response.model_copy(update={"status": ResponseStatus.CANCELLED})
    assert store.write(cancelled, expected=frozenset({"queued"})).ok
    assert not redis_client.hexists(store.keys.record(response.id), "started")

    loaded = store.load_turn(response.id, 0)

    assert loaded.stored is not None and loaded.stored.response.status == "cancelled"
    assert store.events_after(response.id, -1) == []


def test_store_load_turn_of_a_missing_response_leaves_no_stub(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    gone = f"resp_{uuid.uuid4().hex}"
    loaded = store.load_turn(gone, 0)
    assert (loaded.stored, loaded.inputs, loaded.is_rerun) == (None, [], False)
    assert not redis_client.exists(store.keys.record(gone))
