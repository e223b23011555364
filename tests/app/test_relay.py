import json
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest
import redis

from app.inbox import Inbox
from app.keys import Keys
from app.protocol.events import Event
from app.protocol.response import ResponseObject, ResponseStatus
from app.relay import (
    KEEPALIVE,
    RESYNC,
    EventHub,
    Keepalive,
    _events_of,
    each_event,
    follow_event_batches,
)
from app.store import ResponseStore, StoredEvent
from app.store.events import PublishedLine, publish
from app.store.status import CANCEL, FINISH
from tests.support.hub import stop_hub
from tests.support.responses import stored_response
from tests.support.round_trips import CountingConnection, counting_client

WAIT = 10.0


class _MutedKeys(Keys):
    """Keys whose pub/sub channel nobody listens to: emits reach the stream only."""

    __slots__ = ()

    def channel(self, response_id: str) -> str:
        return self.prefix + "muted:" + response_id


@pytest.fixture
def store(store_on_both: ResponseStore) -> ResponseStore:
    """One Redis's, then a cluster's (sharded pub/sub)."""
    return store_on_both


@pytest.fixture
def hub(store: ResponseStore) -> Iterator[EventHub]:
    event_hub = EventHub(store.redis, store.keys)
    event_hub.start()
    yield event_hub
    stop_hub(event_hub, store)


def delta(n: int) -> Event:
    return {"type": "response.output_text.delta", "item_id": "msg_1", "delta": str(n)}


def follow_events(
    store: ResponseStore, hub: EventHub, rid: str, **kwargs: Any
) -> Generator[StoredEvent | Keepalive, None, None]:
    """The relay's events one at a time (as the WebSocket and the sync create take them)."""
    return each_event(follow_event_batches(store, hub, rid, **kwargs))


def muted(store: ResponseStore) -> ResponseStore:
    """``store`` on the same keys, whose emits reach the stream but not pub/sub."""
    return ResponseStore(
        store.redis, keys=_MutedKeys(store.keys.prefix, store.keys.shards), ttl_seconds=60
    )


def new_response(store: ResponseStore) -> ResponseObject:
    return stored_response(store, background=True)


def complete(store: ResponseStore, response: ResponseObject) -> None:
    done = response.model_copy(update={"status": ResponseStatus.COMPLETED})
    event = {"type": "response.completed", "response": done.wire()}
    assert store.write(done, transition=FINISH, events=[event]).ok


class Follower:
    """Runs ``follow_events`` in a thread and records what it yields."""

    def __init__(self, store: ResponseStore, hub: EventHub, rid: str, **kwargs: Any):
        self.events: list[StoredEvent] = []
        self.keepalives = 0
        self.error: BaseException | None = None
        self._seen = threading.Condition()
        self._thread = threading.Thread(
            target=self._run, args=(store, hub, rid), kwargs=kwargs, daemon=True
        )
        self._thread.start()

    def _run(self, store: ResponseStore, hub: EventHub, rid: str, **kwargs: Any) -> None:
        try:
            for event in follow_events(store, hub, rid, **kwargs):
                with self._seen:
                    if isinstance(event, Keepalive):
                        self.keepalives += 1
                    else:
                        self.events.append(event)
                    self._seen.notify_all()
        except BaseException as exc:  # reported by the test thread
            self.error = exc

    def wait_for(self, sequence_number: int) -> None:
        with self._seen:
            assert self._seen.wait_for(
                lambda: any(e.sequence_number >= sequence_number for e in self.events), WAIT
            ), f"follower never saw sequence_number {sequence_number}"

    def finish(self) -> list[int]:
        self._thread.join(timeout=WAIT)
        assert not self._thread.is_alive(), "follower did not stop"
        assert self.error is None
        return [event.sequence_number for event in self.events]

    @property
    def is_running(self) -> bool:
        return self._thread.is_alive()


def test_the_hub_hands_a_listener_each_published_event_live_without_a_resync(
    store: ResponseStore, hub: EventHub
) -> None:
    response = new_response(store)
    inbox = hub.listen(response.id)
    try:
        for i in range(3):
            store.emit(response.id, [delta(i)])
        got: list[PublishedLine] = []
        while len(got) < 3:
            got += inbox.take()
    finally:
        hub.unlisten(response.id, inbox)

    assert [line.sequence_number for line in got] == [0, 1, 2]  # no RESYNC (-1) among them
    assert [json.loads(line.data)["delta"] for line in got] == ["0", "1", "2"]


