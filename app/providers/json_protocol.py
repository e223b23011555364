"""The prompted JSON tool protocol, for models without reliable native tool calling.

A model on the ``json`` protocol is sent no native tools. Instead every call's system prompt
carries the protocol's rules and a manifest of the tools that may be called right now (rebuilt
from ``tools``, ``tool_choice`` and ``allowed_tools`` on every call), and the model answers with
exactly one JSON directive::

    {"type": "plan" | "tool_request" | "reply" | "cancel", "message"?, "step_title"?,
     "tool"?: {"name", "args"}, "steps"?: [...], "more"?: bool}

:class:`JsonToolProtocol` wraps any provider and turns directives into the chunks a native tool
call produces — ``message`` → :class:`TextDelta`, ``tool_request`` → :class:`ToolCallDelta` — so
the loop, the output items and the events are the same as with native calls; a ``plan`` becomes
a :class:`PlanUpdate`, a ``cancel`` a ``Finish`` whose reason is :data:`MODEL_CANCELLED`. A plan
(and a ``reply`` with ``"more": true``) does not end the model turn: the wrapper answers it at once
and asks for the next directive. An answer that breaks the protocol (invalid JSON, a schema
violation, an unknown tool, arguments that fail the tool's JSON schema, no plan first) gets one
repair call that tells the model exactly what was wrong; a second failure raises
:class:`ModelBehaviorError`, which fails the response with that explanation.

The wrapper and the model simulator share the wire conventions below (:data:`PROTOCOL_HEADER`,
:data:`NOTE_PREFIX`, the ``<tools>`` block): the simulator answers in directives when it sees them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from app.config import Settings
from app.errors import ModelBehaviorError
from app.progress import step_title
from app.protocol.items import turn_tag
from app.protocol.json_text import strict_loads
from app.protocol.request import TOOL_PROTOCOL_METADATA_KEY
from app.protocol.response import ResponseObject, Usage
from app.providers.chunks import (
    MODEL_CANCELLED,
    Chunk,
    Exchange,
    Finish,
    PlanUpdate,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from app.providers.json_schema import schema_mismatch
from app.providers.translate import ModelProvider, ModelRequest, to_chat_tool

PROTOCOL_HEADER = "# Antwort JSON tool protocol"
"""First line of the system prompt of every ``json`` call."""
NOTE_PREFIX = "[antwort] "
"""Start of every user-role message the protocol writes (tool results, repairs, go-aheads)."""
RESULT_PREFIX = NOTE_PREFIX + "Result of "
"""Start of a tool result message: ``[antwort] Result of NAME (CALL_ID):`` + newline + output."""
EXCHANGES_EXTRA = "exchanges"
"""The record's ``extra`` field that keeps each turn's :class:`Exchange`, by turn tag."""
TOOLS_OPEN = "<tools>"
TOOLS_CLOSE = "</tools>"
FORMAT_OPEN = "<format>"
FORMAT_CLOSE = "</format>"

_MAX_CONTINUATIONS = 4
"""Plans and interim replies one model turn may take before its answer is taken as final."""
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)

_RULES = """\
Answer every message with exactly ONE JSON object and nothing else: no prose around it, no
code fences. Its shape:
{"type": "plan" | "tool_request" | "reply" | "cancel", "message"?: string,
 "step_title"?: string, "tool"?: {"name": string, "args": object}, "steps"?: [string],
 "more"?: boolean}
