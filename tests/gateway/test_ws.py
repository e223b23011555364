"""The WebSocket route's parts that run without a client: its reader's selector."""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import resource
import selectors
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import gevent
import gevent.socket
import pytest
from flask import Flask
from gevent import monkey
from simple_websocket import Server
from websockets.sync.client import connect
from werkzeug.serving import make_server

from app.config import Settings
from gateway.ws import ReadableOrTimeout, WholeFrames, register
from tests.support.serving import serving


@dataclass
class Reader:
    """A socket pair, one end registered with the reader's selector as simple-websocket does."""

    ours: socket.socket
    theirs: socket.socket
    selector: ReadableOrTimeout
    key: selectors.SelectorKey


@pytest.fixture
def reader() -> Iterator[Reader]:
    ours, theirs = socket.socketpair()
    selector = ReadableOrTimeout()
    key = selector.register(ours, selectors.EVENT_READ, True)
    yield Reader(ours, theirs, selector, key)
    selector.close()
    ours.close()
    theirs.close()


def test_ws_selector_times_out_on_a_quiet_socket(reader: Reader) -> None:
    started = time.monotonic()

    assert reader.selector.select(0.05) == []
    assert time.monotonic() - started >= 0.045  # libev may round its wake-up by a millisecond


def test_ws_selector_reports_a_readable_socket_each_time_it_is_asked(reader: Reader) -> None:
    reader.theirs.send(b"x")

    assert reader.selector.select(5) == [(reader.key, selectors.EVENT_READ)]
    assert reader.selector.select(5) == [(reader.key, selectors.EVENT_READ)]  # still unread
    reader.ours.recv(1)
    assert reader.selector.select(0.01) == []


def test_ws_selector_wakes_when_data_arrives_while_it_waits(reader: Reader) -> None:
    gevent.spawn_later(0.05, reader.theirs.send, b"x")

    assert reader.selector.select(30) == [(reader.key, selectors.EVENT_READ)]


def test_ws_selector_held_waits_past_its_timeout_for_the_socket(reader: Reader) -> None:
    """After our close frame the reader must not ping: its timeouts wait on while held."""
    reader.selector.hold_timeouts(0.3)
    started = time.monotonic()

    assert reader.selector.select(0.01) == []  # the hold's end, not the timeout
    assert time.monotonic() - started >= 0.29

    reader.selector.hold_timeouts(30)
    gevent.spawn_later(0.05, reader.theirs.send, b"x")  # the client's close frame
    assert reader.selector.select(0.01) == [(reader.key, selectors.EVENT_READ)]


def test_ws_selector_held_while_it_waits_keeps_waiting(reader: Reader) -> None:
    waiting = gevent.spawn(reader.selector.select, 0.05)
    gevent.sleep(0)  # it waits, its timer armed for 0.05 s
    started = time.monotonic()

    reader.selector.hold_timeouts(0.3)

    assert waiting.get(timeout=10) == []
    assert time.monotonic() - started >= 0.29


def test_ws_selector_closed_lets_its_socket_go() -> None:
    ours, theirs = socket.socketpair()
    selector = ReadableOrTimeout()
    selector.register(ours, selectors.EVENT_READ, True)
    gone = weakref.ref(ours)

    selector.close()
    ours.close()
    theirs.close()
    del ours, selector
    gc.collect()

    assert gone() is None


def test_ws_register_gives_the_reader_this_selector_where_gevent_patched_sockets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for patched, selector in ((True, ReadableOrTimeout), (False, None)):
        monkeypatch.setattr(monkey, "is_module_patched", lambda name, p=patched: p)
        app = Flask(__name__)
        register(app, Settings())
        assert app.config["WEBSOCKET_SERVER_OPTIONS"]["selector_class"] is selector


def test_ws_readers_woken_together_leave_room_for_a_waiting_request() -> None:
    """Thousands of clients closing their sockets at once must not hold up every other request.

    Each reader is woken through gevent's callback queue, which runs a slice at a time and looks
    at the sockets in between. Woken straight from their watchers, the readers whose sockets
    became readable together run in one pass (gevent polls ever more sockets at once as a burst
    goes on: 64, 128 … 1,024), and a request waits out the pass. The probe asks again as soon
    as it is answered; between two answers no more than a few slices of readers may run.
    """
    readers, work_us = 3000, 1000  # 3 s of readers' work; the burst is sent in milliseconds
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2 * readers + 100:
        pytest.skip(f"needs {2 * readers + 100} open files, the limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    answers: list[int] = []
    with contextlib.ExitStack() as stack:
        stack.callback(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        proc = stack.enter_context(
            subprocess.Popen(
                [sys.executable, "-m", "tests.support.ws_readers", str(readers), str(work_us)],
                stdout=subprocess.PIPE,
            )
        )
        stack.callback(proc.kill)
        assert proc.stdout is not None
        port = int(proc.stdout.readline().split()[1])
        sockets = [
            stack.enter_context(socket.create_connection(("127.0.0.1", port)))
            for _ in range(readers)
        ]
        probe = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=30))
        lines = stack.enter_context(probe.makefile("rb"))
        probe.sendall(b"?")
        assert int(lines.readline()) == 0  # every reader waits; the probe is served
        probe.sendall(b"h")  # while the process is held, the burst arrives: all of it together
        time.sleep(0.1)  # the hold begins
        for connection in sockets:
            connection.send(b"x")
        while not answers or answers[-1] < readers:
            probe.sendall(b"?")
            answers.append(int(lines.readline()))

    gaps = [later - earlier for earlier, later in itertools.pairwise([0, *answers])]
    assert max(gaps) < 800, f"{max(gaps)} readers ran between two answers to the probe"


