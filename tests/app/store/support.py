"""Helpers of the store's tests: responses to store, events to emit, a subscription."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import redis

from app.protocol.events import Event
from app.protocol.response import ResponseObject
from app.store import ResponseStore


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


@contextlib.contextmanager
def published(
    store: ResponseStore, redis_client: redis.Redis, response: ResponseObject
) -> Iterator[redis.client.PubSub]:
    """A subscription to the response's channel, after the response is created."""
    store.create(response, inputs=[], extra={}, events=[])
    pubsub = redis_client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    pubsub.subscribe(store.keys.channel(response.id))
    try:
        yield pubsub
    finally:
        pubsub.close()


def next_message(pubsub: redis.client.PubSub) -> str:
    """The next published payload (subscribe confirmations skipped)."""
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
        if message is not None:
            return str(message["data"].decode())
    raise AssertionError("no pub/sub message arrived")