def test_follow_events_replays_then_follows_live(store: ResponseStore, hub: EventHub) -> None:
    response = new_response(store)
    store.emit(response.id, [delta(i) for i in range(3)])

    follower = Follower(store, hub, response.id, keepalive_seconds=30)
    follower.wait_for(2)
    store.emit(response.id, [delta(i) for i in range(3, 6)])
    follower.wait_for(5)
    complete(store, response)

    assert follower.finish() == list(range(7))
    assert follower.events[-1].type == "response.completed"
    assert json.loads(follower.events[4].data)["delta"] == "4"


def test_follow_events_resumes_after_a_cursor_without_loss_or_duplicates(
    store: ResponseStore, hub: EventHub
) -> None:
    response = new_response(store)
    emitted = threading.Event()

    def emit_all() -> None:
        for i in range(200):
            store.emit(response.id, [delta(i)])
        complete(store, response)
        emitted.set()

    emitter = threading.Thread(target=emit_all, daemon=True)
    emitter.start()
    first: list[int] = []
    stream = follow_events(store, hub, response.id, keepalive_seconds=30)
    for event in stream:
        assert isinstance(event, StoredEvent)
        first.append(event.sequence_number)
        if event.sequence_number == 50:
            break
    stream.close()  # the client went away

    rest = [
        event.sequence_number
        for event in follow_events(store, hub, response.id, starting_after=50)
        if isinstance(event, StoredEvent)
    ]
    emitter.join(timeout=WAIT)

    assert emitted.is_set()
    assert first == list(range(51))
    assert rest == list(range(51, 201))


def test_follow_events_starting_after_replays_only_later_events(
    store: ResponseStore, hub: EventHub
) -> None:
    response = new_response(store)
    store.emit(response.id, [delta(i) for i in range(10)])
    complete(store, response)

    events = list(follow_events(store, hub, response.id, starting_after=4))

    assert [e.sequence_number for e in events if isinstance(e, StoredEvent)] == list(range(5, 11))


def test_follow_events_fills_a_gap_in_live_messages_from_the_stream(
    store: ResponseStore, hub: EventHub
) -> None:
    response = new_response(store)
    store.emit(response.id, [delta(0)])
    # A long keepalive: the only way to learn of the muted events is the gap.
    follower = Follower(store, hub, response.id, keepalive_seconds=60)
    follower.wait_for(0)

    muted(store).emit(response.id, [delta(i) for i in range(1, 5)])  # lost by pub/sub
    store.emit(response.id, [delta(5)])
    follower.wait_for(5)
    complete(store, response)

    assert follower.finish() == list(range(7))
    assert [json.loads(e.data).get("delta") for e in follower.events[:6]] == [
        str(i) for i in range(6)
    ]


def test_follow_events_ends_with_the_terminal_event(store: ResponseStore, hub: EventHub) -> None:
    response = new_response(store)
    follower = Follower(store, hub, response.id, keepalive_seconds=30)
    store.emit(response.id, [delta(0)])
    follower.wait_for(0)

    complete(store, response)

    assert follower.finish() == [0, 1]
    assert follower.events[-1].type == "response.completed"


def test_follow_events_of_a_finished_response_is_a_replay(
    store: ResponseStore, hub: EventHub
) -> None:
    response = new_response(store)
    store.emit(response.id, [delta(0)])
    complete(store, response)

    events = list(follow_events(store, hub, response.id, keepalive_seconds=30))

    assert [(e.sequence_number, e.type) for e in events if isinstance(e, StoredEvent)] == [
        (0, "response.output_text.delta"),
        (1, "response.completed"),
    ]
    assert not any(isinstance(e, Keepalive) for e in events)


