"""``response.steer``: a WebSocket client's input for a response that is still running.

The connection (:class:`app.socket_session.SocketSession`) keeps what this module makes: a
:class:`Steer` per accepted message, and the events that answer it. The run stops the steered
response before its next model call (``incomplete``, reason ``steered``: ``app.run``), and the
connection continues it in a successor response, created with the steering input and the
steered response's own settings (:func:`successor_body`). A response that paused for its
client's tool results or approvals keeps the input queued (``response.steer.pending``, with the
:func:`required_input` stubs) for the client's next ``response.create`` from it.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from app.errors import InvalidRequestError, quoted
from app.protocol.items import is_answer
from app.tools.mcp.catalog import APPROVAL_REQUEST_ITEM, APPROVAL_RESPONSE_ITEM
from app.tools.presenters import PresenterIndex
from app.tools.registry import KINDS

STEER_EVENT = "response.steer"
_FIELDS = frozenset({"type", "previous_response_id", "input"})
_MESSAGE_FIELDS = frozenset({"type", "role", "content"})
_PART_TYPES = frozenset({"input_text", "input_image", "input_file"})

MAX_STEERS = 8
"""Steering messages queued for one response at once (``too_many_pending_steers`` after)."""
MAX_STEER_BYTES = 16 * 1024 * 1024
"""Steering messages' bytes one connection holds queued, all its responses together (one
message of the largest body the gateway takes fits; ``too_many_pending_steers`` after)."""

_STUB_OF_CALL = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "computer_call": "computer_call_output",
    "shell_call": "shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
    "tool_search_call": "tool_search_output",
}
"""A client-owned call's item type → the type of the result the client supplies."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Steer:
    """An accepted ``response.steer``."""

    id: str
    previous_response_id: str
    input: Any
    """As the client sent it (returned as is in ``response.steer.failed``)."""
    items: list[dict[str, Any]]
    """The input as input items (user messages)."""
    size: int = 0
    """The message's length: what the connection holds for it while it is queued."""


class SteerRefused(InvalidRequestError):
    """The message cannot be accepted (``response.steer.failed``): ``code`` says why."""

    def __init__(self, message: str, *, code: str, steer: Steer | None = None) -> None:
        super().__init__(message, code=code)
        self.steer = steer


def parse_steer(event: dict[str, Any], *, size: int = 0) -> Steer:
    """A ``response.steer`` message (``size`` long) as a :class:`Steer` with a new id.

    Raises:
        InvalidRequestError: no ``previous_response_id`` string (an ``error`` event answers).
        SteerRefused: ``invalid_input``, another field or an input other than user messages.
    """
    previous = event.get("previous_response_id")
    if not isinstance(previous, str) or not previous:
        raise InvalidRequestError(
            f"Invalid value for 'previous_response_id': expected the id of a response on this "
            f"connection, got {quoted(previous)}.",
            param="previous_response_id",
            code="invalid_value",
        )
    steer = Steer(
        id=f"steer_{secrets.token_hex(12)}",
        previous_response_id=previous,
        input=event.get("input"),
        items=[],
    )
    extra = sorted(set(event) - _FIELDS)
    if extra:
        raise SteerRefused(
            f"'response.steer' takes only type, previous_response_id and input, not "
            f"{', '.join(extra)} (a steered response's lane is its own).",
            code="invalid_input",
            steer=steer,
        )
    try:
        items = _items(steer.input)
    except ValueError as error:
        raise SteerRefused(str(error), code="invalid_input", steer=steer) from None
    return Steer(
        id=steer.id, previous_response_id=previous, input=steer.input, items=items, size=size
    )


