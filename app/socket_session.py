"""WebSocket mode of ``/v1/responses``: one connection, ``response.create`` after another.

A :class:`SocketSession` serves one connection. Each ``response.create`` message is a create
body (``background`` only false; ``stream`` is implicit, and ``true`` is accepted as Codex CLI
and the Agents SDK send it); the response is created and queued exactly like an HTTP one,
and its events are relayed from the event log as they are — same events, same order, same
``sequence_number``s as SSE.

**Lanes.** A message's ``stream_id`` names its lane: a lane runs its messages one after another
(FIFO), and lanes run side by side; every event and error of a lane's response carries its
``stream_id``. Messages without one share the default lane, whose events carry none (one
response at a time, as clients that know no lanes expect). ``previous_response_id`` may name a
response of any lane (a new lane forks from it). The reader takes up to
``websocket_max_pending`` messages ahead (queued or running, all lanes), and more than one only
while they take fewer than ``max_body_bytes`` together; beyond that it reads no more until one
is done, so a client cannot queue without bound (sixteen 16 MB messages of tiny items, parsed,
would take gigabytes). Across its sockets, a tenant has at most two messages of 1 MiB or more
decoded and not yet made responses in a process (:data:`app.cooperation.DECODED`): a socket's
next large one waits unread until one is. Once made a response, a message's items are let go
(:meth:`_Message.take`): they are in the store, and its response may run for minutes.

``"generate": false`` prepares a response without calling the model: it completes with no
output, and a later ``response.create`` continues from it with ``previous_response_id``
(Codex CLI's warm-up sends the whole prompt this way, then only the new items).

Each lane remembers its most recent response. Continuing from it with
``previous_response_id`` works even when it was created with ``store: false``: the connection
hands the conversation it holds (``context``) to the new response. Another connection knows
nothing of it (``previous_response_not_found``), and a continuation that fails forgets it.

**Steering.** ``response.steer`` queues user input for a response of the connection that is
still running (:mod:`app.steering`); the reader answers it at once with
``response.steer.accepted`` (or ``.failed``), in the target's lane. The run stops the response
before its next model call (``incomplete``, reason ``steered``); when it ends ``incomplete`` or
``completed``, its lane creates a successor from it with the queued input and the steered
response's own request, whose ``response.created`` commits the input. A response that paused
for its client's tool results or approvals keeps the input (``response.steer.pending``, with
the stubs it waits for) and puts it into the client's next ``response.create`` from it, after
the results and approvals that input starts with; one that failed or was cancelled returns
it (``response.steer.failed``). Steering events count their own ``sequence_number``, one
series for the connection.

The connection belongs to the tenant of its handshake's key: it continues only that tenant's
stored responses, and its creates count against that tenant's limits.
Errors are ``{"type": "error", "status", "error": {"code", "message", "param", "type"}}`` (and
the lane's ``stream_id``); after ``websocket_max_seconds`` the connection ends with
``websocket_connection_limit_reached``, and after ``websocket_idle_seconds`` without a message
from the client (while none of its responses runs) with ``websocket_idle_timeout``: an idle
socket holds a gateway connection all the same.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Protocol

from app.config import Settings
from app.conversation import load_history
from app.cooperation import DECODED, LARGE_BYTES, one_large_at_a_time
from app.dispatch import Dispatcher
from app.errors import AppError, InvalidRequestError, NotFoundError, ServerError, quoted
from app.limits import Caller
from app.protocol.events import TERMINAL_EVENT_TYPES
from app.protocol.json_text import load_json
from app.refusals import store_error
from app.relay import EventHub, Keepalive, each_event, follow_event_batches
from app.responses import create_response
from app.steering import (
    MAX_STEER_BYTES,
    MAX_STEERS,
    STEER_EVENT,
    Steer,
    SteerRefused,
    accepted_event,
    encoded,
    failed_event,
    parse_steer,
    pending_event,
    required_input,
    successor_body,
    with_queued,
)
from app.store import ResponseStore
from app.tenancy import OPEN_TENANT, Tenant

logger = logging.getLogger(__name__)

CREATE_EVENT = "response.create"
_ENVELOPE = frozenset({"type", "stream", "generate", "stream_id"})
"""A message's fields that are not the create body's."""
_CONTINUABLE = frozenset({"completed", "incomplete", "requires_action"})
_MAX_STREAM_ID = 64
_ENDED_KEPT = 256
"""Ended responses a connection remembers, to answer a late ``response.steer`` for them."""

Lane = str | None
"""A message's ``stream_id``; None: the default lane."""


