"""The items before a response's input, kept once per chain.

A chain's items live in an append-only list (``Keys.history``), shared along the chain: a
response's record names its history as a reference (:class:`HistoryRef`: the list and how many
of its items), never a copy. Creating a response that continues another appends the parent's
input and output to the parent's list when the parent is its tip — the cost of the new items
alone, whatever the chain's length — and copies the parent's prefix into a list of its own once
when it branches from an older response (``extend_history.lua``). Items are never changed nor
removed, so a reference stays true whoever appends after it, and a deleted response takes
nothing from the others' histories: a list lives on until none of its responses can need it
(every create and every turn that uses it keeps it at least the store's lifetime plus 23 hours).
Reading a history is one round trip (a plain LRANGE, never a script's: a list read into a
script costs Redis some twenty times as much, while every client of the fleet waits; past
1,000 items not known yet, a batch a call): the round trips do not grow with the chain. Nor,
mostly, does the payload: a list's items never change, so a process keeps the items it read of
a list (:class:`ReadItems`, least recently used first out) and reads only the items after them
— the turns of one response, and the next response of the chain, read what was added since.

A conversation keeps its items in such a list too (``Keys.conversation_history``), appended by
the conversation's own scripts alone. It is the one list whose items change: a delete from the
conversation takes the item out. A reference into it names the list's generation (the deletes
it had seen); each delete first keeps the list as it was as the list of the generation it ends,
so a reference reads the items it was made with, whatever deletes came after.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app import cooperation
from app.ids import is_conversation_id
from app.store.base import StoreBase, json_items, text
from app.store.lru import BoundedLru
from app.store.scripts import LuaScript, counted, key

HISTORY_CACHE_ITEMS = 20_000
"""How many items of history lists a process keeps, at most (:class:`ReadItems`)."""
HISTORY_CACHE_BYTES = 32 * 2**20
"""How much of history lists a process keeps, at most, counted as their items' JSON."""
HISTORY_RENEW_SECONDS = 3600
"""A read renews a list's life once it has run down this much (one more round trip, at most
hourly per list): its life after a read is at least the store's lifetime plus 23 hours.
(``EXPIRE … GT``, which would do it in the read's round trip, needs Redis 7; the embedded Redis
of ``antwort up`` is 6.2.)"""


@dataclass(frozen=True, slots=True)
class HistoryRef:
    """A response's history: the first ``length`` items of a chain's list.

    Or of a conversation's list (``Keys.conversation_history``: chain and list are the
    conversation's id) as it was at its ``generation``: the list loses an item at each delete,
    and the list as it was before is kept as the list ``<list>.<generation>``.
    """

    chain: str
    """The response whose create began the chain's first list (``Keys.history``)."""
    list: str
    """The response whose create began this list (the chain's, or a branch's)."""
    length: int
    generation: int | None = None
    """A conversation's list: the deletes it had seen (None: a chain's list, never changed)."""

    def encode(self) -> str:
        """As the record's ``history`` field holds it (response ids hold no space).

        A conversation's list at generation 0 (no delete yet, most conversations) goes without
        it, in the three parts a chain's reference has: a worker of the release before, which
        knows no generation, reads it during a rolling upgrade (the live list is that list).
        """
        generation = "" if not self.generation else f" {self.generation}"
        return f"{self.chain} {self.list} {self.length}{generation}"

    @staticmethod
    def decode(raw: bytes | str | None) -> HistoryRef | None:
        """Inverse of :meth:`encode`; None for no field."""
        if not raw:
            return None
        chain, list_id, length, *rest = text(raw).split(" ")
        generation = int(rest[0]) if rest else (0 if is_conversation_id(list_id) else None)
        return HistoryRef(chain, list_id, int(length), generation)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtendHistoryCall:
    """The operands of ``extend_history.lua``."""

    base: str = key()
    branch: str = key()
    base_length: int
    ttl: int
    items: tuple[str, ...] = counted()


