"""A run that stalled past its lease: fenced out when another run took the lease, and carried
on when nobody did (app/store/fence.py)."""

import json
from collections.abc import Callable

from app.config import Settings
from app.lease import LeaseKeeper
from app.protocol.events import Event
from app.protocol.response import ResponseStatus
from app.providers.chunks import Finish, PlanUpdate, TextDelta
from app.run import RunDeps, StepOutcome, advance_response
from app.store import ResponseStore
from app.store.status import CANCEL
from tests.app.test_run import FakeModel, create, event_types
from tests.support.dispatch import RecordingDispatcher
from tests.support.responses import stored_response

LEASE_SECONDS = 30.0  # the keeper's renewer stays out of the way: the tests lapse it by hand


def other_delta(text: str) -> Event:
    return {
        "type": "response.output_text.delta",
        "item_id": "msg_other",
        "output_index": 0,
        "content_index": 0,
        "delta": text,
        "logprobs": [],
    }


class Takeover:
    """Another run takes the lease while the first one stalls, and emits under it."""

    def __init__(self, store: ResponseStore, rid: str, *, gives_back: bool = False):
        self.store, self.rid, self.gives_back = store, rid, gives_back
        self.keeper = LeaseKeeper(store, lease_seconds=LEASE_SECONDS)
        self.seen = -1
        self.token = ""

    def __call__(self) -> None:
        self.store.redis.delete(self.store.keys.lease(self.rid))  # the stall outlived the lease
        opened = self.keeper.acquire(self.rid, 0)
        assert opened.taken
        self.token = opened.fence.token
        self.seen = self.store.last_sequence_number(self.rid)
        emitted = self.store.emit(self.rid, [other_delta("theirs")], fence=opened.fence)
        assert emitted.last_sequence_number == self.seen + 1
        if self.gives_back:  # it committed elsewhere and handed the turn on
            self.keeper.release(self.rid)
        else:  # it stalls in turn: its lease lapses unrenewed (a renewer left running renews
            # it on the test's closed client for the rest of the session)
            self.keeper.forget(self.rid)


def leased_run(store: ResponseStore, settings: Settings, model: FakeModel) -> RunDeps:
    keeper = LeaseKeeper(store, lease_seconds=LEASE_SECONDS)
    return RunDeps(store=store, provider=model, settings=settings, leases=keeper)


def run_with_takeover(
    store: ResponseStore, settings: Settings, *, gives_back: bool = False
) -> tuple[str, Takeover, RunDeps]:
    rid = create(store, settings, RecordingDispatcher())
    takeover = Takeover(store, rid, gives_back=gives_back)
    model = FakeModel(TextDelta(text="Sun"), takeover, TextDelta(text="ny."), Finish(reason="stop"))
    deps = leased_run(store, settings, model)

    assert advance_response(deps, rid, 0) == StepOutcome.SKIPPED
    return rid, takeover, deps


def test_a_run_whose_lease_was_taken_over_emits_nothing_more(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    rid, takeover, deps = run_with_takeover(store, make_settings(coalesce_ms=0))

    after = store.events_after(rid, takeover.seen)
    assert [json.loads(e.data)["item_id"] for e in after] == ["msg_other"]  # theirs alone
    stored = store.get(rid)
    assert (stored.response.status, stored.turn, stored.response.output) == ("in_progress", 0, [])
    lease = store.redis.get(store.keys.lease(rid))
    assert lease is not None and lease.decode() == takeover.token  # theirs, kept
    assert deps.leases is not None and deps.leases.held() == 0  # nothing renewed any more


def test_a_run_whose_lease_was_taken_over_does_not_commit(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    # A long window: the run's last events ride on its final write, which is refused.
    rid, takeover, _deps = run_with_takeover(store, make_settings(coalesce_ms=60_000))

    after = store.events_after(rid, takeover.seen)
    assert [json.loads(e.data)["item_id"] for e in after] == ["msg_other"]
    stored = store.get(rid)
    assert (stored.response.status, stored.turn) == ("in_progress", 0)
    assert store.redis.exists(store.keys.lease(rid))  # the terminal write did not free theirs


def test_a_run_is_fenced_out_by_a_run_that_took_the_lease_and_gave_it_back(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    rid, takeover, _deps = run_with_takeover(store, make_settings(coalesce_ms=0), gives_back=True)

    assert not store.redis.exists(store.keys.lease(rid))  # not taken again for the stale run
    assert len(store.events_after(rid, takeover.seen)) == 1
    assert store.get(rid).response.status == "in_progress"


def test_a_run_whose_lease_lapsed_untaken_takes_it_again_and_finishes(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(coalesce_ms=0)
    rid = create(store, settings, RecordingDispatcher())
    lease_key = store.keys.lease(rid)
    retaken: list[bytes | None] = []

    def lapse() -> None:
        store.redis.delete(lease_key)
        store.redis.zrem(store.keys.active, rid)  # a sweeper saw it lapse

    def look() -> None:
        retaken.append(store.redis.get(lease_key))

    model = FakeModel(
        TextDelta(text="Sun"), lapse, TextDelta(text="ny."), look, Finish(reason="stop")
    )
    deps = leased_run(store, settings, model)

    assert advance_response(deps, rid, 0) == StepOutcome.COMPLETED

    response = store.get(rid).response
    assert response.output[0]["content"][0]["text"] == "Sunny."
    [during] = retaken
    assert during is not None  # the next emit took the lapsed lease again, for this run
    assert not store.redis.exists(lease_key)  # and the final write freed it
    assert store.redis.zscore(store.keys.active, rid) is None
    types = event_types(store, rid)  # every sequence number once
    assert types.count("response.output_text.delta") == 2
    assert types[-1] == "response.completed"


def test_writes_of_no_run_are_not_fenced(store: ResponseStore) -> None:
    rid = stored_response(store).id
    holder = LeaseKeeper(store, lease_seconds=LEASE_SECONDS)
    assert holder.acquire(rid, 0).taken
    holder.forget(rid)  # held until it lapses, never renewed

    assert store.emit(rid, [other_delta("x")]).last_sequence_number >= 0
    cancelled = store.get(rid).response.model_copy(update={"status": ResponseStatus.CANCELLED})
    assert store.write(cancelled, transition=CANCEL).ok


def test_a_run_whose_lease_was_taken_over_does_not_store_its_plan(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(coalesce_ms=60_000)  # the plan is the run's first write
    rid = create(store, settings, RecordingDispatcher())
    takeover = Takeover(store, rid)
    model = FakeModel(PlanUpdate(steps=("Look", "Answer")), takeover, Finish(reason="stop"))

    assert advance_response(leased_run(store, settings, model), rid, 0) == StepOutcome.SKIPPED

    assert "plan" not in store.get(rid).extra
    lease = store.redis.get(store.keys.lease(rid))
    assert lease is not None and lease.decode() == takeover.token


def test_set_extra_of_no_run_is_not_fenced(store: ResponseStore) -> None:
    rid = stored_response(store).id
    holder = LeaseKeeper(store, lease_seconds=LEASE_SECONDS)
    assert holder.acquire(rid, 0).taken
    holder.forget(rid)  # held until it lapses, never renewed

    assert store.set_extra(rid, {"plan": ["a"]}).ok
    assert store.get(rid).extra == {"plan": ["a"]}
