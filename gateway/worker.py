"""The gateway's gunicorn worker: gevent's, with the edge bounded (``gateway.gunicorn_conf``).

* **Headers in time.** gunicorn's gevent worker reads a request's line and headers under
  :meth:`timeout_ctx`; here that is ``ANTWORT_HEADER_TIMEOUT_SECONDS`` (default 15) in all, not
  per line, so a client sending one header line every few seconds (slowloris) is dropped. The
  same bound ends an idle keep-alive connection. The body's bound is ``gateway.edge``'s.
* **Connections per client address.** At most ``ANTWORT_MAX_CONNECTIONS_PER_CLIENT`` (default
  256; 0: no cap) connections of one address are served at once; one more is answered ``429``
  and closed, so one client cannot take the whole pool (``worker_connections``) from the rest.
* **JSON errors.** What gunicorn refuses before the app sees it (a 414 request line, a 400 bad
  header, a 431) is answered in OpenAI's error shape, not gunicorn's HTML page.
* **New connections in turns.** Once its first bytes came, a connection waits for its turn, a
  few in each pass of gevent's loop (:class:`Turns`), so a burst of new connections shares the
  loop with its timers and the connections already open. libev resumes every greenlet whose
  socket became readable in one pass, back to back: 10,000 WebSocket handshakes arriving
  together (parsing, Flask, the upgrade: up to a millisecond each) held one gateway's loop for
  5 s, every open stream and ``/healthz`` waiting.
* **Fewer full collections.** The garbage collector's youngest generation runs every
  ``ANTWORT_GATEWAY_GC_THRESHOLD`` allocations and the oldest is looked at once every
  10,000,000 (:func:`collect_less_often`).
"""

from __future__ import annotations

import collections
import contextlib
import gc
import html
import json
import socket
import threading
import time
from collections import Counter
from typing import Any

import gevent
import gevent.local
import gevent.socket
from gevent.hub import Waiter, get_hub
from gunicorn.workers.ggevent import GeventWorker

from app.config import Settings

_ERROR_CODES = {
    400: ("invalid_request_error", "invalid_request"),
    403: ("invalid_request_error", "forbidden"),
    414: ("invalid_request_error", "request_line_too_long"),
    417: ("invalid_request_error", "expectation_failed"),
    429: ("rate_limit_exceeded", "too_many_connections"),
    431: ("invalid_request_error", "request_header_fields_too_large"),
    501: ("invalid_request_error", "not_implemented"),
}