SLOT_CHECK_SECONDS = 1.0
"""How often a large message waiting for its tenant's slot looks whether its client is there."""


class Transport(Protocol):
    """The connection as the session sees it (``simple_websocket.Server`` in the gateway)."""

    connected: bool
    """False once the client closed the connection or its socket failed."""

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


def error_message(error: AppError, lane: Lane = None) -> str:
    """The WebSocket form of an error (of ``lane``'s message)."""
    body: dict[str, Any] = {
        "type": "error",
        "status": error.status,
        "error": {
            "type": error.type,
            "code": error.code or error.type,
            "message": error.message,
            "param": error.param,
        },
    }
    if lane is not None:
        body["stream_id"] = lane
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def in_lane(data: str, lane: Lane) -> str:
    """An event's JSON with the lane's ``stream_id`` added (as it is in the default lane)."""
    if lane is None:
        return data
    return f'{data[:-1]},"stream_id":{json.dumps(lane, ensure_ascii=False)}}}'


@dataclass(slots=True, kw_only=True)
class _Running:
    """A response of the connection whose events are being relayed."""

    lane: Lane
    steerable: bool
    """Not bound to a conversation (those cannot be steered)."""
    steers: list[Steer]
    """Accepted for it, not yet committed to a successor."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Ended:
    """A response of the connection that ended."""

    lane: Lane
    status: str
    required: list[dict[str, Any]]
    """The results and approvals its client owes it (:func:`app.steering.required_input`);
    empty once the client continued it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Created:
    """A response the connection created, before its events are relayed."""

    response_id: str
    previous: str | None
    before: list[dict[str, Any]] | None
    """Unstored: the conversation up to its output."""


@dataclass(frozen=True, slots=True)
class CreateMessage:
    """A ``response.create`` message: the create body, and whether the model is called."""

    body: dict[str, Any]
    generate: bool = True
    """False: store the request's state, complete with no output, call no model."""


def lane_of(event: Any) -> Lane:
    """The lane a decoded message goes to (one with a bad ``stream_id``: the default lane's)."""
    lane = event.get("stream_id") if isinstance(event, dict) else None
    return lane if isinstance(lane, str) and 0 < len(lane) <= _MAX_STREAM_ID else None


