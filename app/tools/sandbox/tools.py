"""The sandbox kind's tools as a request declares them, and as the model sees them.

- ``{"type": "code_interpreter", "container": {"type": "auto"} | "cntr_…"}``: OpenAI's tool. The
  response echoes it with the container resolved to an id: the one the request names, else the
  container of the chain's last ``code_interpreter_call`` or hosted ``shell_call``, else a new
  one. Files persist in the container across the calls of a response chain.
- ``{"type": "shell", "environment": {"type": "container_auto"} | {"type":
  "container_reference", "container_id": "cntr_…"}}``: OpenAI's hosted shell. Its commands run
  in the sandbox, in a container found as the code interpreter's (the two share a chain's
  container and its files); the response echoes the environment as a ``container_reference``.
  A shell tool without a container environment (``local``, none) is the client's.
- ``{"type": "sandbox", "name": …}``: a function tool an operator declared in the JSON file
  ``ANTWORT_SANDBOX_TOOLS_FILE``; its script runs in the sandbox with the call's arguments as
  JSON on stdin (and in ``$TOOL_ARGUMENTS``)::

      [{"name": "word_count", "description": "Count words", "language": "python",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        "script": "import json, sys; print(len(json.load(sys.stdin)['text'].split()))"}]
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from app.errors import InvalidRequestError
from app.tools.base import ToolDefinition, ToolKind
from app.tools.client_calls import SHELL as SHELL_SHAPE

logger = logging.getLogger(__name__)

CODE_INTERPRETER = "code_interpreter"
SHELL = "shell"
HOSTED_ENVIRONMENTS = ("container_auto", "container_reference")
MAX_CODE_CHARS = 100_000
_CONTAINER_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxToolSpec:
    """An operator-declared sandboxed function tool."""

    name: str
    script: str
    language: Literal["python", "bash"] = "python"
    description: str | None = None
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    timeout_seconds: float | None = None

    def definition(self) -> ToolDefinition:
        """The tool as the model sees it."""
        return ToolDefinition(
            name=self.name,
            kind=ToolKind.SANDBOX,
            description=self.description,
            parameters=self.parameters,
            timeout_seconds=self.timeout_seconds,
        )


@cache
def load_sandbox_tools(path: str | None) -> dict[str, SandboxToolSpec]:
    """The operator's sandboxed tools, by name (none when no file is configured).

    Raises:
        ValueError: the file is not a JSON list of tool objects.
    """
    if not path:
        return {}
    raw = json.loads(Path(path).read_text())
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a JSON list of tools")
    specs = {}
    for entry in raw:
        if not isinstance(entry, dict) or entry.get("language", "python") not in ("python", "bash"):
            raise ValueError(f"{path}: bad tool entry {entry!r:.80}")
        spec = SandboxToolSpec(**entry)
        specs[spec.name] = spec
    return specs


def declared_sandbox_tools(path: str | None) -> dict[str, SandboxToolSpec]:
    """:func:`load_sandbox_tools` for the gateway: a broken file is logged, and offers no tools.

    (The ``tools.sandbox`` worker refuses to start with it, which is where operators look.)
    """
    try:
        return load_sandbox_tools(path)
    except (OSError, ValueError, TypeError):
        logger.exception("ANTWORT_SANDBOX_TOOLS_FILE %s cannot be read; no sandbox tools", path)
        return {}


def code_interpreter_definition(tool: Mapping[str, Any]) -> ToolDefinition:
    """The ``code_interpreter`` tool of an echoed tool object."""
    container = tool.get("container")
    return ToolDefinition(
        name=CODE_INTERPRETER,
        kind=ToolKind.SANDBOX,
        description=(
            "Run Python 3 code in a sandbox without network access. Files written to the "
            "working directory persist across calls in this conversation. Print what you "
            "need to see: only stdout and stderr come back."
        ),
        parameters={
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The Python code to run."}},
            "required": ["code"],
        },
        options={"container_id": container if isinstance(container, str) else None},
    )


def is_hosted_shell(tool: Mapping[str, Any]) -> bool:
    """Whether a declared ``shell`` tool runs in a container of the fleet's (the sandbox)."""
    environment = tool.get("environment")
    return isinstance(environment, Mapping) and environment.get("type") in HOSTED_ENVIRONMENTS