def error_bytes(status: int, reason: str, message: str) -> bytes:
    """A whole HTTP/1.1 response carrying OpenAI's error body; the connection then closes."""
    error_type, code = _ERROR_CODES.get(status, ("server_error", "server_error"))
    body = json.dumps(
        {"error": {"message": message[:200], "type": error_type, "param": None, "code": code}}
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


class _ErrorPage:
    """Stands in for the client's socket while gunicorn writes its error page, to read it."""

    def __init__(self) -> None:
        self.data = bytearray()

    def gettimeout(self) -> float | None:
        return None

    def setblocking(self, flag: bool) -> None:
        """Nothing to set: nothing blocks here."""

    def sendall(self, data: bytes) -> None:
        self.data += data

    def as_json(self) -> bytes:
        """The page as :func:`error_bytes` (status, reason and message kept)."""
        text = self.data.decode("latin-1")
        _, status, reason = text.split("\r\n", 1)[0].split(" ", 2)
        message = text.rpartition("</h1>")[2].rpartition("</body>")[0].strip() or reason
        return error_bytes(int(status), reason, html.unescape(message))


class EdgeWorker(GeventWorker):  # type: ignore[misc]
    """gunicorn's gevent worker with a header deadline, a per-address cap and JSON errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = Settings()
        self.header_timeout = settings.header_timeout_seconds
        self.per_client = settings.max_connections_per_client
        self.gc_threshold = settings.gateway_gc_threshold
        self._open: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._first = gevent.local.local()  # a new connection's header deadline (monotonic)

    def init_process(self) -> None:
        """Collect less often, then gunicorn's start of the worker (which runs it)."""
        collect_less_often(self.gc_threshold)
        super().init_process()

    def timeout_ctx(self) -> gevent.Timeout:
        """The bound on reading one request's line and headers (gunicorn's hook).

        A connection's first request counts from the connection's start (:meth:`handle` waited
        for its first bytes, then for its turn, which does not count), the others from the end
        of the request before.
        """
        deadline = getattr(self._first, "deadline", None)
        if deadline is None:
            return gevent.Timeout(self.header_timeout, False)
        del self._first.deadline
        return gevent.Timeout(max(deadline - time.monotonic(), 0.001), False)

    def handle(self, listener: Any, client: Any, addr: Any) -> None:
        """Serve a connection unless its address holds its share of the pool already."""
        address = str(addr[0]) if isinstance(addr, tuple) else ""
        if not self._admit(address):
            with contextlib.suppress(OSError):
                client.sendall(error_bytes(429, "Too Many Requests", _TOO_MANY))
                finish_answer(client)
            client.close()
            return
        try:
            deadline = time.monotonic() + self.header_timeout
            if not first_bytes(client, self.header_timeout):
                client.close()  # nothing came in time, as for a request line too slow
                return
            waited = time.monotonic()
            TURNS.wait()
            # the client's time counts, not the time it waited for its turn
            self._first.deadline = deadline + (time.monotonic() - waited)
            super().handle(listener, client, addr)
        finally:
            with self._lock:
                self._open[address] -= 1
                if self._open[address] <= 0:
                    del self._open[address]

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """The error as gunicorn judges and logs it, answered as JSON."""
        page = _ErrorPage()
        super().handle_error(req, page, addr, exc)
        try:
            client.sendall(page.as_json())
            finish_answer(client)
        except (OSError, ValueError):
            self.log.debug("Failed to send error message.")

    def _admit(self, address: str) -> bool:
        with self._lock:
            if self.per_client and self._open[address] >= self.per_client:
                return False
            self._open[address] += 1
            return True


def first_bytes(client: Any, seconds: float) -> bool:
    """Whether ``client`` sent something within ``seconds`` (its request may then be served)."""
    try:
        gevent.socket.wait_read(client.fileno(), timeout=seconds)
    except TimeoutError:
        return False
    return True


class Turns:
    """New connections' first requests, at most ``per_pass`` in each pass of gevent's loop.

    A waiting greenlet is queued (first come, first served); once per pass, after the loop
    looked at its sockets, a ``check`` watcher gives the next ``per_pass`` their turn through
    the callback queue, which the loop runs before it looks again. gevent's callback queue
    alone gives the loop back only every 50 callbacks, at least 50 handshakes of up to a
    millisecond each (25-50 ms; a request on an open connection, ``/healthz`` too, waited two
    or three of them). While any wait, an ``idle`` watcher keeps the loop from sleeping in its
    poll with nothing else to do.
    """

    def __init__(self, per_pass: int) -> None:
        self.per_pass = per_pass
        self._waiting: collections.deque[Waiter[None]] = collections.deque()
        self._watchers: tuple[Any, Any] | None = None

    def wait(self) -> None:
        """Return at this greenlet's turn."""
        hub = get_hub()
        waiter: Waiter[None] = Waiter(hub)
        self._waiting.append(waiter)
        if self._watchers is None:
            check, idle = hub.loop.check(), hub.loop.idle()
            check.start(self._next)
            idle.start(_nothing)
            self._watchers = check, idle
        try:
            waiter.get()
        except BaseException:
            with contextlib.suppress(ValueError):  # killed while queued: not given a turn
                self._waiting.remove(waiter)
            raise

    def _next(self) -> None:
        """Give the next ``per_pass`` their turn (the loop's ``check``, once per pass)."""
        run_callback = get_hub().loop.run_callback
        for _ in range(min(self.per_pass, len(self._waiting))):
            run_callback(self._waiting.popleft().switch, None)
        if not self._waiting and self._watchers is not None:
            for watcher in self._watchers:
                watcher.close()
            self._watchers = None


def _nothing() -> None:
    """An idle watcher's callback: its being active is what counts."""


TURNS = Turns(per_pass=8)
"""The gateway worker's queue of new connections (8 handshakes: 4-8 ms of a pass)."""


def collect_less_often(threshold: int) -> None:
    """Collect the youngest generation every ``threshold`` allocations (0: leave Python's).

    A gateway's streams keep their greenlets, generators and requests alive for minutes, and
    the collector walks every live object in a full collection, which it runs each time the
    heap has grown by a quarter. A process opening 10,000 streams at Python's default ran ten
    of them in its first seconds, of 0.1-0.7 s each, with every request (``/healthz`` too)
    waiting. So the oldest generation is considered once every :data:`OLDEST_EVERY`
    allocations, whatever ``threshold``, and garbage in cycles that reached it waits that
    long (peak RSS +20 % at 10,000 streams). The young and middle generations stay small, for
    a collection walks all of its generation: with 10,000 WebSockets open, a middle one took
    20-60 ms at 10,000, and 0.3 s at 100,000 (a young one then 25-75 ms).
    """
    if threshold:
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(threshold, older, max(oldest, -(-OLDEST_EVERY // (threshold * older))))


OLDEST_EVERY = 10_000_000
"""Allocations between two looks at the oldest generation (Python collects it when the objects
promoted since its last collection reach a quarter of it)."""


def finish_answer(client: socket.socket) -> None:
    """End the answer written on ``client`` (FIN) and read what it sent, before a close.

    A socket closed with unread data answers with a reset instead of an end; a client reading
    the answer to its end (a refused one, whose answer says ``Connection: close``) then got an
    error for it. Sent first, the end reaches the client before any reset, even if the client
    sends more between this read and the close.
    """
    with contextlib.suppress(OSError):
        client.shutdown(socket.SHUT_WR)
    client.setblocking(False)
    with contextlib.suppress(BlockingIOError):
        for _ in range(64):
            if not client.recv(1 << 16):
                break


_TOO_MANY = "Too many open connections from your address; close some and retry."
