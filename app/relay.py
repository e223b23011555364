"""Relaying a response's events to clients: replay from the stream, then follow live.

Each gateway process holds one pub/sub connection (:class:`EventHub`, a pattern subscription made
once at start, so no subscription can race a replay) and fans events out to local listeners. On
a Redis Cluster it holds one per node instead, subscribed once at start to every shard's sharded
channel (``SSUBSCRIBE``; :mod:`app.keys`), each message naming its response on its first line.
:func:`follow_event_batches` replays the log after a cursor, then follows live; a gap in the live
sequence is filled from the log, so every event reaches the client exactly once and in order,
from any gateway replica. Written with ``threading``/``queue``: under gunicorn's gevent worker
both are patched into greenlet primitives, and the hub yields (``time.sleep(0)``) after every
:data:`DELIVERY_SLICE` inboxes it fills, so a burst of events does not hold up the process.

An outage of Redis: the hub reconnects (with backoff, for as long as it takes), subscribes again
and tells every listener to catch up from the stream, since what was published meanwhile never
reached it; the stream is the truth, so each follower goes on from its last sequence number
without a gap or a repeat. A follower whose reads of the stream fail (Redis away longer than the
store's clients wait, ``redis_outage_seconds``) ends its stream with an ``error`` event (code
``stream_interrupted``) saying where to resume (``starting_after``), never with a silent close.
"""

from __future__ import annotations

import json
import logging
import queue
import select
import threading
import time
from collections import defaultdict
from collections.abc import Generator, Iterator
from contextlib import closing
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from app.inbox import Inbox
from app.keys import Keys
from app.protocol.events import TERMINAL_EVENT_TYPES, error_event
from app.protocol.response import ACTIVE_STATUSES, ResponseStatus
from app.store import ResponseStore, StoredEvent
from app.store.events import PublishedLine, parse_published, split_sharded

logger = logging.getLogger(__name__)


class Keepalive:
    """Marker yielded by :func:`follow_event_batches` when nothing happened for a while."""


KEEPALIVE = Keepalive()

RESYNC = PublishedLine(sequence_number=-1, type="antwort.resync", data="")
"""Put in every inbox when the hub subscribed again: what was published meanwhile is lost."""

_QUIET = PublishedLine(sequence_number=-1, type="antwort.quiet", data="")
"""Stands for an inbox that stayed empty a keepalive long: the stream says what was missed."""

SHARDED_WAIT_SECONDS = 5.0
"""Longest wait of the hub on a cluster's connections before it looks whether it was stopped."""

RECONNECT_BACKOFF_CAP = 1.0
"""Longest wait, in seconds, between two attempts of the hub to subscribe again."""

KEEPALIVE_TICK_SECONDS = 0.25
"""How often the hub's ticker wakes the followers that waited a keepalive long for nothing."""

DRAIN_LIMIT = 1000
"""Messages the hub reads before it hands them on, at most (it takes what was read already)."""

DELIVERY_SLICE = 50
"""Inboxes the hub fills (or its ticker wakes) before it yields: no burst holds the process up.

Under gevent each filled inbox queues its follower's wake-up, and the loop runs queued
callbacks in order: a request arriving in a burst of 10,000 wake-ups (~100 µs each) would wait
behind all of them. Yielding after each slice puts the hub, and with it the rest of the burst,
behind whatever came in meanwhile; so a request waits one slice (~5 ms), not the burst.
"""


