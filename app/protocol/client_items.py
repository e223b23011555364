"""Input items of the client-executed tool kinds: their calls (sent back as history) and outputs.

Shapes of the pinned ``openai`` SDK's ``ResponseInputItemParam`` members. A call's nested
payload (``action``, ``operation``) is kept as sent: it is the client's and the model's
business, and the model reads it back as the call's arguments.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from app.protocol.client_tools import CustomTool, NamespaceFunction, NamespaceTool

Status = Literal["in_progress", "completed", "incomplete"] | None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Caller(_Strict):
    """Who made a call: the model directly, or a program (``caller_id``)."""

    type: Literal["direct", "program"]
    caller_id: str | None = None


class CustomToolCallItem(_Strict):
    """A call the model made to a custom tool."""

    type: Literal["custom_tool_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: str
    namespace: str | None = None
    id: str | None = None
    caller: Caller | None = None
    async_: bool | None = Field(default=None, alias="async", exclude=True)
    """The SDK's, taken and dropped: the fleet runs every call in its turn."""


class CustomToolCallOutputItem(_Strict):
    """The client's result of a custom tool call."""

    type: Literal["custom_tool_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[dict[str, Any]]
    """Text, or content parts (``input_text``, ``input_image``, ``input_file``)."""
    id: str | None = None
    caller: Caller | None = None


class ApplyPatchCallItem(_Strict):
    """A file operation the model asked the client for."""

    type: Literal["apply_patch_call"]
    call_id: str = Field(min_length=1)
    operation: dict[str, Any]
    status: Literal["in_progress", "completed"]
    id: str | None = None
    caller: Caller | None = None


class ApplyPatchCallOutputItem(_Strict):
    """How the client's file operation went."""

    type: Literal["apply_patch_call_output"]
    call_id: str = Field(min_length=1)
    status: Literal["completed", "failed"]
    output: str | None = None
    id: str | None = None
    caller: Caller | None = None


class ShellCallItem(_Strict):
    """Commands the model asked the client to run."""

    type: Literal["shell_call"]
    call_id: str = Field(min_length=1)
    action: dict[str, Any]
    id: str | None = None
    status: Status = None
    environment: dict[str, Any] | None = None
    caller: Caller | None = None


class ShellCallOutputItem(_Strict):
    """What the client's commands printed, one entry per command."""

    type: Literal["shell_call_output"]
    call_id: str = Field(min_length=1)
    output: list[dict[str, Any]]
    max_output_length: int | None = None
    id: str | None = None
    status: Status = None
    caller: Caller | None = None


class LocalShellCallItem(_Strict):
    """A command the model asked the client's local shell to run.

    ``status`` as other calls have it: optional (the AI SDK sends the call back without one).
    """

    type: Literal["local_shell_call"]
    id: str = Field(min_length=1)
    call_id: str = Field(min_length=1)
    action: dict[str, Any]
    status: Status = None


class LocalShellCallOutputItem(_Strict):
    """What the command printed, naming its call by ``call_id`` or, without one, by ``id``.

    The SDK's typed param has only ``id`` ("the unique ID of the local shell tool call"); the
    Agents SDK and the AI SDK send ``call_id`` alone. With ``call_id``, ``id`` is the item's own.
    """

    type: Literal["local_shell_call_output"]
    id: str | None = Field(default=None, min_length=1)
    call_id: str | None = Field(default=None, min_length=1, validate_default=True)
    output: str
    status: Status = None

    @field_validator("call_id")
    @classmethod
    def _names_its_call(cls, call_id: str | None, info: ValidationInfo) -> str | None:
        if call_id is None and info.data.get("id") is None:
            raise PydanticCustomError("missing", "Field required")
        return call_id


class ComputerCallItem(_Strict):
    """An action on the screen the model asked the client for."""

    type: Literal["computer_call"]
    id: str = Field(min_length=1)
    call_id: str = Field(min_length=1)
    pending_safety_checks: list[dict[str, Any]]
    status: Literal["in_progress", "completed", "incomplete"]
    action: dict[str, Any] | None = None
    actions: list[dict[str, Any]] | None = None


class ComputerCallOutputItem(_Strict):
    """The screen after the action: a screenshot."""

    type: Literal["computer_call_output"]
    call_id: str = Field(min_length=1)
    output: dict[str, Any]
    acknowledged_safety_checks: list[dict[str, Any]] | None = None
    id: str | None = None
    status: Status = None


Execution = Literal["server", "client"]


class _Searched(_Strict):
    """A tool search's item: the client's names its call; a server's has no ``call_id``."""

    execution: Execution = "client"
    call_id: str | None = Field(default=None, min_length=1, validate_default=True)

    @field_validator("call_id")
    @classmethod
    def _client_names_its_call(cls, call_id: str | None, info: ValidationInfo) -> str | None:
        if call_id is None and info.data.get("execution", "client") == "client":
            raise ValueError("a tool search the client runs needs its call_id")
        return call_id


class ToolSearchCallItem(_Searched):
    """A search the model asked a ``tool_search`` for (``arguments``: an object).

    The client's search (``execution: "client"``) or the fleet's (``"server"``, no call id).
    """

    type: Literal["tool_search_call"]
    arguments: dict[str, Any]
    id: str | None = None
    status: Status = None


SearchedTool = Annotated[
    NamespaceFunction | CustomTool | NamespaceTool, Field(discriminator="type")
]
"""What a ``tool_search_output`` may load: the tools the model is then offered."""


class ToolSearchOutputItem(_Searched):
    """The tools a search loaded: the model may call them from then on."""

    type: Literal["tool_search_output"]
    tools: list[SearchedTool]
    id: str | None = None
    status: Status = None


CLIENT_ITEM_PREFIXES = {
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
    "apply_patch_call": "apc",
    "apply_patch_call_output": "apco",
    "shell_call": "sh",
    "shell_call_output": "sho",
    "local_shell_call": "lsh",
    "local_shell_call_output": "lsho",
    "computer_call": "cu",
    "computer_call_output": "cuo",
    "tool_search_call": "tsc",
    "tool_search_output": "tso",
}
"""The id prefix of each item type above (an input item without an ``id`` gets one)."""