@dataclass(slots=True)
class _Read:
    items: list[dict[str, Any]]
    ends: list[int]
    """The JSON bytes of the items up to each one (its own included)."""

    @property
    def size(self) -> int:
        return self.ends[-1] if self.ends else 0


class ReadItems:
    """The first items of history lists read by this process (a :class:`BoundedLru`).

    A list's items never change (:mod:`app.store.history`), so the items read of it stay true;
    the items are shared by every reader, which must not change them. Bounded by items and by
    their JSON's bytes (a few long items weigh as much as many short ones); a list larger than
    the bytes allowed is not kept at all.
    """

    def __init__(
        self, capacity: int = HISTORY_CACHE_ITEMS, capacity_bytes: int = HISTORY_CACHE_BYTES
    ) -> None:
        self._lists: BoundedLru[str, _Read] = BoundedLru(
            capacity=capacity,
            capacity_bytes=capacity_bytes,
            count=lambda read: len(read.items),
            size=lambda read: read.size,
        )

    @property
    def held_bytes(self) -> int:
        """The JSON bytes of the items kept now."""
        return self._lists.held_bytes

    def get(self, key: str, length: int | None = None) -> tuple[list[dict[str, Any]], list[int]]:
        """The first (up to ``length``) items of the list ``key`` known, with their byte ends."""
        read = self._lists.get(key)
        if read is None:
            return [], []
        return read.items[:length], read.ends[:length]

    def put(self, key: str, items: list[dict[str, Any]], ends: list[int]) -> None:
        """Keep ``items`` as the first items of the list ``key`` (when more than known).

        ``ends``: the JSON bytes of ``items`` up to each one.
        """
        self._lists.put(key, _Read(items, ends))

    def drop(self, key: str) -> None:
        """Forget the list ``key`` (it expired)."""
        self._lists.drop(key)


EXTEND_HISTORY = LuaScript("extend_history", ExtendHistoryCall)
_APPENDED, _BRANCHED = 1, 2


