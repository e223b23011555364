"""The simulator's answers on the JSON tool protocol (``app.providers.json_protocol``).

JSON mode
    A request whose first message is a ``system`` message that starts with the protocol's
    header (``# Antwort JSON tool protocol``) is answered with one JSON directive as text. The
    tools are the ``<tools>`` manifest of that system prompt. The *request* is the last user
    message that the protocol did not write (one not starting with ``[antwort] ``); the
    directives of :mod:`programs.simulator.behaviour` are read from it as usual, and the
    conversation after it decides the answer:

    1. no directive of ours after the request yet: a ``plan`` whose steps are ``Run <tool>``
       for every manifest tool named in the request (in order of appearance) and
       ``Write the answer``;
    2. fewer ``tool_request`` directives after the request than named tools: a ``tool_request``
       of the next named tool, ``step_title`` ``Run <tool>``, arguments generated from its schema
       as for native calls (``name=value`` in the request text included);
    3. otherwise a ``reply``: ``"Tool results: "`` + the outputs of the result messages after
       the request joined with ``"; "``, or, when there are none, the usual simulated answer.
       Under an answer format (the system prompt's ``<format>`` schema) the reply's message is
       that answer as structured answers make it (see :mod:`programs.simulator.behaviour`):
       the JSON value itself.

Scripted mistakes
    ``[json_fault=KIND]`` or ``[json_fault=KIND,KIND,…]`` in the request: the *n*-th mistake is
    made while *n-1* mistakes (answers containing ``sim-fault``) follow the request, and only at
    the answer it replaces: ``bad_json`` (JSON cut off), ``bad_schema`` (a ``tool_request``
    without ``tool``) and ``no_plan`` (a ``reply`` first) replace the plan; ``unknown_tool``
    (``sim_fault_tool``), ``bad_args`` (the first argument of the wrong type) and ``cancel`` (a
    ``cancel`` directive) replace the first ``tool_request``; ``bad_format`` (a message that is
    not JSON) replaces the final ``reply``. So one listed mistake is repaired
    by the next call, and the same mistake listed twice makes the repair fail too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from app.providers.json_protocol import (
    FORMAT_CLOSE,
    FORMAT_OPEN,
    NOTE_PREFIX,
    PROTOCOL_HEADER,
    RESULT_PREFIX,
    TOOLS_CLOSE,
    TOOLS_OPEN,
)

FAULT_MARKER = "sim-fault"
"""Every scripted mistake contains this text, so later calls can count them."""
_FAULT = re.compile(r"\[\s*json_fault\s*=\s*([a-z_,\s]+)\]", re.IGNORECASE)
_PLAN_FAULTS = frozenset({"bad_json", "bad_schema", "no_plan"})
_TOOL_FAULTS = frozenset({"unknown_tool", "bad_args", "cancel"})


def is_json_protocol(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the request speaks the JSON tool protocol (its system prompt says so)."""
    first = messages[0] if messages else {}
    content = first.get("content")
    return (
        first.get("role") == "system"
        and isinstance(content, str)
        and content.startswith(PROTOCOL_HEADER)
    )


def request_index(messages: Sequence[Mapping[str, Any]]) -> int | None:
    """Index of the last user message the protocol did not write."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        is_note = _leading_text(message.get("content")).startswith(NOTE_PREFIX)
        if message.get("role") == "user" and not is_note:
            return index
    return None


def parse_faults(text: str) -> tuple[list[str], str]:
    """The scripted mistakes of a request text, and the text without the directive."""
    faults: list[str] = []
    for match in _FAULT.finditer(text):
        faults += [kind.strip().lower() for kind in match.group(1).split(",") if kind.strip()]
    return faults, _FAULT.sub(" ", text)


def manifest_tools(system: str) -> dict[str, Mapping[str, Any]]:
    """The tools of the system prompt's manifest: name → parameters schema, in order."""
    listed = _tagged_json(system, TOOLS_OPEN, TOOLS_CLOSE)
    if not isinstance(listed, list):
        return {}
    return {
        str(tool["name"]): tool.get("parameters") or {}
        for tool in listed
        if isinstance(tool, Mapping) and tool.get("name")
    }


def answer_schema(system: str) -> Mapping[str, Any] | None:
    """The schema of the system prompt's answer format, if it has one."""
    schema = _tagged_json(system, FORMAT_OPEN, FORMAT_CLOSE)
    return schema if isinstance(schema, Mapping) else None


