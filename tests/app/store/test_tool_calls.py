import time
import uuid

import redis

from app.protocol.response import ResponseStatus
from app.store import ResponseStore
from app.store.status import CANCEL
from tests.app.store.support import new_response


def test_store_open_tool_call_reads_claims_and_counts_the_start_in_one_step(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    rid = new_response(store)
    claim, running = store.keys.tool_claim(rid, "c1"), store.keys.running_calls_of(rid)
    member = store.keys.running_call(rid, "c1")

    # Claims of 30 s renewed to 60 s: the TTLs read tell them apart with 10 s or more to spare
    # for a busy machine between a step and its check.
    first = store.open_tool_call(rid, "c1", token="a", claim_seconds=30, counts_start=True)
    assert (first.starts, first.claim) == (1, "claimed")
    assert first.stored is not None and first.stored.response.id == rid
    assert redis_client.get(claim) == b"a"
    assert 20_000 < redis_client.pttl(claim) <= 30_000
    assert redis_client.zscore(running, member) is not None  # the sweeper watches it

    again = store.open_tool_call(rid, "c1", token="b", claim_seconds=30, counts_start=True)
    assert (again.starts, again.claim) == (0, "held")  # not started: not counted
    assert not store.renew_tool_claim(rid, "c1", token="b", ttl_seconds=60)  # not b's
    assert redis_client.pttl(claim) <= 30_000
    assert store.renew_tool_claim(rid, "c1", token="a", ttl_seconds=60)
    assert redis_client.pttl(claim) > 40_000
    assert redis_client.zscore(running, member) > time.time() + 40  # type: ignore[operator]

    assert store.finish_tool_call(rid, "c1", '{"output": "x"}', token="a")
    assert not redis_client.exists(claim)  # given back
    assert redis_client.zscore(running, member) is None  # watched no more
    done = store.open_tool_call(rid, "c1", token="c", claim_seconds=3, counts_start=True)
    assert (done.starts, done.claim) == (0, "stored")
    assert not redis_client.exists(store.keys.call_starts(rid, "c1"))  # went with the result
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
    assert store.write(cancelled, transition=CANCEL).ok

    assert not store.finish_tool_call(rid, "c1", '{"output": "late"}', token="a")
    assert store.tool_results(rid, ["c1"]) == [None]
    assert not redis_client.exists(store.keys.tool_claim(rid, "c1"))  # given back all the same


def test_store_counts_each_claim_taken_as_a_start_of_the_call(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    rid = new_response(store)
    starts = []
    for token in ("a", "b", "c"):  # each holder dies: its claim lapses (deleted here)
        starts.append(
            store.open_tool_call(rid, "c1", token=token, claim_seconds=3, counts_start=True).starts
        )
        redis_client.delete(store.keys.tool_claim(rid, "c1"))

    assert starts == [1, 2, 3]
    assert 0 < redis_client.ttl(store.keys.call_starts(rid, "c1")) <= store.ttl_seconds


def test_store_release_tool_claim_ends_the_watch_of_the_call(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    rid = new_response(store)
    assert store.open_tool_call(rid, "c1", token="a", claim_seconds=3).claim == "claimed"

    store.release_tool_claim(rid, "c1", token="b")  # not b's
    assert redis_client.exists(store.keys.tool_claim(rid, "c1"))
    store.release_tool_claim(rid, "c1", token="a")

    assert not redis_client.exists(store.keys.tool_claim(rid, "c1"))
    assert (
        redis_client.zscore(store.keys.running_calls_of(rid), store.keys.running_call(rid, "c1"))
        is None
    )


def test_store_status_renewing_claim_reads_the_status_and_renews_ours_only(
    store: ResponseStore,
) -> None:
    rid = new_response(store)
    assert store.open_tool_call(rid, "c1", token="ours", claim_seconds=0.5).claim == "claimed"
    claim = store.keys.tool_claim(rid, "c1")

    status, renewed = store.status_renewing_claim(rid, "c1", token="ours", ttl_seconds=30)

    assert (status, renewed) == ("in_progress", True)
    assert store.redis.pttl(claim) > 10_000
    assert store.status_renewing_claim(rid, "c1", token="theirs", ttl_seconds=30)[1] is False
    assert (
        store.status_renewing_claim(f"resp_{uuid.uuid4().hex}", "c1", token="x", ttl_seconds=1)[0]
        is None
    )
