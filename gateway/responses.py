"""``/v1/responses``: create (three modes), retrieve (and resume), cancel, delete, input items."""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Generator
from contextlib import closing
from typing import TypeVar

from flask import Blueprint, Response, current_app, jsonify, request

from app import cooperation
from app import responses as core
from app.errors import (
    InvalidRequestError,
    PayloadTooLargeError,
    ServerError,
    UnsupportedMediaTypeError,
)
from app.limits import Caller
from app.protocol.events import TERMINAL_EVENT_TYPES
from app.protocol.json_text import load_json
from app.protocol.response import ResponseObject
from app.relay import CreatedRelay, Keepalive, each_event, follow_event_batches
from app.store import StoredEvent
from app.store.events import response_json_of
from gateway.auth import add_rate_headers, current_tenant
from gateway.context import Gateway, gateway
from gateway.sse import sse_response

T = TypeVar("T")

blueprint = Blueprint("responses", __name__)


def _gw() -> Gateway:
    return gateway()


def _require_json() -> None:
    if not request.is_json:
        raise UnsupportedMediaTypeError(
            "Content-Type must be application/json.", param=None, code="unsupported_media_type"
        )


def _too_large() -> PayloadTooLargeError:
    return PayloadTooLargeError(
        "The request body is too large.", param=None, code="payload_too_large"
    )


_ZLIB_WBITS = {
    "gzip": 16 + zlib.MAX_WBITS,
    "x-gzip": 16 + zlib.MAX_WBITS,
    "deflate": zlib.MAX_WBITS,
}
"""The ``Content-Encoding`` values a body may come in, as zlib's window bits for them."""


def _unencoded(data: bytes) -> bytes:
    """The request's body ``data`` as sent, before its ``Content-Encoding`` (gzip, deflate).

    A decoded body counts against ``max_body_bytes`` as a plain one does; decoding stops one
    byte past it, so a small body that inflates to gigabytes is a 413 after that much work.

    Raises:
        PayloadTooLargeError: read up to the limit without a Content-Length (chunked), or
            over the limit once decoded.
        UnsupportedMediaTypeError: another encoding (``zstd``, ``br``): 415.
        InvalidRequestError: not the encoding it says it is, or cut short.
    """
    limit = request.max_content_length
    if request.content_length is None and limit is not None and len(data) >= limit:
        # Without a Content-Length (chunked), werkzeug stops reading at the limit and hands
        # over what it read, cut short: at the limit, the body is taken to go on past it.
        raise _too_large()
    names = request.headers.get("Content-Encoding", "").lower().split(",")
    for name in reversed([n.strip() for n in names if n.strip() not in ("", "identity")]):
        if name not in _ZLIB_WBITS:
            raise UnsupportedMediaTypeError(
                f"Content-Encoding '{name}' is not supported: send the body as it is, or "
                "with gzip or deflate.",
                param=None,
                code="unsupported_content_encoding",
            )
        data = _inflated(data, name, limit)
    return data


def _inflated(data: bytes, name: str, limit: int | None) -> bytes:
    """``data`` decoded from ``name`` (each gzip member in turn), at most ``limit`` bytes."""
    out = bytearray()
    try:
        while data:
            room = 0 if limit is None else limit + 1 - len(out)
            inflater = zlib.decompressobj(_ZLIB_WBITS[name])
            out += inflater.decompress(data, room)
            if limit is not None and len(out) > limit:
                raise _too_large()
            if not inflater.eof:
                raise zlib.error("cut short")
            data = inflater.unused_data  # another gzip member, or junk: not the encoding
    except zlib.error:
        raise InvalidRequestError(
            f"We could not decode the request body as {name}.",
            param=None,
            code="invalid_content_encoding",
        ) from None
    return bytes(out)


def in_turn(use: Callable[[object], T], *, empty: object = None) -> T:
    """``use``'s result for the request's JSON body, decoded in a large body's turn.

    The process takes large bodies one at a time (:func:`app.cooperation.one_large_at_a_time`).
    The body is read whole before the turn is taken: a client sending slowly holds no place.
    Nothing holds the body once this returns (its bytes are not cached on the request), so a
    caller keeps none of it while it then waits for an answer, minutes maybe (a sync create, a
    job): 450,000 one-word messages are 110 MB decoded. ``empty``: the body an empty request
    stands for, whatever its media type (None: it is decoded, and refused, like any other).

    Raises:
        UnsupportedMediaTypeError: not ``application/json``, or an encoding other than gzip
            and deflate (:func:`_unencoded`).
        RequestEntityTooLarge: over ``max_body_bytes`` by its Content-Length.
        PayloadTooLargeError: a body without a Content-Length that reaches the limit, or one
            over it once decoded.
        InvalidRequestError: not JSON, or JSON the fleet refuses (``app.protocol.json_text``).
    """
    # get_data, not get_json(silent=True): that swallows a body over the size limit (413)
    data = _unencoded(request.get_data(cache=False))  # the turn weighs the body decoded
    if not data and empty is not None:
        return use(empty)
    with cooperation.one_large_at_a_time(len(data), tenant=current_tenant().name):
        _require_json()
        body = load_json(data)
        del data
        return use(body)


