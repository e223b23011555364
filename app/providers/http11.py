"""A lean httpx transport for plain-HTTP model servers: HTTP/1.1 over the standard library.

A streamed model answer arrives as a hundred or more small chunked-encoding frames, one per
token. httpx's default transport hands each of them through httpcore's connection and pool
layers and h11's state machine; this one reads the socket through :mod:`http.client` and
decodes the framing itself, handing over, per read, the data of every frame that read brought:
the frames of a fast model, or of a worker busy with other streams, come out as one piece (and
the provider makes them one delta), a slow model's one by one as they come. This transport
keeps httpx's client — its API, timeouts, headers, decoding of compressed bodies and exceptions
— and swaps only the wire underneath, for ``http://`` origins, through httpx's public transport
seam (``mounts``). HTTPS, proxies and HTTP/2
stay with httpx's own transport (see :func:`lean_mounts`).

Measured gain (README, Benchmarks; on this project's 2-core VM): a 100-token stream costs a
worker 0.8–1.1 ms of CPU through this transport against 2.2–3.0 ms through httpcore and h11.
It sits behind ``ANTWORT_LEAN_HTTP`` (on by default; off: httpx's own transport for every model
server), and a canary test pins the httpx and httpcore versions it was measured and tested with.

Connections are kept alive and reused per origin. One that the server closed while idle is
noticed (it reads as ready) and dropped before a request is sent on it; one idle for
:data:`~app.keepalive.KEEPALIVE_EXPIRY_SECONDS` is dropped unused, before the server's own
timeout could close it under a request (:mod:`app.keepalive`).
"""

from __future__ import annotations

import http.client
import select
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import httpx

from app.keepalive import KEEPALIVE_EXPIRY_SECONDS

_READ_SIZE = 65_536
_Origin = tuple[str, int]


