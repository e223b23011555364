"""A worker whose Redis refuses writes for now (``app.refusals``): it stays up, and carries on."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from app.config import Settings
from app.keys import Keys
from app.lease import LeaseKeeper
from app.responses import create_response
from app.run import RunDeps, StepOutcome
from app.store import ResponseStore
from broker.celery_app import make_celery
from broker.routing import RUN_TOOL_CALL
from tests.support.celery_apps import close_celery
from tests.support.dispatch import RecordingDispatcher
from tests.support.model import ScriptedModel, text
from tests.support.private_redis import PrivateRedis
from workers.tasks import _advance


@pytest.fixture
def start_worker(
    private_redis: PrivateRedis, tmp_path: Path
) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    """``start_worker()``: a ``tools.internal`` worker on the private Redis, logging to
    ``tmp_path / "worker.log"``; stopped after the test."""
    workers: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        env = {**os.environ, "ANTWORT_REDIS_URL": private_redis.url, "ANTWORT_KEY_PREFIX": "hb:"}
        argv = [sys.executable, "-m", "workers.main", "--queues=tools.internal", "--loglevel=INFO"]
        with (tmp_path / "worker.log").open("wb") as out:
            workers.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT))
        return workers[-1]

    yield start
    for worker in workers:
        worker.terminate()
        worker.wait(30)


def _wait_for(log: Path, text: str, *, count: int = 1, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while log.read_text().count(text) < count:
        assert time.monotonic() < deadline, f"no {text!r} in:\n{log.read_text()}"
        time.sleep(0.1)


def test_a_heartbeat_redis_refuses_is_logged_in_one_line(
    private_redis: PrivateRedis, start_worker: Callable[[], subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """A Redis out of memory (or away) refuses every beat; each is logged as one warning line,
    and the worker stays up for when Redis has room again.

    It was a warning with a 30-line traceback, every second, from every worker. (kombu's own
    warning about its bindings' expiry still comes with one, every second.)
    """
    worker = start_worker()
    log = tmp_path / "worker.log"
    _wait_for(log, " ready.")  # its consumer is up
    private_redis.refuse_writes()

    _wait_for(log, "worker heartbeat failed", count=3)

    failed = [line for line in log.read_text().splitlines() if "worker heartbeat failed" in line]
    assert all("OutOfMemoryError" in line for line in failed), failed
    assert "in _heartbeat" not in log.read_text()  # no traceback of the beat's
    assert worker.poll() is None


def _consumes(private_redis: PrivateRedis, log: Path) -> None:
    """The worker takes a task off its queue (whatever the task then finds)."""
    celery = make_celery(Settings(redis_url=private_redis.url, key_prefix="hb:"))
    try:
        celery.send_task(RUN_TOOL_CALL, args=["resp_none", "call_none"], queue="tools.internal")
        _wait_for(log, f"Task {RUN_TOOL_CALL}[")
    finally:
        close_celery(celery)


@pytest.mark.parametrize("why", ["disk", "replicas", "memory"])
def test_a_worker_rides_out_redis_refusing_writes(
    private_redis: PrivateRedis,
    start_worker: Callable[[], subprocess.Popen[bytes]],
    tmp_path: Path,
    why: str,
) -> None:
    """Redis refuses writes: the worker's consumer connects again and again (Celery's
    ``broker_channel_error_retry``) until Redis takes them, then consumes as before.

    Refused for its disk (``MISCONF``) or its replicas (``NOREPLICAS``), Redis refuses the
    consumer's ``BRPOP`` (a pop is a write): the worker stopped at once, "Unrecoverable error:
    ResponseError", so every idle worker of the fleet died within a second of Redis failing a
    snapshot. Out of memory it still pops, and the worker was unharmed.
    """
    worker = start_worker()
    log = tmp_path / "worker.log"
    _wait_for(log, " ready.")
    private_redis.refuse_writes(why)

    _wait_for(log, "worker heartbeat failed", count=3)  # three seconds of refusals
    assert worker.poll() is None, log.read_text()
    private_redis.take_writes()

    _consumes(private_redis, log)
    assert worker.poll() is None
    assert "Unrecoverable error" not in log.read_text()


def test_a_worker_started_while_redis_refuses_writes_starts_once_it_takes_them(
    private_redis: PrivateRedis,
    start_worker: Callable[[], subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    """Redis full as the worker starts: its consumer cannot declare its queue (Redis refuses
    every command inside a ``MULTI`` for memory, reads included), and tries again until it can.

    It stopped, "Unrecoverable error", and exited 0.
    """
    private_redis.refuse_writes()
    worker = start_worker()
    log = tmp_path / "worker.log"

    _wait_for(log, "worker heartbeat failed", count=3)
    assert worker.poll() is None, log.read_text()
    private_redis.take_writes()

    _consumes(private_redis, log)
    assert worker.poll() is None


def test_a_turn_redis_refuses_fails_its_response_saying_why(
    private_redis: PrivateRedis,
    make_settings: Callable[..., Settings],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Out of memory, Redis refuses the turn's writes; the response fails, and its error says
    why (the failure's own script gets through). It said only "The turn failed on the worker.",
    and the log had a traceback for what is no bug of ours.
    """
    client = redis.Redis.from_url(private_redis.url)
    store = ResponseStore(client, keys=Keys("t:"), ttl_seconds=3600, stream_maxlen=1000)
    settings = make_settings()
    fleet = RecordingDispatcher()
    response, _ = create_response(store, fleet, settings, {"input": "go"})
    deps = RunDeps(
        store=store,
        provider=ScriptedModel(text("done")),
        settings=settings,
        dispatcher=fleet,
        leases=LeaseKeeper(store, lease_seconds=30),
    )
    private_redis.refuse_writes()

    assert _advance(deps, response.id, 0) is StepOutcome.FAILED

    failed = store.get(response.id).response
    assert failed.status == "failed" and failed.error is not None
    assert failed.error.code == "server_error"
    assert failed.error.message == (
        "The turn failed on the worker: the server's store is out of memory."
    )
    [record] = [r for r in caplog.records if f"turn 0 of {response.id}" in r.getMessage()]
    assert record.exc_info is None
    assert "OutOfMemoryError: " in record.getMessage()
    client.close()