def test_follow_events_ends_when_the_response_is_cancelled(
    store: ResponseStore, hub: EventHub
) -> None:
    response = new_response(store)
    store.emit(response.id, [delta(0), delta(1)])
    follower = Follower(store, hub, response.id, keepalive_seconds=30)
    follower.wait_for(1)
    assert follower.is_running

    cancelled = response.model_copy(update={"status": ResponseStatus.CANCELLED})
    assert store.write(cancelled, transition=CANCEL).ok

    assert follower.finish() == [0, 1]


def test_follow_events_ends_when_the_response_is_deleted(
    store: ResponseStore, hub: EventHub
) -> None:
    response = new_response(store)
    store.emit(response.id, [delta(0)])
    follower = Follower(store, hub, response.id, keepalive_seconds=30)
    follower.wait_for(0)

    store.delete(response.id)

    assert follower.finish() == [0]


def test_follow_events_yields_keepalives_when_idle(store: ResponseStore, hub: EventHub) -> None:
    response = new_response(store)
    store.emit(response.id, [delta(0)])
    stream = follow_events(store, hub, response.id, keepalive_seconds=0.05)
    started = time.monotonic()

    first = next(stream)
    second = next(stream)
    third = next(stream)
    store.emit(response.id, [delta(1)])
    later = [next(stream) for _ in range(3)]
    stream.close()

    assert isinstance(first, StoredEvent)
    assert second is KEEPALIVE
    assert third is KEEPALIVE
    assert time.monotonic() - started < 2
    assert [e.sequence_number for e in later if isinstance(e, StoredEvent)] == [1]


def test_follow_events_serves_concurrent_followers_every_event_once_in_order(
    store: ResponseStore, hub: EventHub
) -> None:
    response = new_response(store)
    total = 500
    early = [Follower(store, hub, response.id, keepalive_seconds=0.5) for _ in range(4)]

    def emit_all() -> None:
        for i in range(total):
            store.emit(response.id, [delta(i)])
        complete(store, response)

    emitter = threading.Thread(target=emit_all, daemon=True)
    emitter.start()
    early[0].wait_for(100)
    late = [Follower(store, hub, response.id, keepalive_seconds=0.5) for _ in range(2)]
    resumed = Follower(store, hub, response.id, starting_after=99, keepalive_seconds=0.5)
    emitter.join(timeout=WAIT)
    assert not emitter.is_alive()

    for follower in [*early, *late]:
        assert follower.finish() == list(range(total + 1))
        assert follower.events[-1].type == "response.completed"
    assert resumed.finish() == list(range(100, total + 1))


def test_the_hub_on_a_cluster_subscribes_again_when_its_nodes_drop_it(
    store: ResponseStore, hub: EventHub
) -> None:
    if not store.keys.is_sharded:
        pytest.skip("a cluster's hub (one Redis's: tests/app/test_outage.py)")
    response = new_response(store)
    follower = Follower(store, hub, response.id, keepalive_seconds=30)
    store.emit(response.id, [delta(0)])
    follower.wait_for(0)

    for node in store.redis.get_primaries():  # type: ignore[attr-defined]
        node.redis_connection.client_kill_filter(_type="pubsub")
    store.emit(response.id, [delta(1)])  # published while the hub is away: caught up
    follower.wait_for(1)
    store.emit(response.id, [delta(2)])  # live again
    follower.wait_for(2)
    complete(store, response)

    assert follower.finish() == [0, 1, 2, 3]


FOLLOWERS, RESPONSES = 4000, 40
"""The burst tests' gevent process: ~2 s of work in all once each follower is woken."""


