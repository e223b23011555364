"""Which worker runs the current task, and when its message was sent and taken.

A worker sets the stamp as a task starts (``workers.telemetry``); the first write of a turn
(``load_turn.lua``) and of a tool call (``open_tool_call.lua``) stores it with the record, so
the console's timeline (:mod:`app.timeline`) knows the queue wait and the worker of each step
without a write of its own.
"""

from __future__ import annotations

import json
from contextvars import ContextVar, Token
from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskStamp:
    """Where and when a task runs."""

    worker: str
    """The Celery worker's hostname."""
    queue: str
    sent_at: float | None
    """Epoch seconds the message was sent (None: sent without the header)."""
    started_at: float
    """Epoch seconds the worker took it."""

    def to_json(self) -> str:
        """The stamp as stored."""
        return json.dumps(asdict(self), separators=(",", ":"))


_CURRENT: ContextVar[TaskStamp | None] = ContextVar("antwort_task_stamp", default=None)


def push(stamp: TaskStamp) -> Token[TaskStamp | None]:
    """Set the current task's stamp; :func:`pop` with the token when the task ends."""
    return _CURRENT.set(stamp)


def pop(token: Token[TaskStamp | None]) -> None:
    """Restore the stamp before :func:`push`."""
    _CURRENT.reset(token)


def current_json() -> str:
    """The current task's stamp as stored ("": no task, e.g. a test calling the engine)."""
    stamp = _CURRENT.get()
    return "" if stamp is None else stamp.to_json()