class Histories(StoreBase):
    """Histories: a chain's extended by a create, a conversation's by its writes; read by turns."""

    def extend_history(
        self, base: HistoryRef | None, items: Sequence[dict[str, Any]], *, response_id: str
    ) -> HistoryRef | None:
        """The history of a new response ``response_id``: ``base``, then ``items``.

        One round trip, carrying ``items`` alone when ``base``'s list ends where ``base`` does.
        None when ``base``'s list expired (its items are gone). More than
        :data:`app.cooperation.BATCH` items go a batch a call: the script takes the first batch
        (appending, or branching), the rest follow it on the list it chose (``append_batch.lua``,
        each only where the one before left the list). Meanwhile nobody else appends to that
        list: the list's end is no response's history, and a sibling of the same parent finds
        the list longer than its base and branches. Items left by a create that died half-way
        are past every reference, so nobody reads them.

        A conversation's list (``base.generation``) is never appended to but by its
        conversation: its items are read and copied into the new response's own list.
        """
        if base is not None and base.generation is not None:
            held = self.history(base)
            if held is None:
                return None
            return self.extend_history(None, [*held, *items], response_id=response_id)
        encoded = cooperation.json_texts(items)
        first, rest = encoded[: cooperation.BATCH], encoded[cooperation.BATCH :]
        chain = base.chain if base is not None else response_id
        branch = self.keys.history(chain, response_id)
        code, length = self.script(EXTEND_HISTORY)(
            ExtendHistoryCall(
                base=branch if base is None else self.keys.history(base.chain, base.list),
                branch=branch,
                base_length=0 if base is None else base.length,
                ttl=self.history_ttl,
                items=tuple(first),
            )
        )
        if code == _APPENDED:
            assert base is not None
            extended = HistoryRef(base.chain, base.list, int(length))
        elif code == _BRANCHED:
            extended = HistoryRef(chain, response_id, int(length))
        else:
            return None
        key = self.keys.history(extended.chain, extended.list)
        if not self.append_list(key, rest, before=extended.length, ttl=self.history_ttl):
            return None
        return HistoryRef(extended.chain, extended.list, extended.length + len(rest))

    @property
    def read_items(self) -> ReadItems:
        """The history items this store read (one per process: the store's is the process')."""
        return _READ_ITEMS

    def history_key(self, ref: HistoryRef) -> str:
        """The list whose first items ``ref`` names, whatever deletes came after."""
        if ref.generation is None:
            return self.keys.history(ref.chain, ref.list)
        return self.keys.conversation_history_at(ref.chain, ref.generation)

    def history(self, ref: HistoryRef) -> list[dict[str, Any]] | None:
        """The items ``ref`` names, oldest first; None when its list expired.

        One round trip, which reads the items after those this process knows already (up to
        :data:`app.cooperation.BATCH` of them; more, a batch a call: Redis serves everyone else
        between two); the list then lives about the history's lifetime from now (each turn that
        reads it keeps it for the responses after: :data:`HISTORY_RENEW_SECONDS`). A
        conversation's list is read with its generation, in one transaction: when a delete came
        since ``ref`` was made, its items are in the list kept at that delete (one more).
        """
        if not ref.length:  # (LRANGE 0 -1 would read the whole list)
            return []
        view = self.history_key(ref)
        if ref.generation is not None:
            live = _Live(self.keys.conversation_generation(ref.chain), ref.generation)
            try:
                return self._history(view, self.keys.history(ref.chain, ref.list), ref.length, live)
            except _MovedError:
                pass  # the list kept at the delete holds them
        return self._history(view, view, ref.length)

    def _history(
        self, view: str, key: str, length: int, live: _Live | None = None
    ) -> list[dict[str, Any]] | None:
        """:meth:`history` of the list ``key``, its items known as ``view``'s.

        ``live``: ``key`` is a conversation's list, which must still be at its generation.

        Raises:
            _MovedError: it is not.
        """
        known, ends = self.read_items.get(view, length)
        first_end = min(length, len(known) + cooperation.BATCH)
        pipe = self.redis.pipeline(transaction=live is not None)
        pipe.lrange(key, len(known), first_end - 1)  # nothing when all are known
        pipe.ttl(key)
        if live is not None:
            pipe.get(live.counter)
        raw: list[bytes | str]
        raw, left, *generation = pipe.execute()
        if live is not None and not live.holds(generation[0]):
            raise _MovedError
        if first_end < length and len(raw) == first_end - len(known):  # the rest, if long
            raw += self.read_list(key, length, start=first_end)
            if live is not None and not live.holds(self.redis.get(live.counter)):
                raise _MovedError  # a delete came between two batches
        if len(known) + len(raw) < length:
            self.read_items.drop(view)
            return None
        if 0 <= left < self.history_ttl - HISTORY_RENEW_SECONDS:  # never shortened
            self.redis.expire(key, self.history_ttl)
            if live is not None:
                self.redis.expire(live.counter, self.history_ttl)
        if not raw:
            return list(known)
        items = [*known, *json_items(raw)]
        size = ends[-1] if ends else 0
        for entry in raw:
            size += len(entry)
            ends.append(size)
        self.read_items.put(view, items, ends)
        return list(items)


@dataclass(frozen=True, slots=True)
class _Live:
    """A conversation's list as a reference saw it: at ``generation`` of its ``counter``."""

    counter: str
    """``Keys.conversation_generation``."""
    generation: int

    def holds(self, raw: bytes | str | None) -> bool:
        """Whether the counter's value (``raw``) is still this generation."""
        return raw is not None and int(raw) == self.generation


class _MovedError(Exception):
    """A conversation's list had a delete since the reference was made."""


_READ_ITEMS = ReadItems()