@blueprint.post("/v1/responses")
def create() -> Response:
    """Create a response: SSE when ``stream``, at once when ``background``, else when done.

    A create that answers with the response's events (a stream, or the wait of a sync create)
    listens from before the first turn is queued (:class:`app.relay.CreatedRelay`), so it
    relays without reading back what it just wrote.
    """
    gw = _gw()
    caller = Caller(current_tenant(), gw.limiter, tenants=gw.tenants.count)
    relay = CreatedRelay(gw.store, gw.hub)
    try:
        response, parsed = in_turn(
            lambda body: core.create_response(
                gw.store, gw.dispatcher, gw.settings, body, caller=caller, on_stored=relay
            )
        )
    except BaseException:
        relay.close()  # stored, then failed: nobody follows it
        raise
    add_rate_headers(caller.headers)
    # the request (its input's items) is not kept while a sync create waits, minutes maybe
    background, stream = parsed.background, parsed.stream
    del parsed
    if background and not stream:  # answered at once: nobody follows it
        relay.close()
        return _as_json(response)
    if stream:
        batches = relay.batches(keepalive_seconds=gw.settings.keepalive_seconds)
        return sse_response(batches, on_close=relay.close)
    try:  # a sync create waits with a 1 s keepalive: its deadline's tick
        final = _wait_until_done(response.id, relay.batches(keepalive_seconds=1.0))
    finally:
        relay.close()
    if final is not None:
        return _json_answer(final)
    return _as_json(gw.store.get(response.id).response)


def _as_json(response: ResponseObject) -> Response:
    """The response object as the answer's JSON body: encoded at once, never a dict first.

    A response echoes what its create held (a schema, tools, instructions), megabytes maybe.
    """
    return _json_answer(response.model_dump_json())


def _json_answer(json_text: str) -> Response:
    """An answer of JSON text, as :func:`flask.jsonify` writes one (a newline after)."""
    return current_app.response_class(json_text + "\n", mimetype="application/json")


def _wait_until_done(
    response_id: str, batches: Generator[list[StoredEvent] | Keepalive, None, None]
) -> str | None:
    """The response's JSON as its terminal event carries it.

    Taken from the event's text as it is (:func:`app.store.events.response_json_of`): a
    response echoes what its create held, megabytes maybe, never decoded to be encoded again.
    None: it ended without one (cancelled), or an older fleet logged it otherwise; the record
    holds it then.
    """
    gw = _gw()
    deadline = time.monotonic() + gw.settings.sync_timeout_seconds
    events = each_event(batches)
    with closing(events):
        for event in events:
            if not isinstance(event, Keepalive) and event.type in TERMINAL_EVENT_TYPES:
                # Written in the same atomic step as the stored object: no need to read it back.
                return response_json_of(event)
            if time.monotonic() > deadline:
                raise ServerError(
                    f"Response {response_id} did not finish within "
                    f"{gw.settings.sync_timeout_seconds:.0f}s; retrieve it later."
                )
    return None


@blueprint.get("/v1/responses/<response_id>")
def retrieve(response_id: str) -> Response:
    """The response; with ``stream=true`` its events after ``starting_after``, then live."""
    gw = _gw()
    response = core.retrieve_response(gw.store, response_id, tenant=current_tenant().name)
    if request.args.get("stream", "false").lower() != "true":
        return _as_json(response)
    after = _starting_after(request.args.get("starting_after"))
    # Read the first page now, so an expired cursor is a 400 rather than a broken stream.
    gw.store.events_after(response_id, after, count=1)
    return sse_response(
        follow_event_batches(
            gw.store,
            gw.hub,
            response_id,
            starting_after=after,
            keepalive_seconds=gw.settings.keepalive_seconds,
        )
    )


_MAX_SEQUENCE_NUMBER = 2**53
"""Above any sequence number a stream reaches; Redis stream ids stop at 2^64 - 1."""


def _starting_after(raw: str | None) -> int:
    if raw is None:
        return -1
    try:
        value = int(raw)
    except ValueError:
        value = -2
    if not -1 <= value <= _MAX_SEQUENCE_NUMBER:
        raise InvalidRequestError(
            "'starting_after' must be a sequence number (an integer ≥ 0).",
            param="starting_after",
            code="invalid_value",
        )
    return value


@blueprint.post("/v1/responses/<response_id>/cancel")
def cancel(response_id: str) -> Response:
    """Cancel a background response."""
    gw = _gw()
    tenant = current_tenant().name
    cancelled = core.cancel_response(
        gw.store, gw.dispatcher, response_id, tenant=tenant, settings=gw.settings
    )
    return _as_json(cancelled)


@blueprint.delete("/v1/responses/<response_id>")
def delete(response_id: str) -> Response:
    """Delete a response, its input items and its events."""
    return jsonify(core.delete_response(_gw().store, response_id, tenant=current_tenant().name))


@blueprint.get("/v1/responses/<response_id>/input_items")
def input_items(response_id: str) -> Response:
    """A page of the response's input items."""
    limit, order = core.check_input_items_query(
        request.args.get("limit"), request.args.get("order")
    )
    page = core.list_input_items(
        _gw().store,
        response_id,
        limit=limit,
        order=order,
        after=request.args.get("after"),
        tenant=current_tenant().name,
    )
    return jsonify(page)
