"""What the model sees: the ``previous_response_id`` chain or the conversation, then the input."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from functools import cached_property
from typing import Any, TypeGuard, overload

from app.errors import InvalidRequestError, NotFoundError, PreviousResponseNotFoundError, quoted
from app.ids import is_conversation_id, is_response_id
from app.store import HistoryRef, ResponseStore, StoredResponse

Item = dict[str, Any]


class History(Sequence[Item]):
    """The items before a new response's input: a prefix kept in the store, then ``tail``.

    ``base``: the prefix, a reference into the chain's list (:mod:`app.store.history`), read
    only when the items are looked at (a check that needs the chain): a create that continues
    a long chain neither reads nor parses it, and stores ``base`` and ``tail`` as its own
    history by appending ``tail`` alone.
    """

    def __init__(
        self, store: ResponseStore, *, base: HistoryRef | None = None, tail: Sequence[Item] = ()
    ) -> None:
        self.store = store
        self.base = base
        self.tail = list(tail)

    @cached_property
    def items(self) -> list[Item]:
        """Every item, oldest first.

        Raises:
            PreviousResponseNotFoundError: the stored prefix expired.
        """
        if self.base is None:
            return self.tail
        stored = self.store.history(self.base)
        if stored is None:
            raise PreviousResponseNotFoundError(
                "The previous response's history expired.", param="previous_response_id"
            )
        return [*stored, *self.tail]

    def is_empty(self) -> bool:
        """No items at all (without reading them)."""
        return self.base is None and not self.tail

    def keep(self, response_id: str) -> HistoryRef | None:
        """Store these items as the history of the new response ``response_id`` (None: none).

        Raises:
            PreviousResponseNotFoundError: the stored prefix expired.
        """
        if self.is_empty():
            return None
        if self.base is not None and not self.tail:  # a list's first items never change
            return self.base
        kept = self.store.extend_history(self.base, self.tail, response_id=response_id)
        if kept is None:
            raise PreviousResponseNotFoundError(
                "The previous response's history expired.", param="previous_response_id"
            )
        return kept

    @overload
    def __getitem__(self, index: int) -> Item: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Item]: ...

    def __getitem__(self, index: int | slice) -> Item | Sequence[Item]:
        return self.items[index]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Item]:
        return iter(self.items)


def chain_history(
    store: ResponseStore, previous_response_id: str, *, owner: str | None = None
) -> History:
    """What a response continuing ``previous_response_id`` has before its input.

    The previous response's own history, then its input and output items. ``owner``: the
    tenant continuing the chain, which must own the previous response (None: a worker's read
    of a chain that was checked when its response was created). ``instructions`` do not carry
    over (OpenAI's rule): only items do. One record is read, however long the chain.

    Raises:
        PreviousResponseNotFoundError: the previous response is unknown, expired, deleted or
            was created with ``store: false``, another tenant's (the same answer), or the id is
            not of the fleet's format (it is never made into a key).
    """
    stored = store.load(previous_response_id) if is_response_id(previous_response_id) else None
    if stored is None or not stored.response.store or not _is_owner(stored, owner):
        raise PreviousResponseNotFoundError(
            f"Previous response with id {quoted(previous_response_id)} not found.",
            param="previous_response_id",
        )
    own = [*store.inputs(previous_response_id), *stored.response.output]
    if stored.history is not None:
        return History(store, base=stored.history, tail=own)
    return History(store, tail=[*_before_lists(store, stored, owner), *own])


def load_history(
    store: ResponseStore, previous_response_id: str | None, *, owner: str | None = None
) -> list[Item]:
    """Every item of :func:`chain_history`, read (none without a previous response).

    Raises:
        PreviousResponseNotFoundError: as :func:`chain_history`, or the history expired.
    """
    if previous_response_id is None:
        return []
    return chain_history(store, previous_response_id, owner=owner).items


def history_of(store: ResponseStore, stored: StoredResponse) -> list[Item]:
    """What comes before a response's own input (one round trip, however long the chain).

    Raises:
        PreviousResponseNotFoundError: the history expired.
    """
    if stored.history is not None:
        return History(store, base=stored.history).items
    return _before_lists(store, stored, owner=None)


def _before_lists(store: ResponseStore, stored: StoredResponse, owner: str | None) -> list[Item]:
    """The history of a response stored without a reference: its ``context``, else its chain.

    Records made before the chain's lists held their history as ``context`` in ``extra``.
    """
    if "context" in stored.extra:
        context: list[Item] = stored.extra["context"]
        return context
    return load_history(store, stored.response.previous_response_id, owner=owner)


OWNER_FIELD = "owner"
"""Where a stored conversation object keeps its owner (:mod:`app.ownership`); never served."""


def conversation_history(
    store: ResponseStore, conversation_id: str, inputs: Sequence[Item], *, owner: str
) -> History:
    """What a new response of a conversation ``owner`` owns has before its ``inputs``.

    The conversation's items as they are now, by reference to its history list: none is read.
    The inputs join the conversation when the response ends: none of their ids may be taken
    there. A conversation made before it had a history list (or whose list missed an older
    fleet's change) has its list built afresh first (its items read once, in Redis's own
    commands), then referenced; only when that does not take (the conversation changed
    meanwhile) are its items read whole and copied.

    Raises:
        NotFoundError: as :func:`load_conversation`.
        InvalidRequestError: an input's id is taken (:func:`check_item_ids`).
    """
    check_conversation_id(conversation_id, param="conversation")
    ids = [item["id"] for item in inputs]
    head = store.head(conversation_id, ids)
    owned_conversation(
        head.conversation if head else None, conversation_id, owner, param="conversation"
    )
    assert head is not None
    if head.history is None and store.rebuild_history(conversation_id):
        head = store.head(conversation_id, ids)  # the list just built, or None: it went
    if head is None or head.history is None:
        held = load_conversation(store, conversation_id, owner=owner)
        check_item_ids(inputs, held_ids=[item["id"] for item in held], param="input")
        return History(store, tail=held)
    check_item_ids(inputs, held_ids=head.held, param="input")
    return History(store, base=head.history if head.history.length else None)


def load_conversation(
    store: ResponseStore, conversation_id: str, *, owner: str
) -> list[dict[str, Any]]:
    """Every item of a conversation ``owner`` owns, oldest first: one round trip, however long.

    Raises:
        NotFoundError: the conversation is unknown, expired, deleted or another tenant's, or
            the id is not of the fleet's format (the same answer).
    """
    check_conversation_id(conversation_id, param="conversation")
    page = store.conversation_items(conversation_id)
    owned_conversation(
        page.conversation if page else None, conversation_id, owner, param="conversation"
    )
    assert page is not None
    return page.items


def owned_conversation(
    stored: dict[str, Any] | None,
    conversation_id: str,
    tenant: str,
    *,
    param: str = "conversation_id",
) -> dict[str, Any]:
    """The conversation object as clients see it, when ``tenant`` owns ``stored``.

    Raises:
        NotFoundError: no such conversation, or another tenant's (the same answer).
    """
    if not owns_conversation(stored, tenant):
        raise conversation_not_found(conversation_id, param=param)
    return {key: value for key, value in stored.items() if key != OWNER_FIELD}


def owns_conversation(stored: dict[str, Any] | None, tenant: str) -> TypeGuard[dict[str, Any]]:
    """Whether ``stored`` (a conversation object as the store keeps it; None: none) is ``tenant``'s.

    A conversation made while the fleet was open has no owner: the open tenant's ("").
    """
    return stored is not None and stored.get(OWNER_FIELD, "") == tenant


def check_conversation_id(conversation_id: str, *, param: str = "conversation_id") -> str:
    """``conversation_id`` when it has the fleet's format: call it before any key is made of it.

    The conversation's keys are its id with suffixes (:mod:`app.ids`): ``<id>:order`` would
    name another conversation's sorted set, ``<id>:items`` its items.

    Raises:
        NotFoundError: any other string, with the answer an unknown id gets.
    """
    if not is_conversation_id(conversation_id):
        raise conversation_not_found(conversation_id, param=param)
    return conversation_id


def conversation_not_found(conversation_id: str, *, param: str) -> NotFoundError:
    """OpenAI's 404 for a conversation id that names nothing."""
    return NotFoundError(f"Conversation with id {quoted(conversation_id)} not found.", param=param)


def check_item_ids(items: Sequence[Item], *, held_ids: Iterable[str] = (), param: str) -> None:
    """Each of ``items`` (with their ids) takes an id no other item has in the conversation.

    An id names one item of a conversation, so a second item of it would take the first
    one's place: OpenAI refuses the request, and so does the fleet, before anything is added.
    ``held_ids``: ids the conversation holds; ``param``: where ``items`` are in the request.

    Raises:
        InvalidRequestError: the first item whose id is held or an earlier item's
            (``param`` ``<param>.<index>.id``).
    """
    seen = set(held_ids)
    for index, item in enumerate(items):
        if item["id"] in seen:
            raise duplicate_item(item["id"], param=f"{param}.{index}.id")
        seen.add(item["id"])


def duplicate_item(item_id: str, *, param: str) -> InvalidRequestError:
    """OpenAI's 400 for an item whose id the conversation (or the request) has already."""
    return InvalidRequestError(
        f"Duplicate item found with id {quoted(item_id, limit=128)}. Remove duplicate items from "
        "your input and try again.",
        param=param,
    )


def _is_owner(stored: StoredResponse, owner: str | None) -> bool:
    return owner is None or stored.owner == owner
