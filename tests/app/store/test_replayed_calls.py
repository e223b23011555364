"""A script call whose reply is lost runs again: the second run must change nothing.

When Redis stops with a call in flight, the call may have run while its reply never arrived;
redis-py's outage ``Retry`` (``app.fleet.outage_retry``) then sends it again after the restart.
These tests lose one reply on purpose (the command reached Redis, its answer is dropped), so
the store's own client retries the very same invocation, as it does after a restart.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from app.protocol.response import ResponseStatus
from app.store import LeaseRequest, ResponseStore
from app.store.once import Writer
from app.store.status import CANCEL, COMMIT, FINISH
from tests.app.store.support import delta, make_response
from tests.support.lost_replies import ReplyLosingConnection, lose_next_reply, lossy_store


@pytest.fixture
def lossy(redis_url: str, key_prefix: str) -> Iterator[ResponseStore]:
    store = lossy_store(redis_url, key_prefix, retries=True)
    yield store
    store.redis.close()


def _texts(store: ResponseStore, rid: str) -> list[str]:
    return [e.data for e in store.events_after(rid, -1)]


def test_emit_replayed_after_a_lost_reply_appends_nothing(lossy: ResponseStore) -> None:
    store = lossy
    response = make_response("in_progress")
    store.create(response, inputs=[], extra={}, events=[])
    store.emit(response.id, [delta("dolor ")])

    lose_next_reply()
    replayed = store.emit(response.id, [delta("sit "), delta("amet")])

    assert (replayed.last_sequence_number, replayed.status) == (2, "in_progress")
    assert ReplyLosingConnection.replies_to_lose == 0  # the reply was lost: the call ran twice
    assert [e.sequence_number for e in store.events_after(response.id, -1)] == [0, 1, 2]
    assert store.last_sequence_number(response.id) == 2
    assert store.emit(response.id, [delta(".")]).last_sequence_number == 3


def test_write_replayed_after_a_lost_reply_returns_the_first_result(
    lossy: ResponseStore,
) -> None:
    store = lossy
    response = make_response("in_progress")
    store.create(response, inputs=[], extra={}, events=[])

    lose_next_reply()
    committed = store.write(response, transition=COMMIT, turn=1, events=[delta("a")])

    assert committed.ok and committed.status == "in_progress"
    assert store.get(response.id).version == 2  # the create's, then this write's: not a third
    assert [e.sequence_number for e in store.events_after(response.id, -1)] == [0]


def test_terminal_write_replayed_after_a_lost_reply_is_still_ok(
    lossy: ResponseStore,
) -> None:
    store = lossy
    response = make_response("in_progress")
    store.create(response, inputs=[], extra={}, events=[])
    done = response.model_copy(update={"status": ResponseStatus.COMPLETED})

    lose_next_reply()
    finished = store.write(done, transition=FINISH, events=[delta("z")])

    assert (finished.ok, finished.status) == (True, "completed")
    assert len(_texts(store, response.id)) == 1


def test_create_replayed_after_a_lost_reply_succeeds(lossy: ResponseStore) -> None:
    response = make_response("queued")

    lose_next_reply()
    lossy.create(response, inputs=[{"role": "user", "content": "hi"}], extra={}, events=[])

    assert lossy.get(response.id).response.status == "queued"
    assert lossy.inputs(response.id) == [{"role": "user", "content": "hi"}]


def test_a_later_call_of_the_same_writer_is_not_taken_for_a_replay(
    lossy: ResponseStore,
) -> None:
    store = lossy
    response = make_response("in_progress")
    store.create(response, inputs=[], extra={}, events=[])

    firsts = [store.emit(response.id, [delta("x")]).last_sequence_number for _ in range(3)]

    assert firsts == [0, 1, 2]


def test_a_writer_replayed_after_another_wrote_returns_its_first_result(
    store: ResponseStore,
) -> None:
    response = make_response("in_progress")
    store.create(response, inputs=[], extra={}, events=[])
    first, other = Writer().next_call(), Writer().next_call()

    landed = store.emit(response.id, [delta("a")], call=first)
    store.emit(response.id, [delta("b")], call=other)
    replayed = store.emit(response.id, [delta("a")], call=first)

    assert replayed == landed
    assert store.last_sequence_number(response.id) == 1


def test_a_refused_call_leaves_no_mark(store: ResponseStore) -> None:
    response = make_response("in_progress")
    store.create(response, inputs=[], extra={}, events=[])
    cancelled = response.model_copy(update={"status": ResponseStatus.CANCELLED})
    assert store.write(cancelled, transition=CANCEL).ok
    call = Writer().next_call()

    assert store.emit(response.id, [delta("late")], call=call).refused

    assert store.redis.hget(store.keys.record(response.id), call.field) is None


def test_a_turn_opened_again_after_a_lost_reply_is_taken_and_counted_once(
    lossy: ResponseStore,
) -> None:
    response = make_response("queued")
    lossy.create(response, inputs=[], extra={}, events=[])
    lease = LeaseRequest(token="run-1", milliseconds=30_000, deadline=time.time() + 30)

    lose_next_reply()
    opened = lossy.open_turn(response.id, 0, lease=lease, counts_start=True)

    assert (opened.taken, opened.starts) == (True, 1)
    assert opened.loaded is not None and opened.loaded.stored.response.status == "in_progress"
    started = [e for e in lossy.events_after(response.id, -1) if e.type == "response.in_progress"]
    assert len(started) == 1
    lease_lost = LeaseRequest(token="run-2", milliseconds=30_000, deadline=time.time() + 30)
    assert not lossy.open_turn(response.id, 0, lease=lease_lost, counts_start=True).taken


def test_a_tool_call_opened_again_after_a_lost_reply_is_claimed_and_counted_once(
    lossy: ResponseStore,
) -> None:
    response = make_response("in_progress")
    lossy.create(response, inputs=[], extra={}, events=[])

    lose_next_reply()
    opened = lossy.open_tool_call(
        response.id, "c1", token="task-1", claim_seconds=30, counts_start=True
    )

    assert (opened.claim, opened.starts) == ("claimed", 1)
    other = lossy.open_tool_call(response.id, "c1", token="task-2", claim_seconds=30)
    assert other.claim == "held"


def test_a_tool_result_stored_again_after_a_lost_reply_reports_stored(
    lossy: ResponseStore,
) -> None:
    response = make_response("in_progress")
    lossy.create(response, inputs=[], extra={}, events=[])
    assert lossy.open_tool_call(response.id, "c1", token="task-1", claim_seconds=30).claim

    lose_next_reply()
    stored = lossy.finish_tool_call(response.id, "c1", '{"output": "x"}', token="task-1")

    assert stored
    assert not lossy.is_tool_call_claimed(response.id, "c1")
    assert not lossy.finish_tool_call(response.id, "c1", '{"output": "y"}', token="task-2")
