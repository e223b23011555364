"""How each tool kind's calls look on the wire: their items, their events, and the model's view.

The loop only ever deals in :class:`~app.tools.base.ToolCall` and
:class:`~app.tools.base.ToolResult`. A presenter turns a call the model is streaming into the
output item of its kind (``function_call``, ``mcp_call``, ``code_interpreter_call`` …), answers it
with a result (a ``function_call_output`` item after it, or the same item updated in place), and
turns those items back into the ``function_call``/``function_call_output`` pairs the model sees.

Function and internal tools share :class:`FunctionCallPresenter`; other kinds bring their own in
their spec (:mod:`app.tools.kinds`). :class:`PresenterIndex` finds the presenter of a tool or an
item among the presenters of the registered kinds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from app.protocol import events as ev
from app.protocol.items import function_call_item, item_of_response
from app.tools.base import ToolCall, ToolDefinition, ToolResult
from app.tools.transcript import group_turns

Item = dict[str, Any]
ItemView = Callable[[Item, Sequence[Item]], list[Item]]
"""How a non-call item of a kind is shown to the model (``item, all items`` → model items)."""


def result_item_id(response_id: str, call_id: str, prefix: str = "fco") -> str:
    """The id of the result item answering ``call_id`` (it names its response).

    ``prefix``: the result item type's (``fco``: a ``function_call_output``).
    """
    digest = hashlib.blake2b(f"{response_id}:{call_id}".encode(), digest_size=12).hexdigest()
    return item_of_response(prefix, response_id, digest[:16]) or f"{prefix}_{digest}"


class CallPresenter(Protocol):
    """The items and events of one kind's calls."""

    item_type: str
    """The type of the call item (``function_call``, ``mcp_call`` …)."""
    id_prefix: str
    """The prefix of the call item's id (``fc``, ``mcp`` …)."""

    def started(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item | None, list[ev.Event]]:
        """The in-progress item as the model starts the call (no arguments yet).

        Returns the item for ``output_item.added`` and the events that follow it; no item: the
        kind announces its item in :meth:`finished` (its fields are not valid before).
        """

    def arguments_delta(self, item_id: str, output_index: int, delta: str) -> list[ev.Event]:
        """Events for a piece of the arguments as the model streams them."""

    def finished(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item, list[ev.Event]]:
        """The item once the model has finished the call, and the events that close it.

        A kind whose item also carries the result leaves it in progress here (no
        ``output_item.done``): :meth:`answered` finishes it.
        """

    def call_of(self, item: Item) -> ToolCall:
        """The call an item of :attr:`item_type` stands for."""

    def is_answered(self, item: Item, answered: frozenset[str]) -> bool:
        """Whether the call item has its result (``answered``: call ids of result items)."""

    def answered(
        self, response_id: str, output: Sequence[Item], index: int, result: ToolResult
    ) -> tuple[list[Item], list[ev.Event]]:
        """The output with ``result`` applied to the call item at ``index``, and its events."""

    def model_view(self, item: Item, output: Sequence[Item]) -> list[Item]:
        """The item as ``function_call``/``function_call_output`` items for the model."""


def call_view(call: ToolCall) -> Item:
    """A call as the model sees it: a ``function_call`` item (kinds' :meth:`model_view`)."""
    return {
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
    }


def result_view(call_id: str, output: str | Sequence[Item]) -> Item:
    """A call's result as the model sees it: a ``function_call_output`` item.

    ``output``: text, or content parts (``input_text``, ``input_image``, ``input_file``).
    """
    return {"type": "function_call_output", "call_id": call_id, "output": output}


class ResultItemCalls:
    """Call items answered by a result item of their own, appended after the output.

    What the ``function_call`` and ``custom_tool_call`` presenters share.
    """

    result_type: str
    """The result item's type."""

    def is_answered(self, item: Item, answered: frozenset[str]) -> bool:
        return bool(item["call_id"] in answered)

    def answered(
        self, response_id: str, output: Sequence[Item], index: int, result: ToolResult
    ) -> tuple[list[Item], list[ev.Event]]:
        return append_result(response_id, output, result, self.result_type)


