"""kombu's Redis transport, tuned for the fleet.

Two changes: a shared client per channel, and the unacked record written beside the task rather
than before it.

kombu builds a new ``redis.Redis`` for every publish, ack and queue operation
(``Channel.conn_or_acquire``); redis-py 8's client constructor is costly enough that this shows
as several percent of a worker's and the gateway's CPU. A client only borrows a connection from
the channel's pool per command, so one per channel is safe across threads. It is rebuilt when
kombu replaces the channel's pool (after a connection error).

kombu pops a message with BRPOP and then records it as unacked (the hash and index that
``restore_visible`` redelivers from after the visibility timeout) in a round trip of its own,
before the task is handed to the pool. On a lightly loaded machine that round trip costs about
half a millisecond of every task's start (the Redis process has to be woken up). :class:`QoS`
hands the record to a writer thread instead, so the task starts while it is being written. It
protects a message exactly as well: the message has left the list at BRPOP either way, and a
worker that dies before the record reaches Redis loses it in both cases. What must not happen
is an ack (or a reject) reaching Redis before the record it removes, which would leave a stale
record to be redelivered; an ack therefore waits for its record first, as does the restore of
unacked messages at shutdown. The writer batches whatever records are waiting into one pipeline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.json import dumps

logger = logging.getLogger(__name__)

RECORD_WAIT_SECONDS = 10.0
"""How long an ack waits for its unacked record to be written before going ahead anyway."""


class _RecordWriter:
    """One daemon thread writing unacked records, whatever is waiting in one pipeline."""

    def __init__(self, qos: QoS):
        self._qos = qos
        self._waiting: list[tuple[str, float, str, threading.Event]] = []
        self._pending: dict[str, threading.Event] = {}
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None

    def put(self, tag: str, raw: str) -> None:
        """Queue the record of ``tag`` (its JSON as kombu stores it)."""
        written = threading.Event()
        with self._lock:
            self._pending[tag] = written
            self._waiting.append((tag, time.time(), raw, written))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kombu-unacked", daemon=True)
                self._thread.start()
            self._lock.notify()

    def wait(self, tag: str, timeout: float = RECORD_WAIT_SECONDS) -> None:
        """Return once the record of ``tag`` is in Redis (or its write failed)."""
        with self._lock:
            written = self._pending.get(tag)
        if written is not None and not written.wait(timeout):
            logger.warning("unacked record of %s not written after %g s", tag, timeout)

    def wait_all(self, timeout: float = RECORD_WAIT_SECONDS) -> None:
        """Return once every queued record is written."""
        with self._lock:
            pending = list(self._pending.values())
        deadline = time.monotonic() + timeout
        for written in pending:
            written.wait(max(0.0, deadline - time.monotonic()))

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._waiting:
                    self._lock.wait()
                batch, self._waiting = self._waiting, []
            try:
                self._write(batch)
            except Exception:  # the messages stay delivered; only their redelivery is at risk
                logger.exception("writing %d unacked record(s) failed", len(batch))
            with self._lock:
                for tag, _, _, written in batch:
                    written.set()
                    if self._pending.get(tag) is written:
                        del self._pending[tag]

    def _write(self, batch: list[tuple[str, float, str, threading.Event]]) -> None:
        qos = self._qos
        with qos.channel.conn_or_acquire() as client:  # type: ignore[attr-defined]
            pipe = client.pipeline()
            pipe.zadd(qos.unacked_index_key, {tag: at for tag, at, _, _ in batch})
            pipe.hset(qos.unacked_key, mapping={tag: raw for tag, _, raw, _ in batch})
            pipe.execute()


class QoS(kombu_redis.QoS):
    """kombu's ack emulation, with the unacked record written off the task's path."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._records = _RecordWriter(self)

    def append(self, message: Any, delivery_tag: str) -> None:
        """Hold the message as delivered now; its Redis record follows on the writer thread."""
        delivery = message.delivery_info
        raw = dumps([message._raw, delivery["exchange"], delivery["routing_key"]])
        self._records.put(delivery_tag, raw)
        virtual.QoS.append(self, message, delivery_tag)  # the in-memory part only

    def ack(self, delivery_tag: str) -> None:
        """Remove the record, once it is there."""
        self._records.wait(delivery_tag)
        super().ack(delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        """Remove (or requeue from) the record, once it is there."""
        self._records.wait(delivery_tag)
        super().reject(delivery_tag, requeue=requeue)

    def restore_unacked(self, client: Any = None) -> None:
        """Put unacked messages back (at shutdown) from records that are all written."""
        self._records.wait_all()
        super().restore_unacked(client)


class Channel(kombu_redis.Channel):
    """A channel that keeps its client and writes unacked records beside the tasks."""

    QoS = QoS
    _shared_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        """The given client, else the channel's own (built once per pool)."""
        if client:
            yield client
            return
        shared = self._shared_client
        if shared is None or shared.connection_pool is not self.pool:
            shared = self._shared_client = self._create_client()  # type: ignore[attr-defined]
        yield shared


class Transport(kombu_redis.Transport):
    """``redis://`` with :class:`Channel`."""

    Channel = Channel
