"""WebSocket mode of ``/v1/responses`` (simple-websocket).

The handshake is an ordinary request, so bearer auth applies to it; the connection is then
served by ``app.socket_session``. Under gunicorn's gevent worker simple-websocket's reader thread
is a greenlet, like the SSE relay's waits.

**Whole frames.** simple-websocket writes each frame with one ``socket.send``, which under gevent
sends what the socket's buffer takes at that moment and returns the count, which it does not look
at: a large event (a long answer's ``response.completed``) to a client that reads slower than the
fleet writes lost its tail, and the stream was garbage from there on. The gateway hands it the
client's socket wrapped (:class:`WholeFrames`): every send whole, one at a time, so the reader's
pings and pongs never land inside one of the session's frames either.

**Read-ahead.** The reader reads the client's messages ahead of the session only while those
waiting take less than ``max_body_bytes`` (:class:`ReadAhead`); then the client's sends wait in
its socket until the session takes one.

**Keepalive.** The reader pings its socket every ``keepalive_seconds`` and closes one whose
client left the last ping unanswered (1008). Under gevent it waits for its socket with a watcher
of its own (:class:`ReadableOrTimeout`) rather than gevent's general selector: an idle socket's
ping and pong cost half the CPU, its closing a quarter less (``bench/results/ws-keepalive.md``).

When the connection's time is up, or the client sent nothing for ``websocket_idle_seconds``, the
gateway runs the closing handshake to its end: it sends a close frame (its reason the code of the
error event sent just before), then waits for the client's before gunicorn closes the socket.
Closing at once would leave the client's close frame unread, and the kernel answers unread data
with a reset, which the client sees instead of a clean close. Meanwhile the reader sends no
keepalive ping (:meth:`ReadableOrTimeout.hold_timeouts`): refused after a close frame, one
made the reader close the socket before the client's frame came in.
"""

from __future__ import annotations

import contextlib
import selectors
import time
import weakref
from typing import Any

import gevent
from flask import Blueprint, Flask, Response, current_app, request
from gevent import monkey
from gevent.hub import Waiter, get_hub
from gevent.lock import Semaphore
from simple_websocket import ConnectionClosed, Server
from wsproto.frame_protocol import CloseReason

from app.config import Settings
from app.limits import Caller
from app.socket_session import SocketSession
from app.telemetry.metrics import OPEN_STREAMS
from gateway.auth import current_tenant
from gateway.context import gateway

blueprint = Blueprint("websocket", __name__)
_OPTIONS = "WEBSOCKET_SERVER_OPTIONS"
"""The app's config key for simple-websocket's ``Server`` options (:func:`register`)."""
_SELECTORS: weakref.WeakKeyDictionary[Any, ReadableOrTimeout] = weakref.WeakKeyDictionary()
"""Each reader's selector, by its socket (for :func:`close` to hold its pings), until the
selector closes. The selector's key holds the socket, so an entry never goes by itself."""

_CLOSE_TIMEOUT_SECONDS = 5.0
"""How long the client has to answer our close frame before the socket is closed anyway."""


