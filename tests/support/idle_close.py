"""A server whose close of an idle keep-alive connection crosses the client's next request.

A server closes a connection that stayed idle for its keep-alive timeout (uvicorn, Node and
Hypercorn: 5 s). A request the client sends on it just then meets the close on the wire: the
server resets the connection without reading it. On a real server that takes a request sent
within a millisecond or so of the timeout; :class:`ClosesIdleConnections`, a TCP proxy in front
of a real server, makes the window wide: a request on a connection idle for
``idle_seconds`` or more (nothing sent either way) is answered with a reset, unread.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class ClosesIdleConnections:
    """Forwards to ``upstream_port``; resets a connection whose next request came too late."""

    def __init__(self, upstream_port: int, *, idle_seconds: float):
        self.upstream_port = upstream_port
        self.idle_seconds = idle_seconds
        self.connections = 0
        """Connections clients opened through the proxy."""
        self.resets = 0
        """Requests answered with a reset, as a server closing its idle connection would."""
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = False

    def start(self) -> None:
        threading.Thread(target=self._accept, name="idle-close-accept", daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for sock in self._open:
                _close(sock)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self._lock:
                self.connections += 1
                self._open.update((client, upstream))
            link = _Link(self, client, upstream)
            for source, sink, is_request in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(
                    target=link.pump, args=(source, sink, is_request), daemon=True
                ).start()

    def _forget(self, *socks: socket.socket) -> None:
        with self._lock:
            for sock in socks:
                self._open.discard(sock)
                _close(sock)


class _Link:
    """One client connection and its upstream, with the time anything last passed."""

    def __init__(
        self, proxy: ClosesIdleConnections, client: socket.socket, upstream: socket.socket
    ):
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.last_passed = time.monotonic()

    def pump(self, source: socket.socket, sink: socket.socket, is_request: bool) -> None:
        try:
            while data := source.recv(65_536):
                if is_request and time.monotonic() - self.last_passed >= self.proxy.idle_seconds:
                    self._reset()
                    return
                sink.sendall(data)
                self.last_passed = time.monotonic()
        except OSError:
            pass
        self.proxy._forget(self.client, self.upstream)

    def _reset(self) -> None:
        """Close with unread data, as the server's kernel answers a request to a closed socket."""
        with self.proxy._lock:
            self.proxy.resets += 1
        self.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.proxy._forget(self.client, self.upstream)


def _close(sock: socket.socket) -> None:
    """Close ``sock``; a reset if it lingers 0 s, else a shutdown first to wake its reader."""
    try:
        lingers = sock.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER, 8) == struct.pack("ii", 1, 0)
        if not lingers:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


@contextmanager
def closing_idle_connections(
    upstream_port: int, *, idle_seconds: float
) -> Iterator[ClosesIdleConnections]:
    """A :class:`ClosesIdleConnections` in front of ``upstream_port``, closed on exit."""
    proxy = ClosesIdleConnections(upstream_port, idle_seconds=idle_seconds)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()
