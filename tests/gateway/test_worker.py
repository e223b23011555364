"""The gateway's gunicorn worker, in-process: what it sets up before it serves."""

from __future__ import annotations

import gc
import socket
import time
from collections import Counter
from collections.abc import Iterator

import gevent
import gevent.socket
import pytest
from gevent.hub import get_hub

from gateway.worker import (
    OLDEST_EVERY,
    TURNS,
    Turns,
    collect_less_often,
    finish_answer,
    first_bytes,
)


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    """The collector's thresholds, put back afterwards."""
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


def test_collect_less_often_sets_the_youngest_generations_threshold(
    thresholds: tuple[int, int, int],
) -> None:
    collect_less_often(100_000)

    assert gc.get_threshold() == (100_000, *thresholds[1:])


def test_collect_less_often_looks_at_the_oldest_generation_as_rarely_whatever_the_threshold(
    thresholds: tuple[int, int, int],
) -> None:
    older = thresholds[1]
    collect_less_often(10_000)

    assert gc.get_threshold() == (10_000, older, OLDEST_EVERY // (10_000 * older))


def test_collect_less_often_zero_leaves_pythons_thresholds(
    thresholds: tuple[int, int, int],
) -> None:
    collect_less_often(0)

    assert gc.get_threshold() == thresholds


@pytest.fixture
def connection() -> Iterator[tuple[socket.socket, socket.socket]]:
    """The gateway's end and the client's end of one TCP connection on loopback."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname(), timeout=10)
        server, _ = listener.accept()
    with server, client:
        yield server, client


def test_an_answer_before_a_close_reaches_a_client_that_sent_more_meanwhile(
    connection: tuple[socket.socket, socket.socket],
) -> None:
    """A client sending between the gateway's last read and its close still reads the answer.

    The unread bytes make the close a reset; sent before the end of the answer, it cost a
    refused client its 429 (CI, ``test_edge_slowloris_is_bounded_in_count_and_time_…``).
    """
    server, client = connection
    server.sendall(b"HTTP/1.1 429 Too Many Requests\r\n\r\n")
    finish_answer(server)  # what the client sent so far is read: nothing
    client.sendall(b"POST /v1/responses HTTP/1.1\r\n")  # unread when the gateway closes
    time.sleep(0.05)
    server.close()

    received = b""
    while chunk := client.recv(65536):  # to the end: the answer, then the gateway's close
        received += chunk

    assert received == b"HTTP/1.1 429 Too Many Requests\r\n\r\n"


def test_a_burst_of_new_connections_is_served_in_turns_with_the_loops_timers() -> None:
    """Connections readable at once are served a few in each pass, timers running between.

    Resumed straight from libev, all of them ran back to back before any timer: 10,000
    WebSocket handshakes held a gateway's loop (``/healthz`` too) for 5 s. Served from gevent's
    callback queue, 50 ran between two looks at the timers: 25-50 ms of handshakes.
    """
    count, cost = 200, 0.001
    ticks = 0
    served_at: list[int] = []

    def ticker() -> None:
        nonlocal ticks
        while True:
            gevent.sleep(0.001)
            ticks += 1

    def connection(sock: gevent.socket.socket) -> None:
        assert first_bytes(sock, 10)
        TURNS.wait()
        sock.recv(1)
        end = time.perf_counter() + cost  # a request's CPU, without a switch
        while time.perf_counter() < end:
            pass
        served_at.append(ticks)

    pairs = [gevent.socket.socketpair() for _ in range(count)]
    clock = gevent.spawn(ticker)
    try:
        waiting = [gevent.spawn(connection, ours) for ours, _ in pairs]
        gevent.sleep(0.05)  # every connection waits for its first bytes
        for _, theirs in pairs:
            theirs.send(b"x")  # all readable in the loop's next pass
        gevent.joinall(waiting, raise_error=True)
    finally:
        clock.kill()
        for ours, theirs in pairs:
            ours.close()
            theirs.close()

    assert len(served_at) == count
    assert max(Counter(served_at).values()) <= TURNS.per_pass


def test_turns_go_first_come_first_served_a_few_a_pass() -> None:
    turns = Turns(per_pass=3)
    served: list[tuple[int, int]] = []  # (index, the loop's pass)

    def connection(index: int) -> None:
        turns.wait()
        served.append((index, get_hub().loop.iteration))

    waiting = [gevent.spawn(connection, index) for index in range(10)]
    gevent.joinall(waiting, timeout=5)

    assert [index for index, _ in served] == list(range(10))
    assert max(Counter(iteration for _, iteration in served).values()) == 3


def test_a_connection_killed_while_waiting_for_its_turn_leaves_the_queue() -> None:
    turns = Turns(per_pass=1)
    served: list[int] = []

    def connection(index: int) -> None:
        turns.wait()
        served.append(index)

    waiting = [gevent.spawn(connection, index) for index in range(3)]
    gevent.sleep(0)  # all three queued
    waiting[1].kill()
    gevent.joinall(waiting, timeout=5)

    assert served == [0, 2]
    assert all(greenlet.dead for greenlet in waiting)


def test_a_connection_that_sends_nothing_in_time_is_not_served() -> None:
    ours, theirs = gevent.socket.socketpair()
    with ours, theirs:
        assert not first_bytes(ours, 0.05)
        theirs.send(b"G")
        assert first_bytes(ours, 0.05)
