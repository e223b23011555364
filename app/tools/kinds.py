"""Tool kinds as plugins: one :class:`ToolKindSpec` per kind, and :class:`ToolKinds`, their index.

A spec says everything the engine needs to know about a kind, so that the loop, the planner, the
gateway's request checks and the tool workers deal in specs and never name a kind:

- which ``tools`` entries of a request are its own (``tool_types``), how each becomes a tool
  definition and how it is offered to the model, and which further tools the chain's items bring
  (an MCP server's listing);
- how its calls look on the wire (its presenter, further call item types, views of other items);
- who runs its calls: the client (``queue`` is None: the response pauses) or the fleet, on
  ``queue`` with the executor ``make_executor`` builds;
- what it does when a response is created (validate, echo into the response's ``tools``, seal
  secrets into the response's ``extra``) and before each step and each model call.

Every kind this build ships is registered in one place, :mod:`app.tools.registry`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import redis

from app import cooperation
from app.config import Settings
from app.errors import InvalidRequestError, quoted
from app.keys import Keys
from app.protocol.client_tools import EXTENSION_TYPE
from app.protocol.events import Event
from app.protocol.response import ResponseObject
from app.tools.base import ToolCall, ToolDefinition, ToolExecutor, ToolResult
from app.tools.presenters import FUNCTION_CALLS, CallPresenter, ItemView, PresenterIndex

Item = dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class KindContext:
    """What a kind's factories may use to build a process's collaborators."""

    settings: Settings
    redis: redis.Redis
    keys: Keys


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestContext:
    """A request being created, as a kind's checks and preparation see it."""

    settings: Settings
    redis: redis.Redis
    history: Sequence[Item]
    """The items before this response (its ``previous_response_id`` chain or context)."""
    inputs: Sequence[Item]
    """The request's input items."""
    tenant: str = ""
    """Who creates the response (:mod:`app.ownership`): what it names must be its own."""
    generate: bool = True
    """Whether the model is called on it (not for WebSocket mode's ``"generate": false``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedTools:
    """A request's ``tools`` after a kind prepared its own."""

    tools: list[Item]
    """Every declared tool, this kind's as the response object echoes them."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Kept with the response for the workers, never shown (sealed secrets)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepInput:
    """A step of a response as a kind's hook sees it."""

    response: ResponseObject
    turn: int
    """Model turns committed so far."""
    history: Sequence[Item]
    inputs: Sequence[Item]
    extra: Mapping[str, Any]


class EventOut(Protocol):
    """Where a hook's events go (the run's event sink)."""

    def emit(self, event: Event) -> None:
        """Emit one event (it may be held back and sent with later ones)."""

    def flush(self) -> None:
        """Send the events held back, now."""


StepHook = Callable[[Any, StepInput, EventOut], ResponseObject]
"""``(the kind's turn dependency or None, the step, events) → the response, updated``."""


def as_declared(tool: Item) -> Item | None:
    """A declared tool offered to the model as it is (the default of ``model_tool``)."""
    return tool


def named_tool(ref: Item) -> str | None:
    """The tool an ``allowed_tools`` reference names (the default of ``choice_name``)."""
    name = ref.get("name")
    return str(name) if name else None


def missing_output(call_type: str, call_id: str) -> InvalidRequestError:
    """The 400 for a call the input leaves without the result the model needs (OpenAI's)."""
    label = call_type.replace("_", " ")
    return InvalidRequestError(
        f"No tool output found for {label} '{call_id}'.",
        param="input",
        code="missing_tool_output",
    )


def duplicate_tool_name(name: str, *, param: str) -> InvalidRequestError:
    """A request offering the model two tools of one name: one of them would never run."""
    return InvalidRequestError(
        f"Tool names must be unique: {quoted(name)} is declared twice.",
        param=param,
        code="duplicate_tool_name",
    )


