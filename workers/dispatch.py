"""``app.dispatch.Dispatcher`` over Celery: turn tasks and tool chords."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from typing import Any

from celery import Celery, chord, signature

from workers.publish import TaskPublisher

logger = logging.getLogger(__name__)


def turn_task_id(response_id: str, turn: int) -> str:
    """Deterministic id of a turn task (DESIGN.md)."""
    return f"{response_id}:t{turn}:infer"


def tool_task_id(response_id: str, call_id: str) -> str:
    """Deterministic id of a tool task (DESIGN.md)."""
    return f"{response_id}:{call_id}"


def send_options(args: list[str | int]) -> dict[str, Any]:
    """The options every task is sent with, to spare the sender work Celery would do per send.

    * ``argsrepr``/``kwargsrepr``: what flower and the logs show of a task's arguments (ids and
      numbers), made directly; Celery's generic ``saferepr`` is a noticeable part of a send.
    * ``declare=[]``: no queue declaration before the publish. A task goes to the anonymous
      exchange with its queue's name as routing key, which kombu's Redis transport turns into an
      LPUSH on the queue's list; the declaration (a copy of the queue bound to the channel, then
      a cache lookup) adds nothing to that and was a sixth of a send's cost. Workers declare
      their queues when they start.
    """
    return {"argsrepr": repr(args), "kwargsrepr": "{}", "declare": []}


class CeleryDispatcher:
    """Sends tasks by name, so the sender never imports the task code.

    A turn and a single call are written by :class:`TaskPublisher` (the message ``send_task``
    would write, for a fraction of its cost); a chord goes through Celery.
    """

    def __init__(self, celery: Celery, publisher: TaskPublisher | None = None):
        self.celery = celery
        self.publisher = publisher or TaskPublisher(celery)

    def enqueue_turn(self, response_id: str, turn: int, *, retry: bool = False) -> None:
        """Queue a turn on ``inference``."""
        task_id = turn_task_id(response_id, turn)
        if retry:
            task_id += f":r{secrets.token_hex(4)}"
        self.publisher.publish(
            "responses.run_turn",
            [response_id, turn],
            task_id=task_id,
            queue="inference",
            ignore_result=True,  # nobody waits on a turn's Celery result
        )

    def enqueue_tools(
        self, response_id: str, calls: Sequence[tuple[str, str]], *, then_turn: int
    ) -> None:
        """A chord: the calls in parallel on their kinds' queues, then the next turn.

        A single call links the next turn directly.
        """
        callback = signature(
            "responses.run_turn",
            args=[response_id, then_turn],
            queue="inference",
            task_id=turn_task_id(response_id, then_turn),
            immutable=True,
            app=self.celery,
            **send_options([response_id, then_turn]),
        )
        if len(calls) == 1:
            # A group of one: its only member links the next turn itself. The chord would be
            # the same story told through the result backend's bookkeeping (the group's size
            # stored at the send, every member's result counted and read back at the end).
            [(call_id, queue)] = calls
            self.publisher.publish(
                "tools.run_call",
                [response_id, call_id],
                task_id=tool_task_id(response_id, call_id),
                queue=queue,
                link=dict(callback),
            )
            return
        header = [
            signature(
                "tools.run_call",
                args=[response_id, call_id],
                queue=queue,
                task_id=tool_task_id(response_id, call_id),
                app=self.celery,
                **send_options([response_id, call_id]),
            )
            for call_id, queue in calls
        ]
        chord(header, app=self.celery)(callback)

    def revoke_response(self, response_id: str, turn: int, call_ids: Sequence[str] = ()) -> None:
        """Best effort; the cancelled status is what really stops the work."""
        ids = [turn_task_id(response_id, turn), *(tool_task_id(response_id, c) for c in call_ids)]
        self.celery.control.revoke(ids)
