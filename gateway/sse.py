"""SSE framing: one chunk per event, keepalive comments, ``data: [DONE]`` last."""

from __future__ import annotations

from collections.abc import Iterator

from flask import Response

from app.relay import Keepalive
from app.store import StoredEvent
from app.telemetry.metrics import OPEN_STREAMS

SSE_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
    "Connection": "keep-alive",
}


def frame(event: StoredEvent) -> bytes:
    """One event in SSE framing (``event:``, ``data:``, blank line), as one write."""
    return f"event: {event.type}\ndata: {event.data}\n\n".encode()


def sse_response(events: Iterator[StoredEvent | Keepalive]) -> Response:
    """Stream events; the generator's ``finally`` runs when the client goes away."""

    def body() -> Iterator[bytes]:
        with OPEN_STREAMS.labels("sse").track_inprogress():
            yield b": connected\n\n"
            for event in events:
                yield b": keepalive\n\n" if isinstance(event, Keepalive) else frame(event)
            yield b"data: [DONE]\n\n"

    return Response(
        body(),
        status=200,
        mimetype="text/event-stream",
        headers=SSE_HEADERS,
    )
