"""Writes that take effect once, even when Redis runs them twice.

When Redis stops with a script call in flight, the call may have run and its reply been lost;
redis-py's outage ``Retry`` (``app.fleet.outage_retry``) then sends the very same call again
once Redis is back. Run twice, ``emit.lua`` would append its events a second time under new
sequence numbers (a client read "dolor sit sit amet"), a write would bump the version again and
a create would find its own record and fail.

So every emit and every write is made by a :class:`Writer` and carries a :class:`CallToken`:
the writer's field in the response's record and a token unique among the writer's calls. A call
that changes anything leaves its token and its result in that field (``lua/include/once.lua``);
a call that finds its own token there is the same call replayed: it returns the result the first
run returned and writes nothing. A writer makes one call at a time (a thread, or an event sink
under its lock), so only its last call can be in flight, and one field per writer is enough.
The fields live in the record, so they go with it (delete, expiry).

A call that was refused changed nothing and leaves no mark: its replay decides afresh.
A run's first read (``load_turn.lua``) and a tool task's (``open_tool_call.lua``) need no
token: each finds the lease or claim holding its own random token and knows it ran before, so
it neither refuses itself nor counts the start twice; a tool result stored again
(``finish_tool_call.lua``) finds its very JSON stored and reports it stored.
"""

from __future__ import annotations

import itertools
import os
import secrets
import threading
from dataclasses import dataclass

FIELD_PREFIX = "once:"
"""The record fields of writers: ``once:<writer id>`` → ``<token> <first result as JSON>``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CallToken:
    """One call of one writer."""

    field: str
    """The writer's field in the record."""
    token: str
    """Unique among the writer's calls."""


class Writer:
    """Makes one call at a time; numbers its calls."""

    def __init__(self) -> None:
        self._field = FIELD_PREFIX + secrets.token_hex(8)
        self._calls = itertools.count(1)

    def next_call(self) -> CallToken:
        """The token of the writer's next call (a retry of a call reuses that call's token)."""
        return CallToken(field=self._field, token=str(next(self._calls)))


_threads = threading.local()


def this_thread() -> Writer:
    """The calling thread's writer (a thread makes one call at a time; so does a greenlet)."""
    writer: Writer | None = getattr(_threads, "writer", None)
    if writer is None:
        writer = _threads.writer = Writer()
    return writer


def _forget_writer() -> None:
    """A forked child must not share its parent's writer (their fields would collide).

    Only the forking thread lives on in the child: its writer is the one to forget.
    """
    vars(_threads).pop("writer", None)


os.register_at_fork(after_in_child=_forget_writer)
