"""Creating, cancelling and deleting responses: what the gateway's views call."""

from __future__ import annotations

import secrets
import time
from typing import Any

from pydantic import ValidationError

from app.config import Settings
from app.conversation import load_history
from app.dispatch import Dispatcher
from app.errors import InvalidRequestError, NotFoundError, ServerError, quoted
from app.ids import check_response_id
from app.protocol import events as ev
from app.protocol.request import CreateResponseRequest, FunctionChoice
from app.protocol.response import (
    ACTIVE_STATUSES,
    ResponseObject,
    ResponseStatus,
)
from app.providers.translate import chat_params
from app.run import fail_response, unanswered_calls
from app.sealing import check_compactions
from app.store import ResponseStore
from app.store.status import CANCEL
from app.tools.kinds import RequestContext, ToolKinds
from app.tools.registry import KINDS

_ITEM_PREFIX = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
    "compaction": "cmp",
    "code_interpreter_call": "ci",
    "mcp_approval_response": "mcpa",
}


def new_response_id() -> str:
    """A fresh ``resp_…`` id."""
    return "resp_" + secrets.token_hex(24)


def parse_request(body: Any) -> CreateResponseRequest:
    """Validate a create body; the first problem becomes a 400 whose ``param`` names the field."""
    if not isinstance(body, dict):
        raise InvalidRequestError("The request body must be a JSON object.")
    try:
        return CreateResponseRequest.model_validate(body)
    except ValidationError as exc:
        raise invalid_request_from(exc) from None


def invalid_request_from(exc: ValidationError) -> InvalidRequestError:
    """The most specific pydantic error as an OpenAI-style 400.

    Every branch of a union reports its own error; the deepest location is the branch the client
    meant (a bad item of a list ``input``, not "``input`` should be a string").
    """
    error = max(exc.errors(include_url=False), key=lambda error: len(error["loc"]))
    location = [
        str(part)
        for previous, part in zip((None, *error["loc"]), error["loc"], strict=False)
        if not _is_union_tag(part, previous)
    ]
    # a location holds the client's own keys (an unknown field, a metadata key): cut short
    param = ".".join(location)[:256] or None
    if error["type"] == "extra_forbidden":
        message = f"Unknown parameter: {quoted(param)}."
        return InvalidRequestError(message, param=param, code="unknown_parameter")
    if error["type"] == "missing":
        return InvalidRequestError(
            f"Missing required parameter: {quoted(param)}.",
            param=param,
            code="missing_required_parameter",
        )
    return InvalidRequestError(
        f"Invalid value for {quoted(param)}: {error['msg']}.", param=param, code="invalid_value"
    )


# Discriminator values pydantic puts into a location after a list index or a tagged union:
# ``("tools", 0, "function", "name")`` means the field ``tools.0.name``.
_DISCRIMINATOR_TAGS = frozenset(
    {
        *_ITEM_PREFIX,
        *("input_text", "input_image", "input_file", "output_text", "refusal"),
        *("function", "allowed_tools", "mcp", "code_interpreter", "file_search"),
        *("web_search_preview", "image_generation"),
    }
)
_BRANCH_PREFIXES = ("function-", "list[", "literal[", "tagged-union[", "union[", "dict[")


def _is_union_tag(part: Any, previous: Any) -> bool:
    """Whether a location part names a union branch rather than a field."""
    if not isinstance(part, str):
        return False
    if part in ("str", "int", "float", "bool") or part.startswith(_BRANCH_PREFIXES):
        return True
    if part[:1].isupper():  # a model's name: a branch of a plain union
        return True
    is_after_branch = isinstance(previous, int) or str(previous).startswith("tagged-union[")
    return is_after_branch and part in _DISCRIMINATOR_TAGS


