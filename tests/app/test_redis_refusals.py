"""A Redis at its ``maxmemory`` (``noeviction``) under the engine: failures still land.

A private ``redis-server`` is made to refuse writes; the machine's shared Redis is never touched.
"""

from collections.abc import Iterator

import pytest
import redis

from app.keys import Keys
from app.run import fail_response
from app.store import ResponseStore
from app.store.status import ResponseStatus
from tests.support.private_redis import PrivateRedis
from tests.support.responses import stored_response


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
