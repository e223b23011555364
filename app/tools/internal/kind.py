"""The ``internal`` kind: in-worker plugins on ``tools.internal``, shown as function calls."""

from __future__ import annotations

import functools
from typing import Any

from app.errors import InvalidRequestError
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

    Raises:
        InvalidRequestError: an internal tool that no worker offers.
    """
    registry = declared_registry(tuple(context.settings.internal_tool_module_list))
    return PreparedTools(
        tools=[
            _echo(tool, index, registry) if tool["type"] == "internal" else tool
            for index, tool in enumerate(declared)
        ]
    )


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
    tool_types=("internal",),
    queue="tools.internal",
    define=named_definition(ToolKind.INTERNAL),
    prepare=echo_internal_tools,
    make_executor=make_internal_executor,
)
"""Server-side; its calls are ``function_call`` items answered by ``function_call_output``."""
