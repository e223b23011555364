"""A request's input items validated a batch at a time, so its process's other work goes on.

A gateway process serves all its clients on one thread (gevent), and pydantic validates a list in
one call: 450,000 items took seconds. So a long list is validated a batch at a time, with a
pause between two: items of :data:`app.cooperation.BATCH` :func:`~app.cooperation.weight` in
all, each item counting its lists' entries (a thousand messages of 900 parts are 900,000 parts,
not a thousand items). An item can be as long by itself: one message of 400,000 text parts
(a 15 MB body) held its process for 5 s, every other client's events and ``/healthz`` waiting.
Such a *heavy* item (a list of its own longer than a batch: a message's ``content``, an
output's parts, a reasoning item's ``summary`` …) is validated a batch of its longest list's
entries at a time: each batch in a copy of the item holding only it.

What is refused is refused as a validation of the whole list would refuse it, and located the
same way (the first bad batch says enough).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from app import cooperation
from app.protocol.items import INPUT_ITEMS


class BadItems(Exception):
    """The first bad batch of a list of items: its errors, located in the whole body."""

    def __init__(self, errors: list[ErrorDetails]):
        super().__init__(errors)
        self.errors = errors


def heavy_field(item: Any) -> str | None:
    """The field of ``item`` (as sent) whose list is over a batch, the longest (None: none)."""
    return cooperation.longest_list(item.items()) if isinstance(item, dict) else None


def is_light(items: Sequence[Any]) -> bool:
    """Whether ``items`` (as sent) weigh a batch at most (:func:`app.cooperation.weight`).

    Stops counting once over: a long list is not walked whole to say it is.
    """
    held = 0
    for item in items:
        held += cooperation.weight(item)
        if held > cooperation.BATCH:
            return False
    return True


def first_entries(items: Sequence[Any]) -> list[Any]:
    """``items`` with each one's longest list cut to its first entries, a batch among them all.

    What the rest of a body is validated with, its list of items' own limits (its length)
    checked, before the items are validated a batch at a time (:func:`validated_items`).
    """
    share = max(1, cooperation.BATCH // max(1, len(items)))
    return [_cut(item, share) for item in items]


def _cut(item: Any, share: int) -> Any:
    """``item`` with its longest list, if longer than ``share`` entries, cut to its first ones."""
    field = cooperation.longest_list(item.items(), over=share) if isinstance(item, dict) else None
    return item if field is None else {**item, field: item[field][:share]}


def validated_items(items: Sequence[Any], *, param: str) -> list[Any]:
    """``items`` (the body's list ``param``) validated a batch at a time, heavy ones on their own.

    Raises:
        BadItems: the first bad batch's errors.
    """
    validated: list[Any] = []
    start, held = 0, 0  # the first item not validated yet; the weight of those from it
    for index, item in enumerate(items):
        heavy = heavy_field(item)
        if heavy is None:
            held += cooperation.weight(item)
            if held < cooperation.BATCH and index + 1 < len(items):
                continue
        end = index if heavy is not None else index + 1
        if end > start:
            if start:
                cooperation.pause()
            validated += _validated(items[start:end], _Place(param, start))
        if heavy is not None:
            cooperation.pause()
            validated.append(_validated_heavy(item, heavy, _Place(param, index)))
        start, held = index + 1, 0
    return validated


@dataclass(frozen=True, slots=True)
class _Place:
    """Where a validated slice of a body's list of items begins, to locate its errors."""

    param: str
    index: int
    field: str | None = None
    offset: int = 0

    def locate(self, error: ErrorDetails) -> ErrorDetails:
        """``error`` (of the slice) located in the whole body.

        The slice's first item is ``param[index]``; with ``field``, the slice is one item whose
        list ``field`` holds its entries from ``offset`` on.
        """
        where: list[Any] = [self.param, self.index + int(error["loc"][0]), *error["loc"][1:]]
        if self.field is not None and self.field in where[2:]:
            # the entry's index follows the field's name, after the tags of any unions between
            after = where.index(self.field, 2) + 1
            at = next((n for n in range(after, len(where)) if isinstance(where[n], int)), None)
            if at is not None:
                where[at] += self.offset
        return {**error, "loc": tuple(where)}


def _validated(items: Sequence[Any], place: _Place) -> list[Any]:
    try:
        return INPUT_ITEMS.validate_python(items)
    except ValidationError as exc:
        raise BadItems([place.locate(error) for error in exc.errors(include_url=False)]) from None


def _validated_heavy(item: dict[str, Any], field: str, place: _Place) -> Any:
    """``item`` validated with its list ``field`` a batch of entries at a time.

    Each batch is validated in a copy of the item holding only it, a pause between two; the
    item is the first copy's with every batch's entries. Should two copies validate as
    different kinds of item, the item is validated whole after all.
    """
    first: Any = None
    attribute: str | None = None
    kept: list[Any] = []
    for number, batch in enumerate(cooperation.in_batches(item[field])):
        offset = number * cooperation.BATCH
        at = _Place(place.param, place.index, field, offset)
        (model,) = _validated([{**item, field: batch}], at)
        if first is None:
            first, attribute = model, _attribute(model, field)
        entries = None if attribute is None else getattr(model, attribute)
        if type(model) is not type(first) or not isinstance(entries, list):
            (whole,) = _validated([item], place)
            return whole
        kept += entries
    return first.model_copy(update={attribute: kept})


def _attribute(model: BaseModel, field: str) -> str | None:
    """The attribute of ``model`` that its item's ``field`` was validated into; None: none."""
    for name, info in type(model).model_fields.items():
        if field in (name, info.alias, info.validation_alias):
            return name
    return None
