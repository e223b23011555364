"""Items: what goes into a response (input) and what comes out of it (output).

Input items are validated strictly (``extra="forbid"``) but accept everything the official SDK
sends back when a client passes a previous response's output as input (ids, statuses,
annotations, logprobs). An input item without ``type`` is a message.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    field_validator,
)

from app import cooperation
from app.errors import InvalidRequestError
from app.protocol.client_items import (
    ApplyPatchCallItem,
    ApplyPatchCallOutputItem,
    Caller,
    ComputerCallItem,
    ComputerCallOutputItem,
    CustomToolCallItem,
    CustomToolCallOutputItem,
    LocalShellCallItem,
    LocalShellCallOutputItem,
    ShellCallItem,
    ShellCallOutputItem,
    ToolSearchCallItem,
    ToolSearchOutputItem,
)

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
"""``reasoning.effort``'s values, least effort first (``app.config.REASONING_EFFORTS``)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PromptCacheBreakpoint(_Strict):
    """Where a reusable prompt prefix ends (OpenAI's explicit prompt caching).

    Accepted and kept with its part, not acted on: a model server caches prefixes by itself
    (vLLM's automatic prefix caching), and a worker keeps the start of a chain's prompt
    (``app.model_prefix``).
    """

    mode: Literal["explicit"]
    ttl: Literal["30m", "12h"] | None = None


class InputText(_Strict):
    """A text part of an input message."""

    type: Literal["input_text"]
    text: str
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None


class InputImage(_Strict):
    """An image part: an URL (``data:`` URLs included) or an uploaded file id."""

    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["low", "high", "auto", "original"] = "auto"
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None


class InputFile(_Strict):
    """A file part: inline data (base64 ``data:`` URL), an URL or a file id.

    ``detail`` (how finely OpenAI renders a file) is kept with the part: Chat Completions' file
    parts have no such field, so the model server reads the file as it does any.
    """

    type: Literal["input_file"]
    file_id: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None
    detail: Literal["auto", "low", "high"] | None = None
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None


class OutputText(_Strict):
    """Text the model wrote (also accepted in assistant input messages)."""

    type: Literal["output_text"]
    text: str
    annotations: list[dict[str, Any]] = Field(default_factory=list)
    logprobs: list[dict[str, Any]] | None = None


class Refusal(_Strict):
    """A refusal the model wrote."""

    type: Literal["refusal"]
    refusal: str


ContentPart = Annotated[
    InputText | InputImage | InputFile | OutputText | Refusal, Field(discriminator="type")
]


class MessageItem(_Strict):
    """A message; roles as in the spec. ``phase`` marks assistant commentary vs final answer."""

    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[ContentPart]
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    phase: Literal["commentary", "final_answer"] | None = None


class FunctionCallItem(_Strict):
    """A call the model made to a function tool."""

    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    namespace: str | None = None
    """The ``namespace`` tool the function belongs to."""
    caller: Caller | None = None
    async_: bool | None = Field(default=None, alias="async", exclude=True)
    """The SDK's, taken and dropped: the fleet runs every call in its turn."""


class FunctionCallOutputItem(_Strict):
    """The result of a function call, sent back by whoever ran it.

    ``name``, ``namespace`` and ``caller`` are the SDK's (a ``response.steer.pending`` stub
    carries the name); they go no further.
    """

    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[InputText | InputImage | InputFile]
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    name: str | None = None
    namespace: str | None = None
    caller: Caller | None = None


class ReasoningSummaryText(_Strict):
    """One summary paragraph of a reasoning item."""

    type: Literal["summary_text"]
    text: str


