"""A worker whose Redis refuses writes for memory (``maxmemory``, ``noeviction``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.private_redis import PrivateRedis


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


def test_a_worker_whose_consumer_redis_refuses_exits_non_zero(
    private_redis: PrivateRedis, start_worker: Callable[[], subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """Redis full as the worker starts: Celery's consumer cannot declare its queue (Redis
    refuses every command of a ``MULTI`` for memory) and the worker stops, "Unrecoverable
    error". It exits 1, so that a supervisor restarting failed processes brings it back.

    It exited 0.
    """
    private_redis.refuse_writes()

    worker = start_worker()

    assert worker.wait(60) == 1, (tmp_path / "worker.log").read_text()
    assert "Unrecoverable error" in (tmp_path / "worker.log").read_text()