class FunctionCallPresenter(ResultItemCalls):
    """``function_call`` items answered by ``function_call_output`` items (function, internal)."""

    item_type = "function_call"
    id_prefix = "fc"
    result_type = "function_call_output"

    def started(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item, list[ev.Event]]:
        name, namespace = wire_name(call.name, tool)
        item = function_call_item(
            item_id, call_id=call.id, name=name, arguments="", status="in_progress"
        )
        return with_namespace(item, namespace), []

    def arguments_delta(self, item_id: str, output_index: int, delta: str) -> list[ev.Event]:
        return [ev.function_call_arguments_delta(item_id, output_index, delta)]

    def finished(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item, list[ev.Event]]:
        name, namespace = wire_name(call.name, tool)
        item = function_call_item(
            item_id, call_id=call.id, name=name, arguments=call.arguments, status="completed"
        )
        item = with_namespace(item, namespace)
        return item, [
            ev.function_call_arguments_done(item_id, output_index, call.arguments, name),
            ev.output_item_done(output_index, item),
        ]

    def call_of(self, item: Item) -> ToolCall:
        arguments = item.get("arguments", "")
        return ToolCall(id=item["call_id"], name=model_name(item), arguments=arguments)

    def model_view(self, item: Item, output: Sequence[Item]) -> list[Item]:
        if item.get("namespace"):
            return [{**item, "name": model_name(item)}]
        return [item]


FUNCTION_CALLS = FunctionCallPresenter()


def append_result(
    response_id: str, output: Sequence[Item], result: ToolResult, item_type: str
) -> tuple[list[Item], list[ev.Event]]:
    """``output`` with a result item (``item_type``) for ``result`` after it, and its events."""
    item = {
        "id": result_item_id(response_id, result.call_id),
        "type": item_type,
        "call_id": result.call_id,
        "output": result.output,
        "status": "completed",
    }
    at = len(output)
    return [*output, item], [ev.output_item_added(at, item), ev.output_item_done(at, item)]


def namespaced(namespace: str, name: str) -> str:
    """The name the model knows a tool of a ``namespace`` tool by.

    A namespace that is the tool's own name is a deferred top-level function's
    (app/tools/function.py): the model knows it by its name.
    """
    return name if namespace == name else f"{namespace}__{name}"


def wire_name(name: str, tool: ToolDefinition | None) -> tuple[str, str | None]:
    """A call's tool name on its item, and its ``namespace`` (a namespace's tool), if any."""
    if tool is not None and tool.options.get("namespace"):
        return str(tool.options["name"]), str(tool.options["namespace"])
    return name, None


def model_name(item: Item) -> str:
    """The name the model called a call item's tool by (its namespace's alias, if any)."""
    namespace = item.get("namespace")
    return namespaced(namespace, item["name"]) if namespace else str(item["name"])


def with_namespace(item: Item, namespace: str | None) -> Item:
    """A call item with its tool's ``namespace``, if it has one."""
    return {**item, "namespace": namespace} if namespace else item


