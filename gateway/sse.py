"""SSE framing: one chunk per batch of events, keepalive comments, ``data: [DONE]`` last."""

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


def frame(events: list[StoredEvent]) -> bytes:
    """Events in SSE framing (``event:``, ``data:``, blank line each), as one write."""
    return "".join([f"event: {event.type}\ndata: {event.data}\n\n" for event in events]).encode()


def sse_response(batches: Iterator[list[StoredEvent] | Keepalive]) -> Response:
    """Stream batches of events, each in one write (``app.relay.follow_event_batches``).

    The generator's ``finally`` runs when the client goes away.
    """

    def body() -> Iterator[bytes]:
        with OPEN_STREAMS.labels("sse").track_inprogress():
            yield b": connected\n\n"
            for batch in batches:
                yield b": keepalive\n\n" if isinstance(batch, Keepalive) else frame(batch)
            yield b"data: [DONE]\n\n"

    return Response(
        body(),
        status=200,
        mimetype="text/event-stream",
        headers=SSE_HEADERS,
    )
