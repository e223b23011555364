"""How the core hands work to the fleet, without knowing it is Celery."""

from __future__ import annotations

from typing import Protocol


class Dispatcher(Protocol):
    """Enqueues units of work (``workers.dispatch.CeleryDispatcher`` in production)."""

    def enqueue_turn(self, response_id: str, turn: int, *, retry: bool = False) -> None:
        """Queue turn ``turn`` of a response on the ``inference`` queue.

        ``retry``: the turn is queued again after its worker died (a fresh task id).
        """

    def revoke_response(self, response_id: str, turn: int) -> None:
        """Best effort: drop queued work of a cancelled response (the status is the real stop)."""
