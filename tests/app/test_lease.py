import json
import threading
import time
from typing import Any

import pytest

from app.lease import LeaseKeeper, sweep, sweep_interval
from app.store import ResponseStore
from app.store.base import StoreBase
from tests.support.dispatch import RecordingDispatcher
from tests.support.responses import stored_response
from tests.support.sentinel import wait_for


@pytest.fixture
def store(store_on_both: ResponseStore) -> ResponseStore:
    """One Redis's, then a cluster's (the sweeper reads every shard's sets)."""
    return store_on_both


def test_acquire_takes_the_lease_and_reads_the_turn_in_one_step(store: ResponseStore) -> None:
    rid = stored_response(store).id
    keeper = LeaseKeeper(store, lease_seconds=30)

    acquired = keeper.acquire(rid, 0, counts_start=True)

    assert (acquired.taken, acquired.starts) == (True, 1)
    assert acquired.loaded is not None and acquired.loaded.stored is not None
    assert acquired.loaded.stored.response.id == rid
    assert (acquired.loaded.start_sequence_number, acquired.loaded.is_rerun) == (-1, False)
    assert store.redis.exists(store.keys.lease(rid))
    assert store.redis.zscore(store.keys.active_of(rid), rid) is not None
    keeper.release(rid)


def test_a_long_input_is_read_with_the_lease_already_renewed(
    store: ResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease lasts 3 s by default: a turn whose input took longer to read and parse than
    that (450,000 items, on a busy worker) lost it before its renewals began, and the sweeper
    ran the turn a second time beside it."""
    response = stored_response(store)
    inputs = [{"type": "message", "role": "user", "content": str(i)} for i in range(500)]
    store.redis.rpush(store.keys.inputs(response.id), *map(json.dumps, inputs))
    keeper = LeaseKeeper(store, lease_seconds=30)
    held_while_read: list[int] = []
    read = StoreBase.read_list

    def reading(turns: StoreBase, *args: Any, **kwargs: Any) -> list[bytes | str]:
        held_while_read.append(keeper.held())
        return read(turns, *args, **kwargs)

    monkeypatch.setattr(StoreBase, "read_list", reading)

    acquired = keeper.acquire(response.id, 0)

    assert acquired.loaded is not None and acquired.loaded.inputs == inputs
    assert held_while_read == [1]
    keeper.release(response.id)


def test_a_held_lease_is_not_taken_and_the_turn_not_read(store: ResponseStore) -> None:
    rid = stored_response(store).id
    first, second = LeaseKeeper(store, lease_seconds=30), LeaseKeeper(store, lease_seconds=30)
    assert first.acquire(rid, 0).taken

    refused = second.acquire(rid, 0, counts_start=True)

    assert (refused.taken, refused.starts, refused.loaded) == (False, 0, None)
    first.release(rid)
    again = second.acquire(rid, 0)
    assert again.taken and again.starts == 0  # none asked for: none counted
    assert again.loaded is not None and again.loaded.is_rerun  # the first run marked the turn
    second.release(rid)


def test_acquire_on_a_deleted_response_reads_nothing(store: ResponseStore) -> None:
    rid = stored_response(store).id
    store.delete(rid)
    keeper = LeaseKeeper(store, lease_seconds=30)

    acquired = keeper.acquire(rid, 0)

    assert acquired.taken and acquired.loaded is not None
    assert acquired.loaded.stored is None
    keeper.release(rid)


def test_renew_on_a_cluster_survives_nodes_that_forgot_the_scripts(store: ResponseStore) -> None:
    if not store.keys.is_sharded:
        pytest.skip("a cluster's own (SCRIPT FLUSH is server-wide: not on the shared Redis)")
    rid = stored_response(store).id
    keeper = LeaseKeeper(store, lease_seconds=2)
    assert keeper.acquire(rid, 0).taken
    token = store.redis.get(store.keys.lease(rid)).decode()  # type: ignore[union-attr]
    keeper.renew({rid: (token, 0)})
    store.redis.pexpire(store.keys.lease(rid), 100)
    for node in store.redis.get_primaries():  # type: ignore[attr-defined]  # as if restarted
        node.redis_connection.script_flush()

    keeper.renew({rid: (token, 0)})  # a cluster pipeline: its scripts go as EVAL

    assert store.redis.pttl(store.keys.lease(rid)) > 1_000
    keeper.release(rid)


def test_renew_extends_every_held_lease_in_one_round_trip(store: ResponseStore) -> None:
    rids = [stored_response(store).id for _ in range(3)]
    keeper = LeaseKeeper(store, lease_seconds=2)
    for rid in rids:
        assert keeper.acquire(rid, 0).taken
    store.redis.pexpire(store.keys.lease(rids[0]), 100)  # nearly lapsed
    held = {rid: (store.redis.get(store.keys.lease(rid)).decode(), 0) for rid in rids}  # type: ignore[union-attr]
    held[rids[2]] = ("not-ours", 0)

    keeper.renew(held)

    assert store.redis.pttl(store.keys.lease(rids[0])) > 1_000
    assert all(
        store.redis.zscore(store.keys.active_of(rid), rid) > time.time() + 1 for rid in rids[:2]
    )  # type: ignore[operator]
    for rid in rids:
        keeper.release(rid)


def test_the_renewer_runs_while_a_lease_is_held_and_again_for_the_next(
    store: ResponseStore,
) -> None:
    """A process holding no lease has no renewer waking (a test's keeper would linger)."""
    first, second = stored_response(store).id, stored_response(store).id
    keeper = LeaseKeeper(store, lease_seconds=0.3)
    before = set(threading.enumerate())

    assert keeper.acquire(first, 0).taken
    [renewer] = set(threading.enumerate()) - before
    keeper.release(first)
    renewer.join(timeout=5)
    assert not renewer.is_alive()  # nothing held: it ended

    assert keeper.acquire(second, 0).taken  # and another starts with the next lease
    lease = store.keys.lease(second)
    store.redis.pexpire(lease, 60_000)  # a renewal sets it back to the lease's 300 ms
    wait_for(lambda: 0 < store.redis.pttl(lease) <= 300, timeout=10, what="a renewal")
    keeper.release(second)


def test_sweep_requeues_the_turn_of_a_tool_call_whose_worker_died(store: ResponseStore) -> None:
    rid = stored_response(store).id
    dispatcher = RecordingDispatcher()
    # The turn handed the call on: the response's own watch waits for the tools' deadline.
    store.redis.zadd(store.keys.active_of(rid), {rid: time.time() + 60})
    opened = store.open_tool_call(rid, "c1", token="dead", claim_seconds=30)
    assert opened.claim == "claimed"
    assert sweep(store, dispatcher, lease_seconds=3) == []  # its claim has not lapsed yet

    lapse_claim(store, rid, "c1")  # the worker died: nobody renewed the claim, and its time passed

    assert sweep(store, dispatcher, lease_seconds=3) == [rid]
    assert dispatcher.turns == [(rid, 0)]
    watched = store.redis.zscore(
        store.keys.running_calls_of(rid), store.keys.running_call(rid, "c1")
    )
    assert watched is None  # swept once
    assert sweep(store, RecordingDispatcher(), lease_seconds=3) == []


def lapse_claim(store: ResponseStore, rid: str, call_id: str) -> None:
    """What the passing of a claim's time does: its key expires and its watch falls due.

    Done by hand, not by sleeping past a short claim: a busy machine can take longer than the
    claim between opening it and the sweep that must still see it held.
    """
    store.redis.delete(store.keys.tool_claim(rid, call_id))
    member = store.keys.running_call(rid, call_id)
    assert store.redis.zadd(
        store.keys.running_calls_of(rid), {member: time.time()}, xx=True, ch=True
    )


def test_sweep_leaves_running_queued_and_finished_calls_alone(store: ResponseStore) -> None:
    rid = stored_response(store).id
    store.redis.zadd(store.keys.active_of(rid), {rid: time.time() + 60})  # c3 waits in its queue
    assert store.open_tool_call(rid, "c1", token="a", claim_seconds=0.05).claim == "claimed"
    assert store.open_tool_call(rid, "c2", token="b", claim_seconds=0.05).claim == "claimed"
    assert store.finish_tool_call(rid, "c2", '{"output": "x"}', token="b")
    time.sleep(0.1)
    store.open_tool_call(rid, "c1", token="a2", claim_seconds=3)  # lapsed, taken over: running
    assert store.renew_tool_claim(rid, "c1", token="a", ttl_seconds=3) is False
    dispatcher = RecordingDispatcher()

    assert sweep(store, dispatcher, lease_seconds=3) == []

    assert dispatcher.turns == []


def test_sweeper_looks_every_third_of_a_lease() -> None:
    assert sweep_interval(3.0) == 1.0
