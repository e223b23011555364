"""A deadline on reading a request's body: a client dripping it byte by byte gets a 408.

gunicorn bounds the headers (``gateway.worker``); the body is read by the app, through
``wsgi.input``, which this middleware wraps. Under gevent each read waits at most until the
deadline (``ANTWORT_BODY_TIMEOUT_SECONDS`` from the first read). Outside gevent (in-process tests)
reads never block on a client, and the wrapper only passes them through.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import gevent
from werkzeug.exceptions import RequestTimeout

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _DeadlineInput:
    """``wsgi.input`` whose reads end with :class:`RequestTimeout` past a deadline."""

    def __init__(self, stream: Any, seconds: float):
        self._stream = stream
        self._seconds = seconds
        self._deadline: float | None = None

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

    def read(self, *args: Any) -> bytes:
        return self._bounded(self._stream.read, *args)

    def readline(self, *args: Any) -> bytes:
        return self._bounded(self._stream.readline, *args)

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
        environ["wsgi.input"] = _DeadlineInput(environ["wsgi.input"], seconds)
        return app(environ, start_response)

    return bounded