- "plan": before you act, list the steps you will take as short titles in "steps".
- "tool_request": call ONE tool: "tool" names it and gives "args" that match its schema;
  "step_title" says in a few words what this step does (reuse your plan's titles).
- "reply": your answer to the user in "message" (Markdown allowed). It ends your work, unless
  "more" is true: then the message is an interim update and you continue.
- "cancel": stop because the task cannot or must not be done; say why in "message".
"message" is optional except in a reply, and is shown to the user at once. Tool results come
back in user messages that start with "[antwort] Result of"."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolRequest(_Strict):
    """``tool`` of a ``tool_request``: which tool, with which arguments."""

    name: str
    args: dict[str, Any] = {}


class Directive(_Strict):
    """One answer of a model on the JSON tool protocol."""

    type: Literal["plan", "tool_request", "reply", "cancel"]
    message: str | dict[str, Any] | list[Any] | None = None
    """Text; under an :class:`AnswerFormat`, a final reply's may be the JSON value itself."""
    step_title: str | None = None
    tool: ToolRequest | None = None
    steps: list[str] | None = None
    more: bool = False

    @model_validator(mode="after")
    def _check_fields_of_type(self) -> Directive:
        if self.type == "plan" and not self.steps:
            raise ValueError('a "plan" needs "steps": a non-empty list of step titles')
        if self.type == "tool_request" and self.tool is None:
            raise ValueError('a "tool_request" needs "tool": {"name": ..., "args": {...}}')
        if self.type != "tool_request" and self.tool is not None:
            raise ValueError(f'"tool" belongs to a "tool_request", not to a "{self.type}"')
        if self.type == "reply" and self.message in (None, ""):
            raise ValueError('a "reply" needs a non-empty "message"')
        return self


@dataclass(frozen=True, slots=True, kw_only=True)
class ManifestTool:
    """A tool as the protocol's manifest lists it."""

    kind: str
    name: str
    description: str | None
    parameters: dict[str, Any]

    def wire(self) -> dict[str, Any]:
        """The manifest entry."""
        return {
            "kind": self.kind,
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Manifest:
    """What the model may call in this call."""

    tools: dict[str, ManifestTool]
    is_required: bool = False
    """``tool_choice`` demands a call: a reply is refused."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerFormat:
    """What a final reply's message must be under ``text.format``: JSON that fits a schema.

    The protocol's own JSON is what the model writes, so the model server cannot be given the
    format (``response_format``). It is told in the prompt and checked here instead, a mismatch
    repaired like any broken answer; and only the final reply's message is shown (the messages
    of plans, tool requests and interim replies are not), so the answer's text is the document
    alone, as a client parsing it expects.
    """

    schema: dict[str, Any]
    """``json_schema``'s schema; ``{"type": "object"}`` for ``json_object``."""
    name: str | None = None

    @classmethod
    def of(cls, response_format: object) -> AnswerFormat | None:
        """The format a request's ``response_format`` asks for (None: plain text)."""
        if not isinstance(response_format, Mapping):
            return None
        kind = response_format.get("type")
        if kind == "json_object":
            return cls(schema={"type": "object"})
        spec = response_format.get("json_schema")
        if kind != "json_schema" or not isinstance(spec, Mapping):
            return None
        schema = spec.get("schema")
        return cls(
            schema=dict(schema) if isinstance(schema, Mapping) else {},
            name=str(spec.get("name") or "output"),
        )

    def prompt(self) -> str:
        """The system prompt's section that tells the model the format."""
        named = f' "{self.name}"' if self.name else ""
        listed = json.dumps(self.schema, indent=1)
        return (
            "# Answer format\n"
            f'The "message" of your final "reply" must be JSON that matches the schema{named} '
            'below: put the JSON value itself in "message", not a string around it. The '
            'messages of plans, tool requests and replies with "more" are not shown to the user.'
            f"\n{FORMAT_OPEN}\n{listed}\n{FORMAT_CLOSE}"
        )

    def answer(self, message: object) -> str:
        """The final reply's message as the answer's text.

        Raises:
            ProtocolViolation: the message is not JSON, or does not match the schema.
        """
        value = message
        if isinstance(message, str):
            try:
                value = strict_loads(_unfenced(message))
            except ValueError as exc:
                raise ProtocolViolation(
                    f'the "message" of your reply is not JSON ({exc}): the answer format asks '
                    "for a JSON value that matches its schema"
                ) from None
        mismatch = schema_mismatch(self.schema, value)
        if mismatch is not None:
            where, problem = mismatch
            raise ProtocolViolation(
                f'the "message" of your reply does not match the answer format at '
                f"'{where or 'message'}': {problem}"
            )
        return json.dumps(value, ensure_ascii=False)


class ProtocolViolation(Exception):
    """An answer broke the protocol; ``message`` says how, in words the model is shown."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def protocol_of(settings: Settings, response: ResponseObject) -> str:
    """``native`` or ``json``: the request's metadata, else the model's setting, else native."""
    chosen = (response.metadata or {}).get(TOOL_PROTOCOL_METADATA_KEY)
    if chosen:
        return str(chosen)
    return model_protocol(settings, response.model)


def model_protocol(settings: Settings, model: str) -> str:
    """``native`` or ``json``: the model's setting (``tool_protocols``), else native."""
    protocols = settings.tool_protocol_map
    return protocols.get(model) or protocols.get("*") or "native"


@dataclass(frozen=True, slots=True, kw_only=True)
class Memory:
    """What the protocol keeps of a response's earlier turns (in the record's ``extra``)."""

    plan: Sequence[str] | None = None
    """The plan the model made in an earlier turn, if any."""
    exchanges: Mapping[str, Sequence[dict[str, Any]]] = field(default_factory=dict)
    """Each earlier turn's :class:`Exchange`, by turn tag (the chain's turns too)."""


def with_tool_protocol(
    provider: ModelProvider,
    settings: Settings,
    response: ResponseObject,
    *,
    is_fresh: bool,
    memory: Memory | None = None,
    allowed: frozenset[str] | None = None,
) -> ModelProvider:
    """The provider that speaks the response's tool protocol.

    Args:
        provider: The model server's provider (native tool calling).
        settings: The fleet's settings (``tool_protocols``).
        response: The response being run (its model and metadata).
        is_fresh: The first turn of a new request: the model must plan first.
        memory: What the model wrote in earlier turns (its plan, its exchanges).
        allowed: The tools an ``allowed_tools`` choice lets run (None: every tool).
    """
    if protocol_of(settings, response) != "json":
        return provider
    memory = memory or Memory()
    return JsonToolProtocol(
        provider,
        needs_plan=is_fresh,
        plan=memory.plan,
        allowed=allowed,
        exchanges=memory.exchanges,
    )


def build_manifest(request: ModelRequest, *, allowed: frozenset[str] | None = None) -> Manifest:
    """The tools the model may call now, under ``tool_choice`` and ``allowed_tools``.

    ``allowed``: the names an ``allowed_tools`` choice lets run (None: every tool); the tool
    kinds know them (``ToolKinds.allowed_names``).
    """
    choice = request.tool_choice
    if choice == "none":
        return Manifest(tools={})
    is_forced = isinstance(choice, dict) and choice.get("type") == "function"
    forced = choice.get("name") if is_forced else None
    tools: dict[str, ManifestTool] = {}
    for tool in request.tools:
        if not tool.get("name"):
            continue  # a tool declaration that is not one callable tool
        function = to_chat_tool(tool)["function"]
        name = function["name"]
        if (allowed is not None and name not in allowed) or (forced and name != forced):
            continue
        tools[name] = ManifestTool(
            kind=str(tool.get("type", "function")),
            name=name,
            description=function.get("description"),
            parameters=function["parameters"],
        )
    is_required = (
        choice == "required"
        or forced is not None
        or (isinstance(choice, dict) and choice.get("mode") == "required")
    )
    return Manifest(tools=tools, is_required=is_required and bool(tools))


def system_prompt(
    manifest: Manifest,
    instructions: str | None,
    *,
    needs_plan: bool,
    plan: Sequence[str] | None = None,
    answer_format: AnswerFormat | None = None,
) -> str:
    """The rules, the plan so far, the manifest, the answer format, then the instructions."""
    parts = [PROTOCOL_HEADER, _RULES]
    if needs_plan:
        parts.append('Your first answer to a new request must be a "plan".')
    elif plan:
        steps = "\n".join(f"{number}. {step}" for number, step in enumerate(plan, start=1))
        parts.append(f"Your plan, made earlier (the results so far follow below):\n{steps}")
    if manifest.tools:
        listed = json.dumps([tool.wire() for tool in manifest.tools.values()], indent=1)
        parts.append(
            "Tools you may call now (kind, name, description, JSON schema of args):\n"
            f"{TOOLS_OPEN}\n{listed}\n{TOOLS_CLOSE}"
        )
        if manifest.is_required:
            parts.append("You must call a tool now: answer with a tool_request.")
    else:
        parts.append(f"{TOOLS_OPEN}\n[]\n{TOOLS_CLOSE}\nNo tool may be called now.")
    if answer_format is not None:
        parts.append(answer_format.prompt())
    if instructions:
        parts.append(f"# Instructions\n{instructions}")
    return "\n\n".join(parts)


def render_transcript(
    items: Sequence[dict[str, Any]],
    exchanges: Mapping[str, Sequence[dict[str, Any]]] | None = None,
) -> list[dict[str, Any]]:
    """The conversation as plain messages: the model's turns as the directives it wrote.

    A turn whose exchange was kept (``exchanges``, by turn tag: :class:`Exchange`) is replayed
    verbatim — its plan, interim replies and final directive, with the notes between them.
    Other turns are rendered: an assistant message followed by a call becomes that call's
    ``message``. A result becomes a user message starting with :data:`RESULT_PREFIX` (its
    images and files as parts after that text).
    Reasoning and other items are left out.
    """
    rendering = _Rendering(exchanges or {})
    for item in items:
        rendering.add(item)
    return rendering.close()


@dataclass(slots=True)
class _Rendering:
    exchanges: Mapping[str, Sequence[dict[str, Any]]]
    rendered: list[dict[str, Any]] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    said: str | None = None
    """Assistant text that a call may still claim as its message."""
    replayed: set[str] = field(default_factory=set)

    def add(self, item: dict[str, Any]) -> None:
        kind = item.get("type", "message")
        if kind == "function_call":
            self.names[item["call_id"]] = item["name"]
        if self._replays(item):
            return
        if kind == "function_call":
            self.rendered.append(_assistant(_call_directive(item, self.said)))
            self.said = None
            return
        self._flush_said()
        if kind == "message" and item.get("role") == "assistant":
            self.said = _text(item.get("content"))
        elif kind == "message":
            self.rendered.append(item)
        elif kind == "function_call_output":
            name = self.names.get(item["call_id"], "a tool")
            note = f"{RESULT_PREFIX}{name} ({item['call_id']}):\n{_text(item.get('output'))}"
            self.rendered.append(_result(note, item.get("output")))

    def close(self) -> list[dict[str, Any]]:
        self._flush_said()
        return self.rendered

    def _replays(self, item: dict[str, Any]) -> bool:
        """Whether ``item`` belongs to a kept exchange (replayed at its turn's first item)."""
        is_model = item.get("type") == "function_call" or item.get("role") == "assistant"
        tag = turn_tag(item.get("id")) if is_model else None
        if tag is None or tag not in self.exchanges:
            return False
        if tag not in self.replayed:
            self._flush_said()
            self.replayed.add(tag)
            self.rendered.extend(dict(message) for message in self.exchanges[tag])
        return True

    def _flush_said(self) -> None:
        if self.said is not None:
            self.rendered.append(_assistant({"type": "reply", "message": self.said}))
            self.said = None


def _call_directive(item: dict[str, Any], message: str | None) -> dict[str, Any]:
    try:
        args = json.loads(item.get("arguments") or "{}")
    except ValueError:
        args = {}
    directive: dict[str, Any] = {"type": "tool_request"}
    if message:
        directive["message"] = message
    directive["step_title"] = step_title(item["name"], item.get("arguments", ""))
    directive["tool"] = {"name": item["name"], "args": args if isinstance(args, dict) else {}}
    return directive


def _assistant(directive: dict[str, Any]) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": json.dumps(directive)}


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def _result(note: str, output: Any) -> dict[str, Any]:
    """A result's note as a user message, with the result's images and files after its text."""
    media = [
        part
        for part in (output if isinstance(output, list) else ())
        if isinstance(part, dict) and part.get("type") in ("input_image", "input_file")
    ]
    if not media:
        return _user(note)
    return {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": note}, *media],
    }


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def parse_directive(
    text: str,
    manifest: Manifest,
    *,
    must_plan: bool,
    may_plan: bool = True,
    may_continue: bool = True,
    answer_format: AnswerFormat | None = None,
) -> Directive:
    """Validate one answer against the protocol, the manifest and the answer format.

    ``may_continue`` False takes a reply's ``"more"`` as final. A final reply's message comes
    back as the answer's text (under ``answer_format``, the JSON it must be).

    Raises:
        ProtocolViolation: what is wrong, said so that the model can fix it.
    """
    stripped = _unfenced(text)
    try:
        value = strict_loads(stripped)
    except ValueError as exc:
        raise ProtocolViolation(f"your answer is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ProtocolViolation(f"your answer is JSON but not an object: {stripped[:80]}")
    try:
        directive = Directive.model_validate(value)
    except ValidationError as exc:
        problem = f"your answer does not fit the directive schema: {_errors(exc)}"
        raise ProtocolViolation(problem) from None
    _check_against_manifest(directive, manifest, must_plan=must_plan, may_plan=may_plan)
    if not may_continue:
        directive.more = False
    if is_final_reply(directive) and answer_format is not None:
        directive.message = answer_format.answer(directive.message)
    elif directive.message is not None and not isinstance(directive.message, str):
        raise ProtocolViolation(f'the "message" of a "{directive.type}" must be a string')
    return directive


def _unfenced(text: str) -> str:
    """``text`` stripped, and out of its Markdown code fence if it has one."""
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    return fenced.group(1) if fenced else stripped


def is_final_reply(directive: Directive) -> bool:
    """Whether the directive is the answer that ends the model's work."""
    return directive.type == "reply" and not directive.more


def _errors(exc: ValidationError) -> str:
    found = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        found.append(f"{where}: {message}" if where else message)
    return "; ".join(found)


def _check_against_manifest(
    directive: Directive, manifest: Manifest, *, must_plan: bool, may_plan: bool
) -> None:
    if must_plan and directive.type not in ("plan", "cancel"):
        raise ProtocolViolation(
            f'your first answer must be a "plan" (with "steps"), not a "{directive.type}"'
        )
    if directive.type == "plan" and not may_plan:
        raise ProtocolViolation(
            'you already made a plan: now answer with a "tool_request" or a "reply"'
        )
    if directive.type == "reply" and manifest.is_required:
        raise ProtocolViolation('a tool must be called now: answer with a "tool_request"')
    if directive.tool is not None:
        _check_tool(directive.tool, manifest)


def _check_tool(request: ToolRequest, manifest: Manifest) -> None:
    tool = manifest.tools.get(request.name)
    if tool is None:
        known = ", ".join(manifest.tools) or "none (no tool may be called now)"
        raise ProtocolViolation(f"there is no tool named '{request.name}'; the tools are: {known}")
    mismatch = schema_mismatch(tool.parameters, request.args)
    if mismatch is not None:
        where, problem = mismatch
        raise ProtocolViolation(
            f"the args for '{request.name}' do not match its schema at '{where or 'args'}': "
            f"{problem}"
        )


@dataclass(slots=True)
class _Answer:
    text: str = ""
    finish_reason: str = "stop"
    usage: Usage = field(default_factory=Usage)


class JsonToolProtocol:
    """A provider on the JSON tool protocol, wrapped around one without it."""

    def __init__(
        self,
        inner: ModelProvider,
        *,
        needs_plan: bool,
        plan: Sequence[str] | None = None,
        allowed: frozenset[str] | None = None,
        exchanges: Mapping[str, Sequence[dict[str, Any]]] | None = None,
    ):
        self._inner = inner
        self._needs_plan = needs_plan
        self._plan = list(plan or ())
        self._allowed = allowed
        self._exchanges = exchanges or {}

    def stream(self, request: ModelRequest) -> Iterator[Chunk]:
        """Ask for directives until one ends the turn; yield them as native chunks."""
        turn = self._turn(request)
        finish = "stop"
        for continuation in range(_MAX_CONTINUATIONS + 1):
            directive, raw = yield from self._directive(
                turn, may_continue=continuation < _MAX_CONTINUATIONS
            )
            if directive.message and turn.shows(directive):
                yield TextDelta(text=("\n\n" if turn.has_said else "") + str(directive.message))
                turn.has_said = True
            if directive.type == "plan" or (directive.type == "reply" and directive.more):
                if directive.type == "plan":
                    turn.plan = list(directive.steps or ())
                    yield PlanUpdate(steps=tuple(turn.plan))
                    turn.must_plan, turn.has_planned = False, True
                said = [_raw_assistant(raw), _user(_go_ahead(directive))]
                turn.items += said
                turn.exchange += said
                continue
            finish = self._finish(directive)
            turn.exchange.append(_raw_assistant(raw))
            if directive.tool is not None:
                yield _call_chunk(directive, directive.tool)
            break
        yield Exchange(messages=tuple(turn.exchange))
        yield UsageReport(usage=turn.usage)
        yield Finish(reason=finish)

    def first_call(self, request: ModelRequest) -> ModelRequest:
        """The model server's request of the turn's first call (what ``input_tokens`` counts)."""
        return self._call(self._turn(request))

    def _turn(self, request: ModelRequest) -> _Turn:
        return _Turn(
            request=request,
            manifest=build_manifest(request, allowed=self._allowed),
            items=render_transcript(request.items, self._exchanges),
            must_plan=self._needs_plan,
            plan=self._plan,
            answer_format=AnswerFormat.of(request.params.get("response_format")),
        )

    @staticmethod
    def _finish(directive: Directive) -> str:
        if directive.type == "cancel":
            return MODEL_CANCELLED
        return "tool_calls" if directive.type == "tool_request" else "stop"

    def _directive(
        self, turn: _Turn, *, may_continue: bool
    ) -> Generator[Chunk, None, tuple[Directive, str]]:
        """One valid directive, with one repair call if the first answer breaks the protocol."""
        problems: list[str] = []
        for _ in range(2):
            answer = yield from self._ask(turn)
            try:
                if answer.finish_reason == "length":
                    raise ProtocolViolation("your answer was cut off (too long): keep it shorter")
                directive = parse_directive(
                    answer.text,
                    turn.manifest,
                    must_plan=turn.must_plan,
                    may_plan=not turn.has_planned,
                    may_continue=may_continue,
                    answer_format=turn.answer_format,
                )
            except ProtocolViolation as violation:
                problems.append(violation.message)
                turn.items += [_raw_assistant(answer.text), _user(_repair(violation.message))]
                continue
            return directive, answer.text
        raise ModelBehaviorError(
            "The model did not follow the JSON tool protocol, even after being told what was "
            f"wrong. First answer: {problems[0]}. Second answer: {problems[1]}."
        )

    def _ask(self, turn: _Turn) -> Generator[Chunk, None, _Answer]:
        """One call of the model; reasoning passes through, the text is collected."""
        answer = _Answer()
        pieces: list[str] = []
        stream = self._inner.stream(self._call(turn))
        try:
            for chunk in stream:
                if isinstance(chunk, TextDelta):
                    pieces.append(chunk.text)
                elif isinstance(chunk, ReasoningDelta):
                    yield chunk
                elif isinstance(chunk, Finish):
                    answer.finish_reason = chunk.reason
                elif isinstance(chunk, UsageReport):
                    answer.usage = chunk.usage
                # native tool calls and plans are not part of this protocol: ignored
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        answer.text = "".join(pieces)
        turn.usage = turn.usage.plus(answer.usage)
        return answer

    @staticmethod
    def _call(turn: _Turn) -> ModelRequest:
        """The turn's next call: its conversation so far, under the protocol's system prompt."""
        request = turn.request
        params = {k: v for k, v in request.params.items() if k != "response_format"}
        return ModelRequest(
            model=request.model,
            instructions=system_prompt(
                turn.manifest,
                request.instructions,
                needs_plan=turn.must_plan,
                plan=turn.plan,
                answer_format=turn.answer_format,
            ),
            items=list(turn.items),
            params=params,
        )


@dataclass(slots=True, kw_only=True)
class _Turn:
    """The state of one model turn on the protocol: the conversation grows with each call."""

    request: ModelRequest
    manifest: Manifest
    items: list[dict[str, Any]]
    must_plan: bool
    plan: list[str] = field(default_factory=list)
    answer_format: AnswerFormat | None = None
    """``text.format``'s JSON, which the final reply must be (None: plain text)."""
    has_planned: bool = False
    has_said: bool = False
    usage: Usage = field(default_factory=Usage)
    exchange: list[dict[str, Any]] = field(default_factory=list)
    """The valid directives of the turn and the notes between them (repairs left out)."""

    def shows(self, directive: Directive) -> bool:
        """Whether the message is shown: under an answer format, the answer's or a cancel's."""
        if self.answer_format is None:
            return True
        return is_final_reply(directive) or directive.type == "cancel"


def _call_chunk(directive: Directive, tool: ToolRequest) -> ToolCallDelta:
    arguments = json.dumps(tool.args)
    return ToolCallDelta(
        index=0,
        name=tool.name,
        arguments=arguments,
        title=directive.step_title or step_title(tool.name, arguments),
    )


def _raw_assistant(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": text}


def _repair(problem: str) -> str:
    return (
        f"{NOTE_PREFIX}Your last answer broke the protocol: {problem}. Answer again with exactly "
        "one JSON object that follows the protocol, and nothing else."
    )


def _go_ahead(directive: Directive) -> str:
    if directive.type == "plan":
        return (
            f"{NOTE_PREFIX}Plan noted. Now take its first step: answer with a tool_request, or "
            "with a reply if no tool is needed."
        )
    return f"{NOTE_PREFIX}Go on."
