"""The body of ``POST /v1/responses``, as the official SDK sends it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    Tag,
    field_validator,
    model_serializer,
)

from app.protocol.client_tools import (
    MAX_NAMESPACE_TOOLS,
    ApplyPatchTool,
    Callers,
    ComputerTool,
    ComputerUsePreviewTool,
    CustomTool,
    ExtensionTool,
    HostedTool,
    LocalShellTool,
    NamespaceFunction,
    NamespaceTool,
    ShellTool,
    ToolSearchTool,
    tool_tag,
)
from app.protocol.conversations import ConversationRef
from app.protocol.items import InputItem, ReasoningEffort
from app.protocol.options import (
    AccessPrograms,
    BackgroundOptions,
    ContextManagement,
    ImageOptions,
    Moderation,
    PromptCacheOptions,
    PromptReference,
)

TOOL_PROTOCOL_METADATA_KEY = "antwort_tool_protocol"
"""``metadata`` key that picks the tool protocol of one request: ``native`` or ``json``."""

Includable = Literal[
    # OpenAI's values (the SDK's ``ResponseIncludable``): accepted; the text's logprobs are asked
    # of the model server (TEXT_LOGPROBS), what else this server produces carries them already
    # (code interpreter outputs on their items) or has none to add (no file search, web search
    # or computer use here).
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
    # This server's extension: plan and step events (app/progress.py).
    "antwort:progress",
]
"""What ``include`` may name; anything else is a 400 naming the entry."""

TEXT_LOGPROBS = "message.output_text.logprobs"
"""``include``'s ask for the text's log probabilities (``top_logprobs`` alternatives each)."""

MAX_TOKENS = 2**31 - 1
"""Bound of token counts a client may ask for (what servers parse ``max_tokens`` into)."""
MAX_TOOLS = 128
"""OpenAI's limit on a request's ``tools`` (``array_above_max_length``). Each tool is echoed in
every ``response.*`` event and the stored response: 250,000 tools (a 14.6 MB body) held a gateway
process 9.7 s in one piece."""
MAX_ALLOWED_TOOLS = MAX_TOOLS + MAX_NAMESPACE_TOOLS
"""An ``allowed_tools`` choice names as many tools as a request can declare, at most: it is
echoed too, and 400,000 names (a 16 MB body) held a gateway process 1.9 s to validate."""
MAX_CONTEXT_MANAGEMENT = 16
"""``context_management`` entries: one says it all (its one type is ``compaction``); 300,000
(a 15 MB body, echoed) held a gateway process 1.6 s to validate."""

Metadata = dict[
    Annotated[str, StringConstraints(max_length=64)],
    Annotated[str, StringConstraints(max_length=512)],
]
"""OpenAI's ``metadata``: at most 16 pairs, keys up to 64 characters, values up to 512."""


class _Strict(BaseModel):
    # strict: a value of the wrong JSON type is refused, as OpenAI does ("stream": "yes" was
    # taken for true, "max_output_tokens": "5" for 5); a whole number still does for a number
    model_config = ConfigDict(extra="forbid", strict=True)


class FunctionTool(NamespaceFunction):
    """A function the client executes itself (the response pauses on a call)."""

    # A namespace's function's fields; echoed otherwise (the serializer replaces the parent's,
    # which leaves out every key not sent).
    @model_serializer(mode="wrap")
    def _as_sent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # The spec's four keys are always echoed; the SDK's later options only when sent.
        return _as_sent(handler(self))


_OPTIONAL_KEYS = frozenset({"output_schema", "allowed_callers", "defer_loading"})


def _as_sent(dumped: dict[str, Any]) -> dict[str, Any]:
    """A tool's echo without the SDK's later options it was not sent with."""
    return {k: v for k, v in dumped.items() if v is not None or k not in _OPTIONAL_KEYS}


class InternalToolRef(_Strict):
    """An internal tool of the fleet (a plugin that runs on ``tools.internal`` workers)."""

    type: Literal["internal"]
    name: str = Field(min_length=1, max_length=128)


class CodeInterpreterAuto(_Strict):
    """``container: {"type": "auto"}``: a container for the response chain."""

    type: Literal["auto"]
    file_ids: list[str] | None = None
    memory_limit: Literal["1g", "4g", "16g", "64g"] | None = None
    network_policy: dict[str, Any] | None = None


