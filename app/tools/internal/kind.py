"""The ``internal`` kind: in-worker plugins on ``tools.internal``, shown as function calls."""

from __future__ import annotations

import functools
from typing import Any

from app.errors import InvalidRequestError
from app.protocol.client_tools import EXTENSION_TYPE
from app.tools.base import ToolKind
from app.tools.internal import InternalExecutor, Registry, load_registry
from app.tools.internal.host import HostedExecutor
from app.tools.kinds import (
    KindContext,
    PreparedTools,
    RequestContext,
    ToolKindSpec,
    named_definition,
)

Item = dict[str, Any]


@functools.cache
def declared_registry(modules: tuple[str, ...]) -> Registry:
    """The internal tools' definitions, as the workers load them (not initialised here)."""
    return load_registry(list(modules))


def echo_internal_tools(context: RequestContext, declared: list[Item]) -> PreparedTools:
    """The declared tools, each internal one filled in from its plugin's definition.

    A ``provider:tool_type`` tool is the plugin that declares that type, echoed with its
    options and the plugin's name, description and parameters.

    Raises:
        InvalidRequestError: an internal tool or a tool type that no worker offers.
    """
    registry = declared_registry(tuple(context.settings.internal_tool_module_list))
    tools = []
    for index, tool in enumerate(declared):
        if tool["type"] == "internal":
            tool = _echo(tool, index, registry)
        elif ":" in tool["type"]:
            tool = {**tool, **_echo(_declaring(tool["type"], index, registry), index, registry)}
            tool["type"] = declared[index]["type"]
        tools.append(tool)
    return PreparedTools(tools=tools)


def _declaring(tool_type: str, index: int, registry: Registry) -> Item:
    found = registry.by_type(tool_type)
    if found is None:
        raise InvalidRequestError(
            f"No tool of this server declares the tool type '{tool_type}'.",
            param=f"tools.{index}.type",
            code="invalid_value",
        )
    return {"name": found.definition().name}


def _echo(tool: Item, index: int, registry: Registry) -> Item:
    found = registry.get(tool["name"])
    if found is None:
        known = ", ".join(sorted(d.name for d in registry.list())) or "none"
        raise InvalidRequestError(
            f"Unknown internal tool '{tool['name']}' (available: {known}).",
            param=f"tools.{index}.name",
            code="invalid_value",
        )
    definition = found.definition()
    return {
        "type": "internal",
        "name": definition.name,
        "description": definition.description,
        "parameters": definition.parameters,
        "strict": None,
        "timeout_seconds": definition.timeout_seconds,
    }


def make_internal_executor(context: KindContext) -> InternalExecutor:
    """The worker's plugins, each initialized now (one that raises is logged and left out).

    Under ``process`` isolation their calls run in tool hosts (:mod:`app.tools.internal.host`).
    """
    settings = context.settings
    registry = load_registry(settings.internal_tool_module_list)
    registry.initialize_all()
    if settings.internal_tool_isolation == "process":
        return HostedExecutor(
            registry,
            modules=settings.internal_tool_module_list,
            default_timeout=settings.tool_timeout_seconds,
        )
    return InternalExecutor(registry)


INTERNAL_KIND = ToolKindSpec(
    name=ToolKind.INTERNAL,
    tool_types=("internal", EXTENSION_TYPE),
    queue="tools.internal",
    define=named_definition(ToolKind.INTERNAL),
    prepare=echo_internal_tools,
    make_executor=make_internal_executor,
)
"""Server-side; its calls are ``function_call`` items answered by ``function_call_output``."""
