import time
import uuid
from typing import Any

import pytest
import redis

from app import cooperation
from app.protocol.response import ResponseStatus
from app.store import ResponseStore
from app.store.base import APPEND_BATCH, AppendBatchCall
from app.store.status import CANCEL, COMMIT, FAIL, FINISH
from tests.app.store.support import (
    created,
    delta,
    keys_like,
    lazily_freed,
    lazily_freed_since,
    make_response,
    new_response,
)
from tests.support.replies import Replies
from tests.support.stamps import as_task


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


def test_store_input_items_reads_each_place_of_many_responses(
    store: ResponseStore,
) -> None:
    """On a cluster the responses' keys lie in different slots: a pipeline sends each its node."""
    made = [make_response() for _ in range(3)]
    for number, response in enumerate(made):
        inputs = [{"type": "message", "role": "user", "content": f"{number}.{i}"} for i in range(3)]
        store.create(response, inputs=inputs, extra={}, events=[])
    places = [(made[2].id, 1), (made[0].id, 2), (made[1].id, 3), ("resp_" + "0" * 48, 0)]

    found = store.input_items(places)

    assert [None if item is None else item["content"] for item in found] == [
        "2.1", "0.2", None, None
    ]  # fmt: skip


def test_store_create_returns_its_events_as_the_log_holds_them(store: ResponseStore) -> None:
    """The creator relays the first events without reading them back: they must be the log's."""
    response = make_response()
    queued = {"type": "response.queued", "response": {"id": response.id, "note": "grüße ✓"}}
    events = [created(response), queued]

    logged = store.create(response, inputs=[], extra={}, events=events)

    read_back = store.events_after(response.id, -1)
    assert [(e.sequence_number, e.type, e.data) for e in logged] == [
        (e.sequence_number, e.type, e.data) for e in read_back
    ]
    assert [e.sequence_number for e in logged] == [0, 1]


