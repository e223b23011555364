"""A Redis that refuses writes for now (``app.refusals``) under the engine.

A private ``redis-server`` is made to refuse writes; the machine's shared Redis is never touched.
"""

import json
import logging
from collections.abc import Iterator

import pytest
import redis

from app.jobs import held_job
from app.keys import Keys
from app.lease import LeaseKeeper, Sweeper
from app.run import fail_response
from app.store import ResponseStore
from app.store.status import ResponseStatus
from tests.support.dispatch import RecordingDispatcher
from tests.support.private_redis import PrivateRedis
from tests.support.responses import stored_response
from tests.support.sentinel import wait_for


@pytest.fixture
def store(private_redis: PrivateRedis) -> Iterator[ResponseStore]:
    client = redis.Redis.from_url(private_redis.url)
    yield ResponseStore(client, keys=Keys("t:"), ttl_seconds=3600, stream_maxlen=1000)
    client.close()


def test_a_response_is_failed_when_redis_refuses_its_failure_count(
    private_redis: PrivateRedis, store: ResponseStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The failure's script gets through (Redis lets a script finish once it has written);
    the count kept for ``antwort status`` is refused (a plain ``LPUSH``). Failing the response
    still succeeds: the worker then gives the tenant's fair-share place to its next response.

    ``fail_response`` raised ``OutOfMemoryError`` from the count, after the response had failed,
    and the worker's task ended there, before it gave that place on.
    """
    rid = stored_response(store).id
    private_redis.refuse_writes()

    assert fail_response(store, rid, code="server_error", message="The turn failed.")

    stored = store.load(rid)
    assert stored is not None and stored.response.status is ResponseStatus.FAILED
    assert store.recent_failures() == []  # refused, and only that
    assert "not recorded: OutOfMemoryError: " in caplog.text
    assert "command not allowed when used memory" in caplog.text


@pytest.mark.parametrize("why", ["disk", "memory"])
def test_a_sweep_redis_refuses_is_logged_in_one_line_and_tried_again(
    private_redis: PrivateRedis, store: ResponseStore, caplog: pytest.LogCaptureFixture, why: str
) -> None:
    """Refused for its disk, Redis refuses even the sweeper's ``PING``; out of memory, its
    watch's writes. Either way one warning line a second, saying why, not a traceback: it was
    a 30-line traceback every second. The next sweep after Redis takes writes holds off a
    lease, as after an outage.
    """
    sweeper = Sweeper(store, RecordingDispatcher(), lease_seconds=3)
    stored_response(store, status=ResponseStatus.QUEUED)
    store.redis.zadd(store.keys.active, {"resp_watched": 0})  # a watch long due: a sweep writes
    private_redis.refuse_writes(why)

    assert sweeper.tick() == []

    [record] = [r for r in caplog.records if r.getMessage().startswith("sweep failed")]
    assert record.exc_info is None
    assert "Error: " in record.getMessage()
    private_redis.take_writes()
    assert sweeper.tick() == []
    assert "Redis is back" in caplog.text


def _logged(caplog: pytest.LogCaptureFixture, start: str) -> logging.LogRecord:
    wait_for(
        lambda: any(r.getMessage().startswith(start) for r in caplog.records),
        timeout=10,
        what=start,
    )
    return next(r for r in caplog.records if r.getMessage().startswith(start))


def test_a_renewal_redis_refuses_is_logged_saying_why(
    private_redis: PrivateRedis, store: ResponseStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused for its disk, Redis refuses a held lease's renewal: the warning says why, in
    one line. It said "could not renew 1 leases; trying again", and never why."""
    rid = stored_response(store).id
    keeper = LeaseKeeper(store, lease_seconds=0.3)
    assert keeper.acquire(rid, 0).taken
    private_redis.refuse_writes("disk")
    try:
        record = _logged(caplog, "could not renew 1 leases")
    finally:
        private_redis.take_writes()
        keeper.release(rid)

    assert "trying again: ResponseError: " in record.getMessage()
    assert "MISCONF " in record.getMessage()  # after the pipeline's preamble
    assert record.exc_info is None


def test_a_job_renewal_redis_refuses_is_logged_in_one_line(
    private_redis: PrivateRedis, store: ResponseStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A job's lease renewal that Redis refuses is one warning line saying why: it was a
    traceback, three times a lease, for as long as Redis refused."""
    store.redis.set(store.keys.job("input_tokens", "job-1"), json.dumps({"n": 1}))
    with held_job(store, "input_tokens", "job-1", lease_seconds=0.3) as job:
        assert job == {"n": 1}
        private_redis.refuse_writes("disk")
        try:
            record = _logged(caplog, "could not renew a job's lease")
        finally:
            private_redis.take_writes()

    assert "trying again: ResponseError: MISCONF " in record.getMessage()
    assert record.exc_info is None
