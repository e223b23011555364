"""Turns a model's streamed chunks into output items and their streaming events."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, assert_never

from app.progress import step_title
from app.protocol import events as ev
from app.protocol.items import item_id, message_item, output_text_part, reasoning_item
from app.protocol.response import Usage
from app.providers.chunks import (
    Chunk,
    Exchange,
    Finish,
    PlanUpdate,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from app.sink import EventSink
from app.tools.base import ToolCall, ToolDefinition
from app.tools.presenters import CallPresenter, PresenterIndex
from app.tools.registry import KINDS


@dataclass(slots=True)
class _OpenText:
    kind: str  # "message" or "reasoning"
    item_id: str
    output_index: int
    text: list[str] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    """The text's tokens' log probabilities, in the output part's shape (asked for, or none)."""


@dataclass(slots=True)
class _OpenCall:
    item_id: str
    output_index: int
    call_id: str
    name: str
    tool: ToolDefinition | None
    presenter: CallPresenter
    arguments: list[str] = field(default_factory=list)
    title: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningOutput:
    """How the turn's reasoning items are written (the request's ``reasoning`` and ``include``)."""

    is_summarised: bool = False
    """``reasoning.summary`` was asked for: the item carries a summary, with its events. The
    fleet has no summarising model: the summary is the reasoning text itself, as it arrives."""
    seal: Callable[[str], str] | None = None
    """Seals the reasoning as the item's ``encrypted_content`` (``include`` asked for it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnOutput:
    """What one model call produced."""

    items: list[dict[str, Any]]
    """Completed output items, in output order."""
    finish_reason: str
    usage: Usage
    calls: list[dict[str, Any]]
    """The call items (of any kind) among ``items``, in the order the model made them."""
    plan: tuple[str, ...] | None = None
    """The plan the model made in this turn (JSON tool protocol), if any."""
    exchange: tuple[dict[str, Any], ...] = ()
    """What the model wrote in this turn, verbatim (JSON tool protocol; :class:`Exchange`)."""
    left_out: tuple[int, int] | None = None
    """``truncation: "auto"``: the parts of the prompt left out (0: none), and of how many
    items; None: the response does not truncate."""


class OutputBuilder:
    """Feeds on provider chunks; emits item events to a sink; collects the finished items."""

    def __init__(  # noqa: PLR0913 - keyword-only, each a separate concern of the builder
        self,
        *,
        response_id: str,
        turn: int,
        first_output_index: int,
        sink: EventSink,
        tools: Mapping[str, ToolDefinition] | None = None,
        progress: bool = False,
        presenters: PresenterIndex = KINDS.presenters,
        reasoning: ReasoningOutput = ReasoningOutput(),
    ):
        self._response_id = response_id
        self._presenters = presenters
        self._tools = tools or {}
        self._turn = turn
        self._next_index = first_output_index
        self._sink = sink
        self._items: dict[int, dict[str, Any]] = {}
        self._text: _OpenText | None = None
        self._calls: dict[int, _OpenCall] = {}
        self._finish_reason = "stop"
        self._usage = Usage()
        self._progress = progress
        """Emit the ``antwort:progress`` events (the request asked for them)."""
        self._plan: tuple[str, ...] | None = None
        self._exchange: tuple[dict[str, Any], ...] = ()
        self._reasoning = reasoning

    def feed(self, chunk: Chunk) -> None:
        """Take one chunk of the model's answer."""
        if isinstance(chunk, TextDelta):
            self._text_delta("message", chunk.text, chunk.logprobs)
        elif isinstance(chunk, ReasoningDelta):
            self._text_delta("reasoning", chunk.text)
        elif isinstance(chunk, ToolCallDelta):
            self._tool_call_delta(chunk)
        elif isinstance(chunk, Finish):
            self._finish_reason = chunk.reason
        elif isinstance(chunk, UsageReport):
            self._usage = chunk.usage
        elif isinstance(chunk, PlanUpdate):
            self._plan = chunk.steps
            if self._progress:
                self._sink.emit(ev.plan_event(list(chunk.steps)))
        elif isinstance(chunk, Exchange):
            self._exchange = chunk.messages
        else:
            assert_never(chunk)

    def close(self) -> TurnOutput:
        """Finish every open item and return the turn's output."""
        self._close_text()
        for index in sorted(self._calls):
            self._close_call(self._calls[index])
        self._calls.clear()
        items = [self._items[index] for index in sorted(self._items)]
        return TurnOutput(
            items=items,
            calls=self._presenters.call_items(items),
            finish_reason=self._finish_reason,
            usage=self._usage,
            plan=self._plan,
            exchange=self._exchange,
        )

    # -- text and reasoning --------------------------------------------------------------------

    def _text_delta(self, kind: str, text: str, logprobs: tuple[dict[str, Any], ...] = ()) -> None:
        if self._text is None or self._text.kind != kind:
            self._close_text()
            self._text = self._open_text(kind)
        self._text.text.append(text)
        iid, index = self._text.item_id, self._text.output_index
        if kind == "message":
            # one shape for the part and the events: Open Responses' (OpenAI's events omit bytes)
            tokens = [_part_logprob(entry) for entry in logprobs]
            self._text.logprobs.extend(tokens)
            self._sink.emit(ev.output_text_delta(iid, index, 0, text, tokens))
            return
        self._sink.emit(ev.reasoning_delta(iid, index, 0, text))
        if self._reasoning.is_summarised:
            self._sink.emit(ev.reasoning_summary_text_delta(iid, index, 0, text))

    def _open_text(self, kind: str) -> _OpenText:
        index = self._take_index()
        prefix = "msg" if kind == "message" else "rs"
        opened = _OpenText(kind, item_id(prefix, self._response_id, self._turn, index), index)
        if kind == "message":
            item = message_item(opened.item_id, text=None, status="in_progress")
            self._sink.emit(ev.output_item_added(index, item))
            self._sink.emit(ev.content_part_added(opened.item_id, index, 0, output_text_part("")))
        else:
            item = reasoning_item(opened.item_id, text=None, status="in_progress")
            self._sink.emit(ev.output_item_added(index, item))
            if self._reasoning.is_summarised:
                self._sink.emit(ev.reasoning_summary_part(False, opened.item_id, index, 0, ""))
        return opened

    def _close_text(self) -> None:
        opened, self._text = self._text, None
        if opened is None:
            return
        text = "".join(opened.text)
        index, iid = opened.output_index, opened.item_id
        if opened.kind == "message":
            status = "incomplete" if self._finish_reason == "length" else "completed"
            part = output_text_part(text, opened.logprobs)
            self._sink.emit(ev.output_text_done(iid, index, 0, text, opened.logprobs))
            self._sink.emit(ev.content_part_done(iid, index, 0, part))
            item = message_item(iid, text=None, status=status, parts=[part])
        else:
            item = self._close_reasoning(iid, index, text)
        self._items[index] = item
        self._sink.emit(ev.output_item_done(index, item))

    def _close_reasoning(self, iid: str, index: int, text: str) -> dict[str, Any]:
        self._sink.emit(ev.reasoning_done(iid, index, 0, text))
        item = reasoning_item(iid, text=text, status="completed")
        if self._reasoning.is_summarised:
            self._sink.emit(ev.reasoning_summary_text_done(iid, index, 0, text))
            self._sink.emit(ev.reasoning_summary_part(True, iid, index, 0, text))
            item["summary"] = [{"type": "summary_text", "text": text}]
        if self._reasoning.seal is not None:
            item["encrypted_content"] = self._reasoning.seal(text)
        return item

    # -- tool calls ----------------------------------------------------------------------------

    def _tool_call_delta(self, chunk: ToolCallDelta) -> None:
        call = self._calls.get(chunk.index)
        if call is None:
            self._close_text()
            for index in sorted(self._calls):  # providers stream calls one after another
                self._close_call(self._calls.pop(index))
            call = self._open_call(chunk)
        if chunk.arguments:
            call.arguments.append(chunk.arguments)
            for event in call.presenter.arguments_delta(
                call.item_id, call.output_index, chunk.arguments
            ):
                self._sink.emit(event)

    def _open_call(self, chunk: ToolCallDelta) -> _OpenCall:
        index = self._take_index()
        name = chunk.name or ""
        tool = self._tools.get(name)
        presenter = self._presenters.for_tool(tool)
        iid = item_id(presenter.id_prefix, self._response_id, self._turn, index)
        digest = iid.partition("_")[2]
        call_id = chunk.call_id or f"call_{digest[:24]}"
        call = _OpenCall(iid, index, call_id, name, tool, presenter, title=chunk.title)
        self._calls[chunk.index] = call
        item, events = presenter.started(
            iid, index, ToolCall(id=call_id, name=name, arguments=""), tool
        )
        if item is not None:  # else the presenter announces the item when it is finished
            self._sink.emit(ev.output_item_added(index, item))
        for event in events:
            self._sink.emit(event)
        return call

    def _close_call(self, call: _OpenCall) -> None:
        arguments = _normalise_arguments("".join(call.arguments))
        item, events = call.presenter.finished(
            call.item_id,
            call.output_index,
            ToolCall(id=call.call_id, name=call.name, arguments=arguments),
            call.tool,
        )
        self._items[call.output_index] = item
        for event in events:
            self._sink.emit(event)
        if self._progress:
            title = call.title or step_title(call.name, arguments)
            # The loop's id of the call (an item id for kinds without call ids, such as
            # ``mcp_call``), so that ``step.completed`` names the same call.
            presenter = self._presenters.for_item(item)
            loop_id = presenter.call_of(item).id if presenter is not None else call.call_id
            self._sink.emit(
                ev.step_started(
                    item_id=call.item_id,
                    output_index=call.output_index,
                    call_id=loop_id,
                    name=call.name,
                    title=title,
                )
            )

    def _take_index(self) -> int:
        index = self._next_index
        self._next_index += 1
        return index


