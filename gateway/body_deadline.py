"""A deadline on reading a request's body: a client dripping it byte by byte gets a 408.

gunicorn bounds the headers (``gateway.worker``); the body is read by the app, through
``wsgi.input``, which this middleware wraps. Under gevent each read waits at most until the
deadline (``ANTWORT_BODY_TIMEOUT_SECONDS`` from the first read). Outside gevent (in-process tests)
reads never block on a client, and the wrapper only passes them through.

A chunked body is decoded by gunicorn as the app reads it, so a malformed one (a chunk size that
is not hex, data longer than its size, a bad trailer) raises gunicorn's parse error in the app's
read, past gunicorn's own error pages. Here those errors become the HTTP errors they are (400, or
431 for a trailer over the header limits), and the errors handler answers them like any other.
A body that ends (the client half-closed) before its ``Content-Length`` is a 400 too: gunicorn
hands the app the short body as if whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import gevent
from gunicorn.http.errors import (
    ChunkMissingTerminator,
    InvalidChunkExtension,
    InvalidChunkSize,
    InvalidHeader,
    InvalidHeaderName,
    LimitRequestHeaders,
    NoMoreData,
    ObsoleteFolding,
)
from werkzeug.exceptions import (
    BadRequest,
    ClientDisconnected,
    RequestHeaderFieldsTooLarge,
    RequestTimeout,
)

from app.errors import quoted

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

_MALFORMED_CHUNKS = (
    InvalidChunkSize,
    ChunkMissingTerminator,
    InvalidChunkExtension,
    InvalidHeader,
    InvalidHeaderName,
    ObsoleteFolding,
)
"""What gunicorn's chunked reader raises for a body framed wrongly: a chunk's size line, its
extension or the CRLF after its data, or a trailer (a header line after the last chunk)."""


class _DeadlineInput:
    """``wsgi.input`` whose reads end with :class:`RequestTimeout` past a deadline.

    A read gunicorn fails on a malformed chunked body ends with a 400 (a 431 for a trailer).
    """

    def __init__(self, stream: Any, seconds: float, length: int | None = None):
        self._stream = stream
        self._seconds = seconds
        self._deadline: float | None = None
        self._left = length
        """Bytes of the declared ``Content-Length`` not read yet (None: none declared)."""

    def _bounded(self, read: Callable[..., bytes], *args: Any) -> bytes:
        if self._deadline is None:
            self._deadline = time.monotonic() + self._seconds
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise RequestTimeout("The request body was not sent in time.")
        try:
            with gevent.Timeout(remaining):
                return read(*args)
        except gevent.Timeout:
            raise RequestTimeout("The request body was not sent in time.") from None
        except _MALFORMED_CHUNKS as exc:
            raise BadRequest(
                f"The request body's chunked encoding is malformed: {quoted(exc)}."
            ) from None
        except LimitRequestHeaders:
            raise RequestHeaderFieldsTooLarge(
                "The request body's chunked trailer is over the header limits."
            ) from None
        except NoMoreData:
            # werkzeug would take this OSError for a disconnect too, in words for a browser
            raise ClientDisconnected(
                "The request body ended before its chunked encoding did."
            ) from None

    def read(self, *args: Any) -> bytes:
        data = self._bounded(self._stream.read, *args)
        if self._left is not None:
            size = args[0] if args else None
            wanted = self._left if size is None or size < 0 else min(size, self._left)
            self._count(data, short=len(data) < wanted)
        return data

    def readline(self, *args: Any) -> bytes:
        data = self._bounded(self._stream.readline, *args)
        if self._left is not None:
            self._count(data, short=not data and self._left > 0)
        return data

    def _count(self, data: bytes, *, short: bool) -> None:
        """Count ``data`` off the declared length; ``short``: the body ended before it.

        gunicorn hands the app what came before a client's end of sending, then nothing: a
        read that gets less than it asked for is the only sign of a body cut short.
        """
        if short:
            raise ClientDisconnected("The request body ended before its Content-Length did.")
        assert self._left is not None
        self._left -= len(data)

    def readinto(self, buffer: bytearray) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def readlines(self, *args: Any) -> list[bytes]:
        return self._bounded(self._stream.readlines, *args)  # type: ignore[return-value]

    def __iter__(self) -> _DeadlineInput:
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line


def bound_body_reads(app: WsgiApp, seconds: float) -> WsgiApp:
    """``app`` with every request's ``wsgi.input`` under a deadline of ``seconds``."""

    def bounded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        length = environ.get("CONTENT_LENGTH")
        environ["wsgi.input"] = _DeadlineInput(
            environ["wsgi.input"], seconds, int(length) if length and length.isdigit() else None
        )
        return app(environ, start_response)

    return bounded