def create_response(
    store: ResponseStore,
    dispatcher: Dispatcher,
    settings: Settings,
    body: Any,
    *,
    context: list[dict[str, Any]] | None = None,
    kinds: ToolKinds = KINDS,
) -> tuple[ResponseObject, CreateResponseRequest]:
    """Validate, store and enqueue a new response; returns it as first stored (``queued``).

    ``context``: the items before this response's input when the caller holds them already (a
    WebSocket connection continuing its unstored previous response). Otherwise the
    ``previous_response_id`` chain is read now and stored as the context: a snapshot, so no turn
    reads the chain again, and a later response's walk ends at this one (a constant number of
    reads, however long the conversation).
    """
    request = parse_request(body)
    model = _model_of(request, settings)
    inputs = normalise_input(request)
    check_compactions(store, settings, inputs)
    if context is None and request.previous_response_id:
        # The chain is read once, here: stored as the response's context, it is what every turn
        # and tool call of this response sees, and where the walk of a later response stops.
        context = load_history(store, request.previous_response_id)
    history = context or []
    tools = kinds.prepare_request(
        RequestContext(settings=settings, redis=store.redis, history=history, inputs=inputs),
        [tool.model_dump(mode="json") for tool in request.tools],
    )
    response = _new_response(request, model, tools=tools.tools)
    events = [ev.response_event("response.created", response.wire())]
    if request.background:
        events.append(ev.response_event("response.queued", response.wire()))
    extra = {**_extra(request), **tools.extra}  # the kinds': secrets, sealed (never in plain)
    if context is not None:
        extra["context"] = context
    store.create(response, inputs=inputs, extra=extra, events=events)
    store.watch_queued(response.id, until=time.time() + settings.queued_grace_seconds)
    _enqueue_first_turn(store, dispatcher, response.id)
    return response, request


def _enqueue_first_turn(store: ResponseStore, dispatcher: Dispatcher, response_id: str) -> None:
    try:
        dispatcher.enqueue_turn(response_id, 0)
    except Exception as exc:
        fail_response(
            store, response_id, code="server_error", message="The fleet could not be reached."
        )
        raise ServerError(f"Could not enqueue the response: {exc}") from exc


def _model_of(request: CreateResponseRequest, settings: Settings) -> str:
    """The request's model (else the fleet's default); its ``tool_choice`` checked too."""
    model = request.model or settings.default_model
    if not model:
        raise InvalidRequestError(
            "Missing required parameter: 'model'.", param="model", code="missing_required_parameter"
        )
    _check_tool_choice(request)
    return model


def _extra(request: CreateResponseRequest) -> dict[str, Any]:
    """What a run needs of the request that the response object does not hold."""
    return {"params": _params(request), "include": request.include or [], "user": request.user}


def _check_tool_choice(request: CreateResponseRequest) -> None:
    choice = request.tool_choice
    names = _tool_names(request)
    if isinstance(choice, FunctionChoice) and choice.name not in names:
        raise InvalidRequestError(
            f"Tool choice {quoted(choice.name)} not found in 'tools' parameter.",
            param="tool_choice",
            code="invalid_value",
        )
    if choice == "required" and not request.tools:
        raise InvalidRequestError(
            "tool_choice 'required' needs at least one tool.",
            param="tool_choice",
            code="invalid_value",
        )


def _tool_names(request: CreateResponseRequest) -> set[str]:
    """The names of the request's tools; a name declared twice is a 400."""
    names: set[str] = set()
    for index, tool in enumerate(request.tools):
        name = getattr(tool, "name", None)
        if name in names:
            raise InvalidRequestError(
                f"Tool names must be unique: {quoted(name)} is declared twice.",
                param=f"tools.{index}.name",
                code="duplicate_tool_name",
            )
        if name is not None:
            names.add(name)
    return names


def _new_response(
    request: CreateResponseRequest, model: str, *, tools: list[dict[str, Any]]
) -> ResponseObject:
    return ResponseObject(
        id=new_response_id(),
        created_at=int(time.time()),
        status=ResponseStatus.QUEUED,
        model=model,
        previous_response_id=request.previous_response_id,
        instructions=request.instructions,
        tools=tools,
        tool_choice=(
            request.tool_choice
            if isinstance(request.tool_choice, str)
            else request.tool_choice.model_dump(mode="json", exclude_none=True)
        ),
        truncation=request.truncation or "disabled",
        parallel_tool_calls=request.parallel_tool_calls,
        text=(
            request.text.model_dump(mode="json", by_alias=True, exclude_none=True)
            if request.text
            else {"format": {"type": "text"}}
        ),
        top_p=1.0 if request.top_p is None else request.top_p,
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        top_logprobs=request.top_logprobs or 0,
        temperature=1.0 if request.temperature is None else request.temperature,
        reasoning=_reasoning(request),
        max_output_tokens=request.max_output_tokens,
        max_tool_calls=request.max_tool_calls,
        store=request.store,
        background=request.background,
        service_tier=request.service_tier or "default",
        metadata=request.metadata or {},
        safety_identifier=request.safety_identifier,
        prompt_cache_key=request.prompt_cache_key,
    )


