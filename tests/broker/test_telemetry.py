"""A task message's send and its start are timed on the fleet's clock (Redis's), so its queue
wait and its age in ``antwort status`` hold when the sender's host clock is off.

The sender's host is played by moving this process's ``time.time`` while it sends (as
``tests/app/test_clock.py`` does); the worker's host is right.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import redis
from celery import Celery
from prometheus_client import REGISTRY

from app.config import Settings
from app.store import ResponseStore
from broker import telemetry
from broker.celery_app import make_celery
from broker.fleet_status import fleet_status
from broker.publish import TaskPublisher
from broker.routing import INFERENCE_QUEUE, RUN_TURN
from broker.telemetry import SENT_AT
from workers.telemetry import TaskRecorder

BEHIND = 600.0
"""How far behind the sender's host clock is, in seconds."""


@pytest.fixture
def fleet_clock(store: ResponseStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stamps on the store's clock, as a gateway's and a worker's entry points set them."""
    monkeypatch.setattr(telemetry, "_clock", time.time)  # put back after the test
    telemetry.use_clock(store.now)


@pytest.fixture
def sender_behind(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[bool], None]]:
    """``sender_behind(True)``: this host's clock is :data:`BEHIND` behind until called False."""
    true_time = time.time

    def behind(on: bool) -> None:
        monkeypatch.setattr(time, "time", (lambda: true_time() - BEHIND) if on else true_time)

    yield behind


@pytest.mark.usefixtures("fleet_clock")
def test_a_messages_age_is_on_the_fleets_clock_whatever_the_senders(
    store: ResponseStore,
    redis_url: str,
    key_prefix: str,
    redis_client: redis.Redis,
    sender_behind: Callable[[bool], None],
) -> None:
    celery = make_celery(Settings(redis_url=redis_url, key_prefix=key_prefix))
    sender_behind(True)
    TaskPublisher(celery, redis_client).publish(
        RUN_TURN, ["resp_t", 0], task_id="t", queue=INFERENCE_QUEUE, ignore_result=True
    )
    sender_behind(False)

    [inference] = [q for q in fleet_status(store)["queues"] if q["name"] == INFERENCE_QUEUE]

    assert inference["oldest"]["age_seconds"] < 60  # not ten minutes


@pytest.mark.usefixtures("fleet_clock")
def test_a_tasks_queue_wait_is_on_the_fleets_clock_whatever_the_senders(
    sender_behind: Callable[[bool], None],
) -> None:
    headers: dict[str, object] = {}
    sender_behind(True)
    telemetry.stamp(headers)  # Celery's own sends (a chord's members, its callback)
    sender_behind(False)
    celery = Celery("queue-wait-test", set_as_current=False)

    @celery.task(name="antwort.test_wait", shared=False)
    def task() -> str:
        return "ok"

    labels = {"queue": "tools.internal"}
    count, total = "antwort_queue_wait_seconds_count", "antwort_queue_wait_seconds_sum"
    before = [REGISTRY.get_sample_value(name, labels) or 0.0 for name in (count, total)]
    # as a worker takes the message: protocol 2 headers are the request's attributes
    task.push_request(
        **{SENT_AT: headers[SENT_AT]},
        delivery_info={"routing_key": "tools.internal"},
        hostname="tools@host",
        id="t",
    )
    recorder = TaskRecorder()
    try:
        recorder.started(task=task, args=())
        recorder.ended(task=task, retval="ok", state="SUCCESS")
    finally:
        task.pop_request()

    after = [REGISTRY.get_sample_value(name, labels) or 0.0 for name in (count, total)]
    assert after[0] - before[0] == 1  # observed once
    assert 0.0 <= after[1] - before[1] < 60  # not ten minutes


def test_a_stamp_falls_back_to_the_hosts_clock_when_redis_cannot_say(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unreadable() -> float:
        raise redis.ConnectionError("Redis is away")

    monkeypatch.setattr(telemetry, "_clock", unreadable)
    headers: dict[str, object] = {}

    telemetry.stamp(headers)  # a stamp is for watching: it never fails a send

    assert abs(float(headers[SENT_AT]) - time.time()) < 5  # type: ignore[arg-type]
