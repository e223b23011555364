import time

import redis

from app.store import ResponseStore


def test_store_count_delivery_counts_per_task_with_ttl(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    counted = [store.count_delivery("itc_a", ttl_seconds=120) for _ in range(3)]

    assert counted == [1, 2, 3]
    assert store.count_delivery("itc_b", ttl_seconds=120) == 1
    assert 0 < redis_client.ttl(store.keys.deliveries("itc_a")) <= 120  # the job's, not 30 days


def test_store_live_workers_counts_recent_heartbeats_per_queue(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    store.heartbeat_worker("inference", "worker-a")
    store.heartbeat_worker("inference", "worker-b")
    store.heartbeat_worker("inference", "worker-a")
    store.heartbeat_worker("tools.mcp", "worker-c")
    redis_client.zadd(store.keys.workers("inference"), {"worker-old": time.time() - 120})

    assert store.live_workers("inference") == 2
    assert store.live_workers("inference", within_seconds=300) == 3
    assert store.live_workers("tools.mcp") == 1
    assert store.live_workers("tools.sandbox") == 0


def test_store_live_threads_adds_up_live_workers_threads(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    store.heartbeat_worker("inference", "worker-a", threads=16)
    store.heartbeat_worker("inference", "worker-b", threads=8)
    store.heartbeat_worker("inference", "worker-c")  # said none: counts one
    store.heartbeat_worker("inference", "worker-gone", threads=32)
    redis_client.zadd(store.keys.workers("inference"), {"worker-gone": time.time() - 120})

    assert store.live_threads("inference") == 25
    assert store.live_threads("tools.mcp") == 0
    assert store.forget_worker_threads(["inference", "tools.mcp"]) == 1
    assert store.live_threads("inference", within_seconds=300) == 25 + 1  # its count forgotten


def test_store_reads_the_queues_where_the_broker_keeps_them(
    store: ResponseStore, redis_url: str
) -> None:
    """With ``ANTWORT_BROKER_URL`` the queues are on another Redis than the store."""
    broker = redis.Redis.from_url(redis_url)
    split = ResponseStore(store.redis, keys=store.keys, ttl_seconds=60, queues=broker)
    queue = split.keys.queue("inference")
    broker.rpush(queue, "newest", "oldest")
    try:
        assert split.queue_depths(["inference", "tools.mcp"]) == {"inference": 2, "tools.mcp": 0}
        assert split.oldest_queued("inference") == "oldest"
    finally:
        broker.delete(queue)
        broker.close()