class ReadableOrTimeout:
    """The selector simple-websocket's reader asks for under gevent: its one socket, or a timeout.

    The reader registers its socket once, then asks ``select(seconds until the next ping)``
    before every read; truthy means readable. This keeps one read watcher and waits on it and
    on a timer: whichever fires first stops both and wakes the reader. No event, no result
    gathering, and a timeout (every ping is one) raises nothing.

    The reader is woken through the loop's callback queue, not straight from the watcher:
    gevent runs queued callbacks a slice at a time and looks at the sockets between slices,
    while the watchers that fired together all run in one pass. 10,000 clients closing their
    sockets at once would otherwise be one pass of 10,000 readers, and every request wait it out.
    """

    def __init__(self) -> None:
        self._key: selectors.SelectorKey | None = None
        self._watcher: Any = None
        self._held_until: float | None = None

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        self._key = selectors.SelectorKey(fileobj, fd, events, data)
        self._watcher = get_hub().loop.io(fd, 1)  # 1: readable
        if not isinstance(fileobj, int):
            _SELECTORS[fileobj] = self
        return self._key

    def hold_timeouts(self, seconds: float) -> None:
        """For ``seconds`` from now, a wait (one under way too) ends only when readable.

        The gateway sent its close frame and waits for the client's: the reader must not ping
        meanwhile. A ping after a close frame is refused (wsproto's ``LocalProtocolError``),
        and the reader then closed the socket before the client's close frame came in, which
        the kernel answered with a reset (the keepalive's ping falling due in that instant).
        """
        self._held_until = time.monotonic() + seconds

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        """``[(key, EVENT_READ)]`` once the socket is readable; ``[]`` when ``timeout`` passes.

        A timeout that passes while held (:meth:`hold_timeouts`; the hold may have begun after
        the timer fired, before the reader ran again) waits on for the rest of the hold.
        """
        assert self._key is not None, "select before register"
        while True:
            if self._wait(timeout):
                return [(self._key, selectors.EVENT_READ)]
            held = None if self._held_until is None else self._held_until - time.monotonic()
            if held is None or held <= 0:
                return []
            timeout = held

    def _wait(self, timeout: float | None) -> bool:
        """Whether the socket became readable before ``timeout`` passed."""
        hub = get_hub()
        waiter = Waiter(hub)
        timer = None if timeout is None else hub.loop.timer(max(0.0, timeout))

        def answer(readable: bool) -> None:  # the first to fire; stopping the other unqueues it
            self._watcher.stop()
            if timer is not None:
                timer.stop()
            hub.loop.run_callback(waiter.switch, readable)

        self._watcher.start(answer, True)
        try:
            if timer is not None:
                timer.start(answer, False, update=True)  # from now, not the loop's last look
            return bool(waiter.get())
        finally:
            self._watcher.stop()
            if timer is not None:
                timer.close()

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        if self._key is not None and not isinstance(self._key.fileobj, int):
            _SELECTORS.pop(self._key.fileobj, None)


class ReadAhead:
    """How far simple-websocket's reader may read a client's messages ahead of its session.

    The reader reads its socket all the time and keeps each whole message it reads
    (``Server.input_buffer``) until the session asks for the next one. The session asks only
    while it has room (``websocket_max_pending`` messages, ``max_body_bytes``), but the reader
    kept reading: a client that sent 60 messages of 4 MB while its responses ran had 240 MB
    held in the gateway. Now the reader reads on only while the messages waiting there take
    fewer than ``max_bytes`` (characters); else the client's sends wait in its socket (TCP's
    own back-pressure), and no message is lost. Small messages are not counted: a client may
    queue many (a client that cannot read while a send of its waits would wait for good).
    """

    def __init__(self, server: Server, *, max_bytes: int) -> None:
        self.server = server
        self.max_bytes = max_bytes
        self.is_over = False
        """The connection is over: the reader reads on, to its end."""

    def is_full(self) -> bool:
        """Whether the messages read and not yet asked for fill what may wait."""
        waiting = self.server.input_buffer
        if self.is_over or not waiting:
            return False
        return sum(map(len, waiting)) >= self.max_bytes

    def wait_for_room(self) -> None:
        """Until the session asks for a message that waits (looked at every 50 ms meanwhile)."""
        while self.is_full():
            gevent.sleep(_READ_AHEAD_POLL_SECONDS)


_READ_AHEAD_POLL_SECONDS = 0.05


class WholeFrames:
    """The client's socket as simple-websocket uses it: each send whole, one at a time.

    It reads only while its session has room for more (:class:`ReadAhead`). Everything else
    (``fileno``, ``close`` …) is the socket's own.
    """

    def __init__(self, sock: Any):
        self.raw = sock
        self._sending = Semaphore()  # a greenlet's wait for the client lets the others run
        self.read_ahead: ReadAhead | None = None
        """Set once the connection's server exists (:func:`responses_socket`)."""

    def send(self, data: bytes, flags: int = 0) -> int:
        """Send all of ``data`` (waiting for the client as long as it takes); its length."""
        with self._sending:
            self.raw.sendall(data, flags)
        return len(data)

    def recv(self, size: int, flags: int = 0) -> bytes:
        """Up to ``size`` bytes from the client, once its session has room for more."""
        if self.read_ahead is not None:
            self.read_ahead.wait_for_room()
        data: bytes = self.raw.recv(size, flags)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