def test_store_create_stores_thousands_of_inputs_in_order(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    response = make_response()
    inputs = [{"type": "message", "role": "user", "content": str(i)} for i in range(2500)]

    store.create(response, inputs=inputs, extra={}, events=[])

    assert store.inputs(response.id) == inputs
    assert 0 < redis_client.ttl(store.keys.inputs(response.id)) <= store.ttl_seconds


def test_store_create_of_thousands_of_inputs_sends_them_a_batch_a_call(
    store: ResponseStore, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, all of them went in the create's one script call, which held Redis for everyone
    while it ran (450,000 items: 0.77 s)."""
    sent: list[int] = []
    send = redis_client.execute_command

    def counting(*args: Any, **options: Any) -> Any:
        sent.append(len(args))
        return send(*args, **options)

    monkeypatch.setattr(redis_client, "execute_command", counting)
    response = make_response()
    inputs = [{"type": "message", "role": "user", "content": str(i)} for i in range(2500)]

    store.create(response, inputs=inputs, extra={}, events=[created(response)])

    monkeypatch.undo()
    assert max(sent) < 1100
    assert store.inputs(response.id) == inputs
    assert 0 < redis_client.ttl(store.keys.inputs(response.id)) <= store.ttl_seconds
    assert keys_like(redis_client, f"{store.keys.staged_inputs(response.id)}*") == []


def test_store_inputs_of_thousands_are_read_a_batch_a_call(
    store: ResponseStore, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway reads them for ``input_items`` and to continue a chain: one LRANGE of 450,000
    held Redis 70 ms, and their parse, one item at a time, held the gateway's process."""
    response = make_response()
    inputs = [{"type": "message", "role": "user", "content": f"{i} ✓"} for i in range(2500)]
    store.create(response, inputs=inputs, extra={}, events=[])
    replies = Replies(redis_client, monkeypatch)

    assert store.inputs(response.id) == inputs
    assert replies.largest == cooperation.BATCH
    assert store.inputs(make_response().id) == []


def test_a_staged_batch_sent_again_goes_on_once(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    """A replay after a lost reply: the list holds more than the batch expects, so it waits."""
    staged = store.keys.staged_inputs(f"resp_{uuid.uuid4().hex}")
    call = AppendBatchCall(target=staged, before=0, ttl=60, items=("a", "b"))

    assert [store.script(APPEND_BATCH)(call) for _ in range(2)] == [2, 2]
    assert redis_client.lrange(staged, 0, -1) == [b"a", b"b"]
    assert 0 < redis_client.ttl(staged) <= 60


def test_store_terminal_write_frees_the_lease(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    rid = new_response(store)
    redis_client.set(store.keys.lease(rid), "a-worker")
    redis_client.zadd(store.keys.active_of(rid), {rid: time.time() + 60})
    stored = store.get(rid)

    store.write(stored.response, transition=COMMIT)  # not terminal: kept
    assert redis_client.exists(store.keys.lease(rid)) == 1
    assert redis_client.zscore(store.keys.active_of(rid), rid) is not None

    done = stored.response.model_copy(update={"status": ResponseStatus.COMPLETED})
    assert store.write(done, transition=FINISH).ok
    assert redis_client.exists(store.keys.lease(rid)) == 0
    assert redis_client.zscore(store.keys.active_of(rid), rid) is None


def test_store_write_requires_a_source_status_of_its_transition(store: ResponseStore) -> None:
    response = make_response("queued")
    store.create(response, inputs=[], extra={}, events=[])
    failed = response.model_copy(update={"status": ResponseStatus.FAILED})

    refused = store.write(failed, transition=FINISH)  # a run's final write: in_progress only
    assert (refused.ok, refused.status, refused.conflict) == (False, "queued", False)
    assert store.status(response.id) == "queued"

    accepted = store.write(failed, transition=FAIL, turn=1)  # any active response may fail
    assert (accepted.ok, accepted.status) == (True, "failed")
    stored = store.get(response.id)
    assert (stored.response.status, stored.version, stored.turn) == ("failed", 2, 1)


def test_store_write_refuses_a_stale_version(store: ResponseStore) -> None:
    response = make_response("in_progress")
    store.create(response, inputs=[], extra={}, events=[])
    version = store.get(response.id).version
    store.write(response, transition=COMMIT, version=version)

    stale = store.write(
        response.model_copy(update={"status": ResponseStatus.FAILED}),
        transition=FAIL,
        version=version,
        events=[{"type": "response.failed", "response": {}}],
    )

    assert (stale.ok, stale.conflict, stale.status) == (False, True, "in_progress")
    assert store.get(response.id).version == version + 1
    assert store.events_after(response.id, -1) == []


def test_store_write_of_an_unknown_response_is_refused(store: ResponseStore) -> None:
    result = store.write(make_response("completed"), transition=FINISH)

    assert (result.ok, result.status, result.conflict) == (False, "", False)


def test_store_create_refuses_an_existing_id(store: ResponseStore) -> None:
    response = make_response("queued")
    store.create(response, inputs=[], extra={}, events=[])

    with pytest.raises(RuntimeError, match="already exists"):
        store.create(
            response.model_copy(update={"status": ResponseStatus.COMPLETED}),
            inputs=[{"type": "message"}],
            extra={"a": 1},
            events=[created(response)],
        )

    assert store.status(response.id) == "queued"
    assert store.inputs(response.id) == []
    assert store.get(response.id).extra == {}
    assert store.events_after(response.id, -1) == []


def test_store_delete_removes_every_key(store: ResponseStore, redis_client: redis.Redis) -> None:
    response = make_response("in_progress")
    store.create(response, inputs=[{"type": "message"}], extra={"a": 1}, events=[created(response)])
    store.emit(response.id, [delta("a")])
    for turn in (0, 1):  # the runs' counts of each turn's starts (poison guards) go too
        assert store.open_turn(response.id, turn, counts_start=True).starts == 1
    redis_client.set(store.keys.lease(response.id), "worker-1")
    redis_client.zadd(store.keys.active_of(response.id), {response.id: time.time()})
    for call_id in ("call_1", "call_2"):  # tool results (what the tools answered) go too
        store.open_tool_call(response.id, call_id, token="t", claim_seconds=30, counts_start=True)
        assert store.finish_tool_call(response.id, call_id, '{"output": "secret"}', token="t")
    with as_task("w", "tools.internal", sent_at=time.time()):
        # a call still running: its claim and count; the record knows it by its run's stamp
        store.open_tool_call(response.id, "call_3", token="t", claim_seconds=30, counts_start=True)
    # the counts of starts: two turns' and the running call's (a stored result took its call's)
    assert len(keys_like(redis_client, f"{store.keys.record(response.id)}:*starts")) == 3

    assert store.delete(response.id) is True

    assert keys_like(redis_client, f"{store.keys.record(response.id)}*") == []
    assert redis_client.zscore(store.keys.active_of(response.id), response.id) is None
    assert store.load(response.id) is None
    assert store.inputs(response.id) == []
    assert store.delete(response.id) is False


def test_store_delete_frees_a_long_input_outside_redis_s_main_thread(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    """A ``DEL`` frees a value in the call, while Redis serves no one else."""
    response = make_response("completed")
    inputs = [{"type": "message", "role": "user", "content": f"m{i}"} for i in range(20_000)]
    store.create(response, inputs=inputs, extra={}, events=[created(response)])
    before = lazily_freed(redis_client)

    assert store.delete(response.id) is True

    assert lazily_freed_since(redis_client, before, at_least=1) >= 1


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
    assert store.write(done, transition=FINISH).ok

    for key in (
        store.keys.record(response.id),
        store.keys.inputs(response.id),
        store.keys.events(response.id),
    ):
        assert 0 < redis_client.ttl(key) <= store.unstored_ttl_seconds, key


@pytest.mark.parametrize("is_stored", [False, True], ids=["unstored", "stored"])
def test_store_a_finished_unstored_response_takes_its_tool_results_and_context_with_it(
    store: ResponseStore, redis_client: redis.Redis, is_stored: bool
) -> None:
    """What its tools answered, and the context a WebSocket connection gave it (the history
    list its create began), expire with a ``store: false`` response's record; a stored
    response's stay as long as the store keeps anything."""
    response = make_response("in_progress", store=is_stored)
    context = [{"type": "message", "role": "user", "content": "the earlier turn"}]
    history = store.extend_history(None, context, response_id=response.id)
    store.create(response, inputs=[{"type": "message"}], extra={}, events=[], history=history)
    store.open_tool_call(response.id, "call_1", token="t", claim_seconds=30)
    assert store.finish_tool_call(response.id, "call_1", '{"output": "secret"}', token="t")

    done = response.model_copy(update={"status": ResponseStatus.COMPLETED})
    assert store.write(done, transition=FINISH).ok

    for key in (store.keys.tool_results(response.id), store.keys.history(response.id, response.id)):
        ttl = redis_client.ttl(key)
        if is_stored:
            assert ttl > store.ttl_seconds - 100, key
        else:
            assert 0 < ttl <= store.unstored_ttl_seconds, key


def test_store_set_extra_replaces_extra_and_brings_back_no_deleted_record(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    rid = new_response(store)

    store.set_extra(rid, {"plan": ["a"]})
    assert store.get(rid).extra == {"plan": ["a"]}

    store.delete(rid)
    store.set_extra(rid, {"plan": ["b"]})
    assert not redis_client.exists(store.keys.record(rid))


def test_store_write_keeps_a_queued_start_only_until_the_first_write(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    response = make_response("queued")
    store.create(response, inputs=[], extra={}, events=[])
    assert redis_client.hexists(store.keys.record(response.id), "started")

    cancelled = response.model_copy(update={"status": ResponseStatus.CANCELLED})
    assert store.write(cancelled, transition=CANCEL).ok

    assert not redis_client.hexists(store.keys.record(response.id), "started")
