"""Every stored object has an owner (a tenant); another tenant is told it does not exist.

An object kind records its owner when it is created — a response's record has an ``owner``
field written by the create (``write.lua``); a code interpreter container an owner key beside
its files; a compaction item its owner inside the sealed content — and every path that reads,
changes or continues an object passes it through :func:`require_owned` first. A new kind of
stored object (conversations) gets the same rule by one call: store ``owner`` at create, load
it into a record with an ``owner`` attribute, and call :func:`require_owned` where it is read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from app.errors import AppError


class Owned(Protocol):
    """A stored object as read back: who created it."""

    @property
    def owner(self) -> str:
        """The tenant's name (``""``: created while the fleet was open)."""
        ...


OwnedT = TypeVar("OwnedT", bound=Owned)


def require_owned(record: OwnedT | None, tenant: str, *, missing: Callable[[], AppError]) -> OwnedT:
    """``record`` when it exists and ``tenant`` owns it.

    ``missing`` makes the error when it is raised: an error a frame's variable holds while it
    is raised is in a reference cycle with that frame (through its traceback), and with it the
    whole request's stack waits for the garbage collector, in the gateway a rare one.

    Raises:
        AppError: ``missing()`` (the error of an unknown id: 404) when there is no record or
            another tenant owns it, so a tenant cannot tell the two apart.
    """
    if record is None or record.owner != tenant:
        raise missing()
    return record
