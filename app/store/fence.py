"""Fencing a run's writes with its lease token, so a run that lost its lease writes nothing.

A run holds its response's lease while it works (``app.lease``), but a process can stall for
longer than a lease (CPU starvation, a long GC pause, SIGSTOP) while still running: the lease
lapses, the sweeper starts another run of the turn, and the stalled one wakes up still
believing it owns the response. So each run passes its lease token (a fencing token) with every
event it emits (``emit.lua``) and every write it makes (``write.lua``; ``set_extra.lua`` for
the model's plan); the script checks it against the lease key in the same step and writes
nothing when another run holds the lease.

A lease that merely lapsed is taken again for the run's token, if no run took it since: the
record's ``holder`` field names the token that last took the lease (``load_turn.lua``), so a
run that took it and gave it back (after committing the turn) still fences the slow one out.
Writes made by no lease-holding run (a create, a cancel, a tool's result, the task boundary's
failure) pass :data:`NO_FENCE` and are not checked.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Fence:
    """The lease a run's writes are made under."""

    token: str
    """What the lease key holds while the lease is the run's ("": no lease, no check)."""
    milliseconds: int
    """How long the lease lasts when a write takes it again after it lapsed."""
    turn: int | None = None
    """The turn the run took the lease for: a terminal write takes the turn's count of starts
    with it (``load_turn.lua``), as giving the lease back does (None: no run's lease)."""

    def deadline(self, now: float) -> float:
        """Epoch seconds: the sweeper's look, should a lease taken ``now`` (the store's) lapse."""
        return now + self.milliseconds / 1000


NO_FENCE = Fence(token="", milliseconds=0)
"""A write made by no lease-holding run: not checked."""