@blueprint.before_request
def _whole_frames() -> None:
    """The upgrade's socket, before simple-websocket takes it from the environment."""
    environ = request.environ
    if "gunicorn.socket" in environ and not isinstance(environ["gunicorn.socket"], WholeFrames):
        environ["gunicorn.socket"] = WholeFrames(environ["gunicorn.socket"])


class Served(Response):
    """The upgrade's answer once its connection is over (the socket was the answer).

    Under gunicorn, ``StopIteration`` from the app tells the worker the socket was taken: it
    closes it and writes nothing. Under werkzeug's server an empty answer does. One class for
    every connection, holding only its mode: a class made per connection whose method closes
    over the connection (flask-sock's) puts the connection, its compressor's buffers with it, in
    a reference cycle, which in the gateway often waits for the collector's rare full collection
    (:func:`gateway.worker.collect_less_often`).
    """

    def __init__(self, mode: str):
        super().__init__()
        self.mode = mode

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if self.mode == "gunicorn":
            raise StopIteration()
        if self.mode == "werkzeug":
            return super().__call__(environ, start_response)
        return []


@blueprint.route("/v1/responses", websocket=True)
def responses_socket() -> Served:
    """Serve ``response.create`` messages until the client leaves or the time limit."""
    gw = gateway()
    environ = request.environ
    if not gw.settings.websocket_deflate:  # no offer seen, none accepted
        environ = {k: v for k, v in environ.items() if k != "HTTP_SEC_WEBSOCKET_EXTENSIONS"}
    ws = Server(environ, **current_app.config[_OPTIONS])
    read_ahead = ReadAhead(ws, max_bytes=gw.settings.max_body_bytes)
    if isinstance(ws.sock, WholeFrames):  # gunicorn's socket (werkzeug's test server: as it is)
        ws.sock.read_ahead = read_ahead
    session = SocketSession(
        store=gw.store,
        hub=gw.hub,
        dispatcher=gw.dispatcher,
        settings=gw.settings,
        caller=Caller(current_tenant(), gw.limiter, tenants=gw.tenants.count),
    )
    # A client that left ends the session by raising; time up or idle, it returns why.
    with OPEN_STREAMS.labels("websocket").track_inprogress(), contextlib.suppress(ConnectionClosed):
        try:
            reason = session.serve(ws)
        finally:  # the session reads no more: the reader reads on, to the client's close or end
            read_ahead.is_over = True
        close(ws, reason=reason)
    return Served(ws.mode)


def close(ws: Server, *, reason: str) -> None:
    """Send a close frame (1000, ``reason``) and wait until the client answers with its own."""
    selector = _SELECTORS.get(ws.sock)
    if selector is not None:  # under gevent: no keepalive ping after the close frame
        selector.hold_timeouts(_CLOSE_TIMEOUT_SECONDS)
    ws.close(reason=CloseReason.NORMAL_CLOSURE, message=reason)
    # The reader ends when it has read the client's close frame (or the socket failed).
    ws.thread.join(timeout=_CLOSE_TIMEOUT_SECONDS)


def register(app: Flask, settings: Settings) -> None:
    """Accept WebSocket upgrades on ``/v1/responses`` (POST stays the HTTP create)."""
    app.config[_OPTIONS] = {
        "max_message_size": settings.max_body_bytes,
        "ping_interval": settings.keepalive_seconds,
        # register() runs in the serving process: under gunicorn, after gevent patched sockets
        "selector_class": ReadableOrTimeout if monkey.is_module_patched("socket") else None,
    }
    app.register_blueprint(blueprint)
