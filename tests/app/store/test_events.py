import json
from dataclasses import replace

import pytest
import redis

from app.protocol import events as ev
from app.protocol.response import ResponseStatus
from app.store import ExpiredCursorError, ResponseStore
from app.store.events import (
    END_EVENT_TYPE,
    END_LINE,
    RESPONSE_EVENT_PREFIX,
    encode_events,
    parse_published,
    response_json_of,
)
from app.store.status import ACTIVE_STATUSES, CANCEL, COMMIT, FINISH
from tests.app.store.support import delta, make_response, new_response, next_message, published


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
    assert store.write(cancelled, transition=CANCEL).ok

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
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    small = ResponseStore(redis_client, keys=store.keys, ttl_seconds=60, stream_maxlen=10)
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


def test_store_publishes_seq_type_json_and_an_end_marker(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    response = make_response("in_progress")
    with published(store, redis_client, response) as pubsub:
        store.emit(response.id, [delta("a")])
        done = response.model_copy(update={"status": ResponseStatus.COMPLETED})
        store.write(
            done,
            transition=FINISH,
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
        assert end == END_LINE == "-1 end -"


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
    response = make_response("in_progress")
    with published(store, redis_client, response) as pubsub:
        assert store.write(response, transition=COMMIT).ok
        store.emit(response.id, [delta("a")])

        assert next_message(pubsub).startswith("0 response.output_text.delta ")


def test_store_events_are_stored_as_their_json_with_the_sequence_number_last(
    store: ResponseStore,
) -> None:
    rid = new_response(store)
    event = {"type": "response.output_text.delta", "delta": "é\n", "item_id": "m"}

    store.emit(rid, [event])

    [stored] = store.events_after(rid, -1)
    assert (
        stored.data == '{"type":"response.output_text.delta","delta":"é\\n","item_id":"m",'
        '"sequence_number":0}'
    )
    [prefix] = encode_events([event]).json_prefixes
    assert stored.data == f"{prefix}0}}"


def test_parse_published_reads_event_lines_and_the_end_line() -> None:
    [event, end] = parse_published('7 response.completed {"a":"b c"}\n' + END_LINE)

    assert (event.sequence_number, event.type, event.data) == (
        7,
        "response.completed",
        '{"a":"b c"}',
    )
    assert (end.sequence_number, end.type) == (-1, END_EVENT_TYPE)


@pytest.mark.parametrize("status", list(ResponseStatus))
def test_store_emit_is_accepted_exactly_while_the_response_is_active(
    store: ResponseStore, status: ResponseStatus
) -> None:
    rid = new_response(store, status=status)

    result = store.emit(rid, [delta("a")])

    assert result.refused == (status not in ACTIVE_STATUSES)
    assert store.last_sequence_number(rid) == (0 if status in ACTIVE_STATUSES else -1)


def test_response_events_are_composed_by_the_script_from_the_object_it_writes(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    response = make_response("queued", instructions='é \u2028 🦜 "q"', metadata={"k": "v"})
    events = [
        ev.response_event("response.created", response),
        ev.response_event("response.queued", response),
    ]
    encoded = encode_events(events, written=response)
    # the object goes to Redis once, for the record and both events
    assert encoded.json_prefixes == (RESPONSE_EVENT_PREFIX, RESPONSE_EVENT_PREFIX)
    assert encoded.response_json == response.model_dump_json()

    logged = store.create(response, inputs=[], extra={}, events=events)

    stored = store.events_after(response.id, -1)
    assert [(e.sequence_number, e.type, e.data) for e in stored] == [
        (e.sequence_number, e.type, e.data) for e in logged
    ]
    assert [json.loads(e.data) for e in stored] == [
        {"type": "response.created", "response": response.wire(), "sequence_number": 0},
        {"type": "response.queued", "response": response.wire(), "sequence_number": 1},
    ]
    assert store.get(response.id).response == response


def test_a_writes_response_event_is_published_as_logged_beside_other_events(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    response = make_response("in_progress", instructions="🦜")
    with published(store, redis_client, response) as pubsub:
        done = response.model_copy(update={"status": ResponseStatus.COMPLETED})
        copy = done.model_copy()  # an equal object, not the one written: sent whole
        events = [
            delta("a"),
            ev.response_event("response.completed", done),
            ev.response_event("response.completed", copy),
        ]
        assert encode_events(events, written=done).json_prefixes[1:2] == (RESPONSE_EVENT_PREFIX,)
        assert store.write(done, transition=FINISH, events=events).ok

        lines = next_message(pubsub).split("\n")
    stored = store.events_after(response.id, -1)
    assert lines == [f"{e.sequence_number} {e.type} {e.data}" for e in stored] + [END_LINE]
    assert [json.loads(e.data) for e in stored[1:]] == [
        {"type": "response.completed", "response": done.wire(), "sequence_number": 1},
        {"type": "response.completed", "response": done.wire(), "sequence_number": 2},
    ]
    # composed by the script, or encoded whole: the same bytes
    assert stored[1].data.removesuffix("1}") == stored[2].data.removesuffix("2}")


def test_a_response_events_object_is_read_from_its_text_as_logged(store: ResponseStore) -> None:
    response = make_response("in_progress", instructions='é \u2028 🦜 "q" ,"sequence_number":9}')
    done = response.model_copy(update={"status": ResponseStatus.COMPLETED})
    store.create(response, inputs=[], extra={}, events=[delta("a")])
    # one event composed by the script from the object written, one encoded whole
    events = [
        ev.response_event("response.completed", done),
        ev.response_event("response.completed", done.model_copy()),
    ]
    assert encode_events(events, written=done).json_prefixes[1] != RESPONSE_EVENT_PREFIX
    assert store.write(done, transition=FINISH, events=events).ok

    composed, encoded = store.events_after(response.id, 0)
    assert response_json_of(composed) == response_json_of(encoded) == done.model_dump_json()
    # not a response event, or not as the store logs one (an older fleet's spaced JSON): None
    [first] = store.events_after(response.id, -1, count=1)
    assert response_json_of(first) is None
    spaced = json.dumps(
        {"type": "response.completed", "response": done.wire(), "sequence_number": 1}
    )
    assert response_json_of(replace(composed, data=spaced)) is None
