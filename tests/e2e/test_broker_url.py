"""``ANTWORT_BROKER_URL``: Celery's broker and result backend on a Redis of their own.

The store stays on ``ANTWORT_REDIS_URL`` (the tests' Redis); the queues, and the chord of a turn
that calls two tools at once, go through a private ``redis-server`` on a free port.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.conftest import delete_prefix
from tests.e2e.conftest import Fleet
from tests.e2e.own_fleet import assert_a_chord_and_a_stream_complete, small_fleet
from tests.support.private_redis import PrivateRedis


@contextlib.contextmanager
def _split_fleet(
    redis_url: str, sim_url: str, tmp_path: Path, environ: dict[str, str]
) -> Iterator[tuple[Fleet, PrivateRedis]]:
    broker = PrivateRedis(tmp_path)
    broker.start()
    prefix = f"antwort-e2e-{uuid.uuid4().hex[:8]}:"
    try:
        with small_fleet(
            environ,
            tmp_path,
            sim_url,
            ANTWORT_REDIS_URL=redis_url,
            ANTWORT_BROKER_URL=broker.url,
            ANTWORT_KEY_PREFIX=prefix,
        ) as fleet:
            yield fleet, broker
    finally:
        broker.stop()
        store = redis.Redis.from_url(redis_url)
        delete_prefix(store, prefix)
        store.close()


@pytest.fixture
def split_fleet(
    redis_url: str, sim_url: str, tmp_path: Path, process_environ: dict[str, str]
) -> Iterator[tuple[Fleet, PrivateRedis]]:
    with _split_fleet(redis_url, sim_url, tmp_path, process_environ) as fleet_and_broker:
        yield fleet_and_broker


@pytest.mark.e2e
def test_the_broker_url_keeps_the_queues_off_the_store(
    split_fleet: tuple[Fleet, PrivateRedis], redis_url: str
) -> None:
    fleet, broker = split_fleet
    # the two calls run as a chord, through the broker's Redis
    response = assert_a_chord_and_a_stream_complete(fleet)
    prefix = fleet.env["ANTWORT_KEY_PREFIX"]
    with redis.Redis.from_url(broker.url) as queues, redis.Redis.from_url(redis_url) as store:
        assert queues.keys(f"{prefix}celery:*")
        assert not queues.keys(f"{prefix}r:*")
        assert store.exists(f"{prefix}r:{response['id']}")
        assert not store.keys(f"{prefix}celery:*")


@pytest.mark.e2e
def test_work_the_broker_cannot_take_is_a_503_to_retry_and_a_create_s_response_failed(
    redis_url: str, sim_url: str, tmp_path: Path, process_environ: dict[str, str]
) -> None:
    """The broker away (the store up) past the outage a send rides out: 503, not 500.

    Creates and compactions were a 500 ``server_error``: nothing told a client (or the SDKs'
    retry) that the same request will do once the broker is back. The response a create stored
    is failed, so that the client's retry is its only run; with the broker back, a create
    completes.
    """
    environ = {**process_environ, "ANTWORT_REDIS_OUTAGE_SECONDS": "1"}
    with _split_fleet(redis_url, sim_url, tmp_path, environ) as (fleet, broker):
        url = f"{fleet.base_url}/v1/responses"
        assert httpx.post(url, json={"input": "hi"}, timeout=60).json()["status"] == "completed"
        broker.stop()

        started = time.monotonic()
        for body in (
            {"input": "hi"},
            {"input": "hi", "stream": True},
            {"input": "hi", "background": True},
        ):
            answer = httpx.post(url, json=body, timeout=60)
            assert answer.status_code == 503, answer.text
            assert answer.headers["Retry-After"] == "1"
            assert answer.json() == {
                "error": {
                    "message": "The server cannot reach its task queue right now; please retry.",
                    "type": "server_error",
                    "param": None,
                    "code": "service_unavailable",
                }
            }
        compaction = httpx.post(
            f"{fleet.base_url}/v1/responses/compact",
            json={"model": "antwort-sim", "input": "hi"},
            timeout=60,
        )
        assert compaction.status_code == 503, compaction.text
        assert compaction.headers["Retry-After"] == "1"
        assert compaction.json()["error"]["code"] == "service_unavailable"
        assert time.monotonic() - started < 60  # each send gave up after its ride-out
        prefix = fleet.env["ANTWORT_KEY_PREFIX"]
        with redis.Redis.from_url(redis_url, decode_responses=True) as store:
            statuses = {
                store.hget(key, "status")
                for key in store.scan_iter(f"{prefix}r:resp_*")
                if store.type(key) == "hash"
            }
        assert statuses == {"completed", "failed"}  # the three refused: failed, none queued

        broker.start()
        answer = httpx.post(url, json={"input": "hi"}, timeout=60)
        assert answer.status_code == 200 and answer.json()["status"] == "completed", answer.text
