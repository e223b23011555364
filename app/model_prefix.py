"""The model's view of a chain's history, prepared once per process and extended at its end.

Each model turn shows the model the whole chain: its items opened (``sealing.model_items``),
regrouped by turn (``PresenterIndex.model_view``) and translated to chat messages
(``translate.to_chat_messages``) — work that grows with the chain, redone on every turn of every
response. A chain's items never change (:mod:`app.store.history`), so a process keeps that work
for the start of each history list it served (:class:`PreparedPrefixes`) and does it only for
the items after: the next turn of the response, and the next response of the chain, prepare
what was added since.

The kept start (:class:`Prefix`) is correct by construction, not by checking later items:

- it ends just before a turn break (a message not the model's), where the grouping and the
  translation start afresh, so no later item joins or answers a turn of it (a call it leaves
  unanswered is answered by the translation of the items after it, told of its messages);
- each of its items has a view of its own (``PresenterIndex.has_own_view``: no MCP call or
  approval, whose view reads other items) and is not sealed (no key is opened for it), so what
  comes after cannot change how it is shown;
- it is keyed by the list, the presenters and the one setting that changes the view
  (``llm_reasoning_replay``), and used only by a history that reaches past its end.

A history with a ``compaction`` item is shown from it on (``items.since_compaction``: before
it, only the messages not the model's), prepared whole: a compaction item is sealed, so no
prefix holds one, and one after the prefix shortens what the prefix stood for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.config import Settings
from app.protocol.items import is_turn_break, is_user_message, since_compaction
from app.providers.translate import ChatMessage, PreparedItems, encode_json, to_chat_messages
from app.sealing import is_sealed, model_items
from app.store import ResponseStore
from app.store.lru import BoundedLru
from app.tools.presenters import PresenterIndex

Item = dict[str, Any]

PREFIX_CACHE_ITEMS = 20_000
"""How many history items the prepared prefixes of a process stand for, at most."""
PREFIX_CACHE_BYTES = 32 * 2**20
"""How large the prepared prefixes of a process are, at most, counted as their messages' JSON."""


@dataclass(frozen=True, slots=True)
class Prefix:
    """The first ``length`` items of a history list, prepared for the model."""

    length: int
    opened: list[Item]
    """:func:`~app.sealing.model_items` of them (what the later items' views read)."""
    view: list[Item]
    """The model's view of ``opened``."""
    messages: list[ChatMessage]
    """``view`` as chat messages."""
    encoded: bytes
    """``messages`` as JSON, comma-separated (``translate.encode_json``)."""


EMPTY = Prefix(0, [], [], [], b"")

PrefixKey = tuple[str, PresenterIndex, bool]


class PreparedPrefixes:
    """Prepared prefixes of history lists (a :class:`BoundedLru`).

    Bounded by the items they stand for and by their messages' JSON bytes; a prefix larger than
    the bytes allowed is not kept at all.
    """

    def __init__(
        self, capacity: int = PREFIX_CACHE_ITEMS, capacity_bytes: int = PREFIX_CACHE_BYTES
    ) -> None:
        self._prefixes: BoundedLru[PrefixKey, Prefix] = BoundedLru(
            capacity=capacity,
            capacity_bytes=capacity_bytes,
            count=lambda prefix: prefix.length,
            size=lambda prefix: len(prefix.encoded),
        )

    @property
    def held_bytes(self) -> int:
        """The JSON bytes of the prefixes kept now."""
        return self._prefixes.held_bytes

    def get(self, key: PrefixKey) -> Prefix:
        return self._prefixes.get(key) or EMPTY

    def put(self, key: PrefixKey, prefix: Prefix) -> None:
        self._prefixes.put(key, prefix)


PREFIXES = PreparedPrefixes()


def prepared_items(  # noqa: PLR0913 - keywords, each an input of the view
    store: ResponseStore,
    settings: Settings,
    presenters: PresenterIndex,
    *,
    history: Sequence[Item],
    history_list: str | None,
    rest: Sequence[Item],
    reasoning_context: str | None = None,
) -> PreparedItems:
    """The model's view of ``history`` then ``rest``, the same as preparing them whole.

    ``history_list``: the key of the list ``history`` is the start of (None: not a list's, and
    nothing is kept). ``reasoning_context``: the request's ``reasoning.context``, where the
    model server takes reasoning back at all; ``current_turn`` leaves out the reasoning before
    the last user message (the earlier turns'), and then no prefix is kept.
    """
    if reasoning_context == "current_turn" and settings.llm_reasoning_replay:
        history, rest = _this_turn_s_reasoning(history, rest)
        history_list = None
    prefix = EMPTY
    if history_list is not None:
        key = (history_list, presenters, settings.llm_reasoning_replay)
        prefix = _extended(store, settings, presenters, PREFIXES.get(key), history)
        PREFIXES.put(key, prefix)
    if prefix.length >= len(history):  # a shorter history of the list: the prefix is not its
        prefix = EMPTY
    after = [*history[prefix.length :], *rest]
    if any(item.get("type") == "compaction" for item in after):  # (a prefix holds none: sealed)
        prefix, after = EMPTY, since_compaction([*history, *rest])
    opened = [*prefix.opened, *model_items(store, settings, after)]
    view = [*prefix.view, *presenters.model_view(opened, start=len(prefix.opened))]
    return PreparedItems(view, prefix=prefix.view, messages=prefix.messages, encoded=prefix.encoded)


def _this_turn_s_reasoning(
    history: Sequence[Item], rest: Sequence[Item]
) -> tuple[list[Item], list[Item]]:
    """``history`` and ``rest`` without the reasoning items before the last user message."""
    items = [*history, *rest]
    users = [n for n, item in enumerate(items) if is_user_message(item)]
    turn = users[-1] if users else 0
    kept = [n for n, item in enumerate(items) if n >= turn or item.get("type") != "reasoning"]
    return [items[n] for n in kept if n < len(history)], [
        items[n] for n in kept if n >= len(history)
    ]


def _extended(
    store: ResponseStore,
    settings: Settings,
    presenters: PresenterIndex,
    prefix: Prefix,
    history: Sequence[Item],
) -> Prefix:
    """``prefix`` grown to the last turn break of ``history`` its items allow (or as it is)."""
    if prefix.length >= len(history):
        return prefix
    end = prefix.length
    for index in range(prefix.length, len(history)):
        item = history[index]
        if index > prefix.length and is_turn_break(item):
            end = index
        if is_sealed(item) or not presenters.has_own_view(item):
            break
    if end == prefix.length:
        return prefix
    opened = model_items(store, settings, history[prefix.length : end])
    view = presenters.model_view(opened)
    messages = to_chat_messages(None, view, after=prefix.messages)
    encoded = b",".join([encode_json(m).encode() for m in messages])
    return Prefix(
        end,
        [*prefix.opened, *opened],
        [*prefix.view, *view],
        [*prefix.messages, *messages],
        b",".join(part for part in (prefix.encoded, encoded) if part),
    )
