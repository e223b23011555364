"""The fleet's kombu transport: unacked records written beside the task, against real Redis."""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu import Connection, Consumer, Producer, Queue
from kombu.message import Message

from workers import kombu_redis

QUEUE = "tools.internal"


@pytest.fixture
def connection(redis_url: str, key_prefix: str) -> Iterator[Connection]:
    """A kombu connection over the fleet's transport, under the test's key prefix."""
    conn = Connection(
        redis_url,
        transport="workers.kombu_redis:Transport",
        transport_options={"global_keyprefix": f"{key_prefix}celery:", "visibility_timeout": 60},
    )
    try:
        yield conn
    finally:
        conn.release()


def _publish(conn: Connection, body: str) -> None:
    with conn.channel() as channel:
        Producer(channel).publish(body, routing_key=QUEUE, exchange="", serializer="json")


def _receive(conn: Connection, channel: Any) -> Message:
    """One message from ``QUEUE``, not acked."""
    got: list[Message] = []
    consumer = Consumer(channel, [Queue(QUEUE, routing_key=QUEUE)], accept=["json"])
    consumer.register_callback(lambda _body, message: got.append(message))
    consumer.qos(prefetch_count=1)
    with consumer:
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                conn.drain_events(timeout=1)
    assert got, "no message arrived"
    return got[0]


def _records(client: redis.Redis, key_prefix: str) -> tuple[dict[bytes, bytes], int]:
    """The unacked hash and the size of its index."""
    unacked = client.hgetall(f"{key_prefix}celery:unacked")
    return unacked, int(client.zcard(f"{key_prefix}celery:unacked_index"))


def test_a_delivered_message_is_recorded_as_unacked_until_its_ack(
    connection: Connection, redis_client: redis.Redis, key_prefix: str
) -> None:
    _publish(connection, "hello")
    channel = connection.channel()
    message = _receive(connection, channel)
    channel.qos._records.wait(message.delivery_tag)

    unacked, indexed = _records(redis_client, key_prefix)
    assert list(unacked) == [message.delivery_tag.encode()] and indexed == 1
    raw, exchange, routing_key = json.loads(unacked[message.delivery_tag.encode()])
    assert (exchange, routing_key) == ("", QUEUE)  # kombu's own record layout
    assert base64.b64decode(raw["body"]) == b'"hello"'

    message.ack()
    assert _records(redis_client, key_prefix) == ({}, 0)
    channel.close()


class _SlowWriter(kombu_redis._RecordWriter):
    """Writes each batch of records only after a pause."""

    def _write(self, batch: list[tuple[str, float, str, threading.Event]]) -> None:
        time.sleep(0.3)
        super()._write(batch)


def _received_slowly_recorded(conn: Connection, body: str) -> tuple[Any, Message]:
    """A channel and ``body`` received on it, its unacked record not yet written."""
    _publish(conn, body)
    channel = conn.channel()
    channel.qos._records = _SlowWriter(channel.qos)
    return channel, _receive(conn, channel)


def test_an_ack_waits_for_the_record_it_removes(
    connection: Connection, redis_client: redis.Redis, key_prefix: str
) -> None:
    channel, message = _received_slowly_recorded(connection, "quick")

    message.ack()  # before the writer has written the record

    time.sleep(0.5)  # had the ack not waited, the record would land after it
    assert _records(redis_client, key_prefix) == ({}, 0)
    channel.close()


def test_unacked_messages_go_back_to_the_queue_at_shutdown_once_recorded(
    connection: Connection, redis_client: redis.Redis, key_prefix: str
) -> None:
    channel, _ = _received_slowly_recorded(connection, "unfinished")

    channel.close()  # restores unacked messages, waiting for their records

    assert redis_client.llen(f"{key_prefix}celery:{QUEUE}") == 1
    assert _records(redis_client, key_prefix) == ({}, 0)


def test_records_waiting_together_are_written_in_one_batch(
    connection: Connection, redis_client: redis.Redis, key_prefix: str
) -> None:
    batches: list[int] = []

    class CountingWriter(kombu_redis._RecordWriter):
        def _write(self, batch: list[tuple[str, float, str, threading.Event]]) -> None:
            batches.append(len(batch))
            time.sleep(0.2)  # the next records queue up meanwhile
            super()._write(batch)

    channel = connection.channel()
    writer = CountingWriter(channel.qos)
    for tag in ("a", "b", "c"):
        writer.put(tag, f'["{tag}"]')
    writer.wait_all()

    assert sum(batches) == 3 and len(batches) <= 2
    unacked, indexed = _records(redis_client, key_prefix)
    assert set(unacked) == {b"a", b"b", b"c"} and indexed == 3
    channel.close()
