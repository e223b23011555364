"""Fair dispatch (``app.fairness``): a tenant's flood waits parked, another tenant goes first."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from app.config import Settings
from app.errors import RateLimitError
from app.fairness import AUTO, FairShare, cap_of, mode_of
from app.jobs import wait_for_answer
from app.lease import Sweeper
from app.limits import Caller, RateLimiter
from app.protocol import events as ev
from app.protocol.response import ResponseStatus, Usage
from app.providers.chunks import Finish, TextDelta, UsageReport
from app.responses import cancel_response, create_response
from app.run import RunDeps
from app.store import ResponseStore
from app.store.status import FAIL
from app.tenancy import Limits, Tenant
from app.token_count import run_count, start_count
from tests.app.test_run import FakeModel
from tests.support.dispatch import RecordingDispatcher, RecordingJobQueue


def submit(
    store: ResponseStore,
    dispatcher: RecordingDispatcher,
    settings: Settings,
    tenant: Tenant,
    *,
    tenants: int = 1,
) -> str:
    caller = Caller(tenant, RateLimiter(store), tenants=lambda: tenants)
    body = {"model": "m", "input": "hi", "background": True}
    response, _ = create_response(store, dispatcher, settings, body, caller=caller)
    return response.id


def end(store: ResponseStore, response_id: str) -> None:
    failed = store.get(response_id).response.model_copy(update={"status": ResponseStatus.FAILED})
    events = [ev.response_event("response.failed", failed)]
    assert store.write(failed, transition=FAIL, events=events).ok


def queued(dispatcher: RecordingDispatcher) -> list[str]:
    return [rid for rid, turn in dispatcher.turns if turn == 0]


A, B = Tenant(name="team-a"), Tenant(name="team-b")


@pytest.fixture
def store(store_on_both: ResponseStore) -> ResponseStore:
    """One Redis's, then a cluster's (the tenant's keys in one slot, its responses in many)."""
    return store_on_both


def test_fairness_a_flood_waits_parked_and_another_tenant_goes_first(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(tenant_max_running=2)
    dispatcher = RecordingDispatcher()
    flood = [submit(store, dispatcher, settings, A) for _ in range(5)]
    theirs = submit(store, dispatcher, settings, B)

    assert queued(dispatcher) == [*flood[:2], theirs]
    assert {store.status(rid) for rid in flood} == {ResponseStatus.QUEUED}  # parked, stored

    end(store, flood[0])
    fair = FairShare(store, settings)
    assert fair.release_owner_of(dispatcher, flood[0]) == [flood[2]]  # in arrival order
    assert fair.release_owner_of(dispatcher, flood[1]) == []  # flood[1] still runs
    cancel_response(store, dispatcher, flood[3], tenant="team-a", settings=settings)
    end(store, flood[1])
    assert fair.release(dispatcher, "team-a") == [flood[4]]  # the cancelled one is skipped
    assert queued(dispatcher) == [*flood[:2], theirs, flood[2], flood[4]]


def test_fairness_the_sweeper_starts_what_got_a_place(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(tenant_max_running=1)
    dispatcher = RecordingDispatcher()
    first, second = (submit(store, dispatcher, settings, A) for _ in range(2))
    end(store, first)  # ended without a word to the fair share (a deleted or expired response)

    Sweeper(store, dispatcher, lease_seconds=3.0, fair=FairShare(store, settings)).tick()

    assert queued(dispatcher) == [first, second]


def test_fairness_off_by_default_queues_everything(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    dispatcher = RecordingDispatcher()
    ids = [submit(store, dispatcher, make_settings(), A) for _ in range(3)]

    assert queued(dispatcher) == ids
    assert store.redis.zscore(store.keys.active_of(ids[0]), ids[0]) is not None  # watched as before


def test_fairness_parked_responses_count_in_flight(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(tenant_max_running=1)
    dispatcher = RecordingDispatcher()
    limited = Tenant(name="team-a", limits=Limits(max_in_flight=3))
    for _ in range(3):
        submit(store, dispatcher, settings, limited)

    with pytest.raises(RateLimitError):
        submit(store, dispatcher, settings, limited)
    assert len(queued(dispatcher)) == 1


@pytest.mark.parametrize(
    ("setting", "tenants", "mode"),
    [
        (None, 1, None),  # unset, one tenant (auth off, or every key one tenant's): off
        (None, 2, AUTO),  # unset, several tenants: on, sized by the fleet
        (0, 5, None),  # 0: off, however many tenants
        (3, 1, "3"),  # a number: that cap, even for one tenant
    ],
)
def test_fairness_default_is_on_only_with_several_tenants(
    setting: int | None, tenants: int, mode: str | None
) -> None:
    assert mode_of(setting, tenants) == mode


def test_fairness_auto_cap_is_half_the_live_threads_at_least_one() -> None:
    assert [cap_of(AUTO, threads) for threads in (0, 1, 2, 3, 16, 64)] == [1, 1, 1, 1, 8, 32]
    assert cap_of("3", 64) == 3


def test_fairness_unset_setting_is_automatic(make_settings: Callable[..., Settings]) -> None:
    assert make_settings().tenant_max_running is None
    assert make_settings(tenant_max_running="auto").tenant_max_running is None
    assert make_settings(tenant_max_running="").tenant_max_running is None  # compose's empty
    assert make_settings(tenant_max_running="0").tenant_max_running == 0
    with pytest.raises(ValueError, match="tenant_max_running"):
        make_settings(tenant_max_running="half")


def test_fairness_by_default_two_tenants_share_the_live_threads(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()  # ANTWORT_TENANT_MAX_RUNNING unset
    store.heartbeat_worker("inference", "inference@one", threads=4)  # auto: 2 per tenant
    dispatcher = RecordingDispatcher()
    flood = [submit(store, dispatcher, settings, A, tenants=2) for _ in range(5)]
    theirs = submit(store, dispatcher, settings, B, tenants=2)

    assert queued(dispatcher) == [*flood[:2], theirs]
    parked = store.redis.zrange(store.keys.tenant_parked("team-a"), 0, -1)
    assert [raw.decode() for raw in parked] == flood[2:]

    # a worker knows no keys and may have any setting: it starts them with the gateways' cap
    end(store, flood[0])
    worker = FairShare(store, make_settings(tenant_max_running=0))
    assert worker.release_owner_of(dispatcher, flood[0]) == [flood[2]]
    assert worker.release_owner_of(dispatcher, flood[1]) == []  # flood[1] still runs


def test_fairness_by_default_one_tenant_is_never_capped(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    store.heartbeat_worker("inference", "inference@one", threads=2)
    dispatcher = RecordingDispatcher()
    ids = [submit(store, dispatcher, make_settings(), A, tenants=1) for _ in range(6)]

    assert queued(dispatcher) == ids
    assert not store.redis.exists(store.keys.fair_share_cap_of(""))
    assert FairShare(store, make_settings()).release_owner_of(dispatcher, ids[0]) == []


def test_fairness_the_cap_follows_the_live_threads(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    dispatcher = RecordingDispatcher()
    # no worker yet: one each
    first, second = (submit(store, dispatcher, settings, A, tenants=2) for _ in range(2))
    assert queued(dispatcher) == [first]

    store.heartbeat_worker("inference", "inference@one", threads=8)  # a worker came: 4 each
    sweeper = Sweeper(store, dispatcher, lease_seconds=3.0, fair=FairShare(store, settings))
    sweeper.tick()

    assert queued(dispatcher) == [first, second]


class WaitingGateway:
    """A count request on a gateway: the job started, its answer waited for on a thread."""

    def __init__(
        self,
        store: ResponseStore,
        settings: Settings,
        dispatcher: RecordingDispatcher,
        tenant: Tenant,
    ):
        self.queue = RecordingJobQueue()
        caller = Caller(tenant, RateLimiter(store), tenants=lambda: 2)
        body = {"model": "m", "input": "hi"}
        self.job_id = start_count(store, self.queue, settings, body, caller=caller)
        self.answer: dict[str, Any] = {}
        self.thread = threading.Thread(
            target=self._wait, args=(store, settings, dispatcher, caller), daemon=True
        )
        self.thread.start()

    def _wait(
        self,
        store: ResponseStore,
        settings: Settings,
        dispatcher: RecordingDispatcher,
        caller: Caller,
    ) -> None:
        self.answer = wait_for_answer(
            store,
            self.queue,
            settings,
            "input_tokens",
            self.job_id,
            caller=caller,
            dispatcher=dispatcher,
        )

    def queued_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while not self.queue.jobs and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.queue.jobs == [self.job_id]

    def answered(self, store: ResponseStore, settings: Settings) -> dict[str, Any]:
        """A worker counts the job; the gateway's answer."""
        server = FakeModel(
            TextDelta(text="A"),
            Finish(reason="length"),
            UsageReport(usage=Usage(input_tokens=5, output_tokens=1, total_tokens=6)),
        )
        run_count(RunDeps(store=store, provider=server, settings=settings), self.job_id)
        self.thread.join(timeout=30)
        return self.answer


def test_fairness_a_job_takes_one_of_its_tenants_places_or_waits_parked_for_one(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """A count or a compaction is a model call on the fleet: a tenant's flood of them waits in
    Redis behind its cap, as its responses do, not in the shared queue before everyone's."""
    settings = make_settings(tenant_max_running=2)
    dispatcher = RecordingDispatcher()
    flood = [submit(store, dispatcher, settings, A) for _ in range(2)]

    job = WaitingGateway(store, settings, dispatcher, A)
    theirs = submit(store, dispatcher, settings, B)
    after_job = submit(store, dispatcher, settings, A)

    assert not job.queued_within(0.3)  # parked: A has two responses on the fleet
    assert queued(dispatcher) == [*flood, theirs]
    end(store, flood[0])
    assert FairShare(store, settings).release_owner_of(dispatcher, flood[0]) == [
        f"job:input_tokens:{job.job_id}"
    ]
    assert job.queued_within(30)  # its gateway queues it: in arrival order, before after_job
    assert queued(dispatcher) == [*flood, theirs]
    assert job.answered(store, settings) == {"object": "response.input_tokens", "input_tokens": 5}
    assert queued(dispatcher) == [*flood, theirs, after_job]  # the job's place went on
    assert store.redis.zcard(store.keys.tenant_jobs("team-a")) == 0


def test_fairness_a_job_with_a_place_holds_it_until_answered(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(tenant_max_running=1, lease_seconds=1.2)
    dispatcher = RecordingDispatcher()
    job = WaitingGateway(store, settings, dispatcher, A)
    assert job.queued_within(30)
    jobs, member = store.keys.tenant_jobs("team-a"), f"job:input_tokens:{job.job_id}"
    first_until = store.redis.zscore(jobs, member)

    parked = submit(store, dispatcher, settings, A)

    assert queued(dispatcher) == []
    deadline = time.monotonic() + 30
    while store.redis.zscore(jobs, member) == first_until:  # its gateway renews the place
        assert time.monotonic() < deadline
        time.sleep(0.05)
    job.answered(store, settings)
    assert queued(dispatcher) == [parked]


def test_fairness_a_jobs_place_lapses_when_its_gateway_stops_renewing_it(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(tenant_max_running=1)
    dispatcher = RecordingDispatcher()
    fair = FairShare(store, settings, tenants=2)
    assert fair.submit_job("team-a", "compaction", "resp_gone")  # its gateway then died
    assert submit(store, dispatcher, settings, A, tenants=2) not in queued(dispatcher)

    jobs = store.keys.tenant_jobs("team-a")
    store.redis.zadd(jobs, {"job:compaction:resp_gone": (time.time() - 1) * 1000})
    fair.release(dispatcher, "team-a")

    assert len(queued(dispatcher)) == 1
    assert store.redis.zcard(jobs) == 0


def test_fairness_a_parked_job_an_older_fleet_dropped_is_queued_by_its_gateway(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """In a rolling upgrade, an older process that releases the tenant's parked work pops a
    parked job as if it were a response, finds no record and drops it: its gateway, which
    would wait for a hand-over that never comes, queues it at its next look."""
    settings = make_settings(tenant_max_running=1, lease_seconds=1.2)
    dispatcher = RecordingDispatcher()
    submit(store, dispatcher, settings, A, tenants=2)  # A's one place
    job = WaitingGateway(store, settings, dispatcher, A)
    assert not job.queued_within(0.3)

    store.redis.zrem(store.keys.tenant_parked("team-a"), f"job:input_tokens:{job.job_id}")

    assert job.queued_within(30)
    assert job.answered(store, settings) == {"object": "response.input_tokens", "input_tokens": 5}