class Http11Transport(httpx.BaseTransport):
    """``http://`` requests over :class:`http.client.HTTPConnection`, pooled per origin."""

    def __init__(
        self,
        *,
        max_idle_per_origin: int = 64,
        keepalive_expiry: float = KEEPALIVE_EXPIRY_SECONDS,
    ):
        self._max_idle = max_idle_per_origin
        self._keepalive_expiry = keepalive_expiry
        self._idle: dict[_Origin, list[tuple[http.client.HTTPConnection, float]]] = {}
        """Per origin, each idle connection with the time it was checked in."""
        self._lock = threading.Lock()
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` and return its response with the body still to be read."""
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol(
                f"{type(self).__name__} serves http:// only, not {request.url.scheme}://",
                request=request,
            )
        timeouts = request.extensions.get("timeout", {})
        origin = (request.url.host, request.url.port or 80)
        conn = self._checkout(origin) or self._connect(request, origin, timeouts.get("connect"))
        assert conn.sock is not None
        conn.sock.settimeout(timeouts.get("read"))
        body = request.read()
        try:
            conn.putrequest(
                request.method,
                request.url.raw_path.decode("ascii"),
                skip_host=True,  # httpx's headers carry Host and Accept-Encoding
                skip_accept_encoding=True,
            )
            for name, value in request.headers.raw:
                if name.lower() != b"transfer-encoding":  # the body is sent whole, not chunked
                    conn.putheader(name, value)
            if body and "content-length" not in request.headers:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
        except OSError as exc:
            conn.close()
            raise _mapped(exc, request, writing=True) from exc
        try:
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise _mapped(exc, request) from exc
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.getheaders()]
        return httpx.Response(
            response.status,
            headers=headers,
            stream=_Body(self, origin, conn, response, request),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": response.reason.encode()},
        )

    def close(self) -> None:
        """Close every idle connection; connections in use close when their body is done."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn, _ in conns:
                conn.close()

    def _checkout(self, origin: _Origin) -> http.client.HTTPConnection | None:
        """An idle connection to ``origin`` that the server has not closed meanwhile."""
        while True:
            with self._lock:
                conns = self._idle.get(origin)
                if not conns:
                    return None
                conn, since = conns.pop()
            is_fresh = time.monotonic() - since < self._keepalive_expiry
            if is_fresh and conn.sock is not None and not _readable(conn.sock):
                return conn
            # Idle too long (the server may be closing it), closed by the server (EOF reads as
            # ready), or it sent us stray bytes.
            conn.close()

    def _checkin(self, origin: _Origin, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            conns = self._idle.setdefault(origin, [])
            if not self._closed and len(conns) < self._max_idle:
                conns.append((conn, time.monotonic()))
                return
        conn.close()

    def _connect(
        self, request: httpx.Request, origin: _Origin, timeout: float | None
    ) -> http.client.HTTPConnection:
        conn = http.client.HTTPConnection(origin[0], origin[1], timeout=timeout)
        try:
            conn.connect()  # sets TCP_NODELAY
        except OSError as exc:
            conn.close()
            if isinstance(exc, TimeoutError):
                raise httpx.ConnectTimeout(str(exc) or "timed out", request=request) from exc
            raise httpx.ConnectError(str(exc), request=request) from exc
        return conn


class _Body(httpx.SyncByteStream):
    """A response body as it arrives; its connection goes back to the pool when it was read out."""

    def __init__(
        self,
        transport: Http11Transport,
        origin: _Origin,
        conn: http.client.HTTPConnection,
        response: http.client.HTTPResponse,
        request: httpx.Request,
    ):
        self._transport = transport
        self._origin = origin
        self._conn: http.client.HTTPConnection | None = conn
        self._response = response
        self._request = request
        self._is_complete = False

    def __iter__(self) -> Iterator[bytes]:
        reads = self._chunked() if self._response.chunked else self._plain()
        while True:
            try:
                chunk = next(reads, None)
            except (OSError, http.client.HTTPException) as exc:
                self._discard()
                raise _mapped(exc, self._request) from exc
            if chunk is None:
                break
            yield chunk
        if self._response.length:  # the server closed before its Content-Length was sent
            self._discard()
            raise httpx.RemoteProtocolError(
                f"Server closed the body {self._response.length} bytes short.",
                request=self._request,
            )
        self._is_complete = True

    def _plain(self) -> Iterator[bytes]:
        """A body sized by its Content-Length, or by the connection's end."""
        read = self._response.read1
        while chunk := read(_READ_SIZE):
            yield chunk

    def _chunked(self) -> Iterator[bytes]:
        """A chunked body, one item per read: the data of every frame that read brought.

        A model server sends a frame per token; frames that arrived together (a fast model, or
        a worker busy with other streams) come out as one piece, so what reads the body handles
        them in one pass rather than a pass per token. A read never waits for more than what
        has arrived. The framing is read here, from the response's buffered reader, because
        ``HTTPResponse.read1`` stops at the end of each frame.
        """
        fp = self._response.fp
        frames = _Frames()
        while not frames.done:
            data = fp.read1(_READ_SIZE)
            if not data:  # the server went away mid-body
                raise http.client.IncompleteRead(b"")
            if payload := frames.feed(data):
                yield payload
        if frames.rest:  # bytes after the body: nothing more is to be read on this connection
            self._response.will_close = True

    def close(self) -> None:
        """Return the connection when the whole body was read and the server keeps it open."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        self._response.close()  # the response object only; the socket stays with ``conn``
        if self._is_complete and not self._response.will_close:
            self._transport._checkin(self._origin, conn)
        else:
            conn.close()

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


_MAX_FRAME_LINE = 4096
"""Longest chunk-size or trailer line taken (http.client's own limit is 65,536)."""


class _Frames:
    """Decodes HTTP/1.1 chunked framing (RFC 9112 §7.1) from bytes as they arrive."""

    __slots__ = ("_pending", "_left", "_in_trailer", "done", "rest")

    def __init__(self) -> None:
        self._pending = b""
        """Undecoded bytes: part of a size line, a frame's closing CRLF or a trailer line."""
        self._left = 0
        """Bytes of the current frame's data still to come (then its CRLF)."""
        self._in_trailer = False
        self.done = False
        self.rest = b""
        """Bytes that came after the body's end."""

    def feed(self, data: bytes) -> bytes:
        """The frame data in ``data`` (with what was pending), joined; b"" when none."""
        out: list[bytes] = []
        buffer, at = self._pending + data, 0
        while not self.done:
            if self._left > 0:
                piece = buffer[at : at + self._left]
                out.append(piece)
                at += len(piece)
                self._left -= len(piece)
                if self._left:
                    break  # the frame goes on in a later read
                self._left = -1  # its data is in: the CRLF after it is next
            end = buffer.find(b"\r\n", at)
            if end < 0:
                if len(buffer) - at > _MAX_FRAME_LINE:
                    raise http.client.LineTooLong("chunk size or trailer line")
                break
            line, at = buffer[at:end], end + 2
            if self._left == -1:
                if line:
                    raise http.client.IncompleteRead(line, 2)  # a frame longer than it said
                self._left = 0
            elif self._in_trailer:
                self.done = not line  # an empty line ends the trailer and the body
            else:
                self._left = _frame_size(line)
                self._in_trailer = self._left == 0  # the last frame: the trailer follows
        self._pending = b"" if self.done else buffer[at:]
        if self.done:
            self.rest = buffer[at:]
        return b"".join(out)


def _frame_size(line: bytes) -> int:
    digits = line.split(b";", 1)[0].strip()  # extensions after ';' are ignored
    if not digits or digits.strip(_HEX_DIGITS):
        raise http.client.IncompleteRead(line[:40])
    return int(digits, 16)


_HEX_DIGITS = b"0123456789abcdefABCDEF"


def _readable(sock: socket.socket) -> bool:
    if hasattr(select, "poll"):  # any descriptor; select() refuses those past FD_SETSIZE (1024)
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


def _mapped(exc: BaseException, request: httpx.Request, *, writing: bool = False) -> Exception:
    """The httpx exception for a failure of the wire (httpx's own classes, its callers' view)."""
    message = str(exc) or type(exc).__name__
    if isinstance(exc, TimeoutError):
        kind: type[httpx.TransportError] = httpx.WriteTimeout if writing else httpx.ReadTimeout
        return kind(message, request=request)
    if isinstance(exc, http.client.RemoteDisconnected):
        return httpx.RemoteProtocolError(
            "Server disconnected without sending a response.", request=request
        )
    if isinstance(exc, http.client.HTTPException):
        return httpx.RemoteProtocolError(message, request=request)
    if writing:
        return httpx.WriteError(message, request=request)
    return httpx.ReadError(message, request=request)


def lean_mounts() -> dict[str, httpx.BaseTransport]:
    """The ``mounts`` (for httpx) that route plain-HTTP requests through :class:`Http11Transport`.

    Empty when the environment names a proxy for HTTP: httpx's own transport then goes through it.
    """
    proxies = urllib.request.getproxies()
    if "http" in proxies or "all" in proxies:
        return {}
    return {"http://": Http11Transport()}