def named_definition(kind: str) -> Callable[[Item], ToolDefinition]:
    """A ``define`` for tools declared with a name, description and JSON schema."""

    def define(tool: Item) -> ToolDefinition:
        return ToolDefinition(
            name=tool["name"],
            kind=kind,
            description=tool.get("description"),
            parameters=tool.get("parameters") or {"type": "object", "properties": {}},
            timeout_seconds=tool.get("timeout_seconds"),
        )

    return define


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolKindSpec:
    """One tool kind: its request tools, its presenter, who runs it, and its hooks."""

    name: str
    """The kind's name (``ToolDefinition.kind``)."""
    tool_types: tuple[str, ...]
    """The ``type`` of the request's ``tools`` entries of this kind."""
    accepts: Callable[[Mapping[str, Any]], bool] | None = None
    """For a ``type`` a later kind also lists: whether a declared tool of it is this kind's
    (a ``tool_search`` the client runs, where the fleet's kind takes OpenAI's). None: all are."""
    presenter: CallPresenter = FUNCTION_CALLS
    """How the calls of this kind's tools look on the wire."""
    queue: str | None = None
    """The queue of its calls; None: the client runs them and the response pauses."""
    define: Callable[[Item], ToolDefinition] | None = None
    """A declared tool (as echoed) as a definition; None: declarations are no tools."""
    model_tool: Callable[[Item], Item | None] = as_declared
    """A declared tool as the model is offered it; None: not offered."""
    listed_tools: (
        Callable[[Sequence[Item], Sequence[Item], Mapping[str, Any]], dict[str, ToolDefinition]]
        | None
    ) = None
    """Tools the chain's items bring: ``(declared tools, items, extra)`` → definitions by name."""
    choice_name: Callable[[Item], str | None] = named_tool
    """The tool an ``allowed_tools`` reference of this kind's type names."""
    is_chosen: Callable[[ToolDefinition, Item], bool] | None = None
    """Whether an ``allowed_tools`` reference picks a tool beyond its name (a whole server)."""
    item_presenters: tuple[CallPresenter, ...] = ()
    """Presenters of further call item types of the kind."""
    awaiting_client: frozenset[str] = frozenset()
    """Call item types the client answers in a later request (the response pauses on them)."""
    views: Mapping[str, ItemView] = field(default_factory=dict)
    """How the kind's non-call items are shown to the model."""
    check_inputs: Callable[[RequestContext], None] | None = None
    """Validates the input items that answer this kind's items (raises ``InvalidRequestError``)."""
    prepare: Callable[[RequestContext, list[Item]], PreparedTools] | None = None
    """Validates and echoes the kind's declared tools at create time."""
    make_executor: Callable[[KindContext], ToolExecutor | None] | None = None
    """Builds a tool worker's executor of the kind (None: not on this machine)."""
    make_turn_dep: Callable[[KindContext], object] | None = None
    """Builds what the kind's hooks need on an inference worker (``RunDeps.kind_deps``)."""
    before_step: StepHook | None = None
    """Runs at the start of every step, before results are collected (starts approved calls)."""
    before_model: StepHook | None = None
    """Runs before each model call (lists MCP servers)."""
    offer: Callable[[Sequence[Item], Sequence[Item], list[Item]], list[Item]] | None = None
    """While a tool of the kind is declared: ``(every declared tool, the items so far, the tools
    offered)`` → the tools the model is offered (a hosted ``tool_search`` holds deferred ones
    back until it loads them)."""
    answer: Callable[[ToolCall, Sequence[Item]], ToolResult] | None = None
    """Answers a call of the kind at once, from the response's declared tools: no queue, no
    client (the hosted ``tool_search``)."""


_MODEL_CHOICES = frozenset({"function", "allowed_tools"})
"""``tool_choice`` types the model's side understands as they are."""