class PresenterIndex:
    """The presenters of a set of kinds, by kind and by item type; the lookups the loop uses.

    Args:
        by_kind: Each kind's presenter of its tools' calls.
        extra: Presenters of further call item types (a kind's second call item).
        awaiting_client: Item types the client answers in a later request (an MCP approval
            request): the response pauses on them.
        views: How non-call item types are shown to the model (default: as they are).
    """

    def __init__(
        self,
        by_kind: Mapping[str, CallPresenter],
        *,
        extra: Iterable[CallPresenter] = (),
        awaiting_client: Iterable[str] = (),
        views: Mapping[str, ItemView] | None = None,
    ):
        self._by_kind = dict(by_kind)
        self._by_item_type = {p.item_type: p for p in [*self._by_kind.values(), *extra]}
        self._awaiting_client = frozenset(awaiting_client)
        self._views = dict(views or {})

    def for_tool(self, tool: ToolDefinition | None) -> CallPresenter:
        """The presenter of a tool's calls (unknown tools' calls are plain function calls)."""
        if tool is None:
            return FUNCTION_CALLS
        # A tool run by one kind may be shown as another's (web search: an internal plugin).
        kind = tool.options.get("presented_as", tool.kind)
        return self._by_kind.get(kind, FUNCTION_CALLS)

    def for_item(self, item: Item) -> CallPresenter | None:
        """The presenter of a call item; None for any other item."""
        return self._by_item_type.get(item.get("type", "message"))

    def awaits_client(self, item: Item) -> bool:
        """Whether a call item waits for the client (an approval request)."""
        return item.get("type") in self._awaiting_client

    def call_items(self, items: Sequence[Item]) -> list[Item]:
        """The call items among ``items``, in order."""
        return [item for item in items if self.for_item(item) is not None]

    def unanswered_calls(self, output: Sequence[Item]) -> list[Item]:
        """Call items of ``output`` that have no result yet, in order."""
        answered = _answered_ids(output)
        pending = []
        for item in output:
            presenter = self.for_item(item)
            if presenter is not None and not presenter.is_answered(item, answered):
                pending.append(item)
        return pending

    def find_call(self, output: Sequence[Item], call_id: str) -> tuple[int, Item] | None:
        """The call item (and its index) whose call is ``call_id``."""
        for index, item in enumerate(output):
            presenter = self.for_item(item)
            if presenter is not None and presenter.call_of(item).id == call_id:
                return index, item
        return None

    def call_of(self, item: Item) -> ToolCall:
        """The call a call item stands for."""
        presenter = self.for_item(item)
        assert presenter is not None, item.get("type")
        return presenter.call_of(item)

    def apply_result(
        self, response_id: str, output: Sequence[Item], result: ToolResult
    ) -> tuple[list[Item], list[ev.Event]]:
        """The output with ``result`` applied to its call, and the events that show it.

        Raises:
            KeyError: no call item in ``output`` is ``result.call_id``.
        """
        found = self.find_call(output, result.call_id)
        if found is None:
            raise KeyError(result.call_id)
        index, item = found
        presenter = self.for_item(item)
        assert presenter is not None
        return presenter.answered(response_id, output, index, result)

    def model_view(self, items: Sequence[Item], start: int = 0) -> list[Item]:
        """``items`` as the model sees them: calls as ``function_call``/``…_output`` items.

        Each model turn's calls come together, then their results in call order
        (:mod:`app.tools.transcript`). ``start``: the view of ``items[start:]`` alone, where
        ``items[start]`` is a turn break (:func:`~app.protocol.items.is_turn_break`).
        """
        return group_turns(
            items, view=lambda item: self._view(item, items), is_call=self._is_call, start=start
        )

    def has_own_view(self, item: Item) -> bool:
        """Whether the model's view of ``item`` reads no other item (and none changes it).

        Function calls and results, messages, and items shown as they are; not the kinds whose
        view looks through the conversation (an MCP call's, an approval's).
        """
        presenter = self.for_item(item)
        if presenter is not None:
            return presenter is FUNCTION_CALLS
        return item.get("type") not in self._views

    def _is_call(self, item: Item) -> bool:
        return self.for_item(item) is not None

    def _view(self, item: Item, items: Sequence[Item]) -> list[Item]:
        presenter = self.for_item(item)
        if presenter is not None:  # the views keep the item's id: which turn made them
            return [{"id": item.get("id"), **v} for v in presenter.model_view(item, items)]
        if item.get("type") in self._views:
            return self._views[item["type"]](item, items)
        return [item]


def _answered_ids(output: Sequence[Item]) -> frozenset[str]:
    """Call ids answered by a result item (every kind's result item type ends in ``_output``)."""
    return frozenset(
        i["call_id"] for i in output if str(i.get("type")).endswith("_output") and "call_id" in i
    )
