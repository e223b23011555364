"""Helpers of the store's tests: responses to store, events to emit, a subscription."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from app.protocol.events import Event
from app.protocol.response import ResponseObject
from app.store import ResponseStore
from app.store.events import split_sharded


def make_response(status: str = "queued", **fields: Any) -> ResponseObject:
    values: dict[str, Any] = {
        "id": f"resp_{uuid.uuid4().hex}",
        "created_at": int(time.time()),
        "status": status,
        "model": "test-model",
    }
    values.update(fields)
    return ResponseObject(**values)


def delta(text: str) -> Event:
    return {"type": "response.output_text.delta", "item_id": "msg_1", "delta": text}


def created(response: ResponseObject) -> Event:
    return {"type": "response.created", "response": response.wire()}


def new_response(store: ResponseStore, status: str = "in_progress", **fields: Any) -> str:
    response = make_response(status, **fields)
    store.create(response, inputs=[], extra={}, events=[])
    return response.id


@dataclass
class Subscription:
    """A subscription to one response's live events (its shard's channel on a cluster)."""

    pubsub: Any
    response_id: str
    is_sharded: bool


@contextlib.contextmanager
def published(
    store: ResponseStore, redis_client: redis.Redis, response: ResponseObject
) -> Iterator[Subscription]:
    """A subscription to the response's channel, after the response is created."""
    store.create(response, inputs=[], extra={}, events=[])
    pubsub = redis_client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    channel, _, _ = store.keys.channel(response.id).partition(" ")
    if store.keys.is_sharded:
        pubsub.ssubscribe(channel)
    else:
        pubsub.subscribe(channel)
    try:
        yield Subscription(pubsub, response.id, store.keys.is_sharded)
    finally:
        pubsub.close()


def next_message(subscription: Subscription) -> str:
    """The next payload published for the response (subscribe confirmations skipped)."""
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        if subscription.is_sharded:
            message = subscription.pubsub.get_sharded_message(
                ignore_subscribe_messages=True, timeout=0.5
            )
        else:
            message = subscription.pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
        if message is None:
            continue
        data = str(message["data"].decode())
        if not subscription.is_sharded:
            return data
        response_id, lines = split_sharded(data)
        if response_id == subscription.response_id:
            return lines
    raise AssertionError("no pub/sub message arrived")


def keys_like(client: redis.Redis, pattern: str) -> list[bytes]:
    """Every key matching ``pattern``: on a cluster, every master's (``KEYS`` asks one node)."""
    return list(client.scan_iter(match=pattern, count=1000))


def lazily_freed_since(client: redis.Redis, before: int, *, at_least: int) -> int:
    """How many values Redis freed outside its main thread since it counted ``before``: its
    background thread counts each when it is done, so this waits (5 s at most) for ``at_least``."""
    deadline = time.monotonic() + 5.0
    while (freed := lazily_freed(client) - before) < at_least and time.monotonic() < deadline:
        time.sleep(0.01)
    return freed


def lazily_freed(client: redis.Redis) -> int:
    """How many values Redis has freed outside its main thread (``UNLINK``), all its masters."""
    if isinstance(client, redis.RedisCluster):
        nodes = client.info("memory", target_nodes=redis.RedisCluster.ALL_NODES).values()
    else:
        nodes = [client.info("memory")]
    counts = [node.get("lazyfreed_objects") for node in nodes]
    if None in counts:
        pytest.skip("this Redis does not count the values it freed lazily")
    return sum(int(count) for count in counts)
