import json
import time
import uuid
from typing import Any

import pytest
import redis

from app import cooperation
from app.protocol.response import ResponseStatus
from app.store import LeaseRequest, ResponseStore
from app.store.status import CANCEL
from app.store.turns import INLINE_INPUTS
from tests.app.store.support import (
    created,
    delta,
    make_response,
    new_response,
    next_message,
    published,
)
from tests.support.replies import Replies


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
    assert store.write(cancelled, transition=CANCEL).ok
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


def test_store_open_turn_takes_the_lease_and_counts_the_start_before_reading(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    rid = new_response(store)
    lease = LeaseRequest(token="t1", milliseconds=30_000, deadline=time.time() + 30)

    opened = store.open_turn(rid, 0, lease=lease, counts_start=True)

    assert (opened.taken, opened.starts) == (True, 1)
    assert opened.loaded is not None and opened.loaded.stored is not None
    assert redis_client.get(store.keys.lease(rid)) == b"t1"
    assert redis_client.zscore(store.keys.active_of(rid), rid) == lease.deadline
    assert 0 < redis_client.ttl(store.keys.turn_starts(rid, 0)) <= store.ttl_seconds

    other = LeaseRequest(token="t2", milliseconds=30_000, deadline=time.time() + 30)
    refused = store.open_turn(rid, 0, lease=other, counts_start=True)
    assert (refused.taken, refused.starts, refused.loaded) == (False, 0, None)  # not started
    assert redis_client.get(store.keys.turn_starts(rid, 0)) == b"1"
    refused = store.open_turn(rid, 1, lease=other, counts_start=True)
    assert (refused.taken, refused.starts, refused.loaded) == (False, 0, None)
    assert redis_client.get(store.keys.lease(rid)) == b"t1"
    assert not redis_client.hexists(store.keys.record(rid), "turn1_seq")


def test_store_load_turn_takes_no_lease_and_counts_nothing(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    rid = new_response(store)

    store.load_turn(rid, 0)

    assert not redis_client.exists(store.keys.lease(rid), store.keys.turn_starts(rid, 0))
    assert redis_client.zscore(store.keys.active_of(rid), rid) is None


def test_store_load_turn_of_a_long_input_reads_it_outside_the_script(
    store: ResponseStore, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the script read the whole list: a Lua string per item, ~20 times a plain read,
    while Redis served nobody else (450,000 items: 1.1 s). Now a batch a call."""
    response = make_response("queued")
    inputs = [{"type": "message", "role": "user", "content": f"m{i} ✓"} for i in range(2500)]
    store.create(response, inputs=inputs, extra={}, events=[created(response)])
    replies = Replies(redis_client, monkeypatch)

    loaded = store.load_turn(response.id, 0)

    assert loaded.stored is not None and loaded.inputs == inputs
    assert replies.scripts and max(replies.scripts) < INLINE_INPUTS
    assert replies.largest == cooperation.BATCH


def test_store_load_turn_of_a_short_input_reads_it_in_the_script(
    store: ResponseStore, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The common case stays one round trip."""
    response = make_response("queued")
    inputs = [{"type": "message", "role": "user", "content": str(i)} for i in range(INLINE_INPUTS)]
    store.create(response, inputs=inputs, extra={}, events=[created(response)])
    sent: list[Any] = []
    execute = redis_client.execute_command
    monkeypatch.setattr(
        redis_client, "execute_command", lambda *a, **o: sent.append(a[0]) or execute(*a, **o)
    )

    loaded = store.load_turn(response.id, 0)

    assert loaded.inputs == inputs
    assert len(sent) == 1


def test_store_load_turn_of_a_long_input_deleted_meanwhile_finds_no_response(
    store: ResponseStore, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    response = make_response("queued")
    inputs = [{"type": "message", "role": "user", "content": str(i)} for i in range(500)]
    store.create(response, inputs=inputs, extra={}, events=[created(response)])
    lrange = redis_client.lrange

    def deleted_first(name: Any, start: int, end: int) -> Any:
        store.delete(response.id)
        return lrange(name, start, end)

    monkeypatch.setattr(redis_client, "lrange", deleted_first)

    assert store.load_turn(response.id, 0).stored is None
