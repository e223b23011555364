"""The jobs a gateway waits for (``app.jobs``): a job whose worker dies is queued again at once,
not after Celery's visibility timeout."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from prometheus_client import REGISTRY

from app.config import Settings
from app.errors import ServerError
from app.jobs import Watch, held_job, push_result, run_job, start_job, wait_for_result
from app.lease import QueuedWatch
from app.limits import Caller
from app.protocol.request import CreateResponseRequest
from app.relay import EventHub
from app.store import ResponseStore
from app.tenancy import OPEN_TENANT, Tenant
from tests.support.dispatch import RecordingJobQueue
from tests.support.hub import stop_hub

LEASE = 3.0
"""Seconds, the default; renewed every second, so that only a death lets it lapse."""


def started(store: ResponseStore, make_settings: Callable[..., Settings]) -> RecordingJobQueue:
    queue = RecordingJobQueue()
    start_job(
        store,
        queue,
        make_settings(),
        "input_tokens",
        "job-1",
        {"n": 1},
        caller=Caller(Tenant(name=OPEN_TENANT)),
        request=CreateResponseRequest(model="m", input="x"),
    )
    return queue


def answer_after(store: ResponseStore, seconds: float, **result: Any) -> threading.Thread:
    """A worker that holds the job ``seconds``, then answers ``result``."""

    def work(job: dict[str, Any]) -> dict[str, Any]:
        time.sleep(seconds)
        return result

    thread = threading.Thread(
        target=run_job, args=(store, "input_tokens", "job-1", work), kwargs={"lease_seconds": LEASE}
    )
    thread.start()
    return thread


def requeued_then_answered(
    store: ResponseStore, queue: RecordingJobQueue, tokens: int
) -> dict[str, Any]:
    """The gateway waits while the job is lost; it must queue it again once, and then get the
    answer of the delivery that follows."""
    waiting: dict[str, Any] = {}

    def gateway() -> None:
        waiting["result"] = wait_for_result(
            store,
            "input_tokens",
            "job-1",
            timeout_seconds=30,
            watch=Watch(queue=queue, every=LEASE),
        )

    thread = threading.Thread(target=gateway)
    thread.start()
    deadline = time.monotonic() + 3 * LEASE
    while len(queue.jobs) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert queue.jobs == ["job-1", "job-1"]  # queued again, once
    answer_after(store, 0, input_tokens=tokens).join()  # the next delivery, on a worker
    thread.join()
    assert queue.jobs == ["job-1", "job-1"]
    return dict(waiting["result"])


def test_a_job_held_longer_than_its_lease_is_not_queued_again(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    queue = started(store, make_settings)
    worker = answer_after(store, 1.5 * LEASE, input_tokens=7)

    result = wait_for_result(
        store, "input_tokens", "job-1", timeout_seconds=30, watch=Watch(queue=queue, every=LEASE)
    )

    worker.join()
    assert result == {"input_tokens": 7}
    assert queue.jobs == ["job-1"]  # the renewed lease kept the gateway from queueing it again
    assert not store.redis.exists(store.keys.job_lease("input_tokens", "job-1"))


def test_a_job_whose_worker_died_is_queued_again_once(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    queue = started(store, make_settings)
    dying = held_job(store, "input_tokens", "job-1", lease_seconds=LEASE)
    assert dying.__enter__() == {"n": 1}
    # the worker dies holding it: its renewal stops, its lease lapses, nothing is answered
    store.redis.delete(store.keys.job_lease("input_tokens", "job-1"))

    assert requeued_then_answered(store, queue, 9) == {"input_tokens": 9}


def test_a_second_delivery_while_the_first_holds_the_job_does_nothing(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    started(store, make_settings)
    with held_job(store, "input_tokens", "job-1", lease_seconds=LEASE) as first:
        assert first == {"n": 1}
        with held_job(store, "input_tokens", "job-1", lease_seconds=LEASE) as second:
            assert second is None


def test_a_job_not_started_within_its_grace_is_not_queued_again_and_times_out(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    queue = started(store, make_settings)

    with pytest.raises(ServerError, match="did not finish within 2s"):
        wait_for_result(
            store, "input_tokens", "job-1", timeout_seconds=2, watch=Watch(queue=queue, every=LEASE)
        )

    assert queue.jobs == ["job-1"]


def test_a_job_redis_lost_is_stored_and_queued_again(
    store: ResponseStore, make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = started(store, make_settings)
    job_key = store.keys.job("input_tokens", "job-1")
    read = store.redis.get

    def read_then_lose(key: str) -> Any:  # Redis restarts empty just after the gateway's read
        value = read(key)
        if key == job_key:
            monkeypatch.undo()
            store.redis.delete(job_key)
        return value

    monkeypatch.setattr(store.redis, "get", read_then_lose)

    assert requeued_then_answered(store, queue, 5) == {"input_tokens": 5}


def test_a_job_no_worker_started_is_queued_again_after_its_grace_then_twice_as_long(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """Its message was lost (a broker restarted empty, a failover): as a response's first
    turn, it is queued again after the grace, then twice as long, at most ``max_resends``."""
    queue = started(store, make_settings)
    unstarted = QueuedWatch(grace_seconds=0.3, max_resends=2)
    watch = Watch(queue=queue, every=0.1, unstarted=unstarted)

    labels = {"kind": "input_tokens", "reason": "not_started"}
    before = REGISTRY.get_sample_value("antwort_job_requeues_total", labels) or 0.0

    with pytest.raises(ServerError):
        wait_for_result(store, "input_tokens", "job-1", timeout_seconds=4, watch=watch)

    assert queue.jobs == ["job-1"] * 3  # queued, then at 0.3 s and 0.9 s; no more
    assert REGISTRY.get_sample_value("antwort_job_requeues_total", labels) == before + 2


def test_a_parked_job_is_queued_once_it_gets_its_place_and_not_before(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    queue = RecordingJobQueue()
    store.redis.set(store.keys.job("input_tokens", "job-1"), '{"n": 1}')
    unstarted = QueuedWatch(grace_seconds=0.1, max_resends=3)
    watch = Watch(queue=queue, every=0.1, unstarted=unstarted, queued=False)
    waiting: dict[str, Any] = {}

    def gateway() -> None:
        waiting["result"] = wait_for_result(
            store, "input_tokens", "job-1", timeout_seconds=10, watch=watch
        )

    thread = threading.Thread(target=gateway)
    thread.start()
    time.sleep(0.5)
    assert queue.jobs == []  # parked: never "not started in time"
    store.redis.rpush(store.keys.job_placed("input_tokens", "job-1"), 1)  # the fair share
    deadline = time.monotonic() + 30
    while not queue.jobs and time.monotonic() < deadline:
        time.sleep(0.01)
    answer_after(store, 0, input_tokens=2).join()
    thread.join(timeout=30)
    assert waiting["result"] == {"input_tokens": 2}
    assert queue.jobs[0] == "job-1"


def test_gateways_waiting_on_the_hub_hold_no_redis_connection(store: ResponseStore) -> None:
    """A flood of waiting counts must not take the gateway's Redis pool (200 connections by
    default) from its other requests: each waiter is woken by the hub's publish, not blocked
    in a ``BLPOP`` of its own. Twelve waiters here share a pool of four."""
    small = _with_a_pool_of_four(store)
    hub = EventHub(store.redis, store.keys)
    queue = RecordingJobQueue()
    ids = [f"job-{n}" for n in range(12)]
    for job_id in ids:
        store.redis.set(store.keys.job("input_tokens", job_id), '{"n": 1}')
    answers: dict[str, Any] = {}
    errors: list[BaseException] = []

    def gateway(job_id: str) -> None:
        watch = Watch(queue=queue, every=LEASE, hub=hub)
        try:
            answers[job_id] = wait_for_result(
                small, "input_tokens", job_id, timeout_seconds=30, watch=watch
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=gateway, args=(job_id,)) for job_id in ids]
    try:
        for thread in threads:
            thread.start()
        time.sleep(3.0)  # every waiter waiting, longer than the pool lets one wait for a connection
        for n, job_id in enumerate(ids):
            push_result(store, "input_tokens", job_id, {"input_tokens": n})
        for thread in threads:
            thread.join(timeout=30)
    finally:
        stop_hub(hub, store)
        small.redis.close()
        small.redis.connection_pool.disconnect()
    assert errors == []
    assert answers == {job_id: {"input_tokens": n} for n, job_id in enumerate(ids)}


def _with_a_pool_of_four(store: ResponseStore) -> ResponseStore:
    """The store on a client of its own whose pool has four connections (a wait of 2 s)."""
    options = store.redis.connection_pool.connection_kwargs
    pool = redis.BlockingConnectionPool(max_connections=4, timeout=2, **options)
    return ResponseStore(redis.Redis(connection_pool=pool), keys=store.keys, ttl_seconds=600)