def _items(raw: Any) -> list[dict[str, Any]]:
    if isinstance(raw, str):
        if not raw:
            raise ValueError("Steering input must not be empty.")
        return [{"type": "message", "role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise ValueError("Steering input must be a string or a non-empty array of user messages.")
    return [_message(item, index) for index, item in enumerate(raw)]


def _message(item: Any, index: int) -> dict[str, Any]:
    where = f"input[{index}]"
    if not isinstance(item, dict) or item.get("role") != "user":
        raise ValueError(f"{where}: steering takes only messages with the user role.")
    if item.get("type", "message") != "message" or set(item) - _MESSAGE_FIELDS:
        raise ValueError(f"{where}: a steering message has only type 'message', role, content.")
    content = item.get("content")
    parts_ok = isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") in _PART_TYPES for part in content
    )
    if not (isinstance(content, str) or parts_ok):
        raise ValueError(
            f"{where}: content is a string or input_text, input_image and input_file parts."
        )
    return {"type": "message", "role": "user", "content": content}


def required_input(
    output: list[dict[str, Any]], presenters: PresenterIndex = KINDS.presenters
) -> list[dict[str, Any]]:
    """Stubs of the results and approvals the client owes a response that ended with ``output``.

    Its calls still without a result (``presenters.unanswered_calls``: a paused response's are
    the client's), and its approval requests (answered in the next request).
    """
    stubs: list[dict[str, Any]] = []
    for item in presenters.unanswered_calls(output):
        kind = item["type"]
        if kind == APPROVAL_REQUEST_ITEM:
            stubs.append({"type": APPROVAL_RESPONSE_ITEM, "approval_request_id": item["id"]})
        elif kind in _STUB_OF_CALL:
            stub = {"type": _STUB_OF_CALL[kind], "call_id": item["call_id"]}
            if kind == "function_call":
                stub["name"] = item["name"]
            if kind == "tool_search_call":
                stub["execution"] = "client"  # the SDK's stub: the client's search answers it
            stubs.append(stub)
    return stubs


def successor_body(body: dict[str, Any], response_id: str, steers: list[Steer]) -> dict[str, Any]:
    """The create body of the response that continues ``response_id`` with ``steers``' input.

    Otherwise the steered response's own request.
    """
    return {
        **{name: value for name, value in body.items() if name != "input"},
        "previous_response_id": response_id,
        "input": _items_of(steers),
    }


def with_queued(body: dict[str, Any], steers: list[Steer]) -> dict[str, Any]:
    """A client's own continuation with the queued steering input.

    The input goes after the results and approvals the continuation starts with (OpenAI puts it
    first): a chat model server takes no message between a turn's calls and their results.
    """
    own = body.get("input", [])
    own_items = (
        [{"type": "message", "role": "user", "content": own}] if isinstance(own, str) else own
    )
    if not isinstance(own_items, list):  # the create refuses it, naming `input`
        return body
    answers = 0
    while answers < len(own_items) and _is_answer(own_items[answers]):
        answers += 1
    return {**body, "input": [*own_items[:answers], *_items_of(steers), *own_items[answers:]]}


def _items_of(steers: list[Steer]) -> list[dict[str, Any]]:
    return [item for steer in steers for item in steer.items]


def _is_answer(item: Any) -> bool:
    return isinstance(item, dict) and is_answer(item)  # the input is not validated yet


def accepted_event(steer: Steer, sequence_number: int) -> dict[str, Any]:
    """``response.steer.accepted``."""
    return {
        "type": "response.steer.accepted",
        "sequence_number": sequence_number,
        "steer": {"id": steer.id, "previous_response_id": steer.previous_response_id},
    }


def pending_event(
    steer: Steer, required: list[dict[str, Any]], sequence_number: int
) -> dict[str, Any]:
    """``response.steer.pending``: the response waits for its client's results first."""
    return {
        "type": "response.steer.pending",
        "sequence_number": sequence_number,
        "reason": "waiting_for_required_input",
        "required_input": required,
        "steer": {"id": steer.id, "previous_response_id": steer.previous_response_id},
    }


def failed_event(
    error: SteerRefused | InvalidRequestError, steer: Steer, sequence_number: int, *, known: bool
) -> dict[str, Any]:
    """``response.steer.failed``, returning the input; ``known``: the steer's id was given out."""
    summary: dict[str, Any] = {
        "input": steer.input,
        "previous_response_id": steer.previous_response_id,
    }
    if known:
        summary["id"] = steer.id
    return {
        "type": "response.steer.failed",
        "sequence_number": sequence_number,
        "error": {
            "type": "invalid_request_error",
            "code": error.code or "invalid_input",
            "message": error.message,
        },
        "steer": summary,
    }


def encoded(event: dict[str, Any]) -> str:
    """An event's JSON as the connection sends it."""
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False)