class ToolKinds:
    """The registered kinds, and what the engine asks of them all."""

    def __init__(self, specs: Sequence[ToolKindSpec]):
        self.specs = tuple(specs)
        self._by_name: dict[str, ToolKindSpec] = {}
        self._by_type: dict[str, list[ToolKindSpec]] = {}
        for spec in self.specs:
            if spec.name in self._by_name:
                raise ValueError(f"tool kind '{spec.name}' is registered twice")
            self._by_name[spec.name] = spec
            for tool_type in spec.tool_types:
                sharing = self._by_type.setdefault(tool_type, [])
                if any(earlier.accepts is None for earlier in sharing):
                    raise ValueError(f"tool type '{tool_type}' belongs to two kinds")
                sharing.append(spec)
        self.presenters = PresenterIndex(
            {spec.name: spec.presenter for spec in self.specs},
            extra=[p for spec in self.specs for p in spec.item_presenters],
            awaiting_client=[t for spec in self.specs for t in spec.awaiting_client],
            views={k: v for spec in self.specs for k, v in spec.views.items()},
        )

    @property
    def queues(self) -> tuple[str, ...]:
        """The queues of the server-side kinds."""
        return tuple(spec.queue for spec in self.specs if spec.queue is not None)

    def spec(self, kind: str) -> ToolKindSpec | None:
        """The spec of the kind called ``kind``."""
        return self._by_name.get(kind)

    def spec_of_tool(self, tool: Mapping[str, Any]) -> ToolKindSpec | None:
        """The spec of a declared tool (by its ``type``); None for a hosted tool of no kind.

        A ``provider:tool_type`` type belongs to the kind that lists :data:`EXTENSION_TYPE`.
        """
        for spec in self._specs_of_type(tool):
            if spec.accepts is None or spec.accepts(tool):
                return spec
        return None

    def _specs_of_type(self, tool: Mapping[str, Any]) -> list[ToolKindSpec]:
        kind = str(tool.get("type"))
        return self._by_type.get(EXTENSION_TYPE if ":" in kind else kind, [])

    def _choice_name(self, ref: Mapping[str, Any]) -> str | None:
        """The tool a reference by type names (``{"type": "tool_search"}``: the client's one).

        A reference carries no more than its type: the first kind of that type that names a
        tool by it does (``check_tool_choice`` refused the choices no declared tool meets).
        """
        specs = self._specs_of_type(ref)
        if not specs:
            return named_tool(dict(ref))  # a hosted tool of no kind
        for spec in specs:
            name = spec.choice_name(dict(ref))
            if name:
                return name
        return None

    def queue_of(self, tool: ToolDefinition) -> str | None:
        """Where the calls of ``tool`` run; None: the client runs them (or its kind answers)."""
        spec = self.spec(tool.kind)
        return spec.queue if spec is not None else None

    def answer_of(
        self, tool: ToolDefinition
    ) -> Callable[[ToolCall, Sequence[Item]], ToolResult] | None:
        """How the calls of ``tool`` are answered at once (:attr:`ToolKindSpec.answer`), if so."""
        spec = self.spec(tool.kind)
        return spec.answer if spec is not None else None

    # -- the response's tools ----------------------------------------------------------------

    def definitions(
        self,
        tools: Sequence[Item],
        items: Sequence[Item] = (),
        *,
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, ToolDefinition]:
        """The response's tools by name, with the tools ``items`` (the chain so far) bring.

        ``extra``: the response's kept extra (the sealed MCP headers tool workers need).
        """
        found: dict[str, ToolDefinition] = {}
        for tool in tools:
            spec = self.spec_of_tool(tool)
            if spec is not None and spec.define is not None:
                definition = spec.define(tool)
                found[definition.name] = definition
        for spec in self.specs:
            if spec.listed_tools is not None:
                listed = spec.listed_tools(self._of(spec, tools), items, extra or {})
                for name, definition in listed.items():
                    found.setdefault(name, definition)  # a declared tool keeps its name
        return found

    def model_tools(self, tools: Sequence[Item], items: Sequence[Item] = ()) -> list[Item]:
        """The tools as the model is offered them: declared ones first, then listed ones."""
        offered = []
        for tool in tools:
            spec = self.spec_of_tool(tool)
            shown = spec.model_tool(tool) if spec is not None else tool  # hosted: as declared
            if shown is not None:
                offered.append(shown)
        names = {tool.get("name") for tool in offered}
        for spec in self.specs:
            if spec.listed_tools is None:
                continue
            for name, definition in spec.listed_tools(self._of(spec, tools), items, {}).items():
                if name == definition.name and name not in names:
                    offered.append({**definition.chat_tool(), "strict": None})
                    names.add(name)  # two kinds may list one tool (a namespace, and its search)
        for spec in self.specs:
            if spec.offer is not None and self._of(spec, tools):
                offered = spec.offer(tools, items, offered)
        return offered

    def is_agentic(self, tools: Sequence[Item]) -> bool:
        """Whether any declared tool is executed by the fleet (the agentic loop is engaged)."""
        specs = (self.spec_of_tool(tool) for tool in tools)
        return any(spec is not None and spec.queue is not None for spec in specs)

    def allowed_names(self, tool_choice: Any) -> frozenset[str] | None:
        """Names an ``allowed_tools`` choice lets run (None: every declared tool)."""
        if not isinstance(tool_choice, dict) or tool_choice.get("type") != "allowed_tools":
            return None
        names = set()
        for ref in tool_choice.get("tools", []):
            name = self._choice_name(ref)
            if name:
                names.add(name)
        return frozenset(names)

    def model_choice(self, tool_choice: Any) -> Any:
        """A ``tool_choice`` forcing a tool by type as the function the model knows it by.

        ``{"type": "shell"}``, ``{"type": "custom", "name"}`` …; any other choice as it is
        (``mcp``: :meth:`model_offer`).
        """
        if not isinstance(tool_choice, dict) or tool_choice.get("type") in _MODEL_CHOICES:
            return tool_choice
        name = self._choice_name(tool_choice)
        return {"type": "function", "name": name} if name else tool_choice

    def model_offer(
        self, tool_choice: Any, tools: Sequence[Item], items: Sequence[Item] = ()
    ) -> tuple[list[Item], Any]:
        """The tools the model is offered (:meth:`model_tools`) and the choice it is told.

        An ``mcp`` choice forces the tools it picks of those listed: one as its function,
        several as the only ones offered (``required``), none (a listing that failed) not at
        all (``auto``). Any other choice as :meth:`model_choice` makes it.
        """
        offered = self.model_tools(tools, items)
        if not isinstance(tool_choice, dict) or tool_choice.get("type") != "mcp":
            return offered, self.model_choice(tool_choice)
        chosen = {  # a listed tool is also found by an alias (``mcp:label:tool``): once
            name
            for name, tool in self.definitions(tools, items).items()
            if name == tool.name and self._is_chosen(tool, tool_choice)
        }
        if not chosen:
            return offered, "auto"
        if len(chosen) == 1:
            return offered, {"type": "function", "name": next(iter(chosen))}
        return [tool for tool in offered if tool.get("name") in chosen], "required"

    def is_allowed(self, tool: ToolDefinition, allowed: frozenset[str], tool_choice: Any) -> bool:
        """Whether an ``allowed_tools`` choice lets ``tool`` run (by name, or as its kind says)."""
        if tool.name in allowed:
            return True
        if not isinstance(tool_choice, dict):
            return False
        return any(self._is_chosen(tool, ref) for ref in tool_choice.get("tools", []))

    def _is_chosen(self, tool: ToolDefinition, ref: Item) -> bool:
        """Whether a reference its kind reads (an MCP server's) picks ``tool``."""
        spec = self.spec(tool.kind)
        return spec is not None and spec.is_chosen is not None and spec.is_chosen(tool, ref)

    def _of(self, spec: ToolKindSpec, tools: Sequence[Item]) -> list[Item]:
        return [tool for tool in tools if self.spec_of_tool(tool) is spec]

    # -- creating a response -------------------------------------------------------------------

    def prepare_request(self, context: RequestContext, declared: list[Item]) -> PreparedTools:
        """Every kind's checks of the input and of its tools; the tools as the response echoes them.

        Raises:
            InvalidRequestError: what a kind refused.
        """
        is_long = len(context.inputs) > cooperation.BATCH
        for spec in self.specs:
            if spec.check_inputs is not None:
                spec.check_inputs(context)
                if is_long:  # a check reads every item: other work runs between two
                    cooperation.pause()
        if context.generate:
            self._check_ending_calls(context.inputs)
        tools, extra = declared, dict[str, Any]()
        for spec in self.specs:
            if spec.prepare is not None:
                prepared = spec.prepare(context, tools)
                tools, extra = prepared.tools, {**extra, **prepared.extra}
        self._check_names(tools)
        return PreparedTools(tools=tools, extra=extra)

    def _check_ending_calls(self, inputs: Sequence[Item]) -> None:
        """The calls the input ends with (after its last message) come with their results.

        Read on the model's view of those items: a call the model would see without a result
        after it cannot be gone on from (OpenAI's API, and model servers that hold a chat to its
        template, refuse it). A call a message follows may go without one (a client went on
        without sending it: the model is told no result came); an approval request waits for
        the client's decision in a later request.

        Raises:
            InvalidRequestError: ``missing_tool_output``, naming the first such call.
        """
        at = len(inputs)
        while at and inputs[at - 1].get("type", "message") != "message":
            at -= 1
        ending = [item for item in inputs[at:] if not self.presenters.awaits_client(item)]
        if not self.presenters.call_items(ending):
            return  # most inputs: nothing to look at
        calls: list[Item] = []
        open_calls: dict[str, list[int]] = {}  # a result answers the first open call of its id
        for seen in self.presenters.model_view(ending):
            if seen["type"] == "function_call":
                open_calls.setdefault(seen["call_id"], []).append(len(calls))
                calls.append(seen)
            elif seen["type"] == "function_call_output" and open_calls.get(seen["call_id"]):
                open_calls[seen["call_id"]].pop(0)
        first = min((index for left in open_calls.values() for index in left), default=None)
        if first is None:
            return
        seen = calls[first]  # the view keeps its item's id, and the call's id as the client's
        made = next((item for item in ending if item.get("id") == seen.get("id")), seen)
        raise missing_output(str(made["type"]), seen["call_id"])

    def _check_names(self, tools: Sequence[Item]) -> None:
        """Each prepared tool the model is offered has a name of its own.

        The request's own names were checked as declared; this catches the names a kind gives
        (``web_search`` backed by a plugin, an extension tool's plugin name), which a function
        beside it could also take: the model would call one name, and only one of them run.

        Raises:
            InvalidRequestError: two tools the model would call by one name.
        """
        names: set[str] = set()
        for tool in tools:
            spec = self.spec_of_tool(tool)
            if spec is None or spec.define is None:
                continue
            name = spec.define(tool).name
            if name in names:
                raise duplicate_tool_name(name, param="tools")
            names.add(name)

    # -- processes and steps -------------------------------------------------------------------

    def make_executors(self, context: KindContext) -> list[ToolExecutor]:
        """The executors of every server-side kind this machine can run."""
        made = (spec.make_executor(context) for spec in self.specs if spec.make_executor)
        return [executor for executor in made if executor is not None]

    def make_turn_deps(self, context: KindContext) -> dict[str, object]:
        """What the kinds' hooks need on an inference worker, by kind name."""
        return {
            spec.name: spec.make_turn_dep(context)
            for spec in self.specs
            if spec.make_turn_dep is not None
        }

    def before_step(
        self, deps: Mapping[str, object], step: StepInput, out: EventOut
    ) -> ResponseObject:
        """Every kind's ``before_step`` hook, in order; the response as they left it."""
        return self._run_hooks("before_step", deps, step, out)

    def before_model(
        self, deps: Mapping[str, object], step: StepInput, out: EventOut
    ) -> ResponseObject:
        """Every kind's ``before_model`` hook, in order; the response as they left it."""
        return self._run_hooks("before_model", deps, step, out)

    def _run_hooks(
        self, hook: str, deps: Mapping[str, object], step: StepInput, out: EventOut
    ) -> ResponseObject:
        response = step.response
        for spec in self.specs:
            run: StepHook | None = getattr(spec, hook)
            if run is not None:
                response = run(deps.get(spec.name), replace(step, response=response), out)
        return response