class EventHub:
    """One pub/sub connection per process, fanned out to per-response listener queues."""

    def __init__(self, client: redis.Redis, keys: Keys):
        self._client = client
        self._keys = keys
        self._filled = 0  # inboxes filled since the hub last yielded
        self._listeners: dict[str, set[Inbox]] = defaultdict(set)
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._ticker: threading.Thread | None = None

    def start(self) -> None:
        """Subscribe and start dispatching, and the keepalive ticker (idempotent)."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="event-hub", daemon=True)
            self._thread.start()
            self._ticker = threading.Thread(target=self._tick, name="event-hub-tick", daemon=True)
            self._ticker.start()
        self._ready.wait(timeout=5)

    def stop(self) -> None:
        """Stop dispatching, and the ticker within a tick (tests; processes just exit)."""
        self._stopped = True

    def listen(self, response_id: str, *, keepalive_seconds: float = 15.0) -> Inbox:
        """An inbox that receives the response's live events until :meth:`unlisten`."""
        self.start()
        inbox = Inbox(keepalive_seconds)
        with self._lock:
            self._listeners[response_id].add(inbox)
        return inbox

    def unlisten(self, response_id: str, inbox: Inbox) -> None:
        """Stop delivering to ``inbox``."""
        with self._lock:
            listeners = self._listeners.get(response_id)
            if listeners is not None:
                listeners.discard(inbox)
                if not listeners:
                    del self._listeners[response_id]

    def listening(self, response_id: str) -> int:
        """How many inboxes listen to the response now."""
        with self._lock:
            return len(self._listeners.get(response_id, ()))

    def _tick(self) -> None:
        """Wake the followers that waited a keepalive long, a slice at a time.

        One ticker for all, rather than a timer per wait: streams opened together go quiet
        together, and their wake-ups then queue behind other work like a burst's.
        """
        while not self._stopped:
            time.sleep(KEEPALIVE_TICK_SECONDS)
            with self._lock:
                inboxes = [inbox for listeners in self._listeners.values() for inbox in listeners]
            now = time.monotonic()
            woken = 0
            for inbox in inboxes:
                if inbox.wake_if_quiet(now):
                    woken += 1
                    if woken % DELIVERY_SLICE == 0:
                        time.sleep(0)

    def _run(self) -> None:
        backoff = 0.05
        while not self._stopped:
            try:
                self._listen_forever()
            except (redis.RedisError, RedisClusterException) as exc:  # the latter: no node answers
                logger.warning("event hub lost Redis (%s); reconnecting", exc)
                time.sleep(backoff)
                backoff = min(backoff * 2, RECONNECT_BACKOFF_CAP)
            else:
                backoff = 0.05

    def _listen_forever(self) -> None:
        if self._keys.is_sharded:
            self._listen_sharded()
            return
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        try:
            pubsub.psubscribe(self._keys.channel_pattern)
            if self._ready.is_set():
                self._resync()  # subscribed again: what was published meanwhile never came
            self._ready.set()
            while not self._stopped:
                # A blocking read (no poll before each message); stop() takes effect with the
                # next message, which on a busy fleet is never far off. Then every message read
                # already, so each follower is woken once with all its response's news.
                self._deliver(self._read_arrived(pubsub))
        finally:
            pubsub.close()

    def _read_arrived(self, pubsub: Any) -> dict[str, list[str]]:
        """The next message (waiting for it) and those read with it: payloads by response."""
        arrived: dict[str, list[str]] = defaultdict(list)
        message = pubsub.get_message(timeout=None)
        read = 0
        while message is not None:
            response_id = self._keys.response_id_of_channel(message["channel"].decode())
            arrived[response_id].append(message["data"].decode())
            read += 1
            message = pubsub.get_message(timeout=0.0) if read < DRAIN_LIMIT else None
        return arrived

    def _listen_sharded(self) -> None:
        """A cluster's events: every shard's channel, each on the node that holds its slot.

        One pub/sub connection per node, all read by this thread (a ``select`` over their
        sockets). A slot that moves to another node unsubscribes its channel there
        (``sunsubscribe``): the hub then subscribes again where the slots are now, and its
        followers catch up from the streams.
        """
        cluster: Any = self._client
        if self._ready.is_set():  # subscribing again: where do the slots live now?
            cluster.nodes_manager.initialize()
        by_node: dict[str, list[str]] = defaultdict(list)
        nodes: dict[str, Any] = {}
        for channel in self._keys.shard_channels:
            node = cluster.get_node_from_key(channel)
            by_node[node.name].append(channel)
            nodes[node.name] = node
        pubsubs: list[Any] = []
        try:
            for name, channels in by_node.items():
                pubsub = nodes[name].redis_connection.pubsub()
                for channel in channels:  # one command per channel: each is a slot of its own
                    pubsub.ssubscribe(channel)
                pubsubs.append(pubsub)
            if self._ready.is_set():
                self._resync()
            self._ready.set()
            while not self._stopped:
                arrived: dict[str, list[str]] = defaultdict(list)
                for pubsub in pubsubs:
                    for _ in range(DRAIN_LIMIT):
                        if (message := pubsub.get_message(timeout=0.0)) is None:
                            break
                        self._take_sharded(message, arrived)
                self._deliver(arrived)
                sockets = [pubsub.connection and pubsub.connection._sock for pubsub in pubsubs]
                if not all(sockets):
                    raise redis.ConnectionError("a node's pub/sub connection closed")
                select.select(sockets, [], [], SHARDED_WAIT_SECONDS)
        finally:
            for pubsub in pubsubs:
                pubsub.close()

    def _take_sharded(self, message: dict[str, Any], arrived: dict[str, list[str]]) -> None:
        kind = message["type"]
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "smessage":
            response_id, lines = split_sharded(message["data"].decode())
            arrived[response_id].append(lines)
        elif kind == "sunsubscribe":
            raise redis.ConnectionError("a shard's slot moved; subscribing again")

    def _resync(self) -> None:
        with self._lock:
            inboxes = [inbox for listeners in self._listeners.values() for inbox in listeners]
        logger.warning("event hub subscribed again; %d followers catch up", len(inboxes))
        self._fill(inboxes, [RESYNC])

    def _deliver(self, arrived: dict[str, list[str]]) -> None:
        """Each response's publishes read together, to each of its listeners in one put."""
        for response_id, payloads in arrived.items():
            with self._lock:
                listeners = list(self._listeners.get(response_id, ()))
            if listeners:  # a payload: the events of one flush, a line each
                self._fill(listeners, [line for p in payloads for line in parse_published(p)])

    def _fill(self, inboxes: list[Inbox], messages: list[PublishedLine]) -> None:
        """Put ``messages`` in every inbox, yielding after every slice of inboxes.

        The count runs on across publishes: a burst is as often many responses with a few
        followers each as one response with many. Each inbox still gets its messages in order
        (this thread alone fills them); one that starts listening while the hub yields misses
        this publish and, seeing a gap in the next, catches up from the stream.
        """
        for inbox in inboxes:
            inbox.put(messages)
            self._filled += 1
            if self._filled >= DELIVERY_SLICE:
                self._filled = 0
                time.sleep(0)  # under gevent: the woken followers, then I/O, then the rest