def parse_create_event(event: Any) -> CreateMessage:
    """The create body of a decoded ``response.create`` message, and its ``generate``.

    Raises:
        InvalidRequestError: not an object, not a ``response.create``, ``background`` other
            than false, ``stream`` other than true, ``generate`` not a boolean, or a
            ``stream_id`` that is not a string of 1 to 64 characters.
    """
    if not isinstance(event, dict):
        raise InvalidRequestError("A message must be a JSON object.", code="invalid_event")
    if event.get("type") != CREATE_EVENT:
        raise InvalidRequestError(
            f"Unsupported event type {quoted(event.get('type'))}; send '{CREATE_EVENT}' "
            f"or '{STEER_EVENT}'.",
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
    if "stream_id" in event and lane_of(event) is None:
        raise InvalidRequestError(
            "Invalid value for 'stream_id': expected a string of 1 to "
            f"{_MAX_STREAM_ID} characters, got {quoted(event['stream_id'])}.",
            param="stream_id",
            code="invalid_value",
        )
    body = {name: value for name, value in event.items() if name not in _ENVELOPE}
    return CreateMessage(body, generate)


def _unexpected(exc: Exception) -> AppError:
    """What a session answers an error that is no :class:`AppError`.

    A store away or refusing writes is a 503 to retry, as over HTTP
    (:func:`app.refusals.store_error`); anything else a 500, its traceback logged.
    """
    error = store_error(exc)
    if error is not None:
        return error
    logger.exception("unexpected error in a WebSocket session")
    return ServerError("The server had an error while processing your request.")


@dataclass(slots=True)
class _Message:
    """A message as the reader took it: decoded, or why it could not be."""

    event: Any
    error: AppError | None = None
    """Not JSON: the error its lane sends, in its turn."""
    claimed: _Claimed | None = None
    """A create from a paused response: what the reader took from it for this continuation."""
    size: int = 0
    """The message's bytes (:func:`app.cooperation.one_large_at_a_time`)."""
    previous: Any = None
    """Its ``previous_response_id``, as sent (a failed continuation evicts it from the cache)."""
    release: Callable[[], None] | None = None
    """A large one's: gives back its tenant's slot for it (:data:`app.cooperation.DECODED`)."""

    def take(self) -> Any:
        """The decoded message, which the message then holds no more.

        A create's items (most of a large message: 450,000 one-word messages are 110 MB
        decoded) are not kept while its response runs, minutes maybe, as the queue of its lane
        and the frames that handle it hold the message until then.
        """
        event, self.event = self.event, None
        return event

    def let_go(self) -> None:
        """Hold the decoded message no more; a large one gives back its tenant's slot."""
        self.event = None
        if self.release is not None:
            self.release()


@dataclass(frozen=True, slots=True, kw_only=True)
class _Claimed:
    """What a continuation of a paused response takes over from it."""

    previous: str
    steers: list[Steer]
    """Its queued steers, to join the continuation's input (:func:`app.steering.with_queued`)."""
    required: list[dict[str, Any]]
    """What it waited for (put back should the continuation be refused)."""


class SocketSession:
    """Serves one WebSocket connection: a reader, and a worker for each lane with messages."""

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
        self.cached: dict[Lane, CachedResponse] = {}
        """Each lane's most recent response."""
        self._state = threading.Condition()  # lanes, cache, counts (gevent's under the gateway)
        self._lanes: dict[Lane, deque[_Message]] = {}
        self._pending = 0
        """Messages taken and not yet done, all lanes (the running ones included)."""
        self._pending_bytes = 0
        """Their bytes as sent."""
        self._last_done = self.clock()
        self._ended = False
        self._sending = threading.Lock()
        self._send_failed = False
        """A send failed: the client has gone (closed, reset), and nobody hears of any error."""
        self._running: dict[str, _Running] = {}
        self._ended_responses: OrderedDict[str, _Ended] = OrderedDict()
        self._queued: dict[str, list[Steer]] = {}
        """A paused response's accepted steers, for the client's continuation of it."""
        self._steer_events = 0
        """Steering events sent (their ``sequence_number``s); under ``_sending``."""

    def serve(self, transport: Transport) -> str:
        """Read messages until the client leaves, the connection's time is up, or it idles.

        Returns why the connection ends (the code of the error event it was sent last), for the
        close frame.
        """
        idle_until = self.clock() + self.settings.websocket_idle_seconds
        try:
            while True:
                now = self.clock()
                if now >= self.deadline:
                    return self._end(transport, _limit_reached())
                if now >= idle_until:
                    with self._state:  # not idle while a response runs, nor since one ended
                        busy, last_done = self._pending > 0, self._last_done
                    idle_until = max(now if busy else 0.0, last_done)
                    idle_until += self.settings.websocket_idle_seconds
                    if idle_until <= now:
                        return self._end(transport, _idle())
                    continue
                if not self._room():
                    continue
                message = transport.receive(timeout=min(self.deadline, idle_until) - now)
                if message is None:
                    continue
                self._take(transport, message)
                idle_until = self.clock() + self.settings.websocket_idle_seconds
        except BaseException:  # the client left: what it sent before is answered
            self._drain()
            raise

    def busy(self) -> bool:
        """Whether a message is queued or running."""
        with self._state:
            return self._pending > 0

    def _room(self) -> bool:
        """Whether another message may be taken (one, however large, always may).

        Fewer than ``websocket_max_pending`` messages must be pending, taking fewer than
        ``max_body_bytes`` together. Waits for one to be done, at most until the connection's
        time is up.
        """
        with self._state:
            while (
                self._pending >= self.settings.websocket_max_pending
                or self._pending_bytes >= self.settings.max_body_bytes
            ):
                left = self.deadline - self.clock()
                if left <= 0:
                    return False
                self._state.wait(timeout=left)
            return True

    def _take(self, transport: Transport, message: str | bytes) -> None:
        """Queue ``message`` on its lane, and start the lane's worker if none runs.

        A large message is decoded once its tenant has a slot for it
        (:data:`app.cooperation.DECODED`), waiting while its client is there, at most until the
        connection's time is up (then it is left unanswered, and the connection ends).
        """
        release = None
        if len(message) >= LARGE_BYTES:
            release = self._slot_for_large(transport)
            if release is None:
                return
        try:
            taken = _Message(load_json(message), size=len(message), release=release)
        except AppError as error:
            if release is not None:
                release()
            # kept for its lane, so without its traceback and the parser's error: their frames
            # (this one among them) would hold it, and the session with them, in a cycle
            error.__context__ = None
            taken = _Message(None, error=error.with_traceback(None))
        if isinstance(taken.event, dict) and taken.event.get("type") == STEER_EVENT:
            try:
                self._steer(transport, taken.event, size=len(message))
            finally:
                taken.let_go()
            return
        if isinstance(taken.event, dict) and taken.event.get("type") == CREATE_EVENT:
            # in message order: a steer read after this create finds its response continued
            taken.claimed = self._claim(taken.event)
            taken.previous = taken.event.get("previous_response_id")
        lane = lane_of(taken.event)
        with self._state:
            self._pending += 1
            self._pending_bytes += taken.size
            queue = self._lanes.get(lane)
            if queue is not None:
                queue.append(taken)
                return
            self._lanes[lane] = deque([taken])
        threading.Thread(target=self._work, args=(transport, lane), daemon=True).start()

    def _slot_for_large(self, transport: Transport) -> Callable[[], None] | None:
        """A slot of its tenant's for a large message (:data:`app.cooperation.DECODED`).

        Waited for while the client is there, at most until the connection's time is up
        (None: neither lasted). Before, a client that left was noticed only then, its message
        held meanwhile: an hour by default.
        """
        while transport.connected:
            left = self.deadline - self.clock()
            if left <= 0:
                return None
            wait = min(left, SLOT_CHECK_SECONDS)
            release = DECODED.take(self.caller.tenant.name, timeout=wait)
            if release is not None:
                return release
        return None

    def _work(self, transport: Transport, lane: Lane) -> None:
        """A lane's worker: its messages in order, then it ends (a new one starts with the next)."""
        while True:
            with self._state:
                queue = self._lanes[lane]
                if not queue or self._ended:
                    self._pending -= len(queue)
                    self._pending_bytes -= sum(message.size for message in queue)
                    for message in queue:
                        message.let_go()
                    del self._lanes[lane]
                    self._state.notify_all()
                    return
                message = queue[0]
            try:
                alive = self.handle(transport, message, lane)
            finally:
                message.let_go()
                with self._state:
                    queue.popleft()
                    self._pending -= 1
                    self._pending_bytes -= message.size
                    self._last_done = self.clock()
                    self._state.notify_all()
            if not alive:
                with self._state:
                    self._ended = True

    def _drain(self) -> None:
        """Wait until every lane is done, at most until the connection's time is up."""
        with self._state:
            while self._pending and (left := self.deadline - self.clock()) > 0:
                self._state.wait(timeout=left)

    def _end(self, transport: Transport, error: AppError) -> str:
        """End the connection with ``error``: lanes take nothing more; the error's code."""
        with self._state:
            self._ended = True
        self._send(transport, error_message(error))
        return error.code or error.type

    def _send(self, transport: Transport, data: str) -> None:
        with self._sending:  # one message at a time, whichever lane sends it
            try:
                transport.send(data)
            except Exception:
                self._send_failed = True
                raise

    def handle(self, transport: Transport, message: _Message, lane: Lane) -> bool:
        """Answer one message; False when the connection can take no more."""
        try:
            if message.error is not None:  # sent, not raised: this frame holds it
                self._send(transport, error_message(message.error, lane))
                return True
            try:
                self.run(transport, message, lane=lane)
            except ConnectionLimitError:
                return False  # the reader says why, once
            except AppError as error:
                self.forget(message.previous)
                self._send(transport, error_message(error, lane))
            except Exception as exc:  # the socket's boundary: an `error` event, never a 500
                if self._send_failed:
                    return False  # the client left while its events went out: not an error
                self.forget(message.previous)
                self._send(transport, error_message(_unexpected(exc), lane))
        except Exception:  # sending failed: the client left
            return False
        return True

    def run(self, transport: Transport, message: _Message, *, lane: Lane = None) -> None:
        """Create a ``response.create`` message's response, relay its events, remember it.

        It is remembered when it can be continued; then its successors are made and relayed,
        while steering input arrives for them.

        Raises:
            AppError: the request is refused (nothing was sent), or ``ConnectionLimitError``
                when the connection's time ran out while the response ran.
        """
        created, body = self._create_first(message, lane)
        while True:
            final = self._follow(transport, created, lane)
            steers = self._settle(transport, created.response_id, final, lane)
            if not steers:
                return
            body = successor_body(body, created.response_id, steers)
            try:
                created = self._create(body, True, lane)
            except AppError as error:
                refused = SteerRefused(
                    f"The successor response could not be created: {error.message}",
                    code="successor_creation_failed",
                )
                for steer in steers:
                    self._send_steer_event(transport, lane, refused, steer)
                return

    def _create_first(self, message: _Message, lane: Lane) -> tuple[_Created, dict[str, Any]]:
        """Create the message's response; and its body without the input, for its successors.

        Nothing holds the message's items once this returns (:meth:`_Message.take`). A message
        from a paused response (``claimed``) has its queued steers join the input. A large one
        is made a response when no other large body of the process is
        (:func:`app.cooperation.one_large_at_a_time`).
        """
        create = parse_create_event(message.take())
        claimed = message.claimed
        steers = claimed.steers if claimed is not None else []
        try:
            with one_large_at_a_time(message.size, tenant=self.caller.tenant.name):
                body = with_queued(create.body, steers) if steers else create.body
                created = self._create(body, create.generate, lane)
        except AppError:
            if claimed is not None:
                self._put_back(claimed)
            raise
        message.let_go()  # made a response: its tenant's slot goes to the next (if it took one)
        return created, {name: value for name, value in body.items() if name != "input"}

    def _create(self, body: dict[str, Any], generate: bool, lane: Lane) -> _Created:
        previous = body.get("previous_response_id")
        context = self.context_of(previous)
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
        with self._state:
            self._running[response.id] = _Running(
                lane=lane, steerable=request.conversation_id is None, steers=[]
            )
        return _Created(response_id=response.id, previous=previous, before=before)

    def _follow(self, transport: Transport, created: _Created, lane: Lane) -> dict[str, Any]:
        """Relay the response's events; its final object, which the lane remembers."""
        try:
            final = self.relay(transport, created.response_id, lane)
            if final is None:
                raise ConnectionLimitError(_limit_reached().message)
        except BaseException:
            with self._state:
                self._running.pop(created.response_id, None)
            raise
        if final["status"] in _CONTINUABLE:
            before = created.before
            context_after = None if before is None else [*before, *final["output"]]
            with self._state:
                self.cached[lane] = CachedResponse(
                    response_id=created.response_id, context=context_after
                )
        else:
            self.forget(created.previous)
        return final

    def _settle(
        self, transport: Transport, response_id: str, final: dict[str, Any], lane: Lane
    ) -> list[Steer]:
        """The response ended: the steers to continue it with.

        None when it waits for its client, or cannot be continued: their events say so.
        """
        status = final["status"]
        required = required_input(final.get("output") or []) if status in _CONTINUABLE else []
        with self._state:
            running = self._running.pop(response_id, None)
            steers = running.steers if running is not None else []
            self._ended_responses[response_id] = _Ended(lane=lane, status=status, required=required)
            while len(self._ended_responses) > _ENDED_KEPT:
                forgotten, _ = self._ended_responses.popitem(last=False)
                self._queued.pop(forgotten, None)
            if steers and required:
                self._queued.setdefault(response_id, []).extend(steers)
        if not steers:
            return []
        if required:
            for steer in steers:
                self._send_steer_event(transport, lane, required, steer)
            return []
        if status in ("completed", "incomplete"):
            return steers
        refused = SteerRefused(
            f"Response {response_id} ended {status} before the steering input was applied.",
            code="response_not_active",
        )
        for steer in steers:
            self._send_steer_event(transport, lane, refused, steer)
        return []

    def _steer(self, transport: Transport, event: dict[str, Any], *, size: int = 0) -> None:
        """Answer a ``response.steer`` (the reader, at once)."""
        try:
            steer = parse_steer(event, size=size)
        except SteerRefused as refused:
            assert refused.steer is not None
            lane = self._lane_of_response(refused.steer.previous_response_id)
            self._send_steer_event(transport, lane, refused, refused.steer, known=False)
            return
        except InvalidRequestError as error:
            self._send(transport, error_message(error))
            return
        with self._state:
            lane, answer, first = self._queue_steer(steer)
        if isinstance(answer, SteerRefused):
            self._send_steer_event(transport, lane, answer, steer, known=False)
            return
        if first:
            self.store.mark_steered(steer.previous_response_id)
        self._send_steer_event(transport, lane, None, steer)
        if answer:
            self._send_steer_event(transport, lane, answer, steer)

    def _queue_steer(
        self, steer: Steer
    ) -> tuple[Lane, SteerRefused | list[dict[str, Any]] | None, bool]:
        """Under the lock: queue ``steer`` where its response takes it.

        Returns the response's lane; why it is refused, or the stubs a paused response waits
        for (``response.steer.pending``), or None; and whether it is the running response's
        first steer (the run is told then).
        """
        target = steer.previous_response_id
        running = self._running.get(target)
        if running is not None:
            if not running.steerable:
                refusal = "A response bound to a conversation cannot be steered."
                return running.lane, SteerRefused(refusal, code="steering_not_supported"), False
            if len(running.steers) >= MAX_STEERS or self._over_budget(steer):
                return running.lane, _too_many(target), False
            running.steers.append(steer)
            return running.lane, None, len(running.steers) == 1
        ended = self._ended_responses.get(target)
        if ended is None:
            refusal = f"No response {target} is running on this connection."
            return None, SteerRefused(refusal, code="response_not_found"), False
        if ended.required:  # paused for its client: queued for the client's continuation
            queued = self._queued.setdefault(target, [])
            if len(queued) >= MAX_STEERS or self._over_budget(steer):
                return ended.lane, _too_many(target), False
            queued.append(steer)
            return ended.lane, ended.required, False
        if ended.status in _CONTINUABLE:
            refusal = f"Response {target} has completed; continue it with 'response.create'."
            return ended.lane, SteerRefused(refusal, code="response_already_completed"), False
        refusal = f"Response {target} ended {ended.status} and takes no steering input."
        return ended.lane, SteerRefused(refusal, code="response_not_active"), False

    def _over_budget(self, steer: Steer) -> bool:
        """Under the lock: whether queuing ``steer`` would hold more than ``MAX_STEER_BYTES``."""
        held = sum(s.size for running in self._running.values() for s in running.steers)
        held += sum(s.size for queued in self._queued.values() for s in queued)
        return held + steer.size > MAX_STEER_BYTES

    def _claim(self, event: dict[str, Any]) -> _Claimed | None:
        """A create from a paused response takes its queued steers, and it waits no more.

        A later steer for it is ``response_already_completed``.
        """
        previous = event.get("previous_response_id")
        if not isinstance(previous, str):
            return None
        with self._state:
            ended = self._ended_responses.get(previous)
            if ended is None or not ended.required:
                return None
            self._ended_responses[previous] = _Ended(
                lane=ended.lane, status=ended.status, required=[]
            )
            steers = self._queued.pop(previous, [])
        return _Claimed(previous=previous, steers=steers, required=ended.required)

    def _put_back(self, claimed: _Claimed) -> None:
        """The continuation was refused: the paused response waits, its steers queued, again."""
        with self._state:
            ended = self._ended_responses.get(claimed.previous)
            if ended is not None:
                self._ended_responses[claimed.previous] = _Ended(
                    lane=ended.lane, status=ended.status, required=claimed.required
                )
            if claimed.steers:
                queued = self._queued.get(claimed.previous, [])
                self._queued[claimed.previous] = [*claimed.steers, *queued]

    def _lane_of_response(self, response_id: str) -> Lane:
        with self._state:
            known = self._running.get(response_id) or self._ended_responses.get(response_id)
            return None if known is None else known.lane

    def _send_steer_event(
        self,
        transport: Transport,
        lane: Lane,
        answer: SteerRefused | list[dict[str, Any]] | None,
        steer: Steer,
        *,
        known: bool = True,
    ) -> None:
        """Send ``steer``'s event in ``lane``.

        ``response.steer.accepted`` without an ``answer``, ``.pending`` with the stubs, or
        ``.failed`` with why; ``known``: its id was given out.
        """
        with self._sending:  # numbered as sent, whichever thread sends it
            sequence_number = self._steer_events
            self._steer_events += 1
            if answer is None:
                event = accepted_event(steer, sequence_number)
            elif isinstance(answer, list):
                event = pending_event(steer, answer, sequence_number)
            else:
                event = failed_event(answer, steer, sequence_number, known=known)
            transport.send(in_lane(encoded(event), lane))

    def relay(
        self, transport: Transport, response_id: str, lane: Lane = None
    ) -> dict[str, Any] | None:
        """Send the response's events; its final object, or None when time ran out first.

        Also None when the client has gone, found at a keepalive: a response that says nothing
        for a while (queued, parked behind its tenant's others, in a long tool call) would
        otherwise hold the connection, and the gateway's slot for it, until it spoke again.
        """
        events = each_event(
            follow_event_batches(
                self.store, self.hub, response_id, keepalive_seconds=self.settings.keepalive_seconds
            )
        )
        with closing(events):
            for event in events:
                if isinstance(event, Keepalive):
                    if self.clock() >= self.deadline or self._ended or not transport.connected:
                        return None
                    continue
                self._send(transport, in_lane(event.data, lane))
                if event.type in TERMINAL_EVENT_TYPES:
                    final: dict[str, Any] = json.loads(event.data)["response"]
                    return final
        raise NotFoundError(f"Response {response_id} was deleted while it ran.")

    def context_of(self, response_id: str | None) -> list[dict[str, Any]] | None:
        """The conversation a lane holds for ``response_id`` (its most recent, unstored).

        None: read it from the store.
        """
        with self._state:
            for cached in self.cached.values():
                if cached.response_id == response_id:
                    return cached.context
        return None

    def forget(self, response_id: Any) -> None:
        """Evict ``response_id`` from every lane's cache (a failed continuation)."""
        if not isinstance(response_id, str):
            return
        with self._state:
            for lane, cached in list(self.cached.items()):
                if cached.response_id == response_id:
                    del self.cached[lane]

    def _history(self, previous: str | None) -> list[dict[str, Any]]:
        return load_history(self.store, previous, owner=self.caller.tenant.name) if previous else []


def _too_many(response_id: str) -> SteerRefused:
    return SteerRefused(
        f"Too much steering input is queued: at most {MAX_STEERS} messages for response "
        f"{response_id}, and {MAX_STEER_BYTES // (1024 * 1024)} MiB on this connection.",
        code="too_many_pending_steers",
    )


def _limit_reached() -> ConnectionLimitError:
    return ConnectionLimitError(
        "The WebSocket connection reached its time limit; open a new connection to continue."
    )


def _idle() -> IdleTimeoutError:
    return IdleTimeoutError(
        "The WebSocket connection was idle too long; open a new connection to continue."
    )