def _small_buffered_pair() -> tuple[gevent.socket.socket, gevent.socket.socket]:
    ours, theirs = gevent.socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
    return ours, theirs


def _read(sock: gevent.socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        data += sock.recv(size - len(data))
    return bytes(data)


def test_ws_a_gevent_socket_sends_only_what_its_buffer_takes() -> None:
    """Why :class:`WholeFrames` is there: one ``send`` of a frame can send part of it."""
    ours, theirs = _small_buffered_pair()
    with ours, theirs:
        assert ours.send(b"x" * 1_000_000) < 1_000_000


def test_ws_whole_frames_sends_a_frame_larger_than_the_socket_takes() -> None:
    ours, theirs = _small_buffered_pair()
    frame = bytes(range(256)) * 4000
    with ours, theirs:
        reading = gevent.spawn(_read, theirs, len(frame))

        assert WholeFrames(ours).send(frame) == len(frame)
        assert reading.get(timeout=30) == frame


def test_ws_whole_frames_sends_one_frame_at_a_time() -> None:
    """The session's event and the reader's ping, sent at once, arrive one after the other."""
    ours, theirs = _small_buffered_pair()
    sock, size = WholeFrames(ours), 500_000
    with ours, theirs:
        reading = gevent.spawn(_read, theirs, 2 * size)
        senders = [gevent.spawn(sock.send, letter * size) for letter in (b"a", b"b")]
        gevent.joinall(senders, timeout=30, raise_error=True)

        received = reading.get(timeout=30)
    assert received in (b"a" * size + b"b" * size, b"b" * size + b"a" * size)
    assert sock.fileno() == ours.fileno()  # the rest is the socket's own


@pytest.fixture
def serve(make_app: Callable[..., Flask]) -> Iterator[Callable[..., str]]:
    """Serve a gateway (settings as keywords) on werkzeug's threaded server; its WebSocket URL."""
    with contextlib.ExitStack() as servers:

        def start(**overrides: Any) -> str:
            server = make_server("127.0.0.1", 0, make_app(**overrides), threaded=True)
            servers.enter_context(serving(server))
            return f"ws://127.0.0.1:{server.server_port}/v1/responses"

        yield start


@pytest.fixture
def served(serve: Callable[..., str]) -> str:
    """The gateway on werkzeug's threaded server; its WebSocket URL."""
    return serve()


@pytest.mark.parametrize("deflate", [True, False])
def test_ws_compresses_messages_only_where_deflate_is_on(
    serve: Callable[..., str], deflate: bool
) -> None:
    """Off (the default): the client's permessage-deflate offer is declined
    (a connection that carried a message would hold its compressor for its whole life)."""
    with connect(
        serve(websocket_deflate=deflate), additional_headers={"Authorization": "Bearer x"}
    ) as ws:
        accepted = ws.response.headers.get("Sec-WebSocket-Extensions") or ""
        ws.send(json.dumps({"type": "response.nonsense", "padding": "x" * 10_000}))
        assert json.loads(ws.recv(timeout=10))["type"] == "error"
    assert accepted.startswith("permessage-deflate") is deflate


def _connections() -> list[Server]:
    return [o for o in gc.get_objects() if isinstance(o, Server)]


def test_ws_a_served_connection_goes_when_it_ends_without_a_collection(served: str) -> None:
    """Nothing of a WebSocket connection is left in a reference cycle once it was served: the
    gateway collects its oldest generation rarely, and a cycle keeps the compressor's buffers."""
    gc.collect()
    gc.disable()
    try:
        with connect(served, additional_headers={"Authorization": "Bearer x"}) as ws:
            ws.send(json.dumps({"type": "response.nonsense"}))
            assert json.loads(ws.recv(timeout=10))["type"] == "error"
        deadline = time.monotonic() + 30  # the server's thread ends the connection after ours
        while _connections() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _connections() == []
    finally:
        gc.enable()
