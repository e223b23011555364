"""The transcript the model reads: each of its earlier turns as it produced it.

A model turn that called tools is shown as its text and reasoning, then ALL its calls, then the
results in the order of the calls — one assistant message with every ``tool_calls`` entry in the
chat form, as the model wrote it. The output items do not always come in that order: kinds that
carry a call's result in the call's own item (``mcp_call``, ``code_interpreter_call``) show up as
call, result, call, result.

Which items one turn produced is read from their ids (:func:`app.protocol.items.turn_tag`).
Items without such an id (a client's own history) count as one turn while no result came
between them, which is how a client writes a turn of parallel calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.protocol.items import turn_tag

Item = dict[str, Any]


@dataclass(slots=True)
class _Turn:
    tag: str | None
    said: list[Item] = field(default_factory=list)
    """Assistant text and reasoning of the turn."""
    calls: list[Item] = field(default_factory=list)
    results: list[Item] = field(default_factory=list)

    def takes(self, tag: str | None) -> bool:
        """Whether an item of the model with ``tag`` belongs to this turn."""
        if tag is not None and self.tag is not None:
            return tag == self.tag
        return not self.results

    def answers(self, item: Item) -> bool:
        return item.get("type") == "function_call_output" and any(
            call["call_id"] == item["call_id"] for call in self.calls
        )

    def items(self) -> list[Item]:
        order = {call["call_id"]: index for index, call in enumerate(self.calls)}
        results = sorted(self.results, key=lambda result: order[result["call_id"]])
        return [*self.said, *self.calls, *results]


def is_model_item(item: Item, is_call: Callable[[Item], bool]) -> bool:
    """Whether the model produced ``item``: an assistant message, reasoning, or a call."""
    kind = item.get("type", "message")
    if kind == "message":
        return bool(item.get("role") == "assistant")
    return kind == "reasoning" or is_call(item)


def group_turns(
    items: Sequence[Item],
    *,
    view: Callable[[Item], list[Item]],
    is_call: Callable[[Item], bool],
    start: int = 0,
) -> list[Item]:
    """``items`` as the model sees them (``view`` of each), each turn's calls together.

    Args:
        items: The conversation's items, oldest first.
        view: An item as ``function_call``/``function_call_output`` items (or as it is).
        is_call: Whether an item is a call item of some kind.
        start: Group the items from this one on only (the ones before it are grouped
            already, and none of their turns continues past it: see
            :func:`~app.protocol.items.is_turn_break`).
    """
    viewed: list[Item] = []
    turn: _Turn | None = None
    for item in items[start:] if start else items:
        shown = view(item)
        if is_model_item(item, is_call):
            tag = turn_tag(item.get("id"))
            if turn is None or not turn.takes(tag):
                viewed += turn.items() if turn is not None else []
                turn = _Turn(tag)
            _add(turn, shown)
        elif turn is not None and shown and all(turn.answers(each) for each in shown):
            turn.results += shown
        elif shown:
            viewed += turn.items() if turn is not None else []
            turn = None
            viewed += shown
    return viewed + (turn.items() if turn is not None else [])


def _add(turn: _Turn, shown: list[Item]) -> None:
    for each in shown:
        if each.get("type") == "function_call":
            turn.calls.append(each)
        elif turn.answers(each):
            turn.results.append(each)
        else:
            turn.said.append(each)