def shell_definition(tool: Mapping[str, Any]) -> ToolDefinition:
    """The hosted ``shell`` tool of an echoed tool object (shown as the client's shell calls)."""
    environment = tool.get("environment") or {}
    return ToolDefinition(
        name=SHELL,
        kind=ToolKind.SANDBOX,
        description=(
            "Run shell commands (bash), one after another, in a sandbox without network "
            "access, and read what each prints. Files in the working directory persist across "
            "calls in this conversation."
        ),
        parameters=SHELL_SHAPE.parameters,
        options={"container_id": environment.get("container_id"), "presented_as": SHELL},
    )


def echo_sandbox_tool(
    tool: dict[str, Any],
    index: int,
    *,
    history: Sequence[Mapping[str, Any]] = (),
    operator_tools: Mapping[str, SandboxToolSpec] | None = None,
) -> dict[str, Any]:
    """A ``code_interpreter`` or ``sandbox`` tool as the response object shows it.

    Raises:
        InvalidRequestError: a feature the sandbox does not offer, or an unknown tool.
    """
    if tool["type"] == CODE_INTERPRETER:
        return {"type": CODE_INTERPRETER, "container": _container_id(tool, index, history)}
    if tool["type"] == SHELL:
        environment = _shell_environment(tool, index, history)
        return {**tool, "environment": environment}
    spec = (operator_tools or {}).get(tool["name"])
    if spec is None:
        known = ", ".join(sorted(operator_tools or {})) or "none"
        raise InvalidRequestError(
            f"Unknown sandbox tool '{tool['name']}' (available: {known}).",
            param=f"tools.{index}.name",
            code="invalid_value",
        )
    return {
        "type": "sandbox",
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.parameters,
        "strict": None,
        "timeout_seconds": spec.timeout_seconds,
    }


def _container_id(tool: Mapping[str, Any], index: int, history: Sequence[Mapping[str, Any]]) -> str:
    container = tool.get("container")
    if isinstance(container, str):
        return _checked_id(container, f"tools.{index}.container")
    return _auto_container(container or {}, f"tools.{index}.container", history)


def _shell_environment(
    tool: Mapping[str, Any], index: int, history: Sequence[Mapping[str, Any]]
) -> dict[str, str]:
    environment = tool["environment"]
    param = f"tools.{index}.environment"
    if environment["type"] == "container_reference":
        container = environment.get("container_id")
        if not isinstance(container, str):
            raise InvalidRequestError(
                "A container_reference names its container_id.",
                param=f"{param}.container_id",
                code="missing_required_parameter",
            )
        container = _checked_id(container, f"{param}.container_id")
    else:
        if environment.get("skills"):
            raise InvalidRequestError(
                "skills are not supported: write the files from a command instead.",
                param=f"{param}.skills",
                code="unsupported_parameter",
            )
        container = _auto_container(environment, param, history)
    return {"type": "container_reference", "container_id": container}


def _checked_id(container: str, param: str) -> str:
    if not _CONTAINER_ID.match(container):
        raise InvalidRequestError(
            "A container id has 1-64 letters, digits, '_' or '-'.",
            param=param,
            code="invalid_value",
        )
    return container


def _auto_container(
    auto: Mapping[str, Any], param: str, history: Sequence[Mapping[str, Any]]
) -> str:
    """The container of ``{"type": "auto"}``: the chain's last one, else a new one."""
    if auto.get("file_ids"):
        raise InvalidRequestError(
            "file_ids are not supported: write files from code instead.",
            param=f"{param}.file_ids",
            code="unsupported_parameter",
        )
    policy = auto.get("network_policy") or {"type": "disabled"}
    if policy.get("type") != "disabled":
        raise InvalidRequestError(
            "The sandbox has no network access; only network_policy 'disabled' is supported.",
            param=f"{param}.network_policy",
            code="unsupported_parameter",
        )
    for item in reversed(history):
        found = container_of(item)
        if found:
            return found
    return f"cntr_{secrets.token_hex(16)}"


def container_of(item: Mapping[str, Any]) -> str | None:
    """The container a code interpreter call or a hosted shell call ran in, if any."""
    if item.get("type") == "code_interpreter_call" and item.get("container_id"):
        return str(item["container_id"])
    environment = item.get("environment")
    if item.get("type") == "shell_call" and isinstance(environment, Mapping):
        found = environment.get("container_id")
        return str(found) if found else None
    return None
