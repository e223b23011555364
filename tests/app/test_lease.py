from app.lease import LeaseKeeper
from app.store import ResponseStore
from tests.support.responses import stored_response


def test_acquire_takes_the_lease_and_reads_the_turn_in_one_step(store: ResponseStore) -> None:
    rid = stored_response(store).id
    keeper = LeaseKeeper(store, lease_seconds=30)

    acquired = keeper.acquire(rid, 0, delivery=f"{rid}:t0:infer")

    assert (acquired.taken, acquired.deliveries) == (True, 1)
    assert acquired.loaded is not None and acquired.loaded.stored is not None
    assert acquired.loaded.stored.response.id == rid
    assert (acquired.loaded.start_sequence_number, acquired.loaded.is_rerun) == (-1, False)
    assert store.redis.exists(store.keys.lease(rid))
    assert store.redis.zscore(store.keys.active, rid) is not None
    keeper.release(rid)


def test_a_held_lease_is_not_taken_and_the_turn_not_read(store: ResponseStore) -> None:
    rid = stored_response(store).id
    first, second = LeaseKeeper(store, lease_seconds=30), LeaseKeeper(store, lease_seconds=30)
    assert first.acquire(rid, 0).taken

    refused = second.acquire(rid, 0, delivery=f"{rid}:t0:infer")

    assert (refused.taken, refused.deliveries, refused.loaded) == (False, 1, None)
    first.release(rid)
    again = second.acquire(rid, 0)
    assert again.taken and again.deliveries == 0  # no delivery named: none counted
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
