"""The ``sandbox`` kind: code interpreter, hosted shell, operators' tools (``tools.sandbox``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.tools.base import ToolDefinition, ToolKind
from app.tools.kinds import (
    KindContext,
    PreparedTools,
    RequestContext,
    ToolKindSpec,
    named_definition,
    named_tool,
)
from app.tools.sandbox.containers import claim_containers
from app.tools.sandbox.executor import SandboxExecutor, optional_sandbox_executor
from app.tools.sandbox.presenter import SandboxPresenter
from app.tools.sandbox.tools import (
    CODE_INTERPRETER,
    SHELL,
    SandboxToolSpec,
    code_interpreter_definition,
    declared_sandbox_tools,
    echo_sandbox_tool,
    is_hosted_shell,
    shell_definition,
)

Item = dict[str, Any]
_TOOL_TYPES = (CODE_INTERPRETER, SHELL, "sandbox")
_named = named_definition(ToolKind.SANDBOX)


def is_sandbox_tool(tool: Mapping[str, Any]) -> bool:
    """Whether a declared tool is the sandbox's: a ``shell`` only in a container environment."""
    return tool["type"] in _TOOL_TYPES and (tool["type"] != SHELL or is_hosted_shell(tool))


def define_sandbox_tool(tool: Item) -> ToolDefinition:
    """The definition of an echoed ``code_interpreter``, hosted ``shell`` or ``sandbox`` tool."""
    if tool["type"] == CODE_INTERPRETER:
        return code_interpreter_definition(tool)
    return shell_definition(tool) if tool["type"] == SHELL else _named(tool)


def offer_sandbox_tool(tool: Item) -> Item:
    """The code interpreter and the shell as the functions the model calls; others as declared."""
    if tool["type"] in (CODE_INTERPRETER, SHELL):
        return define_sandbox_tool(tool).chat_tool()
    return tool


def chosen_sandbox_tool(ref: Item) -> str | None:
    """An ``allowed_tools`` reference's tool: ``{"type": "code_interpreter"}`` has no name."""
    kind = ref.get("type")
    return named_tool(ref) or (kind if kind in (CODE_INTERPRETER, SHELL) else None)


def echo_sandbox_tools(
    declared: list[Item],
    *,
    history: Sequence[Mapping[str, Any]] = (),
    operator_tools: Mapping[str, SandboxToolSpec] | None = None,
) -> list[Item]:
    """The declared tools with each sandbox tool as the response echoes it.

    ``history`` (the chain's items and the input) tells a code interpreter which container the
    chain already uses; ``operator_tools`` are the operator's sandboxed function tools.

    Raises:
        InvalidRequestError: a feature the sandbox does not offer, or an unknown tool.
    """
    return [
        echo_sandbox_tool(tool, index, history=history, operator_tools=operator_tools)
        if is_sandbox_tool(tool)
        else tool
        for index, tool in enumerate(declared)
    ]


def prepare_sandbox_tools(context: RequestContext, declared: list[Item]) -> PreparedTools:
    """:func:`echo_sandbox_tools` for a request being created."""
    is_declared = any(is_sandbox_tool(tool) for tool in declared)
    echoed = echo_sandbox_tools(
        declared,
        # the chain is read only when a sandbox tool may find its container in it
        history=[*context.history, *context.inputs] if is_declared else (),
        operator_tools=declared_sandbox_tools(context.settings.sandbox_tools_file),
    )
    settings = context.settings
    claim_containers(
        context.redis,
        settings.keys,
        echoed,
        context.tenant,
        ttl_seconds=settings.response_ttl_seconds,
    )
    return PreparedTools(tools=echoed)


def make_sandbox_executor(context: KindContext) -> SandboxExecutor | None:
    """The executor, or None where bubblewrap is missing."""
    return optional_sandbox_executor(context.settings, context.redis, context.keys)


SANDBOX_KIND = ToolKindSpec(
    name=ToolKind.SANDBOX,
    tool_types=_TOOL_TYPES,
    accepts=is_sandbox_tool,  # a shell in the client's environment is the client's kind
    presenter=SandboxPresenter(),
    queue="tools.sandbox",
    define=define_sandbox_tool,
    model_tool=offer_sandbox_tool,
    choice_name=chosen_sandbox_tool,
    prepare=prepare_sandbox_tools,
    make_executor=make_sandbox_executor,
)
"""Server-side; ``code_interpreter`` calls are ``code_interpreter_call`` items, hosted shell
calls ``shell_call`` and ``shell_call_output`` items (the shell kind's presenter)."""
