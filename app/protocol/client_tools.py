"""Request tools beyond function, MCP and the fleet's own: client-executed kinds and hosted tools.

Shapes of the pinned ``openai`` SDK's ``ToolParam`` members. The client-executed kinds pause the
response like ``function`` (app/tools/client_calls.py, app/tools/tool_search.py); hosted tools the
fleet cannot run are dropped or refused (app/tools/hosted.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

Callers = list[Literal["direct", "programmatic"]] | None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # wrong JSON types refused

    @model_serializer(mode="wrap")
    def _as_sent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Echoed on the response as the client sent it: options it left out stay out.
        return {k: v for k, v in handler(self).items() if v is not None}


class TextFormat(_Strict):
    """A custom tool's input is free-form text."""

    type: Literal["text"]


class GrammarFormat(_Strict):
    """A custom tool's input follows a grammar (told to the model; not enforced)."""

    type: Literal["grammar"]
    syntax: Literal["lark", "regex"]
    definition: str


class CustomTool(_Strict):
    """``custom``: a client tool whose input is a free-form string."""

    type: Literal["custom"]
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
    description: str | None = None
    format: Annotated[TextFormat | GrammarFormat, Field(discriminator="type")] | None = None
    allowed_callers: Callers = None
    defer_loading: bool | None = None
    async_: bool | None = Field(default=None, alias="async", exclude=True)
    """The SDK's (the AI SDK's ``openai.tools.custom({async})``), taken and dropped."""


class NamespaceFunction(_Strict):
    """A function tool of a namespace."""

    type: Literal["function"]
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    output_schema: dict[str, Any] | None = None
    allowed_callers: Callers = None
    defer_loading: bool | None = None
    async_: bool | None = Field(default=None, alias="async", exclude=True)
    """The SDK's, taken and dropped: the fleet runs every call in its turn."""


MAX_NAMESPACE_TOOLS = 1024
"""The tools a request's namespaces hold, all together (its ``additional_tools`` items' too).

Each is offered to the model and echoed in every ``response.*`` event: one namespace of 150,000
functions (a 16 MB body) held a gateway process 3.2 s to validate and make a dict, in one piece."""


class NamespaceTool(_Strict):
    """``namespace``: a group of function and custom tools; their calls carry ``namespace``."""

    type: Literal["namespace"]
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str
    tools: list[Annotated[NamespaceFunction | CustomTool, Field(discriminator="type")]] = Field(
        min_length=1, max_length=MAX_NAMESPACE_TOOLS
    )


def namespace_tools_count(tools: Any, *, most: int) -> int:
    """How many tools the namespaces of ``tools`` (a body's list, as sent) hold together.

    0 for a list longer than ``most`` (refused for its length), and for anything not a list.
    """
    if not isinstance(tools, list) or len(tools) > most:
        return 0
    namespaces = (
        tool for tool in tools if isinstance(tool, dict) and tool.get("type") == "namespace"
    )
    return sum(len(ns["tools"]) for ns in namespaces if isinstance(ns.get("tools"), list))


class _FixedTool(_Strict):
    """A tool the model is offered as a function of a fixed name (a second one is a 400)."""

    type: str

    @property
    def name(self) -> str:
        """The name the model calls it by (its type's; ``computer`` for both computer tools)."""
        return "computer" if self.type == "computer_use_preview" else self.type


class ApplyPatchTool(_FixedTool):
    """``apply_patch``: the client creates, updates or deletes files as the model asks."""

    type: Literal["apply_patch"]
    allowed_callers: Callers = None


SHELL_ENVIRONMENTS = ("local", "container_auto", "container_reference")


class ShellTool(_FixedTool):
    """``shell``: the client runs commands (``local``), or the sandbox does (a container)."""

    type: Literal["shell"]
    environment: dict[str, Any] | None = None
    allowed_callers: Callers = None

    @field_validator("environment")
    @classmethod
    def _known(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and value.get("type") not in SHELL_ENVIRONMENTS:
            raise ValueError(f"environment 'type' must be one of {', '.join(SHELL_ENVIRONMENTS)}")
        return value


class LocalShellTool(_FixedTool):
    """``local_shell``: the older shell tool (one command, an ``exec`` action)."""

    type: Literal["local_shell"]


class ComputerTool(_FixedTool):
    """``computer``: the client acts on a screen and answers with a screenshot."""

    type: Literal["computer"]


class ComputerUsePreviewTool(_FixedTool):
    """``computer_use_preview``: ``computer`` with the display declared."""

    type: Literal["computer_use_preview"]
    display_width: int = Field(ge=1)
    display_height: int = Field(ge=1)
    environment: Literal["windows", "mac", "linux", "ubuntu", "browser"]


class ToolSearchTool(_Strict):
    """``tool_search`` run by the client: the model searches, the client loads deferred tools.

    The client answers the ``tool_search_call`` with a ``tool_search_output`` whose ``tools``
    the model may call from then on. One run by OpenAI (no ``execution``, or ``server``) is
    parsed as a hosted tool (:class:`HostedTool`); the fleet runs that search itself
    (app/tools/tool_search.py).
    """

    type: Literal["tool_search"]
    execution: Literal["client"]
    description: str | None = None
    parameters: dict[str, Any] | None = None


HostedToolType = Literal[
    "web_search",
    "web_search_2025_08_26",
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "file_search",
    "image_generation",
    "tool_search",
    "programmatic_tool_calling",
]
"""OpenAI's hosted tools the fleet does not run itself (``ANTWORT_UNAVAILABLE_HOSTED_TOOLS``)."""

HOSTED_TOOL_TYPES: tuple[str, ...] = get_args(HostedToolType)

WEB_SEARCH_TYPES = (
    "web_search",
    "web_search_2025_08_26",
    "web_search_preview",
    "web_search_preview_2025_03_11",
)
"""The hosted tools an operator's plugin can back (app/tools/web_search.py)."""

EXTENSION_TYPE = "provider:tool_type"
"""The specs' extension point: a ``type`` with a colon names a tool type a plugin declares."""


class HostedTool(BaseModel):
    """A hosted tool; its options are OpenAI's to interpret, kept as sent."""

    model_config = ConfigDict(extra="allow")
    type: HostedToolType


class ExtensionTool(BaseModel):
    """``"provider:tool_type"``: a tool type an internal plugin declares (its options as sent)."""

    model_config = ConfigDict(extra="allow")
    type: str = Field(pattern=r"^[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+$", max_length=128)


def _field(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def is_client_tool_search(tool: Any) -> bool:
    """Whether a declared tool is a ``tool_search`` the client runs (a dict or a model)."""
    return bool(_field(tool, "type") == "tool_search" and _field(tool, "execution") == "client")


def tool_tag(value: Any) -> str | None:
    """The union member of a request's tool: its ``type``, or ``hosted`` / ``extension``."""
    kind = _field(value, "type")
    if not isinstance(kind, str):
        return None
    if is_client_tool_search(value):
        return kind
    if kind in HOSTED_TOOL_TYPES:
        return "hosted"
    return "extension" if ":" in kind else kind