def _reasoning(request: CreateResponseRequest) -> dict[str, Any] | None:
    if request.reasoning is None:
        return None
    reasoning = request.reasoning
    return {"effort": reasoning.effort, "summary": reasoning.summary or reasoning.generate_summary}


def _params(request: CreateResponseRequest) -> dict[str, Any]:
    text_format = request.text.format.model_dump(by_alias=True) if request.text else None
    return chat_params(
        temperature=request.temperature,
        top_p=request.top_p,
        presence_penalty=request.presence_penalty,
        frequency_penalty=request.frequency_penalty,
        max_output_tokens=request.max_output_tokens,
        text_format=text_format,
    )


def normalise_input(request: CreateResponseRequest) -> list[dict[str, Any]]:
    """The input as a list of items, each with an ``id`` (``input_items`` pages by it)."""
    if isinstance(request.input, str):
        raw: list[dict[str, Any]] = [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": request.input}],
            }
        ]
    else:
        raw = [item.model_dump(mode="json", exclude_none=True) for item in request.input]
    for item in raw:
        item.setdefault("type", "message")
        item.setdefault("id", f"{_ITEM_PREFIX[item['type']]}_{secrets.token_hex(16)}")
        if item["type"] == "message":
            item.setdefault("status", "completed")
            if isinstance(item["content"], str):
                part_type = "output_text" if item["role"] == "assistant" else "input_text"
                item["content"] = [{"type": part_type, "text": item["content"]}]
    return raw


def cancel_response(
    store: ResponseStore, dispatcher: Dispatcher, response_id: str
) -> ResponseObject:
    """Cancel a background response; a finished one comes back unchanged."""
    check_response_id(response_id)
    for _ in range(10):
        stored = store.get(response_id)
        response = stored.response
        if not response.background:
            raise InvalidRequestError(
                "Only responses created with background=true can be cancelled.",
                param="response_id",
                code="invalid_request",
            )
        if response.status not in ACTIVE_STATUSES:
            return response
        cancelled = response.model_copy(update={"status": ResponseStatus.CANCELLED})
        result = store.write(cancelled, transition=CANCEL, version=stored.version)
        if result.ok:
            pending = [item["call_id"] for item in unanswered_calls(response)]
            dispatcher.revoke_response(response_id, stored.turn, pending)
            return cancelled
    raise ServerError("The response changed too often to cancel; try again.")


def retrieve_response(store: ResponseStore, response_id: str) -> ResponseObject:
    """The stored response; a finished ``store: false`` response is gone for HTTP clients."""
    check_response_id(response_id)
    response = store.get(response_id).response
    if not response.store and response.status not in ACTIVE_STATUSES:
        raise NotFoundError(f"No response found with id '{response_id}'.", param="response_id")
    return response


def delete_response(store: ResponseStore, response_id: str) -> dict[str, Any]:
    """Delete a response with its input items and events."""
    check_response_id(response_id)
    if not store.delete(response_id):
        raise NotFoundError(f"No response found with id '{response_id}'.", param="response_id")
    return {"id": response_id, "object": "response.deleted", "deleted": True}


def list_input_items(
    store: ResponseStore, response_id: str, *, limit: int, order: str, after: str | None
) -> dict[str, Any]:
    """``GET /v1/responses/{id}/input_items``: a page of the response's input items."""
    retrieve_response(store, response_id)
    items = store.inputs(response_id)
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item.get("id") for item in items]
        if after not in ids:
            raise InvalidRequestError(
                f"No input item with id {quoted(after)}.", param="after", code="invalid_value"
            )
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }


def check_input_items_query(limit: str | None, order: str | None) -> tuple[int, str]:
    """Validate ``limit`` (1–100, default 20) and ``order`` (asc|desc, default desc)."""
    try:
        value = 20 if limit is None else int(limit)
    except ValueError:
        raise InvalidRequestError(
            "'limit' must be an integer.", param="limit", code="invalid_value"
        ) from None
    if not 1 <= value <= 100:
        raise InvalidRequestError(
            "'limit' must be between 1 and 100.", param="limit", code="invalid_value"
        )
    direction = order or "desc"
    if direction not in ("asc", "desc"):
        raise InvalidRequestError(
            "'order' must be 'asc' or 'desc'.", param="order", code="invalid_value"
        )
    return value, direction