class CodeInterpreterTool(_Strict):
    """OpenAI's ``code_interpreter``: Python in the fleet's sandbox (``tools.sandbox``)."""

    type: Literal["code_interpreter"]
    container: str | CodeInterpreterAuto = Field(
        default_factory=lambda: CodeInterpreterAuto(type="auto")
    )
    allowed_callers: list[Literal["direct", "programmatic"]] | None = None

    @property
    def name(self) -> str:
        """The name the model calls it by."""
        return "code_interpreter"


class SandboxToolRef(_Strict):
    """A sandboxed function tool the operator declared (``ANTWORT_SANDBOX_TOOLS_FILE``)."""

    type: Literal["sandbox"]
    name: str = Field(min_length=1, max_length=128)


class McpToolFilter(_Strict):
    """Which tools of an MCP server a rule applies to."""

    tool_names: list[str] | None = None
    read_only: bool | None = None


class McpApprovalFilter(_Strict):
    """``require_approval`` per tool: ``always`` / ``never`` filters."""

    always: McpToolFilter | None = None
    never: McpToolFilter | None = None


class McpTool(_Strict):
    """A remote MCP server (OpenAI's shape), or a configured one named by ``server_label``."""

    type: Literal["mcp"]
    server_label: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    server_url: str | None = Field(default=None, max_length=2048)
    headers: dict[str, str] | None = None
    authorization: str | None = None
    allowed_tools: list[str] | McpToolFilter | None = None
    require_approval: Literal["always", "never"] | McpApprovalFilter | None = None
    server_description: str | None = None
    allowed_callers: Callers = None
    defer_loading: bool | None = None
    """Taken: no tool search runs here, so the server's tools are offered from the start (as
    a deferred function is, app/tools/function.py)."""

    @model_serializer(mode="wrap")
    def _as_sent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _as_sent(handler(self))


Tool = Annotated[
    Annotated[FunctionTool, Tag("function")]
    | Annotated[InternalToolRef, Tag("internal")]
    | Annotated[CodeInterpreterTool, Tag("code_interpreter")]
    | Annotated[SandboxToolRef, Tag("sandbox")]
    | Annotated[McpTool, Tag("mcp")]
    # issue 17: client-executed kinds, hosted tools, ``provider:tool_type`` (client_tools.py)
    | Annotated[CustomTool, Tag("custom")]
    | Annotated[NamespaceTool, Tag("namespace")]
    | Annotated[ApplyPatchTool, Tag("apply_patch")]
    | Annotated[ShellTool, Tag("shell")]
    | Annotated[LocalShellTool, Tag("local_shell")]
    | Annotated[ComputerTool, Tag("computer")]
    | Annotated[ComputerUsePreviewTool, Tag("computer_use_preview")]
    | Annotated[ToolSearchTool, Tag("tool_search")]
    | Annotated[HostedTool, Tag("hosted")]
    | Annotated[ExtensionTool, Tag("extension")],
    Discriminator(
        tool_tag, custom_error_type="invalid_tool_type", custom_error_message="unknown tool type"
    ),
]


class FunctionChoice(_Strict):
    """Force one named function."""

    type: Literal["function"]
    name: str


class AllowedToolRef(BaseModel):
    """A reference to a tool in an ``allowed_tools`` choice."""

    model_config = ConfigDict(extra="allow")
    type: str
    name: str | None = None
    server_label: str | None = None


class AllowedToolsChoice(_Strict):
    """Restrict which of the declared tools may run."""

    type: Literal["allowed_tools"]
    mode: Literal["auto", "required", "none"] = "auto"
    tools: list[AllowedToolRef] = Field(max_length=MAX_ALLOWED_TOOLS)


class McpChoice(_Strict):
    """Force a tool of one MCP server.

    Without ``server_label``, of any declared one: what the AI SDK sends to force its ``mcp``
    tool, and the Agents SDK's ``tool_choice="mcp"``.
    """

    type: Literal["mcp"]
    server_label: str | None = None
    name: str | None = None


class HostedChoice(_Strict):
    """Force a tool by its type (``code_interpreter``, ``apply_patch``, ``shell`` …)."""

    type: Literal[
        "code_interpreter",
        "file_search",
        "web_search",  # not in the SDK's choices: the Agents SDK and the AI SDK send it
        "web_search_2025_08_26",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "image_generation",
        "computer",
        "computer_use",
        "computer_use_preview",
        "apply_patch",
        "shell",
        "programmatic_tool_calling",
        "tool_search",  # not in the SDK's choices: forces a tool_search the client runs
    ]


