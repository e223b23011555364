"""What ``antwort chat`` shows: a response's events folded into a live terminal view (rich).

:class:`ChatView` takes the events of one or more responses (a client-tool continuation goes on
in the same view) and renders: the plan as a checklist that ticks as steps finish, every step
with its title (a spinner while it runs) and its result (shortened unless ``full_results``), the
messages as Markdown, and a status line. It needs no terminal: the tests render it into a
recording console.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.console import Group, RenderableType
from rich.markdown import Markdown
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from app.progress import step_title

RESULT_PREVIEW_CHARS = 160
"""Characters of a tool result shown unless ``--full-results``."""
_RESULT_PREVIEW_LINES = 3
_MARKS = {"pending": "○", "done": "✔", "failed": "✖"}
_FINAL = {
    "completed": "✔ completed",
    "requires_action": "⏸ waiting for client tools",
    "incomplete": "◐ incomplete",
    "failed": "✖ failed",
    "cancelled": "✖ cancelled",
}


@dataclass(slots=True)
class Step:
    """One tool call the model made."""

    call_id: str
    title: str
    status: str = "running"
    """``running``, ``done`` or ``failed``."""
    result: str | None = None
    plan_index: int | None = None


@dataclass(slots=True)
class _Message:
    text: str = ""


@dataclass(slots=True)
class ChatView:
    """The state of the screen, built from events."""

    full_results: bool = False
    plan: list[str] = field(default_factory=list)
    plan_status: list[str] = field(default_factory=list)
    steps: dict[str, Step] = field(default_factory=dict)
    blocks: list[Step | _Message] = field(default_factory=list)
    """Steps and messages in the order they appeared."""
    response_id: str | None = None
    status: str | None = None
    error: str | None = None
    last_sequence_number: int = -1
    _open: dict[str, _Message] = field(default_factory=dict)
    _call_items: dict[str, str] = field(default_factory=dict)
    """Call item id → call id, from ``antwort:step.started``."""

    # -- folding events ----------------------------------------------------------------------

    def feed(self, event: dict[str, Any]) -> None:
        """Take one event of the stream."""
        self.last_sequence_number = int(event.get("sequence_number", self.last_sequence_number))
        kind = str(event.get("type"))
        if "response" in event:
            self._response_event(kind, event["response"])
        elif kind == "antwort:plan":
            self.plan = [str(step) for step in event["steps"]]
            self.plan_status = ["pending"] * len(self.plan)
        elif kind == "antwort:step.started":
            self._step(event["call_id"]).title = str(event["title"])
            self._link_to_plan(self.steps[event["call_id"]])
            self._call_items[str(event.get("item_id"))] = event["call_id"]
        elif kind == "antwort:step.completed":
            self.finish_step(event["call_id"], None, is_error=event.get("status") == "failed")
        elif kind == "response.output_text.delta":
            self._message(event["item_id"]).text += event["delta"]
        elif kind == "response.output_item.done":
            self._item_done(event["item"])
        elif kind == "error":
            self.error = str(event.get("message") or event.get("error", {}).get("message"))

    def _response_event(self, kind: str, response: dict[str, Any]) -> None:
        self.response_id = response["id"]
        self.status = response["status"]
        if response.get("error"):
            self.error = response["error"].get("message")
        is_idle = not any(step.status == "running" for step in self.steps.values())
        if kind == "response.completed" and self.status == "completed" and is_idle:
            self.plan_status = ["done" if s == "pending" else s for s in self.plan_status]

    def _item_done(self, item: dict[str, Any]) -> None:
        if item["type"] == "message":
            parts = item.get("content") or []
            self._message(item["id"]).text = "".join(p.get("text", "") for p in parts)
        elif item["type"] == "function_call":
            step = self._step(item["call_id"])
            if step.title == item["call_id"]:  # no antwort:step.started (yet): derive a title
                step.title = step_title(item["name"], item.get("arguments", ""))
        elif item["type"] == "function_call_output":
            self.finish_step(item["call_id"], str(item.get("output", "")), is_error=False)
        elif item.get("id") in self._call_items and item.get("output") is not None:
            # a kind whose call item carries its own result (mcp_call …)
            call_id = self._call_items[item["id"]]
            self.finish_step(call_id, str(item["output"]), is_error=bool(item.get("error")))

    def _step(self, call_id: str) -> Step:
        step = self.steps.get(call_id)
        if step is None:
            step = self.steps[call_id] = Step(call_id=call_id, title=call_id)
            self.blocks.append(step)
        return step

    def _message(self, item_id: str) -> _Message:
        message = self._open.get(item_id)
        if message is None:
            message = self._open[item_id] = _Message()
            self.blocks.append(message)
        return message

    def _link_to_plan(self, step: Step) -> None:
        """The plan entry a step carries out: same title, else the first still pending."""
        if step.plan_index is not None or not self.plan:
            return
        pending = [i for i, status in enumerate(self.plan_status) if status == "pending"]
        same = [i for i in pending if self.plan[i].casefold() == step.title.casefold()]
        if same or pending:
            step.plan_index = (same or pending)[0]
            self.plan_status[step.plan_index] = "running"

    def finish_step(self, call_id: str, result: str | None, *, is_error: bool) -> None:
        """A step's result arrived (from the server, or from a client tool)."""
        step = self._step(call_id)
        if result is not None:
            step.result = result
        step.status = "failed" if is_error else "done"
        if step.plan_index is not None:
            self.plan_status[step.plan_index] = step.status

    # -- rendering ---------------------------------------------------------------------------

    def __rich__(self) -> RenderableType:
        parts: list[RenderableType] = []
        if self.plan:
            parts.append(self._plan_table())
        for block in list(self.blocks):  # Live renders from its own thread: iterate a copy
            if isinstance(block, Step):
                parts.append(self._step_view(block))
            elif block.text.strip():
                parts.append(Markdown(block.text))
        parts.append(self._status_line())
        return Group(*parts)

    def _plan_table(self) -> Table:
        table = Table.grid(padding=(0, 1))
        table.add_row(Text("Plan", style="bold"))
        for title, status in zip(list(self.plan), list(self.plan_status), strict=False):
            if status == "running":
                table.add_row(Spinner("dots", text=Text(title)))
            else:
                style = {"done": "green", "failed": "red"}.get(status, "dim")
                table.add_row(Text(f"{_MARKS[status]} {title}", style=style))
        return table

    def _step_view(self, step: Step) -> RenderableType:
        if step.status == "running":
            return Spinner("dots", text=Text(step.title, style="cyan"))
        mark = _MARKS["failed" if step.status == "failed" else "done"]
        title = Text(f"{mark} {step.title}", style="red" if step.status == "failed" else "cyan")
        if step.result is None:
            return title
        result = Table.grid(padding=(0, 1))
        result.add_column(no_wrap=True)
        result.add_column(overflow="fold")
        result.add_row(Text("  │", style="dim"), Text(self._shown(step.result), style="dim"))
        return Group(title, result)

    def _shown(self, result: str) -> str:
        if self.full_results:
            return result
        lines = result.splitlines() or [""]
        cut = "\n".join(lines[:_RESULT_PREVIEW_LINES])[:RESULT_PREVIEW_CHARS]
        if cut == result:
            return result
        return f"{cut}…\n(+{len(result) - len(cut)} characters: --full-results)"

    def _status_line(self) -> RenderableType:
        if self.status in _FINAL:
            text = Text(_FINAL[self.status], style="green" if self.status == "completed" else "red")
            if self.error:
                text.append(f": {self.error}")
            if self.response_id:
                text.append(f"  {self.response_id}", style="dim")
            return text
        return Spinner("dots", text=Text("working…", style="dim"))
