"""WebSocket mode of ``/v1/responses``: one connection, ``response.create`` after another.

A :class:`SocketSession` serves one connection. Each ``response.create`` message is a create
body (``background`` only false; ``stream`` is implicit, and ``true`` is accepted as Codex CLI
and the Agents SDK send it); the response is created and queued exactly like an HTTP one,
and its events are relayed from the event log as they are — same events, same order, same
``sequence_number``s as SSE. One response is in flight at a time; messages that arrive meanwhile
wait their turn.

``"generate": false`` prepares a response without calling the model: it completes with no
output, and a later ``response.create`` continues from it with ``previous_response_id``
(Codex CLI's warm-up sends the whole prompt this way, then only the new items).

The connection remembers its most recent response. Continuing from it with
``previous_response_id`` works even when it was created with ``store: false``: the connection
hands the conversation it holds (``context``) to the new response. Another connection knows
nothing of it (``previous_response_not_found``), and a continuation that fails forgets it.
The connection belongs to the tenant of its handshake's key: it continues only that tenant's
stored responses, and its creates count against that tenant's limits.
Errors are ``{"type": "error", "status", "error": {"code", "message", "param", "type"}}``; after
``websocket_max_seconds`` the connection ends with ``websocket_connection_limit_reached``, and
after ``websocket_idle_seconds`` without a message from the client (while none of its responses
runs) with ``websocket_idle_timeout``: an idle socket holds a gateway connection all the same.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Protocol

from app.config import Settings
from app.conversation import load_history
from app.dispatch import Dispatcher
from app.errors import AppError, InvalidRequestError, NotFoundError, ServerError, quoted
from app.limits import Caller
from app.protocol.events import TERMINAL_EVENT_TYPES
from app.protocol.json_text import load_json
from app.relay import EventHub, Keepalive, each_event, follow_event_batches
from app.responses import create_response
from app.store import ResponseStore
from app.tenancy import OPEN_TENANT, Tenant

logger = logging.getLogger(__name__)

CREATE_EVENT = "response.create"
_ENVELOPE = frozenset({"type", "stream", "generate"})
"""A message's fields that are not the create body's."""
_CONTINUABLE = frozenset({"completed", "incomplete", "requires_action"})


class Transport(Protocol):
    """The connection as the session sees it (``simple_websocket.Server`` in the gateway)."""

    def send(self, data: str) -> None:
        """Send one text message."""

    def receive(self, timeout: float | None = None) -> str | bytes | None:
        """The next message; None when ``timeout`` passes first."""


class ConnectionLimitError(AppError):
    """The connection reached its lifetime (``websocket_max_seconds``)."""

    status = 400
    type = "invalid_request_error"
    default_code = "websocket_connection_limit_reached"


class IdleTimeoutError(AppError):
    """The client sent nothing for ``websocket_idle_seconds``."""

    status = 400
    type = "invalid_request_error"
    default_code = "websocket_idle_timeout"


@dataclass(frozen=True, slots=True, kw_only=True)
class CachedResponse:
    """The connection's most recent response."""

    response_id: str
    context: list[dict[str, Any]] | None
    """Everything the model saw and said, for an unstored response; None: read the store."""


def error_message(error: AppError) -> str:
    """The WebSocket form of an error."""
    body = {
        "type": "error",
        "status": error.status,
        "error": {
            "type": error.type,
            "code": error.code or error.type,
            "message": error.message,
            "param": error.param,
        },
    }
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class CreateMessage:
    """A ``response.create`` message: the create body, and whether the model is called."""

    body: dict[str, Any]
    generate: bool = True
    """False: store the request's state, complete with no output, call no model."""


def parse_create_message(message: str | bytes) -> CreateMessage:
    """The create body of a ``response.create`` message, and its ``generate``.

    Raises:
        InvalidRequestError: not JSON, not a ``response.create``, ``background`` other than
            false, ``stream`` other than true, or ``generate`` not a boolean.
    """
    event = load_json(message)
    if not isinstance(event, dict):
        raise InvalidRequestError("A message must be a JSON object.", code="invalid_event")
    if event.get("type") != CREATE_EVENT:
        raise InvalidRequestError(
            f"Unsupported event type {quoted(event.get('type'))}; send '{CREATE_EVENT}'.",
            param="type",
            code="invalid_event_type",
        )
    if event.get("background", False) is not False:
        raise InvalidRequestError(
            "'background' is not supported in WebSocket mode (responses always stream).",
            param="background",
            code="unsupported_parameter",
        )
    if event.get("stream", True) is not True:
        raise InvalidRequestError(
            "Invalid value for 'stream': WebSocket mode always streams; send true or leave it out.",
            param="stream",
            code="invalid_value",
        )
    generate = event.get("generate", True)
    if not isinstance(generate, bool):
        raise InvalidRequestError(
            f"Invalid value for 'generate': expected a boolean, got {quoted(generate)}.",
            param="generate",
            code="invalid_value",
        )
    body = {name: value for name, value in event.items() if name not in _ENVELOPE}
    return CreateMessage(body, generate)