def served_during_a_burst(
    redis_url: str, key_prefix: str, *, keepalive_seconds: float, burst: Callable[[], None]
) -> tuple[int | None, int]:
    """How many followers handled their wake-up between a connection's arrival, made while they
    did, and its answer (None: they were through before it came); and the fewest messages a
    follower found at its wake-up.

    The followers live in a gevent process as the gateway runs (``tests.support.burst``);
    ``burst`` wakes them all at once.
    """
    command = [sys.executable, "-m", "tests.support.burst", redis_url, key_prefix]
    command += [str(RESPONSES), str(FOLLOWERS // RESPONSES), "500", str(keepalive_seconds)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as program:
        assert program.stdout is not None
        try:
            _, port = program.stdout.readline().split()
            burst()
            assert program.stdout.readline() == "started\n"
            arrived = time.monotonic()
            with socket.create_connection(("127.0.0.1", int(port)), timeout=WAIT) as probe:
                probe.sendall(b"%r\n" % arrived)
                before, served = map(int, probe.makefile("rb").readline().split())
            done, fewest = program.stdout.readline().split()
            assert done == "done"
        finally:
            program.kill()
    if before == FOLLOWERS:
        return None, int(fewest)  # the followers were through before it came: it measured nothing
    return served - before, int(fewest)


def publishing(client: redis.Redis, key_prefix: str, rounds: int = 1) -> Callable[[], None]:
    """A burst: ``rounds`` publishes to every response, reaching the hub in one write.

    In a transaction: Redis runs the publishes at ``EXEC`` and writes them to the hub's connection
    together. A plain pipeline is sent in pieces of 6,000 bytes (redis-py's ``pack_commands``),
    and Redis publishes each piece as it reads it: a hub waiting on its socket then read 120
    publishes in two or three reads (3 bursts of 4 split so, seen with a reader thread), and a
    follower woke once for each.
    """

    def publish_to_all() -> None:
        with client.pipeline(transaction=True) as pipe:
            for n in range(rounds):
                for response in range(RESPONSES):
                    publish(pipe, Keys(key_prefix).channel(f"resp_{response}"), f"{n} delta {{}}")
            pipe.execute()

    return publish_to_all


def test_the_hub_lets_a_new_connection_in_while_it_delivers_a_burst(
    redis_url: str, key_prefix: str, redis_client: redis.Redis
) -> None:
    handled, _ = served_during_a_burst(
        redis_url, key_prefix, keepalive_seconds=60, burst=publishing(redis_client, key_prefix)
    )

    assert handled is not None, "the burst was over before the connection came"
    assert handled < FOLLOWERS / 10, handled  # within a slice or two, not all of it


def test_the_hub_lets_a_new_connection_in_while_followers_gone_quiet_together_wake(
    redis_url: str, key_prefix: str
) -> None:
    # Streams opened together go quiet together: their keepalives are a burst as well.
    handled, _ = served_during_a_burst(
        redis_url, key_prefix, keepalive_seconds=1.0, burst=lambda: None
    )

    assert handled is not None, "the burst was over before the connection came"
    assert handled < FOLLOWERS / 10, handled


def line(n: int) -> PublishedLine:
    return PublishedLine(sequence_number=n, type="response.output_text.delta", data=str(n))


def test_inbox_take_hands_every_waiting_message_at_once_in_order() -> None:
    inbox = Inbox(keepalive_seconds=60)
    inbox.put([line(0)])
    inbox.put([line(1), line(2)])

    first = inbox.take()

    assert first == [line(0), line(1), line(2)]


def test_inbox_take_reports_a_quiet_spell_once_the_ticker_sees_one() -> None:
    inbox = Inbox(keepalive_seconds=60)
    is_woken_early = inbox.wake_if_quiet(time.monotonic())
    is_woken = inbox.wake_if_quiet(time.monotonic() + 61)

    with pytest.raises(queue.Empty):
        inbox.take()
    inbox.put([line(0)])

    assert (is_woken_early, is_woken) == (False, True)
    assert inbox.take() == [line(0)]


def test_follow_event_batches_relays_what_waits_as_one_batch_each_event_once_in_order(
    store: ResponseStore, hub: EventHub
) -> None:
    response = new_response(store)
    store.emit(response.id, [delta(i) for i in range(2)])
    batches = follow_event_batches(store, hub, response.id, keepalive_seconds=60)

    replay = next(batches)
    store.emit(response.id, [delta(i) for i in range(2, 5)])  # one publish, three events
    live = next(batches)
    muted(store).emit(response.id, [delta(i) for i in range(5, 7)])  # lost by pub/sub
    store.emit(response.id, [delta(7), delta(8)])  # the gap shows: 5 and 6 from the stream
    after_gap = next(batches)
    complete(store, response)
    rest = list(batches)

    assert [_numbers(batch) for batch in (replay, live, after_gap, *rest)] == [
        [0, 1],
        [2, 3, 4],
        [5, 6, 7, 8],
        [9],
    ]


def _numbers(batch: list[StoredEvent] | Keepalive) -> list[int]:
    assert isinstance(batch, list), batch
    return [event.sequence_number for event in batch]


def test_the_hub_wakes_each_follower_once_with_the_publishes_read_together(
    redis_url: str, key_prefix: str, redis_client: redis.Redis
) -> None:
    # Three publishes to each of 40 responses in one write: read together, each follower
    # gets its three in one wake-up (one write), though the hub yields between slices.
    _, fewest = served_during_a_burst(
        redis_url,
        key_prefix,
        keepalive_seconds=60,
        burst=publishing(redis_client, key_prefix, rounds=3),
    )

    assert fewest == 3


@pytest.fixture
def counting_store(store: ResponseStore, redis_url: str) -> Iterator[ResponseStore]:
    """The test's store over a client that counts its round trips (one Redis's, not a cluster's)."""
    if store.keys.is_sharded:
        pytest.skip("one Redis's (the counting client is not a cluster's)")
    counting = counting_client(redis_url)
    yield ResponseStore(counting, keys=store.keys, ttl_seconds=60)
    counting.close()


def _counted_follower(
    store: ResponseStore, hub: EventHub, counting_store: ResponseStore, **kwargs: Any
) -> tuple[ResponseObject, Follower]:
    """A response with its first event, and a follower (reading through ``counting_store``)
    that has relayed it."""
    response = new_response(store)
    store.emit(response.id, [delta(0)])
    follower = Follower(counting_store, hub, response.id, **kwargs)
    follower.wait_for(0)
    return response, follower


def test_a_follower_reads_nothing_from_redis_for_live_events_and_the_end(
    store: ResponseStore, hub: EventHub, counting_store: ResponseStore
) -> None:
    """Past its first read, a follower takes everything from pub/sub, the end included.

    A terminal write publishes the terminal event and then the end line in one message; the end
    line, out of line, used to send every follower to the event stream for nothing once more
    (10,000 reads when 10,000 streams ended together).
    """
    response, follower = _counted_follower(store, hub, counting_store)
    first_read = CountingConnection.sent

    for n in range(1, 4):
        store.emit(response.id, [delta(n)])
    follower.wait_for(3)
    complete(store, response)

    assert follower.finish() == [0, 1, 2, 3, 4]
    assert CountingConnection.sent - first_read == 0


def test_a_quiet_follower_reads_the_stream_and_the_status_in_one_round_trip_a_keepalive(
    store: ResponseStore, hub: EventHub, counting_store: ResponseStore
) -> None:
    """A keepalive with nothing published looks at the stream and the status together.

    It took three: the stream, its first entry (a check for trimmed events that cannot fire
    when nothing was read), then the status; 10,000 idle streams made that 30,000 round trips
    a keepalive period.
    """
    response, follower = _counted_follower(store, hub, counting_store, keepalive_seconds=0.1)

    def keepalives() -> int:
        with follower._seen:
            return follower.keepalives

    deadline = time.monotonic() + WAIT
    while keepalives() < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    first, sent = keepalives(), CountingConnection.sent
    while keepalives() < first + 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    quiet, reads = keepalives() - first, CountingConnection.sent - sent
    complete(store, response)

    assert follower.finish() == [0, 1]
    assert quiet >= 5
    assert reads <= quiet + 1  # one a keepalive (the one under way when counted, at most)


def test_a_batch_with_several_messages_out_of_line_reads_the_stream_once(
    store: ResponseStore, counting_store: ResponseStore
) -> None:
    """One read after the batch arrived covers every message in it: each was published by the
    script that stored its event, so a second message out of line has nothing more to find."""
    response = new_response(store)
    store.emit(response.id, [delta(n) for n in range(4)])
    gap = PublishedLine(sequence_number=3, type="response.output_text.delta", data="{}")
    counting_store.events_and_status(response.id, 0)  # connected, the script loaded
    sent = CountingConnection.sent

    events, status = _events_of(counting_store, response.id, 0, None, [RESYNC, gap, RESYNC])

    assert [event.sequence_number for event in events] == [1, 2, 3]
    assert status == "in_progress"
    assert CountingConnection.sent - sent == 1