def _tagged_json(system: str, opening: str, closing: str) -> Any:
    """The JSON between the system prompt's ``opening`` and ``closing`` tags (None: none)."""
    start, end = system.find(opening), system.find(closing)
    if start < 0 or end < start:
        return None
    try:
        return json.loads(system[start + len(opening) : end])
    except ValueError:
        return None


def json_answer(
    messages: Sequence[Mapping[str, Any]],
    *,
    named: Sequence[str],
    tools: Mapping[str, Mapping[str, Any]],
    arguments: Mapping[str, dict[str, Any]],
    faults: Sequence[str],
    fallback: str,
) -> str:
    """The directive answering a JSON-mode conversation, as text.

    Args:
        messages: The messages after the request.
        named: Manifest tools named in the request, in order of appearance.
        tools: The manifest's tools (name → parameters schema).
        arguments: Generated arguments of each named tool.
        faults: The scripted mistakes, in order.
        fallback: The text answer when no tool results follow the request.
    """
    ours = [_directive(m) for m in messages if m.get("role") == "assistant"]
    made = [d for d in ours if d is not None and FAULT_MARKER not in json.dumps(d)]
    mistakes = sum(1 for m in messages if m.get("role") == "assistant" and _is_fault(m))
    requested = sum(1 for d in made if d.get("type") == "tool_request")
    fault = faults[mistakes] if mistakes < len(faults) else None
    if not made:
        if fault in _PLAN_FAULTS:
            return _fault_answer(fault, named, tools)
        steps = [f"Run {name}" for name in named] + ["Write the answer"]
        return json.dumps({"type": "plan", "steps": steps})
    if requested < len(named):
        if requested == 0 and fault in _TOOL_FAULTS:
            return _fault_answer(fault, named, tools)
        name = named[requested]
        request = {"name": name, "args": arguments[name]}
        return json.dumps({"type": "tool_request", "step_title": f"Run {name}", "tool": request})
    if fault == "bad_format":
        return json.dumps({"type": "reply", "message": f"{FAULT_MARKER}: not the format"})
    results = [_result(m) for m in messages if _result(m) is not None]
    message = "Tool results: " + "; ".join(r for r in results if r is not None)
    return json.dumps({"type": "reply", "message": message if results else fallback})


def formatted(answer: str, shape: Callable[[str], object]) -> str:
    """``answer`` with a reply's message made the JSON value ``shape`` makes of its text."""
    directive = json.loads(answer)
    if directive.get("type") != "reply" or FAULT_MARKER in str(directive.get("message")):
        return answer
    return json.dumps({**directive, "message": shape(directive["message"])})


def _directive(message: Mapping[str, Any]) -> dict[str, Any] | None:
    try:
        value = json.loads(str(message.get("content") or ""))
    except ValueError:
        return None
    return value if isinstance(value, dict) and "type" in value else None


def _is_fault(message: Mapping[str, Any]) -> bool:
    return FAULT_MARKER in str(message.get("content") or "")


def _result(message: Mapping[str, Any]) -> str | None:
    content = _leading_text(message.get("content"))
    if message.get("role") != "user" or not content.startswith(RESULT_PREFIX):
        return None
    return content.partition("\n")[2]


def _leading_text(content: object) -> str:
    """A message's text, or its first part's (a result's note, its images after it)."""
    if isinstance(content, list) and content and isinstance(content[0], Mapping):
        content = content[0].get("text")
    return content if isinstance(content, str) else ""


def _fault_answer(fault: str, named: Sequence[str], tools: Mapping[str, Mapping[str, Any]]) -> str:
    if fault == "bad_json":
        return '{"type": "plan", "steps": ["' + FAULT_MARKER + '"'
    if fault == "bad_schema":
        return json.dumps({"type": "tool_request", "message": FAULT_MARKER})
    if fault == "no_plan":
        return json.dumps({"type": "reply", "message": f"{FAULT_MARKER}: no plan"})
    if fault == "cancel":
        return json.dumps({"type": "cancel", "message": "The simulator gives up, as scripted."})
    if fault == "bad_args":
        name = named[0]
        args = _wrong_arguments(tools.get(name) or {})
        request = {"name": name, "args": args}
        return json.dumps({"type": "tool_request", "step_title": FAULT_MARKER, "tool": request})
    request = {"name": "sim_fault_tool", "args": {}}
    return json.dumps({"type": "tool_request", "step_title": FAULT_MARKER, "tool": request})


def _wrong_arguments(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments whose first property has the wrong type."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return {FAULT_MARKER: True}
    name, sub = next(iter(properties.items()))
    is_string = isinstance(sub, Mapping) and sub.get("type") == "string"
    return {name: 12345 if is_string else FAULT_MARKER}
