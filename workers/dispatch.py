"""``app.dispatch.Dispatcher`` over Celery."""

from __future__ import annotations

import logging
import secrets

from celery import Celery

logger = logging.getLogger(__name__)


def turn_task_id(response_id: str, turn: int) -> str:
    """Deterministic id of a turn task (DESIGN.md)."""
    return f"{response_id}:t{turn}:infer"


class CeleryDispatcher:
    """Sends turn tasks by name, so the gateway never imports the task code."""

    def __init__(self, celery: Celery):
        self.celery = celery

    def enqueue_turn(self, response_id: str, turn: int, *, retry: bool = False) -> None:
        """Queue a turn on ``inference``."""
        task_id = turn_task_id(response_id, turn)
        if retry:
            task_id += f":r{secrets.token_hex(4)}"
        self.celery.send_task(
            "responses.run_turn",
            args=[response_id, turn],
            task_id=task_id,
            queue="inference",
        )

    def revoke_response(self, response_id: str, turn: int) -> None:
        """Best effort; the cancelled status is what really stops the work."""
        self.celery.control.revoke(turn_task_id(response_id, turn))
