"""What the model simulator answers: a Chat Completions request in, a planned answer out.

The simulator is not a model. It answers every request by the rules below, deterministically;
tests, the quickstart and the benchmarks rely on them, so they are a contract.

Directives
    Written anywhere in the text of the last ``user`` message (text parts only), e.g.
    ``"hello [tokens=100] [reason]"``. They are removed from the text before it is used.

    - ``[tokens=N]``: a simulated answer is exactly N tokens long (capped at 100000).
    - ``[error=CODE]``: answer with HTTP status CODE and an OpenAI error body; a 429 also carries
      ``Retry-After: 0``. Only codes 400-599 count. This wins over every other rule.
    - ``[reason]``: before the answer, emit the words of ``"Thinking about: <text>"`` as
      ``reasoning_content``.
    - ``[delay_ms=N]`` / ``[ttft_ms=N]``: per-token delay / delay before the first chunk for this
      request, instead of the server's :class:`SimConfig` values.

Tokens
    A token is a whitespace-separated word; every token but the first carries its leading space,
    so the chunks concatenate back into the text.

Tool calls
    When the request has function ``tools``, ``tool_choice`` is not ``"none"`` and the last
    message is a ``user`` message, the tools called are:

    - with ``tool_choice={"type": "function", "function": {"name": X}}``: X alone (an X that is
      not among the tools is a 400);
    - otherwise every tool whose name appears as a whole word in the last user text, in order of
      first appearance;
    - if none appears and ``tool_choice`` is ``"required"``: the first tool.

    A ``[call NAME {json}]`` directive in the last user text (NAME one of the tools, the JSON
    an object) wins over the rules above: the calls are exactly those directives, in order, with
    exactly those arguments (nothing generated). A directive naming no tool is left out.

    ``parallel_tool_calls=false`` keeps only the first. A non-empty list is the whole answer
    (finish_reason ``tool_calls``, no content). Call ids are ``call_`` + 8 hex digits of a
    SHA-256 over the messages and the call's index.

Generated arguments
    Built from ``function.parameters``: object → every property, recursively; string → the
    first ``enum`` value, else ``"sim"``; integer → 1; number → 1.5; boolean → true; array → one
    element generated from ``items``; null → null; ``const`` → its value. A missing or empty
    schema gives ``{}`` for the parameters and ``"sim"`` for a property. ``anyOf``/``oneOf``/
    ``allOf`` use their first non-null branch, a type list its first non-null type, and local
    ``$ref``s are followed; objects nested deeper than 4 levels get only their required
    properties. ``name=value`` or ``name="a value"`` in the last user text sets every
    property called ``name``, coerced to its type (an array takes comma-separated values; an
    unquoted value loses trailing ``.,;:!?``); a value that does not coerce is ignored. The JSON
    is written with ``json.dumps`` default spacing.
    ``name=```value``` `` takes the value verbatim, newlines and quotes included (for code);
    such a block is left out when tools are chosen and other assignments are read.

Text answers
    After tool results (the last message is a ``tool`` message): ``"Tool results: "`` + the
    contents of the tool messages after the last assistant message, joined with ``"; "``, in
    full. Otherwise ``"Simulated answer to: <last user text>"``, cut or padded with the
    repeating filler ``lorem ipsum dolor sit amet …`` to exactly N tokens, N being
    ``[tokens=N]`` or ``SimConfig.default_tokens``. A ``max_completion_tokens`` (or else
    ``max_tokens``) below the answer's length cuts it there with finish_reason ``length``;
    otherwise the finish_reason is ``stop``. Reasoning is never cut.

Usage
    prompt_tokens = words in all message contents (strings or text parts) + 1 per message.
    completion_tokens = reasoning tokens + content tokens, or for tool calls reasoning tokens +
    the words of all the arguments JSON (at least 1).

JSON tool protocol
    A request whose system prompt starts with ``# Antwort JSON tool protocol`` is answered with
    JSON directives instead, by the rules of :mod:`programs.simulator.json_mode`.

Malformed requests (no ``messages`` array of objects, ``tools`` not an array, an unknown forced
tool) are a 400 ``invalid_request_error``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from programs.simulator.json_mode import (
    is_json_protocol,
    json_answer,
    manifest_tools,
    parse_faults,
    request_index,
)

MAX_ANSWER_TOKENS = 100_000
"""Upper bound for ``[tokens=N]``, so a typo cannot exhaust memory."""

_FILLER = (
    *("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do"),
    *("eiusmod", "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua"),
)
_MAX_SCHEMA_DEPTH = 12
_FULL_OBJECT_DEPTH = 4
_DIRECTIVE = re.compile(
    r"\[\s*(tokens|error|delay_ms|ttft_ms)\s*=\s*(\d+(?:\.\d+)?)\s*\]|\[\s*reason\s*\]",
    re.IGNORECASE,
)
_FENCED = re.compile(r"(?<![\w-])([A-Za-z_][\w-]*)=```(.*?)```", re.DOTALL)
_CALL = re.compile(r"\[\s*call\s+([A-Za-z0-9_.:-]+)\s+")
_ASSIGNMENT = re.compile(r'(?<![\w-])([A-Za-z_][\w-]*)=(?:"([^"]*)"|(\S+))')
_SCALARS: dict[str, Any] = {
    "string": "sim",
    "integer": 1,
    "number": 1.5,
    "boolean": True,
    "null": None,
}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}

FinishReason = Literal["stop", "tool_calls", "length"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SimConfig:
    """Server-wide settings of the model simulator."""

    ttft_ms: float = 0.0
    """Delay before the first chunk, in milliseconds."""
    token_delay_ms: float = 0.0
    """Delay between token chunks, in milliseconds."""
    default_tokens: int = 20
    """Length of a simulated text answer in tokens (words) when no ``[tokens=N]`` is given."""
    models: tuple[str, ...] = ("antwort-sim",)
    """Model ids listed by ``GET /v1/models``; the first is used when a request names none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Directives:
    """The directives found in the last user message, and its text without them."""

    text: str
    """The message text with the directives removed and whitespace collapsed."""
    tokens: int | None = None
    """``[tokens=N]``: answer length."""
    error: int | None = None
    """``[error=CODE]``: HTTP status to fail with."""
    is_reasoning: bool = False
    """``[reason]``: emit reasoning before the answer."""
    delay_ms: float | None = None
    """``[delay_ms=N]``: per-token delay."""
    ttft_ms: float | None = None
    """``[ttft_ms=N]``: delay before the first chunk."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedToolCall:
    """One tool call of a planned answer."""

    id: str
    """``call_`` + 8 hex digits."""
    name: str
    """The function's name."""
    arguments: str
    """The arguments as a JSON object text."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerPlan:
    """A successful answer: what to emit, in which order, and how fast."""

    reasoning: tuple[str, ...]
    """Reasoning tokens, emitted first."""
    content: tuple[str, ...]
    """Content tokens (empty for tool calls)."""
    tool_calls: tuple[PlannedToolCall, ...]
    """Tool calls (empty for a text answer)."""
    finish_reason: FinishReason
    """``stop``, ``tool_calls`` or ``length``."""
    prompt_tokens: int
    """Usage: prompt tokens."""
    completion_tokens: int
    """Usage: completion tokens."""
    ttft_ms: float
    """Delay before the first chunk."""
    token_delay_ms: float
    """Delay between token chunks."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorPlan:
    """A failed answer: an HTTP status with an OpenAI error body."""

    status: int
    """HTTP status code."""
    message: str
    """``error.message``."""
    type: str
    """``error.type``."""
    code: str
    """``error.code``."""
    headers: tuple[tuple[str, str], ...] = ()
    """Extra response headers."""

    def body(self) -> dict[str, Any]:
        """Return the OpenAI error body ``{"error": {message, type, param, code}}``."""
        return {
            "error": {"message": self.message, "type": self.type, "param": None, "code": self.code}
        }


