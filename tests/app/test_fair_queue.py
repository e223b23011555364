"""The pools' queue: a connection given back goes to the longest waiter, not to a newcomer."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from app.config import Settings
from app.fair_queue import POOL_PATIENCE_SECONDS, FairLifoQueue, PoolQueue
from app.fleet import make_redis


class Waiters:
    """Threads that each wait on a queue for an item; what each got, by name."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.got: dict[str, object] = {}

    def start(self, q: FairLifoQueue, name: str) -> None:
        """One more waiter, in line behind those started before it."""
        before = q.waiting()
        thread = threading.Thread(target=lambda: self.got.setdefault(name, q.get(timeout=10)))
        thread.start()
        self.threads.append(thread)
        until(lambda: q.waiting() == before + 1)


@pytest.fixture
def waiters() -> Iterator[Waiters]:
    started = Waiters()
    yield started
    for thread in started.threads:
        thread.join(10)


def until(condition: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_items_come_back_last_in_first_out() -> None:
    q = FairLifoQueue(3)
    for item in ("a", "b", "c"):
        q.put_nowait(item)
    with pytest.raises(queue.Full):
        q.put_nowait("d")

    assert [q.get(timeout=1) for _ in range(3)] == ["c", "b", "a"]
    with pytest.raises(queue.Empty):
        q.get(block=False)


def test_an_item_given_back_goes_to_the_waiter_not_to_a_newcomer(waiters: Waiters) -> None:
    q = FairLifoQueue(1)
    waiters.start(q, "waiter")

    q.put_nowait("connection")
    with pytest.raises(queue.Empty):  # a LifoQueue gave it to this newcomer
        q.get(block=False)

    until(lambda: "waiter" in waiters.got)
    assert waiters.got == {"waiter": "connection"}


def test_waiters_are_served_in_the_order_they_came(waiters: Waiters) -> None:
    q = FairLifoQueue(3)
    for name in ("first", "second", "third"):
        waiters.start(q, name)

    for item in ("x", "y", "z"):
        q.put_nowait(item)

    until(lambda: len(waiters.got) == 3)
    assert waiters.got == {"first": "x", "second": "y", "third": "z"}
    assert q.qsize() == 0


def test_before_its_patience_a_waiter_may_be_passed_by_a_newcomer(waiters: Waiters) -> None:
    q = FairLifoQueue(2, patience=60)
    waiters.start(q, "waiter")

    q.put_nowait("first")
    assert q.get(block=False) == "first"  # the newcomer, as in redis-py's own queue
    q.put_nowait("second")

    until(lambda: "waiter" in waiters.got)
    assert waiters.got == {"waiter": "second"}


def test_no_newcomer_passes_a_waiter_that_waited_its_patience(waiters: Waiters) -> None:
    q = FairLifoQueue(1, patience=0.05)
    waiters.start(q, "waiter")
    time.sleep(0.1)

    q.put_nowait("connection")
    with pytest.raises(queue.Empty):
        q.get(block=False)

    until(lambda: "waiter" in waiters.got)
    assert waiters.got == {"waiter": "connection"}


def test_items_kept_for_waiters_before_their_patience_all_find_one(waiters: Waiters) -> None:
    q = FairLifoQueue(3, patience=60)
    for name in ("first", "second", "third"):
        waiters.start(q, name)

    for item in ("x", "y", "z"):
        q.put_nowait(item)

    until(lambda: len(waiters.got) == 3)
    assert sorted(map(str, waiters.got.values())) == ["x", "y", "z"]
    assert q.qsize() == 0
    assert q.waiting() == 0


def test_a_waiter_whose_time_ran_out_leaves_the_line() -> None:
    q = FairLifoQueue(1)

    with pytest.raises(queue.Empty):
        q.get(timeout=0.01)

    assert q.waiting() == 0
    q.put_nowait("kept")  # nobody waits: kept for the next get
    assert q.get(block=False) == "kept"


def test_the_fleets_pool_serves_its_waiters_in_order(
    make_settings: Callable[..., Settings],
) -> None:
    client = make_redis(make_settings(redis_max_connections=4))
    pool = client.connection_pool
    assert isinstance(pool, redis.BlockingConnectionPool)
    assert isinstance(pool.pool, PoolQueue)
    assert pool.pool.patience == POOL_PATIENCE_SECONDS
    held = [pool.get_connection() for _ in range(4)]
    served: list[str] = []

    def command(name: str) -> None:
        connection = pool.get_connection()
        served.append(name)
        pool.release(connection)

    threads = []
    for name in ("first", "second"):
        threads.append(threading.Thread(target=command, args=(name,)))
        threads[-1].start()
        until(lambda: pool.pool.waiting() == len(threads))

    pool.release(held.pop())
    for thread in threads:
        thread.join(10)
    for connection in held:
        pool.release(connection)

    assert served == ["first", "second"]
    client.close()