def follow_event_batches(
    store: ResponseStore,
    hub: EventHub,
    response_id: str,
    *,
    starting_after: int = -1,
    keepalive_seconds: float = 15.0,
) -> Generator[list[StoredEvent] | Keepalive, None, None]:
    """Every event after ``starting_after``, then live ones until the response ends, in batches.

    A batch is the replay, or every live event a follower found in its inbox when it woke (one
    publish often carries several, and an inbox may hold several publishes), so a relay can
    write each batch in one go. Never empty; each event in exactly one batch, in order.
    Should Redis stay away longer than the store's clients wait, the last batch is an ``error``
    event saying where to resume (:func:`resume_event`).
    """
    return _resumable(
        _replay_and_follow(
            store,
            hub,
            response_id,
            starting_after=starting_after,
            keepalive_seconds=keepalive_seconds,
        ),
        response_id,
        starting_after=starting_after,
    )


class CreatedRelay:
    """The relay of a response being created: it listens from before its first turn is queued.

    Given to :func:`app.responses.create_response` as ``on_stored``, it starts listening once
    the response is stored and before any run can publish, so :meth:`batches` hands over the
    events the create logged and then the live ones without reading the log or the status
    back: the round trip :func:`follow_event_batches` makes first, which a create does without.
    :meth:`close` stops listening whether or not the batches were read (the client left before
    the first byte, the create failed after storing, a background create nobody follows).
    """

    def __init__(self, store: ResponseStore, hub: EventHub):
        self._store = store
        self._hub = hub
        self._opened: tuple[str, Inbox, list[StoredEvent]] | None = None

    def __call__(self, response_id: str, events: list[StoredEvent]) -> None:
        """Listen to the stored response (``on_stored``); ``events``: what its create logged."""
        self._opened = (response_id, self._hub.listen(response_id), events)

    def batches(
        self, *, keepalive_seconds: float
    ) -> Generator[list[StoredEvent] | Keepalive, None, None]:
        """As :func:`follow_event_batches` from the start, for the response just created.

        Raises:
            RuntimeError: nothing was stored (the create did not get that far).
        """
        if self._opened is None:
            raise RuntimeError("no response was stored to relay")
        response_id, inbox, created = self._opened
        inbox.keepalive_seconds = keepalive_seconds  # before its first wait, which counts from it
        return _resumable(self._follow(response_id, inbox, created), response_id, starting_after=-1)

    def close(self) -> None:
        """Stop listening (idempotent)."""
        opened, self._opened = self._opened, None
        if opened is not None:
            self._hub.unlisten(opened[0], opened[1])

    def _follow(
        self, response_id: str, inbox: Inbox, created: list[StoredEvent]
    ) -> Iterator[list[StoredEvent] | Keepalive]:
        try:
            batch, is_end = _through_terminal(created)
            if batch:
                yield batch
            if is_end:
                return
            last = batch[-1].sequence_number if batch else -1
            # Stored as queued a moment ago, and listened to since: nothing can have ended it
            # unseen (its end message comes through the inbox like every other).
            yield from _follow_live(self._store, inbox, response_id, last, ResponseStatus.QUEUED)
        finally:
            self.close()


def _resumable(
    batches: Iterator[list[StoredEvent] | Keepalive], response_id: str, *, starting_after: int
) -> Generator[list[StoredEvent] | Keepalive, None, None]:
    """``batches``, ended by a :func:`resume_event` should Redis stay away too long."""
    last = starting_after
    try:
        for batch in batches:
            if not isinstance(batch, Keepalive):
                last = batch[-1].sequence_number
            yield batch
    except redis.RedisError as exc:
        logger.warning(
            "lost Redis while relaying %s (%s); told the client to resume", response_id, exc
        )
        yield [resume_event(last)]