class ReasoningText(_Strict):
    """Raw reasoning text of a reasoning item."""

    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(_Strict):
    """The model's reasoning, as a provider returned it."""

    type: Literal["reasoning"]
    id: str | None = None
    summary: list[ReasoningSummaryText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class McpApprovalResponseItem(_Strict):
    """The client's decision on an ``mcp_approval_request`` of the previous response."""

    type: Literal["mcp_approval_response"]
    approval_request_id: str = Field(min_length=1)
    approve: bool
    reason: str | None = None
    id: str | None = None


class McpListedTool(_Strict):
    """One tool of an ``mcp_list_tools`` item."""

    name: str
    input_schema: dict[str, Any]
    description: str | None = None
    annotations: dict[str, Any] | None = None


class McpListToolsItem(_Strict):
    """A server's tool listing, sent back as input (a stateless client's history).

    Context only: the fleet lists the server again rather than trust a client's listing.
    """

    type: Literal["mcp_list_tools"]
    id: str = Field(min_length=1)
    server_label: str
    tools: list[McpListedTool]
    error: str | None = None


class McpCallItem(_Strict):
    """An MCP call with its result, sent back as input (a stateless client's history)."""

    type: Literal["mcp_call"]
    id: str = Field(min_length=1)
    server_label: str
    name: str
    arguments: str
    output: str | None = None
    error: dict[str, Any] | None = None
    """The SDK's ``McpToolCallError`` (``mcp_protocol_error``, ``http_error`` …)."""
    status: Literal["in_progress", "completed", "incomplete", "calling", "failed"] | None = None
    approval_request_id: str | None = None
    content: list[dict[str, Any]] | None = None
    """The fleet's: the MCP result's content blocks (``app.tools.mcp.presenter``)."""
    structured_content: Any = None
    """The fleet's: the MCP result's structured content."""


class McpApprovalRequestItem(_Strict):
    """An approval request sent back as input, before the client's answer to it.

    A stateless client's history: the answer may follow it in the same input.
    """

    type: Literal["mcp_approval_request"]
    id: str = Field(min_length=1)
    server_label: str
    name: str
    arguments: str


class WebSearchCallItem(_Strict):
    """A web search call, sent back as input (a stateless client's history); context only."""

    type: Literal["web_search_call"]
    id: str = Field(min_length=1)
    status: Literal["in_progress", "searching", "completed", "failed"]
    action: dict[str, Any]
    output: str | None = None
    """The fleet's: the search's answer (``app.tools.web_search``)."""


class FileSearchResult(_Strict):
    """A passage a file search found."""

    attributes: dict[str, str | float | bool] | None = None
    file_id: str | None = None
    filename: str | None = None
    score: float | None = None
    text: str | None = None


class FileSearchCallItem(_Strict):
    """A file search OpenAI ran, sent back as input (a history made there); context only.

    No file search runs here (``app.tools.hosted``): the model is shown the queries and what
    they found.
    """

    type: Literal["file_search_call"]
    id: str = Field(min_length=1)
    queries: list[str]
    status: Literal["in_progress", "searching", "completed", "incomplete", "failed"]
    results: list[FileSearchResult] | None = None


class ImageGenerationCallItem(_Strict):
    """An image OpenAI generated, sent back as input (a history made there); context only.

    No image generation runs here (``app.tools.hosted``): the model is told what was made (the
    image itself is not shown: a text model could not take it).
    """

    type: Literal["image_generation_call"]
    id: str = Field(min_length=1)
    result: str | None = None
    """The image, base64."""
    status: Literal["in_progress", "completed", "generating", "failed"]
    action: Literal["generate", "edit", "auto"] | None = None
    background: Literal["transparent", "opaque", "auto"] | None = None
    error: dict[str, Any] | None = None
    output_format: Literal["png", "webp", "jpeg", "gif", "svg"] | None = None
    quality: Literal["low", "medium", "high", "xhigh", "max", "auto"] | None = None
    revised_prompt: str | None = None
    size: str | None = None
    svg_usage: dict[str, Any] | None = None


class CompactionItem(_Strict):
    """The conversation so far, sealed by ``POST /v1/responses/compact`` (opaque to clients)."""

    type: Literal["compaction"]
    encrypted_content: str = Field(min_length=1, max_length=10_485_760)
    id: str | None = None
    created_by: str | None = None


class CompactionTriggerItem(_Strict):
    """Compact the conversation now: the response's one output is a ``compaction`` item.

    It must be the last input item (:func:`check_compaction_trigger`); the run makes the item
    (:func:`app.run.compact_conversation`).
    """

    type: Literal["compaction_trigger"]
    id: str | None = None
    metadata: dict[str, Any] | None = None
    """Codex CLI's (not in the SDK's types): taken, kept with the item."""


COMPACTION_TRIGGER = "compaction_trigger"


def asks_compaction(inputs: Sequence[dict[str, Any]]) -> bool:
    """Whether the input ends with a ``compaction_trigger``: the response compacts, nothing else."""
    return bool(inputs) and inputs[-1].get("type") == COMPACTION_TRIGGER


def check_compaction_trigger(inputs: Sequence[dict[str, Any]], *, has_history: bool) -> None:
    """A ``compaction_trigger`` is the last input item, if any, and something comes before it.

    ``has_history``: the response continues a chain or a conversation with items.

    Raises:
        InvalidRequestError: a trigger before another item, or one with nothing to compact.
    """
    for index, item in enumerate(cooperation.each(inputs[:-1])):
        if item.get("type") == COMPACTION_TRIGGER:
            raise InvalidRequestError(
                "A 'compaction_trigger' item must be the last input item.",
                param=f"input.{index}",
                code="invalid_value",
            )
    if asks_compaction(inputs) and len(inputs) == 1 and not has_history:
        raise InvalidRequestError(
            "Nothing to compact: give items before the 'compaction_trigger', or a "
            "'previous_response_id' or 'conversation' with items.",
            param="input",
            code="invalid_value",
        )


def since_compaction(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items the model is shown: the latest ``compaction`` item stands for what came before.

    Its summary covers the model's side of the conversation before it (answers, reasoning,
    calls and their results), which is left out; the messages not the model's (the user's,
    the system's and developer's) are kept, as ``/v1/responses/compact`` keeps the user's. So
    a chain or a stateless history compacted once is shown shortened from then on, however
    it reached the fleet (OpenAI: "the latest compaction item carries the necessary context").
    """
    latest = next(
        (n for n in range(len(items) - 1, -1, -1) if items[n].get("type") == "compaction"), None
    )
    if latest is None:
        return list(items)
    kept = [item for item in items[:latest] if is_turn_break(item)]
    return [*kept, *items[latest:]]


def is_compactable(items: Sequence[dict[str, Any]]) -> bool:
    """Whether a summary would shorten ``items`` (:func:`since_compaction` would leave one out).

    That is an item of the model's side after the latest ``compaction`` item, or anywhere
    without one.
    """
    for item in reversed(items):
        if item.get("type") == "compaction":
            return False
        if not is_turn_break(item) and item.get("type") not in _NEVER_SHOWN:
            return True
    return False


SETTINGS_ITEMS = frozenset({"additional_tools", "configuration_update"})
"""Items that set what a response may use and how, and that the model never sees."""
_NEVER_SHOWN = SETTINGS_ITEMS | {COMPACTION_TRIGGER}
"""Items the model is never shown (a summary shortens nothing by leaving them out)."""


class AdditionalToolsItem(_Strict):
    """Tools made available at this point of the conversation.

    Codex CLI's "lite" requests declare their tools this way, and no ``tools``. The model
    never sees the item. The tools of the input's items join the request's ``tools``
    (checked as those are: ``app.responses.prepare_response``); an earlier response's items in
    a chain still offer their function, custom and namespace tools (``app.tools.tool_search``).
    """

    type: Literal["additional_tools"]
    role: Literal["developer"] = "developer"
    tools: list[dict[str, Any]]
    id: str | None = None


class ConfigurationReasoning(_Strict):
    """The reasoning settings a ``configuration_update`` changes: the effort alone."""

    effort: ReasoningEffort | None = None


class ConfigurationUpdateItem(_Strict):
    """Settings for this response and the chain's later ones, until a later update replaces them.

    Codex CLI sends one when its user changes the reasoning effort mid-session, so the prompt's
    start stays the same. The model never sees the item; its ``reasoning.effort`` is sent as the
    request's would be (``app.run``). A ``text`` update is refused: the fleet holds a structured
    answer to the request's own ``text.format``.
    """

    type: Literal["configuration_update"]
    id: str | None = None
    reasoning: ConfigurationReasoning | None = None
    text: dict[str, Any] | None = None

    @field_validator("text")
    @classmethod
    def _no_text(cls, value: dict[str, Any] | None) -> None:
        if value is not None:
            raise ValueError("a text update is not supported; send text.format with the request")


def configured_effort(items: Sequence[dict[str, Any]]) -> str | None:
    """The reasoning effort the last ``configuration_update`` among ``items`` set, if any."""
    for item in reversed(items):
        if item.get("type") == "configuration_update":
            effort = (item.get("reasoning") or {}).get("effort")
            if effort is not None:
                return str(effort)
    return None


class CodeInterpreterLogs(_Strict):
    """Logs a code interpreter call printed."""

    type: Literal["logs"]
    logs: str


class CodeInterpreterImage(_Strict):
    """An image a code interpreter call produced."""

    type: Literal["image"]
    url: str


class CodeInterpreterCallItem(_Strict):
    """A code interpreter call sent back as input (a previous response's output item)."""

    type: Literal["code_interpreter_call"]
    id: str = Field(min_length=1)
    code: str | None = None
    container_id: str
    outputs: list[CodeInterpreterLogs | CodeInterpreterImage] | None = None
    status: Literal["in_progress", "completed", "incomplete", "interpreting", "failed"]


class ItemReference(_Strict):
    """An item of a stored response, named by its id (``app.references`` puts the item here).

    The SDK's ``type`` is optional: an item of an ``id`` alone is a reference.
    """

    type: Literal["item_reference"] = "item_reference"
    id: str = Field(min_length=1, max_length=256)


ITEM_REFERENCE = "item_reference"


def _item_type(value: Any) -> str:
    if isinstance(value, dict):
        if value.keys() == {"id"}:
            return ITEM_REFERENCE
        return str(value.get("type", "message"))
    return str(getattr(value, "type", "message"))


CLIENT_ITEM_LABELS = "internal_chat_message_metadata_passthrough"
"""Codex CLI's labels on each item it sends to OpenAI's own provider (turn id, content kinds):
taken and dropped, as its request-level ``client_metadata``."""


def _without_client_labels(value: Any) -> Any:
    if isinstance(value, dict) and CLIENT_ITEM_LABELS in value:
        return {key: item for key, item in value.items() if key != CLIENT_ITEM_LABELS}
    return value


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[CompactionItem, Tag("compaction")]
    | Annotated[CompactionTriggerItem, Tag("compaction_trigger")]
    | Annotated[CodeInterpreterCallItem, Tag("code_interpreter_call")]
    | Annotated[McpApprovalResponseItem, Tag("mcp_approval_response")]
    | Annotated[McpListToolsItem, Tag("mcp_list_tools")]
    | Annotated[McpCallItem, Tag("mcp_call")]
    | Annotated[McpApprovalRequestItem, Tag("mcp_approval_request")]
    | Annotated[WebSearchCallItem, Tag("web_search_call")]
    | Annotated[FileSearchCallItem, Tag("file_search_call")]
    | Annotated[ImageGenerationCallItem, Tag("image_generation_call")]
    | Annotated[ConfigurationUpdateItem, Tag("configuration_update")]
    | Annotated[AdditionalToolsItem, Tag("additional_tools")]
    # the client-executed kinds' calls and outputs (app/protocol/client_items.py)
    | Annotated[CustomToolCallItem, Tag("custom_tool_call")]
    | Annotated[CustomToolCallOutputItem, Tag("custom_tool_call_output")]
    | Annotated[ApplyPatchCallItem, Tag("apply_patch_call")]
    | Annotated[ApplyPatchCallOutputItem, Tag("apply_patch_call_output")]
    | Annotated[ShellCallItem, Tag("shell_call")]
    | Annotated[ShellCallOutputItem, Tag("shell_call_output")]
    | Annotated[LocalShellCallItem, Tag("local_shell_call")]
    | Annotated[LocalShellCallOutputItem, Tag("local_shell_call_output")]
    | Annotated[ComputerCallItem, Tag("computer_call")]
    | Annotated[ComputerCallOutputItem, Tag("computer_call_output")]
    | Annotated[ToolSearchCallItem, Tag("tool_search_call")]
    | Annotated[ToolSearchOutputItem, Tag("tool_search_output")]
    | Annotated[ItemReference, Tag(ITEM_REFERENCE)],
    Discriminator(
        _item_type,
        custom_error_type="invalid_item_type",
        custom_error_message="unsupported input item type",
    ),
    BeforeValidator(_without_client_labels),
]

