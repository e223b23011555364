import uuid

import redis

from app.protocol.response import ResponseStatus
from app.store import ResponseStore
from app.store.status import CANCEL
from tests.app.store.support import new_response


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
    assert store.write(cancelled, transition=CANCEL).ok

    assert not store.finish_tool_call(rid, "c1", '{"output": "late"}', token="a")
    assert store.tool_results(rid, ["c1"]) == [None]
    assert not redis_client.exists(store.keys.tool_claim(rid, "c1"))  # given back all the same