Plan = AnswerPlan | ErrorPlan


class SimRequestError(ValueError):
    """The request is malformed; :func:`plan_answer` turns it into a 400."""


def plan_answer(request: Mapping[str, Any], config: SimConfig) -> Plan:
    """Decide the simulator's answer to a Chat Completions request.

    Args:
        request: The decoded JSON body of ``POST /v1/chat/completions``.
        config: The server's settings.

    Returns:
        An :class:`AnswerPlan`, or an :class:`ErrorPlan` for an ``[error=CODE]`` directive or a
        malformed request.
    """
    try:
        return _plan(request, config)
    except SimRequestError as exc:
        return ErrorPlan(
            status=400, message=str(exc), type="invalid_request_error", code="invalid_request"
        )


def _plan(request: Mapping[str, Any], config: SimConfig) -> Plan:
    messages = _messages(request)
    if is_json_protocol(messages):
        return _plan_json(request, messages, config)
    last_user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    directives = parse_directives(content_text(last_user.get("content")) if last_user else "")
    if directives.error is not None:
        return _error_plan(directives.error)
    reasoning = tokenize(f"Thinking about: {directives.text}") if directives.is_reasoning else ()
    calls: tuple[PlannedToolCall, ...] = ()
    if messages[-1].get("role") == "user":
        raw = content_text(last_user.get("content")) if last_user else ""
        calls = _plan_tool_calls(request, messages, directives.text, raw)
    content: tuple[str, ...] = ()
    if calls:
        finish: FinishReason = "tool_calls"
        emitted = max(1, sum(len(call.arguments.split()) for call in calls))
    else:
        content, finish = _plan_text(request, messages, directives, config)
        emitted = len(content)
    return _answer_plan(
        messages,
        directives,
        config,
        _Emitted(reasoning=reasoning, content=content, tool_calls=calls, finish_reason=finish),
        completion_tokens=len(reasoning) + emitted,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Emitted:
    reasoning: tuple[str, ...]
    content: tuple[str, ...]
    tool_calls: tuple[PlannedToolCall, ...] = ()
    finish_reason: FinishReason


def _answer_plan(
    messages: Sequence[Mapping[str, Any]],
    directives: Directives,
    config: SimConfig,
    emitted: _Emitted,
    *,
    completion_tokens: int,
) -> AnswerPlan:
    delay_ms = config.token_delay_ms if directives.delay_ms is None else directives.delay_ms
    return AnswerPlan(
        reasoning=emitted.reasoning,
        content=emitted.content,
        tool_calls=emitted.tool_calls,
        finish_reason=emitted.finish_reason,
        prompt_tokens=sum(len(content_text(m.get("content")).split()) + 1 for m in messages),
        completion_tokens=completion_tokens,
        ttft_ms=config.ttft_ms if directives.ttft_ms is None else directives.ttft_ms,
        token_delay_ms=delay_ms,
    )


def _plan_json(
    request: Mapping[str, Any], messages: Sequence[Mapping[str, Any]], config: SimConfig
) -> Plan:
    """A JSON-protocol answer (see :mod:`programs.simulator.json_mode`)."""
    index = request_index(messages)
    text = content_text(messages[index].get("content")) if index is not None else ""
    faults, text = parse_faults(text)
    directives = parse_directives(text)
    if directives.error is not None:
        return _error_plan(directives.error)
    tools = manifest_tools(content_text(messages[0].get("content")))
    named = select_tools({"tool_choice": "auto"}, tools, directives.text)
    overrides = parse_assignments(directives.text)
    length = config.default_tokens if directives.tokens is None else directives.tokens
    answer = json_answer(
        messages[index + 1 :] if index is not None else messages,
        named=named,
        tools=tools,
        arguments={name: generate_arguments(tools[name], overrides=overrides) for name in named},
        faults=faults,
        fallback="".join(_padded(tokenize(f"Simulated answer to: {directives.text}"), length)),
    )
    reasoning = tokenize(f"Thinking about: {directives.text}") if directives.is_reasoning else ()
    content = tokenize(answer)
    limit = _max_tokens(request)
    finish: FinishReason = "stop"
    if limit is not None and limit < len(content):
        content, finish = content[:limit], "length"
    return _answer_plan(
        messages,
        directives,
        config,
        _Emitted(reasoning=reasoning, content=content, finish_reason=finish),
        completion_tokens=len(reasoning) + len(content),
    )


def _messages(request: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise SimRequestError("'messages' must be a non-empty array")
    if not all(isinstance(message, Mapping) for message in messages):
        raise SimRequestError("every item of 'messages' must be an object")
    return messages


def content_text(content: object) -> str:
    """Return the text of a message content: a string, or the text parts of a list of parts.

    Args:
        content: A message's ``content`` value.

    Returns:
        The text; parts that are not text (images, audio) are ignored.
    """
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return ""


def tokenize(text: str) -> tuple[str, ...]:
    """Split text into simulator tokens: words, each but the first with its leading space.

    Args:
        text: Any text.

    Returns:
        The tokens; ``"".join(tokens)`` is the text with whitespace runs collapsed.
    """
    words = text.split()
    return tuple(word if i == 0 else f" {word}" for i, word in enumerate(words))


def parse_directives(text: str) -> Directives:
    """Find the directives in a user message text.

    Args:
        text: The text of the last user message.

    Returns:
        The directives, and the text without them.
    """
    values: dict[str, float] = {}
    is_reasoning = False
    for match in _DIRECTIVE.finditer(text):
        if match.group(1) is None:
            is_reasoning = True
        else:
            values[match.group(1).lower()] = float(match.group(2))
    tokens = values.get("tokens")
    error = values.get("error")
    return Directives(
        text=" ".join(_DIRECTIVE.sub(" ", text).split()),
        tokens=None if tokens is None else min(int(tokens), MAX_ANSWER_TOKENS),
        error=int(error) if error is not None and 400 <= error <= 599 else None,
        is_reasoning=is_reasoning,
        delay_ms=values.get("delay_ms"),
        ttft_ms=values.get("ttft_ms"),
    )


def _error_plan(status: int) -> ErrorPlan:
    return ErrorPlan(
        status=status,
        message=f"Simulated error {status}, requested by an [error={status}] directive.",
        type=_ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error"),
        code="simulated_error",
        headers=(("Retry-After", "0"),) if status == 429 else (),
    )


def _plan_text(
    request: Mapping[str, Any],
    messages: Sequence[Mapping[str, Any]],
    directives: Directives,
    config: SimConfig,
) -> tuple[tuple[str, ...], FinishReason]:
    if messages[-1].get("role") == "tool":
        results = [content_text(m.get("content")) for m in _trailing_tool_messages(messages)]
        tokens = tokenize("Tool results: " + "; ".join(results))
    else:
        length = config.default_tokens if directives.tokens is None else directives.tokens
        tokens = _padded(tokenize(f"Simulated answer to: {directives.text}"), length)
    limit = _max_tokens(request)
    if limit is not None and limit < len(tokens):
        return tokens[:limit], "length"
    return tokens, "stop"


def _trailing_tool_messages(
    messages: Sequence[Mapping[str, Any]],
) -> list[Mapping[str, Any]]:
    trailing: list[Mapping[str, Any]] = []
    for message in reversed(messages):
        if message.get("role") == "assistant":
            break
        if message.get("role") == "tool":
            trailing.append(message)
    return trailing[::-1]


def _padded(tokens: tuple[str, ...], length: int) -> tuple[str, ...]:
    if len(tokens) >= length:
        return tokens[: max(length, 0)]
    filler = (f" {_FILLER[i % len(_FILLER)]}" for i in range(length - len(tokens)))
    return tokens + tuple(filler)


def _max_tokens(request: Mapping[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = request.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def _plan_tool_calls(
    request: Mapping[str, Any], messages: Sequence[Mapping[str, Any]], text: str, raw: str
) -> tuple[PlannedToolCall, ...]:
    tools = _function_tools(request)
    explicit = [(name, arguments) for name, arguments in parse_calls(raw) if name in tools]
    if explicit and request.get("tool_choice", "auto") != "none":
        chosen = explicit[:1] if request.get("parallel_tool_calls") is False else explicit
        return _planned(messages, chosen)
    text = _FENCED.sub(" ", text)
    names = select_tools(request, tools, text)
    overrides = {**parse_assignments(text), **dict(_FENCED.findall(raw))}
    generated = [generate_arguments(tools[name], overrides=overrides) for name in names]
    return _planned(messages, [(n, json.dumps(a)) for n, a in zip(names, generated, strict=True)])


def _planned(
    messages: Sequence[Mapping[str, Any]], calls: Sequence[tuple[str, str]]
) -> tuple[PlannedToolCall, ...]:
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True, default=str).encode()).hexdigest()
    return tuple(
        PlannedToolCall(
            id="call_" + hashlib.sha256(f"{digest}:{index}".encode()).hexdigest()[:8],
            name=name,
            arguments=arguments,
        )
        for index, (name, arguments) in enumerate(calls)
    )


def parse_calls(text: str) -> list[tuple[str, str]]:
    """Find ``[call NAME {json}]`` directives in a text.

    Args:
        text: The last user text, as written.

    Returns:
        ``(name, arguments JSON text)`` of each directive whose JSON is an object, in order.
    """
    found = []
    decoder = json.JSONDecoder()
    for match in _CALL.finditer(text):
        try:
            value, end = decoder.raw_decode(text, match.end())
        except ValueError:
            continue
        if isinstance(value, dict) and text[end:].lstrip().startswith("]"):
            found.append((match.group(1), json.dumps(value)))
    return found


def _function_tools(request: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    tools = request.get("tools")
    if tools is None:
        return {}
    if not isinstance(tools, list):
        raise SimRequestError("'tools' must be an array")
    found: dict[str, Mapping[str, Any]] = {}
    for tool in tools:
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            parameters = function.get("parameters")
            found[function["name"]] = parameters if isinstance(parameters, Mapping) else {}
    return found


def select_tools(
    request: Mapping[str, Any], tools: Mapping[str, Mapping[str, Any]], text: str
) -> list[str]:
    """Choose which tools to call, by the tool-call rules of this module.

    Args:
        request: The request (``tool_choice`` and ``parallel_tool_calls`` are read).
        tools: The request's function tools, name to parameters schema, in request order.
        text: The last user text without directives.

    Returns:
        The names of the tools to call, in call order; empty for a text answer.

    Raises:
        SimRequestError: ``tool_choice`` forces a function that is not among the tools.
    """
    choice = request.get("tool_choice", "auto")
    if choice == "none" or not tools:
        return []
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        function = choice.get("function")
        forced = function.get("name") if isinstance(function, Mapping) else choice.get("name")
        if forced not in tools:
            raise SimRequestError(f"tool_choice names {forced!r}, which is not among the tools")
        return [str(forced)]
    positions = []
    for name in tools:
        match = re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)
        if match:
            positions.append((match.start(), name))
    names = [name for _, name in sorted(positions)]
    if not names and choice == "required":
        names = [next(iter(tools))]
    return names[:1] if request.get("parallel_tool_calls") is False else names


def parse_assignments(text: str) -> dict[str, str]:
    """Find ``name=value`` and ``name="a value"`` assignments in a text.

    Args:
        text: The last user text without directives.

    Returns:
        Property name to raw value; a later assignment of a name wins.
    """
    found: dict[str, str] = {}
    for match in _ASSIGNMENT.finditer(text):
        quoted, bare = match.group(2), match.group(3)
        found[match.group(1)] = quoted if quoted is not None else bare.rstrip(".,;:!?")
    return found


def generate_arguments(
    schema: Mapping[str, Any], *, overrides: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Generate tool-call arguments from a function's JSON schema.

    Args:
        schema: The function's ``parameters`` schema (may be empty).
        overrides: Raw values for properties, by property name, from the user's text.

    Returns:
        The arguments object; ``{}`` when the schema does not describe an object.
    """
    value = _generate(schema, _SchemaScope(root=schema, overrides=overrides or {}), 0)
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True, kw_only=True)
class _SchemaScope:
    root: Mapping[str, Any]
    overrides: Mapping[str, str]


def _generate(schema: object, scope: _SchemaScope, depth: int) -> Any:
    resolved = _resolve(schema, scope.root)
    if depth > _MAX_SCHEMA_DEPTH:
        return None
    if "const" in resolved:
        return resolved["const"]
    enum = resolved.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    kind = _schema_type(resolved)
    if kind == "object":
        properties = resolved.get("properties")
        if not isinstance(properties, Mapping):
            return {}
        required = resolved.get("required")
        if depth >= _FULL_OBJECT_DEPTH and isinstance(required, list):
            # a recursive schema would otherwise grow exponentially with the depth
            properties = {k: v for k, v in properties.items() if k in required}
        return {
            name: _property_value(name, sub, scope, depth + 1) for name, sub in properties.items()
        }
    if kind == "array":
        return [_generate(resolved.get("items"), scope, depth + 1)]
    return _SCALARS.get(kind or "string", "sim")


def _property_value(name: str, schema: object, scope: _SchemaScope, depth: int) -> Any:
    raw = scope.overrides.get(name)
    if raw is not None:
        try:
            return _coerce(raw, schema, scope.root)
        except ValueError:
            pass  # the user's value does not fit the type: fall back to the generated one
    return _generate(schema, scope, depth)


def _coerce(raw: str, schema: object, root: Mapping[str, Any]) -> Any:
    kind = _schema_type(_resolve(schema, root))
    if kind == "integer":
        return int(raw)
    if kind == "number":
        return float(raw)
    if kind == "boolean":
        if raw.lower() not in ("true", "false"):
            raise ValueError(raw)
        return raw.lower() == "true"
    if kind == "array":
        items = _resolve(schema, root).get("items")
        return [_coerce(part.strip(), items, root) for part in raw.split(",") if part.strip()]
    if kind in ("object", "null"):
        value = json.loads(raw)
        if kind == "object" and not isinstance(value, dict):
            raise ValueError(raw)
        return value
    return raw


def _resolve(schema: object, root: Mapping[str, Any]) -> Mapping[str, Any]:
    """Follow ``$ref`` and take the first non-null branch of ``anyOf``/``oneOf``/``allOf``."""
    for _ in range(_MAX_SCHEMA_DEPTH):
        if not isinstance(schema, Mapping):
            return {}
        ref = schema.get("$ref")
        branches = schema.get("anyOf") or schema.get("oneOf") or schema.get("allOf")
        if isinstance(ref, str):
            schema = _follow_ref(ref, root)
        elif isinstance(branches, list) and branches:
            schema = next((b for b in branches if _schema_type(b) != "null"), branches[0])
        else:
            return schema
    return {}


def _follow_ref(ref: str, root: Mapping[str, Any]) -> object:
    if not ref.startswith("#"):
        return {}  # remote references are out of scope for a simulator
    target: object = root
    for segment in ref.lstrip("#").split("/"):
        if segment:
            if not isinstance(target, Mapping):
                return {}
            target = target.get(segment.replace("~1", "/").replace("~0", "~"), {})
    return target


def _schema_type(schema: object) -> str | None:
    if not isinstance(schema, Mapping):
        return None
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if isinstance(kind, str):
        return kind
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return None
