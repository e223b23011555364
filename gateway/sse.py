"""SSE framing: one chunk per batch of events, keepalive comments, ``data: [DONE]`` last."""

from __future__ import annotations

from collections.abc import Callable, Iterator

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


def sse_response(
    batches: Iterator[list[StoredEvent] | Keepalive],
    *,
    on_close: Callable[[], None] | None = None,
) -> Response:
    """Stream batches of events, each in one write (``app.relay.follow_event_batches``).

    When the client goes away (or the server is done), ``batches`` is closed (its ``finally``
    runs) and then ``on_close`` is called: also when not one byte was sent, which a generator's
    ``finally`` alone would miss.
    """

    def body() -> Iterator[bytes]:
        with OPEN_STREAMS.labels("sse").track_inprogress():
            yield b": connected\n\n"
            for batch in batches:
                yield b": keepalive\n\n" if isinstance(batch, Keepalive) else frame(batch)
            yield b"data: [DONE]\n\n"

    response = Response(body(), status=200, mimetype="text/event-stream", headers=SSE_HEADERS)
    # Called by the response's close (werkzeug), after the body's own: a body that never
    # started has not started ``batches`` either, so their ``finally`` alone would not run.
    close = getattr(batches, "close", None)
    if close is not None:
        response.call_on_close(close)
    if on_close is not None:
        response.call_on_close(on_close)
    return response
