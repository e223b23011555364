"""Client-side function tools for ``antwort chat --tools MODULE``: Python callables.

The module's ``TOOLS`` list, or else every public function defined in it, becomes a function
tool: the name is the function's, the description its docstring's first paragraph, the
parameters a JSON schema built by pydantic from the signature. When a response pauses on a
``function_call`` of one of them, the client calls the function and sends the result back as a
``function_call_output``. A function that raises answers ``Error: …``: a failing tool is data.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError, create_model


@dataclass(frozen=True, slots=True)
class ClientTool:
    """One Python callable offered to the model as a function tool."""

    function: Callable[..., Any]
    arguments: type[BaseModel]

    @property
    def name(self) -> str:
        """The tool's name: the function's."""
        return self.function.__name__

    def definition(self) -> dict[str, Any]:
        """The ``function`` tool of the request."""
        schema = self.arguments.model_json_schema()
        schema.pop("title", None)
        doc = inspect.getdoc(self.function) or ""
        return {
            "type": "function",
            "name": self.name,
            "description": doc.split("\n\n")[0] or None,
            "parameters": schema,
        }

    def call(self, arguments: str) -> str:
        """Run the function on the model's arguments; the output the model will read."""
        try:
            values = self.arguments.model_validate(json.loads(arguments or "{}"))
        except (ValueError, ValidationError) as exc:
            return f"Error: invalid arguments for {self.name}: {exc}"
        try:
            result = self.function(**dict(values))
        except Exception as exc:  # the tool's failure is data the model sees
            return f"Error: {self.name} failed: {exc}"
        return result if isinstance(result, str) else json.dumps(result, default=str)


def client_tool(function: Callable[..., Any]) -> ClientTool:
    """Describe one callable (its signature's annotations give the argument types)."""
    hints = typing.get_type_hints(function)
    fields: dict[str, Any] = {}
    for name, parameter in inspect.signature(function).parameters.items():
        annotation = hints.get(name, Any)
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[name] = (annotation, default)
    model = create_model(f"{function.__name__}_arguments", **fields)
    return ClientTool(function, model)


def load_client_tools(module_name: str) -> dict[str, ClientTool]:
    """The tools of a module, importable from the current directory as ``python -m`` does."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module = importlib.import_module(module_name)
    listed = getattr(module, "TOOLS", None)
    if listed is None:
        listed = [
            value
            for name, value in vars(module).items()
            if inspect.isfunction(value)
            and value.__module__ == module.__name__
            and not name.startswith("_")
        ]
    tools = [client_tool(function) for function in listed]
    return {tool.name: tool for tool in tools}