def each_event(
    batches: Generator[list[StoredEvent] | Keepalive, None, None],
) -> Generator[StoredEvent | Keepalive, None, None]:
    """The events of :func:`follow_event_batches` one at a time, in order."""
    with closing(batches):  # closing this closes the relay (it unlistens) at once
        for batch in batches:
            if isinstance(batch, Keepalive):
                yield batch
            else:
                yield from batch


def resume_event(last: int) -> StoredEvent:
    """The ``error`` event that ends a relay cut off from Redis: resume after ``last``.

    Not an event of the response's log: its ``sequence_number`` is the last one relayed, which
    is where the client resumes (``starting_after``).
    """
    message = (
        "The event store is unreachable; resume the stream with "
        f"starting_after={last} (GET /v1/responses/{{id}}?stream=true&starting_after={last})."
    )
    data = {**error_event(code="stream_interrupted", message=message), "sequence_number": last}
    return StoredEvent(sequence_number=last, type="error", data=json.dumps(data))


def _replay_and_follow(
    store: ResponseStore,
    hub: EventHub,
    response_id: str,
    *,
    starting_after: int,
    keepalive_seconds: float,
) -> Iterator[list[StoredEvent] | Keepalive]:
    inbox = hub.listen(response_id, keepalive_seconds=keepalive_seconds)
    try:
        # The status comes with the replay: whether the response ended before the inbox
        # listened (its end message then never comes).
        replay, status = store.events_and_status(response_id, starting_after)
        batch, is_end = _through_terminal(replay)
        if batch:
            yield batch
        if is_end:
            return
        last = batch[-1].sequence_number if batch else starting_after
        yield from _follow_live(store, inbox, response_id, last, status)
    finally:
        hub.unlisten(response_id, inbox)


def _follow_live(
    store: ResponseStore,
    inbox: Inbox,
    response_id: str,
    last: int,
    status: str | None,
) -> Iterator[list[StoredEvent] | Keepalive]:
    while True:
        # Whether the response ended (its end message may never come): known at the start,
        # then read with the stream (one round trip), not for every message.
        if status not in ACTIVE_STATUSES:
            # Ended (or cancelled/deleted) while we replayed: drain what is left and stop.
            rest = store.events_after(response_id, last)
            if rest:
                yield rest
            return
        try:
            messages = inbox.take()
        except queue.Empty:
            yield KEEPALIVE
            messages = [_QUIET]
        events, status = _events_of(store, response_id, last, status, messages)
        batch, is_end = _through_terminal(events)
        if batch:
            yield batch
            last = batch[-1].sequence_number
        if is_end:
            return


def _events_of(
    store: ResponseStore,
    response_id: str,
    last: int,
    status: str | None,
    messages: list[PublishedLine],
) -> tuple[list[StoredEvent], str | None]:
    """The events after ``last`` that ``messages`` bring, in order, and the status known then.

    A message out of line (quiet, resubscribed, ended, or after a gap: pub/sub is best
    effort) is answered from the stream, the truth, and the stored status read right after it
    in the same round trip, as a cancelled response has no terminal event; with every message
    in line, ``status`` comes back as it was given. One already relayed is dropped. Nothing
    after a terminal event is read: the end line published with it would send every follower
    of the response to the stream for nothing. A message numbered -1 after the stream was read
    is dropped too: the script that stores an event publishes it, so a read made after the batch
    arrived holds what came before it (a message further on can still find a gap, where a read
    stopped at its count).
    """
    events: list[StoredEvent] = []
    read_stream = False
    for message in messages:  # RESYNC, _QUIET and the end line are numbered -1
        if message.sequence_number == last + 1:
            event = StoredEvent(
                sequence_number=message.sequence_number, type=message.type, data=message.data
            )
            events.append(event)
            if event.type in TERMINAL_EVENT_TYPES:
                break
        elif 0 <= message.sequence_number <= last or (message.sequence_number < 0 and read_stream):
            continue  # relayed already, or read from the stream with an earlier message
        else:
            read, status = store.events_and_status(response_id, last)
            events += read
            read_stream = True
        if events:
            last = events[-1].sequence_number
    return events, status


def _through_terminal(events: list[StoredEvent]) -> tuple[list[StoredEvent], bool]:
    """``events`` up to its terminal one, and whether there was one."""
    for index, event in enumerate(events):
        if event.type in TERMINAL_EVENT_TYPES:
            return events[: index + 1], True
    return events, False
