"""Conversations: an object, and its items in the order they were added.

A conversation is three keys (``Keys.conversation``, ``…_items``, ``…_order``): the object
with the position its next item takes, the items by id, and the ids by position. Every read
and write is one script (``app/store/lua/``) or one transaction, so a reader never sees half a
write, and reading a whole conversation is one round trip however many items it holds. The
whole is read by Redis's own commands, not a script: a script that reads many items makes a Lua
string of each, some twenty times the cost of a plain read, while Redis serves no one else. A
response that belongs to a conversation appends its input and output items as one block when it
ends, in the same script as its final write (``write.lua``): blocks of responses that end at the
same time follow each other in the order the responses ended, never interleaved. A block of more
than :data:`BLOCK_BATCH` items (or one that ends while another waits) is queued by that write
instead, and appended a batch a call (``append_block.lua``: each item costs the script a Lua
string and three commands); whatever reads or changes the conversation's items first appends
the blocks waiting (:meth:`ConversationBlocks.settle_conversation`), so none sees one in part.

The same scripts keep the items in a fourth key, the conversation's history list
(``Keys.conversation_history``, :mod:`app.store.history`): a new response of the conversation
references its items there, as a response of a chain references its chain's, and neither reads
nor copies them (:meth:`Conversations.head`). A delete takes the item from the list too, and
keeps the list as it was for the references made before (``delete_conversation_item.lua``).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app import cooperation
from app.store.base import StoreBase, json_items, text
from app.store.history import HistoryRef
from app.store.scripts import LuaScript, counted, key

if TYPE_CHECKING:
    from redis.client import Pipeline

    from app.store.scripts import CallT


@dataclass(frozen=True, slots=True, kw_only=True)
class _ConversationCall:
    """The keys of a conversation, the first operands of the scripts that read or add items."""

    conversation: str = key()
    items_key: str = key()
    order_key: str = key()


@dataclass(frozen=True, slots=True, kw_only=True)
class _HistoryCall(_ConversationCall):
    """The keys of a conversation and of its items' history list (``conversation.lua``)."""

    history: str = key()
    generation: str = key()


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateConversationCall(_HistoryCall):
    """The operands of ``create_conversation.lua``."""

    object: str
    ttl: int
    history_ttl: int
    items: tuple[str, ...] = counted()


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendConversationCall(_HistoryCall):
    """The operands of ``append_conversation.lua``."""

    pending: str = key()
    ttl: int
    history_ttl: int
    items: tuple[str, ...] = counted()


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendBlockCall(_HistoryCall):
    """The operands of ``append_block.lua``."""

    pending: str = key()
    block: str = key()
    """The block expected first on ``pending``."""
    count: int
    ttl: int
    history_ttl: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationPageCall(_ConversationCall):
    """The operands of ``conversation_page.lua``."""

    pending: str = key()
    after: str
    """The id of the item the page starts after ("": from the first)."""
    is_descending: bool
    limit: int
    """0: every item."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateConversationCall:
    """The operands of ``update_conversation.lua``."""

    conversation: str = key()
    object: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteConversationItemCall(_HistoryCall):
    """The operands of ``delete_conversation_item.lua``."""

    snapshot: str = key()
    """The history list as it is now, kept as the list of ``expected_generation``."""
    referenced: str = key()
    """Set when a reference into the list was made: only then is the snapshot kept."""
    pending: str = key()
    item_id: str
    expected_generation: str
    """The generation read before the call ("": none, a conversation without a list)."""
    history_ttl: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AdoptHistoryCall:
    """The operands of ``adopt_conversation_history.lua``."""

    conversation: str = key()
    order_key: str = key()
    history: str = key()
    generation: str = key()
    staged: str = key()
    snapshot: str = key()
    """The list there now, kept as the list of ``expected_generation`` (when referenced)."""
    referenced: str = key()
    expected_next: str
    expected_count: int
    expected_generation: str
    """The list's generation when the items were read ("": it had none)."""
    history_ttl: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemPage:
    """A page of a conversation's items (:meth:`Conversations.conversation_items`)."""

    conversation: dict[str, Any]
    """The conversation object."""
    items: list[dict[str, Any]]
    has_more: bool
    is_after_known: bool = True
    """False: the conversation holds no item of the ``after`` id (the page is empty)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationHead:
    """What a new response of a conversation needs of it (:meth:`Conversations.head`)."""

    conversation: dict[str, Any]
    """The conversation object."""
    history: HistoryRef | None
    """Its items now, in its history list (None: a conversation made before it had one, or
    whose list missed a change: an older fleet's)."""
    held: frozenset[str]
    """Those of the ids asked about that the conversation holds already."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Whole:
    """A whole conversation as stored (:meth:`Conversations._whole`)."""

    object: bytes | str
    next_position: bytes | str | None
    """The position its next item takes (``next``)."""
    generation: bytes | str | None
    """Its history list's (None: it has none)."""
    count: int
    """The ids in its order."""
    items: list[str]
    """Its items (JSON, as stored), oldest first: those of the order's ids that have one."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Appended:
    """What :meth:`Conversations.append_to_conversation` did."""

    conversation: dict[str, Any] | None
    """The conversation object (None: there is none, and nothing was appended)."""
    held: int | None = None
    """The index of the first item whose id the conversation holds already: nothing appended."""


APPEND_BLOCK = LuaScript("append_block", AppendBlockCall)
CREATE_CONVERSATION = LuaScript("create_conversation", CreateConversationCall)
APPEND_CONVERSATION = LuaScript("append_conversation", AppendConversationCall)
CONVERSATION_PAGE = LuaScript("conversation_page", ConversationPageCall)
UPDATE_CONVERSATION = LuaScript("update_conversation", UpdateConversationCall)
DELETE_CONVERSATION_ITEM = LuaScript("delete_conversation_item", DeleteConversationItemCall)
ADOPT_HISTORY = LuaScript("adopt_conversation_history", AdoptHistoryCall)
_BLOCKS_WAIT = -2
"""What a script that reads or changes a conversation's items returns when blocks wait."""
STAGED_SECONDS = 3600
"""How long a list being built afresh lives, should its build never end."""
BLOCK_BATCH = 250
"""A response's final write appends a block of up to this many items to its conversation
itself; a longer one is queued and appended this many items a call (``append_block.lua``: a
few milliseconds of Redis's time each, where 450,000 items in the write held it 4.9 s)."""


def encode_items(items: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """Items as the scripts take them (JSON; each has an ``id``)."""
    return tuple(json.dumps(item) for item in items)


class ConversationBlocks(StoreBase):
    """The blocks of items waiting to be appended to a conversation (``write.lua`` queues them)."""

    def _conversation_keys(self, conversation_id: str) -> dict[str, str]:
        return {
            "conversation": self.keys.conversation(conversation_id),
            "items_key": self.keys.conversation_items(conversation_id),
            "order_key": self.keys.conversation_order(conversation_id),
        }

    def _history_keys(self, conversation_id: str) -> dict[str, str]:
        return {
            **self._conversation_keys(conversation_id),
            "history": self.keys.conversation_history(conversation_id),
            "generation": self.keys.conversation_generation(conversation_id),
        }

    def settle_conversation(self, conversation_id: str) -> None:
        """Append the blocks waiting on the conversation, :data:`BLOCK_BATCH` items a call.

        Every read or change of a conversation's items first finds none waiting, or settles
        them (so none sees a block half appended); a response's final write that queued one
        settles it at once. Several callers may settle the same conversation side by side:
        each call appends the next items of the first block.
        """
        keys = self._history_keys(conversation_id)
        pending = self.keys.conversation_pending(conversation_id)
        block = self.redis.lindex(pending, 0)
        append = self.script(APPEND_BLOCK)
        while block is not None:
            block = append(
                AppendBlockCall(
                    **keys,
                    pending=pending,
                    block=text(block),
                    count=BLOCK_BATCH,
                    ttl=self.ttl_seconds,
                    history_ttl=self.history_ttl,
                )
            )

    def _settled_reads(self, conversation_id: str, reads: Callable[[Pipeline], object]) -> Any:
        """The replies to the reads ``reads`` queues, in a transaction that finds no block waiting.

        Blocks waiting on the conversation are appended first, then the transaction runs again.
        """
        pending = self.keys.conversation_pending(conversation_id)
        while True:
            with self.redis.pipeline(transaction=True) as pipe:
                pipe.exists(pending)
                reads(pipe)
                waits, *replies = pipe.execute()
            if not waits:
                return replies
            self.settle_conversation(conversation_id)

    def _settled_script(self, conversation_id: str, script: LuaScript[CallT], call: CallT) -> Any:
        """The script's reply to ``call`` once it found no block waiting on the conversation.

        A script that finds some replies :data:`_BLOCKS_WAIT` second: those are appended first,
        then it runs again.
        """
        while True:
            reply = self.script(script)(call)
            if len(reply) < 2 or reply[1] != _BLOCKS_WAIT:
                return reply
            self.settle_conversation(conversation_id)


class Conversations(ConversationBlocks):
    """Creating, reading, changing and deleting conversations and their items."""

    def _moving_keys(self, conversation_id: str, generation: str) -> dict[str, str]:
        """What moving the history list on from ``generation`` ("": none) needs."""
        return {
            "snapshot": self.keys.conversation_history_at(conversation_id, int(generation or 0)),
            "referenced": self.keys.conversation_referenced(conversation_id),
        }

    def create_conversation(
        self, conversation: dict[str, Any], *, items: Sequence[dict[str, Any]]
    ) -> None:
        """Store a new conversation (its ``id`` fresh) with its first items."""
        created = self.script(CREATE_CONVERSATION)(
            CreateConversationCall(
                **self._history_keys(conversation["id"]),
                object=json.dumps(conversation),
                ttl=self.ttl_seconds,
                history_ttl=self.history_ttl,
                items=encode_items(items),
            )
        )
        if not created:  # ids are random; a clash is a bug
            raise RuntimeError(f"conversation {conversation['id']} already exists")

    def append_to_conversation(
        self, conversation_id: str, items: Sequence[dict[str, Any]]
    ) -> Appended:
        """Append ``items`` as one block, or nothing when the conversation holds one's id."""
        call = AppendConversationCall(
            **self._history_keys(conversation_id),
            pending=self.keys.conversation_pending(conversation_id),
            ttl=self.ttl_seconds,
            history_ttl=self.history_ttl,
            items=encode_items(items),
        )
        raw, held = self._settled_script(conversation_id, APPEND_CONVERSATION, call)
        return Appended(
            conversation=None if raw is None else _object(raw),
            held=held - 1 if held else None,  # the script counts from 1
        )

    def conversation_items(
        self,
        conversation_id: str,
        *,
        after: str | None = None,
        is_descending: bool = False,
        limit: int = 0,
    ) -> ItemPage | None:
        """A page of items (``limit`` 0: all of them, one round trip); None: no conversation."""
        if not (limit or after or is_descending):
            return self._all_conversation_items(conversation_id)
        call = ConversationPageCall(
            **self._conversation_keys(conversation_id),
            pending=self.keys.conversation_pending(conversation_id),
            after=after or "",
            is_descending=is_descending,
            limit=limit,
        )
        raw, *rest = self._settled_script(conversation_id, CONVERSATION_PAGE, call)
        if raw is None:
            return None
        has_more, *items = rest
        if has_more == -1:
            return ItemPage(
                conversation=_object(raw), items=[], has_more=False, is_after_known=False
            )
        return ItemPage(
            conversation=_object(raw),
            items=[json.loads(item) for item in items if item is not None],
            has_more=bool(has_more),
        )

    def _all_conversation_items(self, conversation_id: str) -> ItemPage | None:
        """Every item, oldest first, in one transaction of plain reads."""
        whole = self._whole(conversation_id)
        if whole is None:
            return None
        return ItemPage(
            conversation=_object(whole.object), items=json_items(whole.items), has_more=False
        )

    def _whole(self, conversation_id: str) -> _Whole | None:
        """The whole conversation as stored, in one transaction of plain reads (None: none)."""
        keys = self._history_keys(conversation_id)

        def reads(pipe: Pipeline) -> None:
            pipe.hget(keys["conversation"], "object")
            pipe.hget(keys["conversation"], "next")
            pipe.get(keys["generation"])
            pipe.zrange(keys["order_key"], 0, -1)
            pipe.hgetall(keys["items_key"])

        raw_object, next_position, generation, ids, by_id = self._settled_reads(
            conversation_id, reads
        )
        if raw_object is None:
            return None
        return _Whole(
            object=raw_object,
            next_position=next_position,
            generation=generation,
            count=len(ids),
            items=[text(by_id[id_]) for id_ in ids if id_ in by_id],
        )

    def head(self, conversation_id: str, item_ids: Sequence[str]) -> ConversationHead | None:
        """The conversation, its items by reference, and which of ``item_ids`` it holds.

        A constant number of round trips whatever the conversation's length, none of its items
        read (None: no such conversation): one transaction of plain reads, then one that marks
        the list referenced (``delete_conversation_item.lua`` keeps it for the reference made
        here) and reads its generation again (a delete came between: all over). More than
        :data:`app.cooperation.BATCH` ids are asked about a batch a call (Redis serves everyone
        else between two).
        """
        keys = self._history_keys(conversation_id)
        first, *rest = cooperation.in_batches(item_ids) if item_ids else [()]

        def reads(pipe: Pipeline) -> None:
            pipe.hget(keys["conversation"], "object")
            pipe.get(keys["generation"])
            pipe.llen(keys["history"])
            pipe.zcard(keys["order_key"])
            if first:
                pipe.hmget(keys["items_key"], list(first))

        while True:
            raw_object, generation, length, count, *found = self._settled_reads(
                conversation_id, reads
            )
            if raw_object is None:
                return None
            # a list that does not hold every item (an older fleet's script added or deleted
            # one during an upgrade) is not used: the conversation is read whole
            history = (
                HistoryRef(conversation_id, conversation_id, int(length), int(generation))
                if generation is not None and length == count
                else None
            )
            if history is None or not length or self._referenced(conversation_id, generation):
                break
        stored = found[0] if found else []
        for batch in rest:  # a long input's ids, a batch a call
            stored += self.redis.hmget(keys["items_key"], list(batch))
        held = [id_ for id_, item in zip(item_ids, stored, strict=True) if item is not None]
        return ConversationHead(
            conversation=_object(raw_object), history=history, held=frozenset(held)
        )

    def rebuild_history(self, conversation_id: str) -> bool:
        """Build the conversation's history list afresh from its items; whether it took.

        For a conversation made before it had such a list, or whose list missed a change (an
        older fleet's script): the items, read in one transaction, go onto a list of their
        own a batch a call, which takes the list's place when nothing changed the conversation
        meanwhile (``adopt_conversation_history.lua``); a new response then references it.
        """
        keys = self._history_keys(conversation_id)
        whole = self._whole(conversation_id)
        # gone, or an id without its item (the list's length would never match the order's)
        if whole is None or whole.next_position is None or len(whole.items) != whole.count:
            return False
        staged = self.keys.conversation_history_staged(conversation_id, secrets.token_hex(8))
        if not self.append_list(staged, whole.items, before=0, ttl=STAGED_SECONDS):
            return False
        expected = "" if whole.generation is None else text(whole.generation)
        return bool(
            self.script(ADOPT_HISTORY)(
                AdoptHistoryCall(
                    conversation=keys["conversation"],
                    order_key=keys["order_key"],
                    history=keys["history"],
                    generation=keys["generation"],
                    staged=staged,
                    **self._moving_keys(conversation_id, expected),
                    expected_next=text(whole.next_position),
                    expected_count=whole.count,
                    expected_generation=expected,
                    history_ttl=self.history_ttl,
                )
            )
        )

    def _referenced(self, conversation_id: str, generation: bytes | str) -> bool:
        """Mark the conversation's list referenced; whether it is still at ``generation``."""
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.keys.conversation_referenced(conversation_id), 1, ex=self.history_ttl)
            pipe.get(self.keys.conversation_generation(conversation_id))
            _, now = pipe.execute()
        return bool(now == generation)

    def conversation(self, conversation_id: str) -> dict[str, Any] | None:
        """The conversation object, or None when unknown, expired or deleted."""
        raw = self.redis.hget(self.keys.conversation(conversation_id), "object")
        return None if raw is None else _object(raw)

    def conversation_item(
        self, conversation_id: str, item_id: str
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The conversation object and one of its items (each None when there is none)."""

        def reads(pipe: Pipeline) -> None:
            pipe.hget(self.keys.conversation(conversation_id), "object")
            pipe.hget(self.keys.conversation_items(conversation_id), item_id)

        raw_object, raw_item = self._settled_reads(conversation_id, reads)
        return (
            None if raw_object is None else _object(raw_object),
            None if raw_item is None else _object(raw_item),
        )

    def conversation_items_named(
        self, places: Sequence[tuple[str, str]]
    ) -> list[tuple[dict[str, Any] | None, dict[str, Any] | None]]:
        """Each place's (a conversation and an item id) conversation object and item.

        Each None when there is none. One round trip (one a node on a cluster), no block
        settled: a block waiting holds a response's items, whose ids name the response.
        """
        pipe = self.redis.pipeline(transaction=False)
        for conversation_id, item_id in places:
            pipe.hget(self.keys.conversation(conversation_id), "object")
            pipe.hget(self.keys.conversation_items(conversation_id), item_id)
        replies = [None if raw is None else _object(raw) for raw in pipe.execute()]
        return list(zip(replies[::2], replies[1::2], strict=True))

    def update_conversation(self, conversation: dict[str, Any]) -> bool:
        """Replace the conversation object; False when there is no such conversation."""
        return bool(
            self.script(UPDATE_CONVERSATION)(
                UpdateConversationCall(
                    conversation=self.keys.conversation(conversation["id"]),
                    object=json.dumps(conversation),
                )
            )
        )

    def delete_conversation_item(
        self, conversation_id: str, item_id: str
    ) -> tuple[dict[str, Any] | None, bool]:
        """Remove an item: the conversation object (None: none) and whether the item was there.

        Its history list loses it too, the list as it was kept for the references into it
        (``delete_conversation_item.lua``): the generation is read first, and again should
        another delete come between.
        """
        keys = self._history_keys(conversation_id)
        while True:
            generation = self.redis.get(keys["generation"])
            expected = "" if generation is None else text(generation)
            call = DeleteConversationItemCall(
                **keys,
                **self._moving_keys(conversation_id, expected),
                pending=self.keys.conversation_pending(conversation_id),
                item_id=item_id,
                expected_generation=expected,
                history_ttl=self.history_ttl,
            )
            raw, removed = self._settled_script(conversation_id, DELETE_CONVERSATION_ITEM, call)
            if removed != -1:
                return (None if raw is None else _object(raw)), bool(removed)

    def delete_conversation(self, conversation_id: str) -> bool:
        """Remove a conversation with its items; False when there was none.

        Redis frees them outside its main thread (``UNLINK``: a ``DEL`` of 450,000 items held it
        270 ms). The blocks waiting on it go too (one queued meanwhile expires with its time to
        live, or goes with the next look at the conversation: ``append_block.lua``).
        """
        keys = self._conversation_keys(conversation_id)
        pending = self.keys.conversation_pending(conversation_id)
        blocks = self.redis.lrange(pending, 0, -1)
        deleted = self.redis.unlink(keys["conversation"], keys["items_key"], keys["order_key"])
        self.redis.unlink(pending, *(text(block) for block in blocks))
        return bool(deleted)


def _object(raw: bytes | str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(text(raw))
    return found