def _unexpected() -> ServerError:
    return ServerError("The server had an error while processing your request.")


class SocketSession:
    """Serves one WebSocket connection; keeps its most recent response."""

    def __init__(
        self,
        *,
        store: ResponseStore,
        hub: EventHub,
        dispatcher: Dispatcher,
        settings: Settings,
        caller: Caller | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.store = store
        self.hub = hub
        self.dispatcher = dispatcher
        self.settings = settings
        self.caller = caller or Caller(Tenant(name=OPEN_TENANT))
        """Who opened the connection: owns what it creates, continues only its own, and its
        limits are taken for every ``response.create``."""
        self.clock = clock
        self.deadline = clock() + settings.websocket_max_seconds
        self.cached: CachedResponse | None = None

    def serve(self, transport: Transport) -> str:
        """Answer messages until the client leaves, the connection's time is up, or it idles.

        Returns why the connection ends (the code of the error event it was sent last), for the
        close frame.
        """
        idle_until = self.clock() + self.settings.websocket_idle_seconds
        while True:
            now = self.clock()
            if now >= self.deadline:
                transport.send(error_message(_limit_reached()))
                return ConnectionLimitError.default_code
            if now >= idle_until:
                transport.send(error_message(_idle()))
                return IdleTimeoutError.default_code
            message = transport.receive(timeout=min(self.deadline, idle_until) - now)
            if message is None:
                continue
            if not self.handle(transport, message):
                return ConnectionLimitError.default_code
            idle_until = self.clock() + self.settings.websocket_idle_seconds

    def handle(self, transport: Transport, message: str | bytes) -> bool:
        """Answer one message; False when the connection must end."""
        body: dict[str, Any] = {}
        try:
            create = parse_create_message(message)
            body = create.body
            self.run(transport, body, generate=create.generate)
        except AppError as error:
            self.forget(body.get("previous_response_id"))
            transport.send(error_message(error))
            return not isinstance(error, ConnectionLimitError)
        except Exception:  # the socket's boundary: an `error` event, never a 500 in the stream
            logger.exception("unexpected error in a WebSocket session")
            self.forget(body.get("previous_response_id"))
            transport.send(error_message(_unexpected()))
        return True

    def run(self, transport: Transport, body: dict[str, Any], *, generate: bool = True) -> None:
        """Create the response, relay its events, and remember it when it can be continued.

        ``generate``: False to complete it with no output (the request's state only).

        Raises:
            AppError: the request is refused (nothing was sent), or ``ConnectionLimitError``
                when the connection's time ran out while the response ran.
        """
        previous = body.get("previous_response_id")
        context = self.cached.context if self.is_cached(previous) and self.cached else None
        caller = Caller(  # this create's headers
            self.caller.tenant, self.caller.limiter, tenants=self.caller.tenants
        )
        if caller.limiter is not None:
            caller.limiter.admit_request(caller.tenant)
        response, request = create_response(
            self.store,
            self.dispatcher,
            self.settings,
            body,
            context=context,
            caller=caller,
            generate=generate,
        )
        before: list[dict[str, Any]] | None = None
        if not request.store:
            history = context if context is not None else self._history(previous)
            before = [*history, *self.store.inputs(response.id)]
        final = self.relay(transport, response.id)
        if final is None:
            raise ConnectionLimitError(_limit_reached().message)
        if final["status"] in _CONTINUABLE:
            context_after = None if before is None else [*before, *final["output"]]
            self.cached = CachedResponse(response_id=response.id, context=context_after)
        else:
            self.forget(previous)

    def relay(self, transport: Transport, response_id: str) -> dict[str, Any] | None:
        """Send the response's events; its final object, or None when time ran out first."""
        events = each_event(
            follow_event_batches(
                self.store, self.hub, response_id, keepalive_seconds=self.settings.keepalive_seconds
            )
        )
        with closing(events):
            for event in events:
                if isinstance(event, Keepalive):
                    if self.clock() >= self.deadline:
                        return None
                    continue
                transport.send(event.data)
                if event.type in TERMINAL_EVENT_TYPES:
                    final: dict[str, Any] = json.loads(event.data)["response"]
                    return final
        raise NotFoundError(f"Response {response_id} was deleted while it ran.")

    def is_cached(self, response_id: str | None) -> bool:
        """Whether ``response_id`` is the connection's most recent response."""
        return self.cached is not None and self.cached.response_id == response_id

    def forget(self, response_id: Any) -> None:
        """Evict ``response_id`` from the connection's cache (a failed continuation)."""
        if isinstance(response_id, str) and self.is_cached(response_id):
            self.cached = None

    def _history(self, previous: str | None) -> list[dict[str, Any]]:
        return load_history(self.store, previous, owner=self.caller.tenant.name) if previous else []


def _limit_reached() -> ConnectionLimitError:
    return ConnectionLimitError(
        "The WebSocket connection reached its time limit; open a new connection to continue."
    )


def _idle() -> IdleTimeoutError:
    return IdleTimeoutError(
        "The WebSocket connection was idle too long; open a new connection to continue."
    )
