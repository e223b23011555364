"""A Redis restart under a busy worker: the worker stays up and the response in flight ends.

With kombu's ack emulation, celery 5.7 killed a worker that held an unacked message when its
broker connection dropped (issue 16 §1); the fleet runs without it (``broker.celery_app``).

On a Redis of its own (a private server with AOF on a free port, stopped and started again; never
the machine's shared one), so the restart touches no other test.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from app.config import Settings
from app.fleet import make_store
from app.protocol.response import TERMINAL_STATUSES, ResponseObject
from app.responses import create_response
from app.store import ResponseStore
from broker.celery_app import make_celery
from broker.dispatch import make_dispatcher
from programs.supervisor import embedded_redis_argv, free_port
from tests.support.celery_apps import close_celery


class _PrivateRedis:
    """A redis-server with an append-only file, which keeps its data across a restart."""

    def __init__(self, directory: Path):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        argv = embedded_redis_argv(self.port, str(directory))
        argv[argv.index("--appendonly") + 1] = "yes"
        self._argv = argv
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._proc = subprocess.Popen(
            self._argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        client = redis.Redis.from_url(self.url)
        try:
            _wait(lambda: _answers(client), "the private Redis to answer", timeout=30)
        finally:
            client.close()

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()  # SIGTERM: the AOF is flushed, as in a clean restart
            self._proc.wait(timeout=10)
            self._proc = None


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def _wait(predicate: Callable[[], bool], what: str, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[_PrivateRedis]:
    server = _PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _dumped(log: str) -> list[str]:
    """The files kombu's ``emergency_dump_state`` named in a worker's log."""
    return re.findall(r"EMERGENCY DUMP STATE TO FILE -> (\S+) <-", log)


def _text(response: ResponseObject) -> str:
    return "".join(
        part["text"]
        for item in response.output
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


def _event_count(store: ResponseStore, response_id: str) -> int:
    return len(store.events_after(response_id, -1, count=100_000))


def test_a_busy_worker_survives_a_redis_restart_and_finishes_its_response(
    private_redis: _PrivateRedis,
    sim_url: str,
    tmp_path: Path,
    process_environ: dict[str, str],
) -> None:
    dumps = tmp_path / "tmp"  # kombu's emergency dumps (see below), the test's to clean
    dumps.mkdir()
    settings = Settings(
        redis_url=private_redis.url,
        llm_base_url=sim_url,
        default_model="antwort-sim",
        llm_max_retries=0,
        lease_seconds=3,
    )
    env = {
        **process_environ,
        "ANTWORT_REDIS_URL": private_redis.url,
        "ANTWORT_LLM_BASE_URL": sim_url,
        "ANTWORT_DEFAULT_MODEL": "antwort-sim",
        "ANTWORT_LLM_MAX_RETRIES": "0",
        "ANTWORT_LEASE_SECONDS": "3",
        "ANTWORT_INFERENCE_CONCURRENCY": "4",
        "TMPDIR": str(dumps),
    }
    log = tmp_path / "worker.log"
    argv = [sys.executable, "-m", "workers.main", "--queues=inference", "--loglevel=WARNING"]
    with log.open("wb") as out:
        worker = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    store = make_store(settings)
    celery = make_celery(settings)
    dispatcher = make_dispatcher(celery, settings, store.redis)
    try:
        _wait(lambda: store.live_workers("inference") > 0, "the worker's heartbeat", timeout=60)
        body = {"input": "[tokens=200] [delay_ms=20] go", "background": True}
        response, _ = create_response(store, dispatcher, settings, body)
        # the worker is streaming the answer: a task in flight, its message unacked
        _wait(lambda: _event_count(store, response.id) > 10, "the answer to stream", timeout=30)

        private_redis.stop()
        time.sleep(2.0)  # an outage longer than redis-py's reconnection attempts ride out
        private_redis.start()

        def is_terminal_id(response_id: str) -> bool:
            try:
                stored = store.load(response_id)
            except redis.ConnectionError:
                return False
            return stored is not None and stored.response.status in TERMINAL_STATUSES

        def is_terminal() -> bool:
            return is_terminal_id(response.id)

        def has_died() -> bool:  # a worker that gave up may take a while to exit
            return worker.poll() is not None or "Unrecoverable error" in log.read_text()

        _wait(lambda: is_terminal() or has_died(), "the response", timeout=60)
        assert not has_died(), f"the worker gave up:\n{log.read_text()[-3000:]}"
        stored = store.load(response.id)
        assert stored is not None and stored.response.status == "completed"
        events = store.events_after(response.id, -1, count=100_000)
        assert [e.sequence_number for e in events] == list(range(len(events)))
        # the turn went on where it was: its text is an undisturbed run's, sent once
        undisturbed, _ = create_response(
            store, dispatcher, settings, {**body, "input": "[tokens=200] go"}
        )
        _wait(lambda: is_terminal_id(undisturbed.id), "the undisturbed run", timeout=30)
        again = store.load(undisturbed.id)
        assert again is not None
        assert _text(stored.response) == _text(again.response)
        deltas = "".join(
            json.loads(e.data)["delta"] for e in events if e.type == "response.output_text.delta"
        )
        assert deltas == _text(stored.response)
        assert worker.poll() is None, "the worker exited"
        # kombu could not give back a message it held while Redis was away: it pickles it to a
        # mkstemp() file, in $TMPDIR (no setting turns this off), here the test's own directory
        assert all(Path(path).parent == dumps for path in _dumped(log.read_text())), dumps
    finally:
        close_celery(celery)
        store.redis.close()
        worker.terminate()
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