def _normalise_arguments(arguments: str) -> str:
    """Empty arguments become ``{}``; anything else is passed on as the model wrote it."""
    return arguments if arguments.strip() else "{}"


LEAST_LOGPROB = -9999.0
"""What stands for a log probability of minus infinity (vLLM's own stand-in; JSON has none)."""


def _part_logprob(entry: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions ``logprobs.content`` entry as an ``output_text`` part's logprob."""
    tops = entry.get("top_logprobs")
    return {
        **_token(entry),
        "top_logprobs": [_token(top) for top in tops if isinstance(top, dict)]
        if isinstance(tops, list)
        else [],
    }


def _token(entry: dict[str, Any]) -> dict[str, Any]:
    token = entry.get("token")
    token = token if isinstance(token, str) else ""
    raw = entry.get("bytes")
    ok_bytes = isinstance(raw, list) and all(isinstance(b, int) and 0 <= b < 256 for b in raw)
    logprob = entry.get("logprob")
    finite = isinstance(logprob, int | float) and math.isfinite(logprob)
    return {
        "token": token,
        "bytes": raw if ok_bytes else list(token.encode("utf-8", "surrogatepass")),
        "logprob": max(float(logprob), LEAST_LOGPROB) if finite else LEAST_LOGPROB,  # type: ignore[arg-type]
    }
