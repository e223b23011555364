"""The store's tests run twice: on one Redis, and on a Redis Cluster of three masters.

On the cluster the keys carry hash tags (``Keys(prefix, CLUSTER_SHARDS)``), so a script whose
keys are not in one slot fails there with ``CROSSSLOT``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from app.keys import CLUSTER_SHARDS, Keys
from app.store import ResponseStore
from tests.conftest import delete_prefix
from tests.support.cluster import LocalCluster


@pytest.fixture(params=["redis", "cluster"])
def store_redis(request: pytest.FixtureRequest) -> Iterator[tuple[redis.Redis, Keys]]:
    """The store's client and keyspace: one Redis's (the test's prefix), or a cluster's."""
    if request.param == "redis":
        client = redis.Redis.from_url(request.getfixturevalue("redis_url"))
        yield client, Keys(request.getfixturevalue("key_prefix"))
        client.close()
        return
    cluster: LocalCluster = request.getfixturevalue("redis_cluster")
    prefix = f"antwort-test-{uuid.uuid4().hex[:10]}:"
    client = cluster.client()
    yield client, Keys(prefix, CLUSTER_SHARDS)  # type: ignore[misc]
    delete_prefix(client, prefix)  # type: ignore[arg-type]
    client.close()


@pytest.fixture
def store(store_redis: tuple[redis.Redis, Keys]) -> ResponseStore:
    client, keys = store_redis
    return ResponseStore(client, keys=keys, ttl_seconds=3600, stream_maxlen=1000)


@pytest.fixture
def redis_client(store: ResponseStore) -> redis.Redis:
    """The store's own client (a cluster client on the cluster)."""
    return store.redis