INPUT_ITEMS: TypeAdapter[list[InputItem]] = TypeAdapter(list[InputItem])


def output_text_part(text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An ``output_text`` content part as the wire carries it."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def message_item(
    item_id: str, *, text: str | None, status: str, parts: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """An assistant output message item."""
    content = parts if parts is not None else ([] if text is None else [output_text_part(text)])
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def function_call_item(
    item_id: str, *, call_id: str, name: str, arguments: str, status: str
) -> dict[str, Any]:
    """A ``function_call`` output item."""
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def reasoning_item(item_id: str, *, text: str | None, status: str) -> dict[str, Any]:
    """A ``reasoning`` output item carrying the provider's reasoning text."""
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    return {"id": item_id, "type": "reasoning", "status": status, "summary": [], "content": content}


def item_id(prefix: str, response_id: str, turn: int, index: int) -> str:
    """A deterministic item id: a re-run turn names its items as the first run did.

    Its first 8 hex digits are the turn's tag (the same for every item of one model turn):
    :func:`turn_tag` reads which items one model turn produced, wherever they travel (a later
    response's chain, a client's resent history). Then the item's output index (8), then the
    response id's 48 digits (:func:`item_of_response`: an ``item_reference`` is read there).
    """
    tag = turn_tag_of(response_id, turn)
    named = item_of_response(prefix, response_id, f"{tag}{index:08x}")
    if named is not None:
        return named
    own = hashlib.blake2b(f"{response_id}:{turn}:{index}".encode(), digest_size=8).hexdigest()
    return f"{prefix}_{tag}{own}"  # a response id not of the fleet's making (a test's own)


def item_of_response(prefix: str, response_id: str, own: str) -> str | None:
    """``prefix``, then ``own`` (hex digits: an output item's 16) and the 48 of ``response_id``.

    The id names the response that made the item (:func:`response_of_item`), or whose input
    holds it (:func:`input_item_id`). None when ``response_id`` is not of the fleet's making (a
    test's own).
    """
    digits = _FLEET_RESPONSE_ID.fullmatch(response_id)
    return f"{prefix}_{own}{digits.group(1)}" if digits else None


def response_of_item(item_id: str) -> str | None:
    """The response whose output holds the item ``item_id`` (:func:`item_of_response`)."""
    found = _ITEM_OF_RESPONSE.fullmatch(item_id)
    return f"resp_{found.group(1)}" if found else None


def input_item_id(prefix: str, response_id: str, index: int) -> str | None:
    """The id of an item sent without one, ``index`` in the fleet's ``response_id``'s input.

    ``prefix``, the index (8 hex digits), then the response id's 48: the id names its place
    (:func:`input_of_item`), so an ``item_reference`` is read there. One digit group shorter
    than an output item's id, it names no model turn (:func:`turn_tag`). None when
    ``response_id`` is not of the fleet's making (a test's own).
    """
    return item_of_response(prefix, response_id, f"{index:08x}")


def input_of_item(item_id: str) -> tuple[str, int] | None:
    """The response and the place in its input of the item ``item_id`` (:func:`input_item_id`)."""
    found = _INPUT_OF_RESPONSE.fullmatch(item_id)
    return (f"resp_{found.group(2)}", int(found.group(1), 16)) if found else None


def conversation_item_id(prefix: str, conversation_id: str) -> str | None:
    """A fresh id for an item added to ``conversation_id`` without one: it names the conversation.

    ``prefix``, 12 random hex digits, then the conversation id's 48: an ``item_reference`` is
    read there (:func:`conversation_of_item`). Its length is neither an output item's nor an
    input item's (:func:`item_of_response`, :func:`input_item_id`). None when
    ``conversation_id`` is not of the fleet's making (a test's own).
    """
    digits = _FLEET_CONVERSATION_ID.fullmatch(conversation_id)
    return f"{prefix}_{secrets.token_hex(6)}{digits.group(1)}" if digits else None


def conversation_of_item(item_id: str) -> str | None:
    """The conversation the item ``item_id`` was added to (:func:`conversation_item_id`)."""
    found = _ITEM_OF_CONVERSATION.fullmatch(item_id)
    return f"conv_{found.group(1)}" if found else None


def turn_tag_of(response_id: str, turn: int) -> str:
    """The tag of a model turn: what the ids of all its items share (:func:`item_id`)."""
    return hashlib.blake2b(f"{response_id}:{turn}".encode(), digest_size=4).hexdigest()


_FLEET_RESPONSE_ID = re.compile(r"resp_([0-9a-f]{48})")
_ITEM_ID = re.compile(r"[a-z]+_([0-9a-f]{8})(?:[0-9a-f]{16}|[0-9a-f]{56})")
"""An id of :func:`item_id`: its response's (a fleet's id) or not (24 digits)."""
_ITEM_OF_RESPONSE = re.compile(r"[a-z]+_[0-9a-f]{16}([0-9a-f]{48})")
_INPUT_OF_RESPONSE = re.compile(r"[a-z]+_([0-9a-f]{8})([0-9a-f]{48})")
_FLEET_CONVERSATION_ID = re.compile(r"conv_([0-9a-f]{48})")
_ITEM_OF_CONVERSATION = re.compile(r"[a-z]+_[0-9a-f]{12}([0-9a-f]{48})")


def is_user_message(item: dict[str, Any]) -> bool:
    """Whether ``item`` is a message of the user's (a turn of the conversation starts there)."""
    return item.get("type", "message") == "message" and item.get("role") == "user"


def is_turn_break(item: dict[str, Any]) -> bool:
    """Whether a model turn ends before ``item``, whatever came before it.

    That is a message not the model's (the user's, the system's). Grouping by turn
    (``app.tools.transcript``) and the translation to chat messages
    (``app.providers.translate``) both start afresh there.
    """
    return item.get("type", "message") == "message" and item.get("role") != "assistant"


def is_answer(item: dict[str, Any]) -> bool:
    """Whether ``item`` answers the model: a result (``…_output``) or an approval's decision."""
    kind = item.get("type")
    return isinstance(kind, str) and (kind.endswith("_output") or kind == "mcp_approval_response")


def turn_tag(item_id: object) -> str | None:
    """The model turn an item id of :func:`item_id` names; None for any other id."""
    found = _ITEM_ID.fullmatch(item_id) if isinstance(item_id, str) else None
    return found.group(1) if found else None
