"""The status table: every move a response's status can make, and which write makes it.

A record's status changes only through the store's compare-and-set scripts, and each write
names its :class:`Transition`: the statuses the record must have now (``source``) and those
the write may give it (``target``). The scripts receive both sets as arguments (they hold no
status of their own), so this table is the whole truth::

    (none) ──create──▶ queued ──START (load_turn only)──▶ in_progress ──COMMIT──▶ in_progress
                         │                                      │
                         └──CANCEL / FAIL──▶ cancelled, failed ◀┴──FINISH──▶ any terminal status

A terminal status is the source of no transition: a finished response refuses every write.
``create`` stores a new record in whatever status it is given (production: ``queued``).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.protocol.response import ACTIVE_STATUSES, TERMINAL_STATUSES, ResponseStatus

__all__ = [
    "ACTIVE_STATUSES",
    "APPENDING_STATUSES",
    "CANCEL",
    "COMMIT",
    "FAIL",
    "FINISH",
    "START",
    "TERMINAL_STATUSES",
    "TRANSITIONS",
    "ResponseStatus",
    "Transition",
    "is_allowed",
    "packed",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Transition:
    """One kind of status write."""

    name: str
    source: frozenset[ResponseStatus]
    """The statuses the record must have for the write to happen."""
    target: frozenset[ResponseStatus]
    """The statuses the write may store."""
    is_write: bool = True
    """Made by ``ResponseStore.write``; False: only by a run's first read (``load_turn``)."""

    def allows(self, current: str, new: str) -> bool:
        """Whether this transition moves a record from ``current`` to ``new``."""
        return current in self.source and new in self.target


START = Transition(
    name="start",
    source=frozenset({ResponseStatus.QUEUED}),
    target=frozenset({ResponseStatus.IN_PROGRESS}),
    is_write=False,
)
"""A run's first read starts a queued response (``load_turn``; no ``write`` makes it)."""
COMMIT = Transition(
    name="commit",
    source=frozenset({ResponseStatus.IN_PROGRESS}),
    target=frozenset({ResponseStatus.IN_PROGRESS}),
)
"""A run commits a turn's progress; the response goes on."""
FINISH = Transition(
    name="finish", source=frozenset({ResponseStatus.IN_PROGRESS}), target=TERMINAL_STATUSES
)
"""A run writes the response's final status (a model's own cancel included)."""
CANCEL = Transition(
    name="cancel", source=ACTIVE_STATUSES, target=frozenset({ResponseStatus.CANCELLED})
)
"""A client cancels a background response that has not finished."""
FAIL = Transition(name="fail", source=ACTIVE_STATUSES, target=frozenset({ResponseStatus.FAILED}))
"""The fleet gives up on a response that has not finished."""

APPENDING_STATUSES = frozenset(
    {ResponseStatus.COMPLETED, ResponseStatus.INCOMPLETE, ResponseStatus.REQUIRES_ACTION}
)
"""The final statuses whose write adds the response's items to its conversation: a failed or
cancelled response adds nothing (the client may try the same input again)."""

TRANSITIONS = (START, COMMIT, FINISH, CANCEL, FAIL)
"""The table: every status write there is."""


def is_allowed(current: str, new: str) -> bool:
    """Whether some transition of the table moves a record from ``current`` to ``new``."""
    return any(transition.allows(current, new) for transition in TRANSITIONS)


def packed(statuses: frozenset[ResponseStatus]) -> str:
    """A set of statuses as one script argument, ``|a|b|`` (a script looks up ``|s|``)."""
    return "|" + "|".join(sorted(statuses)) + "|"
