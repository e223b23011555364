"""The store's tests run twice: on one Redis, and on a Redis Cluster of three masters
(``store_on_both``, ``tests/conftest.py``)."""

from __future__ import annotations

import pytest
import redis

from app.store import ResponseStore


@pytest.fixture
def store(store_on_both: ResponseStore) -> ResponseStore:
    return store_on_both


@pytest.fixture
def redis_client(store: ResponseStore) -> redis.Redis:
    """The store's own client (a cluster client on the cluster)."""
    return store.redis
