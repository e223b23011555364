"""Creating, cancelling and deleting responses: what the gateway's views call."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails, to_jsonable_python

from app import cooperation, references, validation
from app.choices import check_forced_tool_kept, check_tool_choice
from app.config import Settings
from app.conversation import History, chain_history, conversation_history
from app.dispatch import Dispatcher, QueueUnavailableError
from app.errors import InvalidRequestError, NotFoundError, ServerError, quoted, retry_later
from app.fairness import FairShare, mode_of
from app.ids import check_response_id
from app.keys import Keys
from app.limits import TOKEN_CHARGE_EXTRA, Caller
from app.ownership import require_owned
from app.protocol import events as ev
from app.protocol.client_items import CLIENT_ITEM_PREFIXES
from app.protocol.client_tools import (
    HOSTED_TOOL_TYPES,
    MAX_NAMESPACE_TOOLS,
    NamespaceTool,
    namespace_tools_count,
)
from app.protocol.items import (
    ITEM_REFERENCE,
    SETTINGS_ITEMS,
    AdditionalToolsItem,
    check_compaction_trigger,
    conversation_item_id,
    input_item_id,
    output_text_part,
)
from app.protocol.options import ECHOED_OPTIONS
from app.protocol.request import MAX_TOOLS, TEXT_LOGPROBS, CreateResponseRequest, ToolList
from app.protocol.response import (
    ACTIVE_STATUSES,
    ResponseConversation,
    ResponseObject,
    ResponseStatus,
)
from app.providers.json_protocol import EXCHANGES_EXTRA, protocol_of
from app.providers.translate import chat_params, response_format_param
from app.run import COMPACT_THRESHOLD_EXTRA, NO_OUTPUT_EXTRA, fail_response, unanswered_calls
from app.sealing import check_sealed_items
from app.store import ResponseStore, StoredEvent, StoredResponse
from app.store.status import CANCEL
from app.telemetry import metrics, tracing
from app.tenancy import OPEN_TENANT, Tenant
from app.tool_share import TOOL_SHARE_EXTRA
from app.tools.kinds import RequestContext, ToolKinds
from app.tools.presenters import PresenterIndex
from app.tools.registry import KINDS

BodyT = TypeVar("BodyT", bound=BaseModel)

_ITEM_PREFIX = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
    "compaction": "cmp",
    "compaction_trigger": "ct",
    "code_interpreter_call": "ci",
    "mcp_approval_response": "mcpa",
    "mcp_list_tools": "mcpl",
    "mcp_call": "mcp",
    "mcp_approval_request": "mcpr",
    "web_search_call": "ws",
    "file_search_call": "fs",
    "image_generation_call": "ig",
    "configuration_update": "cfg",
    "additional_tools": "at",
    **CLIENT_ITEM_PREFIXES,
}

logger = logging.getLogger(__name__)


def new_response_id(keys: Keys | None = None, shard_with: str | None = None) -> str:
    """A fresh ``resp_…`` id; with ``shard_with``, one in that id's shard of ``keys``.

    On a cluster a response is made in its conversation's shard, or in its previous
    response's: a conversation, or a chain, keeps its keys in one slot (``app.keys``).
    """
    if keys is not None and shard_with:
        return keys.new_id_with_shard_of("resp_", shard_with)
    return "resp_" + secrets.token_hex(24)


def parse_request(body: Any) -> CreateResponseRequest:
    """Validate a create body; the first problem becomes a 400 whose ``param`` names the field.

    A list ``input`` weighing more than a batch (:func:`app.cooperation.weight`: its items and
    their lists' entries) is validated a batch at a time, the process's other work running
    between two (:mod:`app.validation`). The problem reported is the one a validation of the
    whole body would report.
    """
    if isinstance(body, dict):
        _check_namespace_tools(namespace_tools_count(body.get("tools"), most=MAX_TOOLS), "tools")
    items = body.get("input") if isinstance(body, dict) else None
    if not isinstance(items, list) or validation.is_light(items):
        return parse_body(CreateResponseRequest, body)
    errors: list[ErrorDetails] = []
    request = None
    try:
        request = CreateResponseRequest.model_validate({**body, "input": []})
    except ValidationError as exc:
        errors += exc.errors(include_url=False)
    try:
        validated = validation.validated_items(items, param="input")
    except validation.BadItems as exc:
        errors += exc.errors
    if errors or request is None:
        raise _invalid_request(errors)
    return request.model_copy(update={"input": validated})


def parse_with_items(model: type[BodyT], body: Any) -> BodyT:
    """:func:`parse_body` for a body whose ``items`` are input items (the Conversations API's).

    When they weigh more than a batch, they are validated a batch at a time
    (:mod:`app.validation`), after the rest of the body with their first entries (so the list's
    own limits apply).
    """
    items = body.get("items") if isinstance(body, dict) else None
    if not isinstance(items, list) or validation.is_light(items):
        return parse_body(model, body)
    parsed = parse_body(model, {**body, "items": validation.first_entries(items)})
    try:
        validated = validation.validated_items(items, param="items")
    except validation.BadItems as exc:
        raise _invalid_request(exc.errors) from None
    return parsed.model_copy(update={"items": validated})


def parse_body(model: type[BodyT], body: Any) -> BodyT:
    """Validate a JSON body as ``model``; the first problem becomes a 400 naming the field."""
    if not isinstance(body, dict):
        raise InvalidRequestError("The request body must be a JSON object.")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise invalid_request_from(exc) from None


def invalid_request_from(exc: ValidationError) -> InvalidRequestError:
    """The most specific pydantic error as an OpenAI-style 400 (:func:`_invalid_request`)."""
    return _invalid_request(exc.errors(include_url=False))


def _invalid_request(errors: Sequence[ErrorDetails]) -> InvalidRequestError:
    """The most specific of pydantic's errors as an OpenAI-style 400.

    Every branch of a union reports its own error; the deepest location is the branch the client
    meant (a bad item of a list ``input``, not "``input`` should be a string").
    """
    error = max(errors, key=lambda error: len(error["loc"]))
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
    if error["type"] == "too_long" and isinstance(error["input"], list):
        limit = error.get("ctx", {}).get("max_length")
        return _array_too_long(param, limit=limit, length=len(error["input"]))
    expected = _EXPECTED_TYPES.get(error["type"])
    if expected is not None:  # OpenAI's words for a value of the wrong JSON type
        return InvalidRequestError(
            f"Invalid type for {quoted(param)}: expected {expected}, but got "
            f"{_json_type(error['input'])} instead.",
            param=param,
            code="invalid_type",
        )
    return InvalidRequestError(
        f"Invalid value for {quoted(param)}: {error['msg']}.", param=param, code="invalid_value"
    )


def _array_too_long(param: str | None, *, limit: int | None, length: int) -> InvalidRequestError:
    """OpenAI's words for a list over its limit."""
    return InvalidRequestError(
        f"Invalid {quoted(param)}: array too long. Expected an array with maximum length "
        f"{limit}, but got an array with length {length} instead.",
        param=param,
        code="array_above_max_length",
    )


def _check_namespace_tools(count: int, param: str) -> None:
    """A request's namespaces hold :data:`MAX_NAMESPACE_TOOLS` tools at most, all together.

    Counted as sent, before any of them is validated.

    Raises:
        InvalidRequestError: they hold more (``param``: the list whose namespaces took it over).
    """
    if count > MAX_NAMESPACE_TOOLS:
        raise InvalidRequestError(
            f"Invalid {quoted(param)}: too many tools in namespaces. Expected at most "
            f"{MAX_NAMESPACE_TOOLS} in all, but got {count} instead.",
            param=param,
            code="array_above_max_length",
        )


def _too_many_tools(count: int) -> InvalidRequestError:
    """A request's ``tools`` with those its ``additional_tools`` items add: over OpenAI's limit."""
    return _array_too_long("tools", limit=MAX_TOOLS, length=count)


_EXPECTED_TYPES = {
    "bool_type": "a boolean",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
}
"""pydantic's type errors, by what the field takes."""


def _json_type(value: Any) -> str:
    """What a JSON value is, in OpenAI's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


# Discriminator values pydantic puts into a location after a list index or a tagged union:
# ``("tools", 0, "function", "name")`` means the field ``tools.0.name``.
_DISCRIMINATOR_TAGS = frozenset(
    {
        *_ITEM_PREFIX,
        ITEM_REFERENCE,
        *("input_text", "input_image", "input_file", "output_text", "refusal"),
        *("function", "allowed_tools", "mcp", "code_interpreter", "file_search"),
        *("web_search_preview", "image_generation"),
        *("custom", "namespace", "apply_patch", "shell", "local_shell", "computer"),
        *("computer_use_preview", "hosted", "extension", *HOSTED_TOOL_TYPES),
    }
)
_BRANCH_PREFIXES = ("function-", "list[", "literal[", "tagged-union[", "union[", "dict[")
# A field whose own value is a tagged union puts its tag after the field's name:
# ``("text", "format", "json_schema", "name")`` means ``text.format.name``.
_TAGGED_FIELDS = {"format": frozenset({"text", "grammar", "json_object", "json_schema"})}


def _is_union_tag(part: Any, previous: Any) -> bool:
    """Whether a location part names a union branch rather than a field."""
    if not isinstance(part, str):
        return False
    if part in ("str", "int", "float", "bool") or part.startswith(_BRANCH_PREFIXES):
        return True
    if part[:1].isupper():  # a model's name: a branch of a plain union
        return True
    if part in _TAGGED_FIELDS.get(str(previous), ()):
        return True
    is_after_branch = isinstance(previous, int) or str(previous).startswith("tagged-union[")
    return is_after_branch and part in _DISCRIMINATOR_TAGS


def create_response(  # noqa: PLR0913 - optional keywords, each a caller's own
    store: ResponseStore,
    dispatcher: Dispatcher,
    settings: Settings,
    body: Any,
    *,
    context: list[dict[str, Any]] | None = None,
    kinds: ToolKinds = KINDS,
    caller: Caller | None = None,
    on_stored: Callable[[str, list[StoredEvent]], None] | None = None,
    generate: bool = True,
) -> tuple[ResponseObject, CreateResponseRequest]:
    """Validate, store and enqueue a new response; returns it as first stored (``queued``).

    ``on_stored(response_id, events)``: called once the response is stored, with the events
    its create logged, before its first turn is queued; a relay that starts listening there
    misses nothing the run publishes and needs not read the log back
    (:class:`app.relay.CreatedRelay`).

    ``caller``'s tenant owns the response (None: the open tenant, no limits); what it continues
    (``previous_response_id``, compaction items, a container) must be its own, and its limits
    are taken before the response is stored.

    ``context``: the items before this response's input when the caller holds them already (a
    WebSocket connection continuing its unstored previous response). Otherwise the
    ``previous_response_id`` chain's history is extended with the previous response's items
    and referenced as this response's (:mod:`app.store.history`): a snapshot no later write
    changes, stored once per chain, read by a turn in one round trip however long it is.

    ``generate``: False (WebSocket mode's ``"generate": false``) to store the request's state
    only: its first turn completes it with no output and calls no model.
    """
    caller = caller or Caller(Tenant(name=OPEN_TENANT))
    prepared = prepare_response(
        store,
        settings,
        body,
        tenant=caller.tenant.name,
        context=context,
        kinds=kinds,
        generate=generate,
    )
    request, response, tenant = prepared.request, prepared.response, caller.tenant.name
    token_charge = caller.admit(response.id, request)
    kept = prepared.history.keep(response.id)  # after the limits: a refused create appends nothing
    events = [ev.response_event("response.created", response)]
    if request.background:
        events.append(ev.response_event("response.queued", response))
    extra = dict(prepared.extra)
    if token_charge is not None:  # its run charges what the model takes beyond the reservation
        extra[TOKEN_CHARGE_EXTRA] = token_charge
    if not generate:
        extra[NO_OUTPUT_EXTRA] = True
    trace_headers = tracing.carrier()
    if trace_headers:  # a turn queued again later (the sweeper) joins the response's trace
        extra["trace"] = trace_headers
    tenants = caller.tenants()
    tool_share = mode_of(settings.tenant_max_tool_calls, tenants)  # as the fair share's cap
    if tool_share is not None:  # its calls take places on the tool queues (app.tool_share)
        extra[TOOL_SHARE_EXTRA] = tool_share
    fair = FairShare(store, settings, tenants=tenants)
    # in case its message is lost (a parked response is watched when the fair share starts it)
    watch_until = None if fair.is_on else store.now() + settings.queued_grace_seconds
    logged = store.create(
        response,
        inputs=prepared.inputs,
        extra=extra,
        events=events,
        owner=tenant,
        watch_until=watch_until,
        history=kept,
    )
    if on_stored is not None:
        on_stored(response.id, logged)
    _enqueue_first_turn(fair, dispatcher, tenant, response.id)
    caller.confirm(response.id)
    return response, request


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedResponse:
    """A create request checked and made a response, nothing stored (:func:`prepare_response`)."""

    request: CreateResponseRequest
    response: ResponseObject
    """As it would first be stored (``queued``)."""
    inputs: list[dict[str, Any]]
    history: History
    extra: dict[str, Any]
    """What its runs need that the response does not hold (the kinds' secrets sealed)."""


def prepare_response(  # noqa: PLR0913 - optional keywords, as create_response's
    store: ResponseStore,
    settings: Settings,
    body: Any,
    *,
    tenant: str,
    context: list[dict[str, Any]] | None = None,
    kinds: ToolKinds = KINDS,
    generate: bool = True,
) -> PreparedResponse:
    """Check a create request and make its response; nothing is stored.

    ``create_response``'s first half; ``POST /v1/responses/input_tokens`` counts what such a
    response would send the model (:mod:`app.token_count`).

    Raises:
        InvalidRequestError: the request is not one the fleet would run, or continues what
            ``tenant`` does not own.
    """
    request = _with_additional_tools(with_items_referenced(store, parse_request(body), tenant))
    model = _model_of(request, settings)
    # made first: an input item the client sent without an id is given one naming its place
    response_id = new_response_id(
        store.keys, request.conversation_id or request.previous_response_id
    )
    inputs = normalise_input(request, response_id=response_id)
    check_sealed_items(store, settings, inputs, owner=tenant)
    history = _history_of(store, request, inputs, context=context, tenant=tenant)
    check_compaction_trigger(inputs, has_history=not history.is_empty())
    if generate and not request.instructions and history.is_empty():
        _check_input_says_something(inputs, kinds.presenters)
    tools = kinds.prepare_request(
        RequestContext(
            settings=settings,
            redis=store.redis,
            history=history,
            inputs=inputs,
            tenant=tenant,
            generate=generate,
        ),
        [tool.model_dump(mode="json") for tool in request.tools],
    )
    check_forced_tool_kept(request, tools.tools)
    response = _new_response(
        request, model, tools=tools.tools, response_id=response_id, created_at=int(store.now())
    )
    # the kinds' extra: secrets, sealed (never in plain)
    extra = {**_extra(request, settings), **tools.extra}
    extra.update(_kept_by_protocol(store, settings, response))
    return PreparedResponse(
        request=request, response=response, inputs=inputs, history=history, extra=extra
    )


def with_items_referenced(
    store: ResponseStore, request: CreateResponseRequest, tenant: str
) -> CreateResponseRequest:
    """The request with each ``item_reference`` of its input the item it names.

    Raises:
        NotFoundError: a reference names no item ``tenant`` can read (:mod:`app.references`).
    """
    if isinstance(request.input, str):
        return request
    items = references.resolved(store, request.input, owner=tenant, param="input")
    return request if items is request.input else request.model_copy(update={"input": items})


def _with_additional_tools(request: CreateResponseRequest) -> CreateResponseRequest:
    """The request with the tools of its input's ``additional_tools`` items among its ``tools``.

    Raises:
        InvalidRequestError: a tool the request's ``tools`` would refuse (``param``: its place
            in the item).
    """
    if isinstance(request.input, str):
        return request
    added: list[Any] = []
    in_namespaces = sum(len(t.tools) for t in request.tools if isinstance(t, NamespaceTool))
    for index, item in enumerate(request.input):
        if not isinstance(item, AdditionalToolsItem):
            continue
        try:
            in_namespaces += namespace_tools_count(item.tools, most=MAX_TOOLS)
            _check_namespace_tools(in_namespaces, "tools")
            added += parse_body(ToolList, {"tools": item.tools}).tools
            if len(request.tools) + len(added) > MAX_TOOLS:  # the request's tools and all added
                raise _too_many_tools(len(request.tools) + len(added))
        except InvalidRequestError as exc:
            param = f"input.{index}" + (f".{exc.param}" if exc.param else "")
            raise InvalidRequestError(exc.message, param=param, code=exc.code) from None
    if not added:
        return request
    return request.model_copy(update={"tools": [*request.tools, *added]})


_UNSPOKEN = SETTINGS_ITEMS | {"reasoning"}
"""Input items that say nothing to the model by themselves."""


def _check_input_says_something(inputs: list[dict[str, Any]], presenters: PresenterIndex) -> None:
    """Without instructions or history, the input must hold an item the model is shown.

    Reasoning goes with the assistant message after it; the model never sees an
    ``additional_tools`` or ``configuration_update`` item, nor an MCP listing that worked (its
    tools are offered instead). With those alone, the model would be sent no message at all,
    which a model server refuses. Read on the model's view, unless a message is there.

    Raises:
        InvalidRequestError: the input is empty, or holds only such items.
    """
    if any(item.get("type", "message") == "message" for item in inputs):
        return  # most inputs
    if any(seen.get("type") not in _UNSPOKEN for seen in presenters.model_view(inputs)):
        return
    what = "empty"
    if inputs:
        alone = all(item.get("type") == "reasoning" for item in inputs)
        what = "it holds reasoning items only" if alone else "it holds no item the model is shown"
    raise InvalidRequestError(
        f"Invalid 'input': {what}, so the model would be sent nothing. Give a message, "
        "'instructions', or a 'previous_response_id' or 'conversation' with items.",
        param="input",
        code="empty_array" if not inputs else "invalid_value",
    )


def _history_of(
    store: ResponseStore,
    request: CreateResponseRequest,
    inputs: list[dict[str, Any]],
    *,
    context: list[dict[str, Any]] | None,
    tenant: str,
) -> History:
    """The items before the input: ``context`` if given, else the chain or the conversation.

    Stored as the response's history, it is what every turn and tool call of this response
    sees: a conversation's items as they are now, a chain's, each by reference. The input
    joins the conversation when the response ends: none of its ids may be taken there.
    """
    if request.conversation_id is not None:
        if request.previous_response_id:
            raise InvalidRequestError(
                "Mutually exclusive parameters: Ensure you are only providing one of: "
                "'previous_response_id' or 'conversation'.",
                code="mutually_exclusive_parameters",
            )
        return conversation_history(store, request.conversation_id, inputs, owner=tenant)
    if context is None and request.previous_response_id:
        return chain_history(store, request.previous_response_id, owner=tenant)
    return History(store, tail=context or [])


def _kept_by_protocol(
    store: ResponseStore, settings: Settings, response: ResponseObject
) -> dict[str, Any]:
    """What the JSON tool protocol kept of the chain's turns: the model's words, verbatim."""
    previous = response.previous_response_id
    if previous is None or protocol_of(settings, response) != "json":
        return {}
    stored = store.load(previous)
    exchanges = stored.extra.get(EXCHANGES_EXTRA) if stored is not None else None
    return {EXCHANGES_EXTRA: exchanges} if exchanges else {}


def _enqueue_first_turn(
    fair: FairShare, dispatcher: Dispatcher, tenant: str, response_id: str
) -> None:
    """Watch and queue the first turn, or park it behind the tenant's running responses.

    A send that fails fails the stored response, so that the client's retry is the only run of
    it: a broker that cannot be reached, or refuses writes for now (:mod:`app.refusals`), is a
    503 to retry, anything else a 500.
    """
    store = fair.store
    try:
        fair.submit(dispatcher, tenant, response_id)
    except Exception as exc:
        fail_response(
            store, response_id, code="server_error", message="The fleet could not be reached."
        )
        if isinstance(exc, QueueUnavailableError):
            logger.warning("answered 503, %s was not queued: %s", response_id, exc)
            raise retry_later(exc.client_message) from exc
        logger.exception("could not enqueue the response")
        raise ServerError("The server could not queue the response.") from exc


def _model_of(request: CreateResponseRequest, settings: Settings) -> str:
    """The request's model (else the fleet's default), its other fields' checks passed.

    Those are the ones that span fields: ``tool_choice``, ``background_options``, ``prompt``.
    """
    model = request.model or settings.default_model
    if not model:
        raise InvalidRequestError(
            "Missing required parameter: 'model'.", param="model", code="missing_required_parameter"
        )
    check_tool_choice(request)
    check_background_options(request)
    if request.prompt is not None:
        raise InvalidRequestError(
            "Stored prompt templates are not available on this server: send the prompt's text "
            "as 'instructions' and 'input'.",
            param="prompt",
            code="unsupported_parameter",
        )
    return model


_WINDOWED_TIERS = (None, "auto", "default")
"""The ``service_tier``s of Standard processing, which the ``2h`` and ``8h`` windows need."""


def check_background_options(request: CreateResponseRequest) -> None:
    """``2h`` and ``8h`` windows need ``background: true``, no stream, Standard processing."""
    options = request.background_options
    window = options.completion_window if options is not None else None
    if window not in ("2h", "8h"):
        return
    if not request.background or request.stream or request.service_tier not in _WINDOWED_TIERS:
        raise InvalidRequestError(
            f"The '{window}' completion window requires 'background': true, 'stream': false "
            "or omitted, and Standard processing ('service_tier' 'auto' or 'default').",
            param="background_options.completion_window",
            code="invalid_value",
        )


def _extra(request: CreateResponseRequest, settings: Settings) -> dict[str, Any]:
    """What a run needs of the request that the response object does not hold."""
    extra: dict[str, Any] = {
        "params": _params(request),
        "include": request.include or [],
        "user": request.user,
    }
    threshold = _compact_threshold(request, settings)
    if threshold is not None:
        extra[COMPACT_THRESHOLD_EXTRA] = threshold
    return extra


def _compact_threshold(request: CreateResponseRequest, settings: Settings) -> int | None:
    """``context_management``'s compaction threshold (else the fleet's default; None: none)."""
    for entry in request.context_management or ():
        if entry.type == "compaction":
            return entry.compact_threshold or settings.compact_threshold
    return None


def _new_response(
    request: CreateResponseRequest,
    model: str,
    *,
    tools: list[dict[str, Any]],
    response_id: str,
    created_at: int,
) -> ResponseObject:
    return ResponseObject(
        id=response_id,
        created_at=created_at,
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
        conversation=(
            None
            if request.conversation_id is None
            else ResponseConversation(id=request.conversation_id)
        ),
        **request.model_dump(mode="json", include=set(ECHOED_OPTIONS), exclude_none=True),
    )


def _reasoning(request: CreateResponseRequest) -> dict[str, Any] | None:
    if request.reasoning is None:
        return None
    reasoning = request.reasoning
    echoed = {
        "effort": reasoning.effort,
        "summary": reasoning.summary or reasoning.generate_summary,
    }
    return echoed | reasoning.model_dump(include={"context", "mode"}, exclude_none=True)


def _params(request: CreateResponseRequest) -> dict[str, Any]:
    """The sampling parameters, and ``response_format`` for workers of earlier releases.

    A run takes the format from the response's ``text.format`` (``app.run``); a worker of an
    earlier release, running while a fleet is upgraded (gateways first), only from here. Once
    none runs, this can stop repeating a format's schema, megabytes maybe, in the record.
    """
    text_format = request.text.format.model_dump(by_alias=True) if request.text else None
    return response_format_param(text_format) | chat_params(
        temperature=request.temperature,
        top_p=request.top_p,
        presence_penalty=request.presence_penalty,
        frequency_penalty=request.frequency_penalty,
        max_output_tokens=request.max_output_tokens,
        top_logprobs=(request.top_logprobs or 0)
        if TEXT_LOGPROBS in (request.include or ())
        else None,
    )


def normalise_input(
    request: CreateResponseRequest, *, response_id: str | None = None
) -> list[dict[str, Any]]:
    """The input as a list of items, each with an ``id`` (``input_items`` pages by it).

    With ``response_id``, the input is that response's: an item given without an id gets one
    that names its place there (:func:`normalise_items`).
    """
    if isinstance(request.input, str):
        raw: list[dict[str, Any]] = [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": request.input}],
            }
        ]
    else:
        raw = [_dumped(item) for item in cooperation.each(request.input)]
    return normalise_items(raw, response_id=response_id)


def _dumped(item: BaseModel) -> dict[str, Any]:
    """``item`` as its JSON value (no ``None`` fields), a heavy list a batch of entries at a time.

    A heavy item (:func:`app.cooperation.longest_list`): one message of 400,000 text parts took
    0.4 s at once.
    """
    field = cooperation.longest_list(vars(item).items())
    if field is None:
        return item.model_dump(mode="json", exclude_none=True)
    dumped = item.model_copy(update={field: []}).model_dump(mode="json", exclude_none=True)
    entries: list[Any] = []
    for batch in cooperation.in_batches(getattr(item, field)):
        entries += to_jsonable_python(batch, exclude_none=True)
    dumped[field] = entries  # in its place: the copy's empty list held it
    return dumped


_STATUS_KEPT = frozenset(
    {
        "message", "function_call", "function_call_output", "custom_tool_call",
        "custom_tool_call_output", "computer_call", "computer_call_output", "local_shell_call",
        "shell_call", "shell_call_output", "apply_patch_call", "apply_patch_call_output",
        "code_interpreter_call", "web_search_call", "tool_search_call", "tool_search_output",
        "file_search_call", "image_generation_call",
    }
)  # fmt: skip
"""Item types whose stored form has a ``status`` (OpenAI's SDK requires it of an item read back
from ``input_items`` or a conversation): a client's item without one is ``completed``."""


def normalise_items(
    raw: list[dict[str, Any]],
    *,
    response_id: str | None = None,
    conversation_id: str | None = None,
) -> list[dict[str, Any]]:
    """Input items as stored: each with its ``type`` and an ``id``, message content as parts.

    An item of a type whose stored form has a ``status`` has one (:data:`_STATUS_KEPT`). An
    item without an id gets one an ``item_reference`` finds it by: with ``response_id`` (the
    items are that response's input), one naming its place there
    (:func:`app.protocol.items.input_item_id`); with ``conversation_id`` (the items are added
    to it), one naming the conversation (:func:`app.protocol.items.conversation_item_id`);
    else a random one.
    """
    for index, item in enumerate(cooperation.each(raw)):
        item.setdefault("type", "message")
        if "id" not in item:
            prefix = _ITEM_PREFIX[item["type"]]
            if response_id is not None:
                named = input_item_id(prefix, response_id, index)
            elif conversation_id is not None:
                named = conversation_item_id(prefix, conversation_id)
            else:
                named = None
            item["id"] = named or f"{prefix}_{secrets.token_hex(16)}"
        if item["type"] in _STATUS_KEPT:
            item.setdefault("status", "completed")
        if item["type"] == "message" and isinstance(item["content"], str):
            item["content"] = [_text_part(item["role"], item["content"])]
    return raw


def _text_part(role: str, text: str) -> dict[str, Any]:
    """A message's string content as its one part (an assistant's as it would have said it)."""
    if role == "assistant":
        return output_text_part(text)
    return {"type": "input_text", "text": text}


def owned_response(store: ResponseStore, response_id: str, tenant: str) -> StoredResponse:
    """The stored response when ``tenant`` owns it.

    Raises:
        NotFoundError: no such response, or another tenant's (the same answer).
    """
    check_response_id(response_id)  # before any key is made of it
    record = store.load(response_id)
    return require_owned(record, tenant, missing=lambda: _not_found(response_id))


def _not_found(response_id: str) -> NotFoundError:
    return NotFoundError(f"No response found with id '{response_id}'.", param="response_id")


def cancel_response(
    store: ResponseStore,
    dispatcher: Dispatcher,
    response_id: str,
    *,
    tenant: str = OPEN_TENANT,
    settings: Settings | None = None,
    kinds: ToolKinds = KINDS,
) -> ResponseObject:
    """Cancel a background response; a finished one comes back unchanged.

    ``settings``: the fleet's (its fair share: the place the response held goes to the next).
    The calls in flight are revoked by their call ids, each as its kind's presenter reads it (an
    ``mcp_call`` or ``code_interpreter_call`` item has no ``call_id`` field: its ``id`` is it).
    """
    for _ in range(10):
        stored = owned_response(store, response_id, tenant)
        response = _kept(stored.response)
        if not response.background:
            raise InvalidRequestError(
                "Only responses created with background=true can be cancelled.",
                param="response_id",
                code="invalid_request",
            )
        if response.status not in ACTIVE_STATUSES:
            return response
        cancelled = response.model_copy(update={"status": ResponseStatus.CANCELLED})
        store.mark_cancelled(response_id)  # before the write: a worker may see it at once
        result = store.write(
            cancelled, transition=CANCEL, version=stored.version, running_turn=stored.turn
        )
        if result.ok:
            metrics.CANCELLATIONS.inc()
            in_flight = unanswered_calls(response, kinds)
            pending = [kinds.presenters.call_of(item).id for item in in_flight]
            dispatcher.revoke_response(response_id, stored.turn, pending)
            if settings is not None:
                FairShare(store, settings).release(dispatcher, tenant)
            return cancelled
    raise ServerError("The response changed too often to cancel; try again.")


def retrieve_response(
    store: ResponseStore, response_id: str, *, tenant: str = OPEN_TENANT
) -> ResponseObject:
    """The stored response; a finished ``store: false`` response is gone for HTTP clients."""
    return _kept(owned_response(store, response_id, tenant).response)


def _kept(response: ResponseObject) -> ResponseObject:
    """``response``, unless it is a finished ``store: false`` one: gone for HTTP clients.

    A background one stays while its record lives (``ANTWORT_UNSTORED_TTL_SECONDS`` after it
    ends): polling is how its client gets the answer.

    Raises:
        NotFoundError: it is.
    """
    if not response.store and not response.background and response.status not in ACTIVE_STATUSES:
        raise _not_found(response.id)
    return response


def delete_response(
    store: ResponseStore, response_id: str, *, tenant: str = OPEN_TENANT
) -> dict[str, Any]:
    """Delete a response with its input items and events."""
    owned_response(store, response_id, tenant)
    if not store.delete(response_id):
        raise _not_found(response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}


def list_input_items(
    store: ResponseStore,
    response_id: str,
    *,
    limit: int,
    order: str,
    after: str | None,
    tenant: str = OPEN_TENANT,
) -> dict[str, Any]:
    """``GET /v1/responses/{id}/input_items``: a page of the response's input items."""
    retrieve_response(store, response_id, tenant=tenant)
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