class CustomChoice(_Strict):
    """Force one named custom tool."""

    type: Literal["custom"]
    name: str


ToolChoice = (
    Literal["auto", "required", "none"]
    | Annotated[
        FunctionChoice | AllowedToolsChoice | McpChoice | HostedChoice | CustomChoice,
        Field(discriminator="type"),
    ]
)


class PlainText(_Strict):
    """``text.format`` ``text``: the answer is plain text."""

    type: Literal["text"]


class JsonObject(_Strict):
    """``text.format`` ``json_object``: the answer is a JSON object (older JSON mode)."""

    type: Literal["json_object"]


class JsonSchema(BaseModel):
    """``text.format`` ``json_schema``: the answer follows a named JSON schema.

    Told to the model as Chat Completions' ``response_format``; enforced as far as the model
    server does.
    """

    model_config = ConfigDict(extra="forbid", strict=True, serialize_by_alias=True)
    type: Literal["json_schema"]
    name: str = Field(max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    schema_: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


TextFormat = Annotated[PlainText | JsonObject | JsonSchema, Field(discriminator="type")]


class TextConfig(_Strict):
    """``text``: the output format and verbosity."""

    format: TextFormat = Field(default_factory=lambda: PlainText(type="text"))
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningConfig(_Strict):
    """``reasoning``: effort and summary preferences, and which earlier reasoning the model sees.

    ``context``: ``current_turn`` leaves out the reasoning of earlier turns, ``all_turns`` and
    ``auto`` keep it (where the model server takes it back). ``mode``: ``standard`` only, the
    one execution mode a self-hosted model has.
    """

    effort: ReasoningEffort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None
    context: Literal["auto", "current_turn", "all_turns"] | None = None
    mode: Literal["standard"] | None = None


class StreamOptions(_Strict):
    """``stream_options``."""

    include_obfuscation: bool | None = None
    include_usage: bool | None = None


ServiceTier = Literal["auto", "default", "flex", "scale", "priority", "fast", "ultrafast"]
"""``service_tier``'s values (the pinned SDK's ``ServiceTier``): echoed; one fleet serves all."""


class ToolList(_Strict):
    """The tools of an ``additional_tools`` input item, checked as the request's own."""

    tools: list[Tool] = Field(max_length=MAX_TOOLS)


class CreateResponseRequest(_Strict):
    """``POST /v1/responses``. Unknown fields are refused with ``param`` naming them."""

    model: str | None = None
    input: str | list[InputItem] = Field(default_factory=list)
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: str | ConversationRef | None = None
    store: bool = True
    background: bool = False
    background_options: BackgroundOptions | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[Tool] = Field(default_factory=list, max_length=MAX_TOOLS)
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool = True
    max_output_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    max_tool_calls: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    truncation: Literal["auto", "disabled"] | None = None
    metadata: Metadata | None = Field(default=None, max_length=16)
    user: str | None = None
    safety_identifier: str | None = Field(default=None, max_length=64)
    prompt_cache_key: str | None = None
    service_tier: ServiceTier | None = None
    include: list[Includable] | None = None
    # The rest of the SDK's create body (the README's field table says what each does here).
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    context_management: list[ContextManagement] | None = Field(
        default=None, max_length=MAX_CONTEXT_MANAGEMENT
    )
    moderation: Moderation | None = None
    access_programs: AccessPrograms | None = None
    image: ImageOptions | None = None
    prompt: PromptReference | None = None
    client_metadata: dict[str, str] | None = None
    """Codex CLI's per-turn labels (not in the SDK's types): accepted, never echoed."""

    @field_validator("metadata")
    @classmethod
    def _check_tool_protocol(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        protocol = (value or {}).get(TOOL_PROTOCOL_METADATA_KEY)
        if protocol is not None and protocol not in ("native", "json"):
            raise ValueError(f"'{TOOL_PROTOCOL_METADATA_KEY}' must be 'native' or 'json'")
        return value

    @property
    def conversation_id(self) -> str | None:
        """The id ``conversation`` names (a string or ``{"id": …}``), if any."""
        if isinstance(self.conversation, ConversationRef):
            return self.conversation.id
        return self.conversation or None
