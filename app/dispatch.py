"""How the core hands work to the fleet, without knowing it is Celery."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

QUEUE_UNAVAILABLE_MESSAGE = "The server cannot reach its task queue right now; please retry."
"""What a client is told (503) when its request's work could not be queued."""


class QueueUnavailableError(Exception):
    """The fleet's queues cannot be reached now (the broker is away): a send to retry later."""

    client_message = QUEUE_UNAVAILABLE_MESSAGE
    """What the client whose request it was is told, with a 503."""


class QueueRefusedError(QueueUnavailableError):
    """The broker's Redis is up but refuses writes for now: a send to retry later.

    Out of memory, unable to save to its disk, too few replicas (:mod:`app.refusals`).
    """

    def __init__(self, detail: str, client_message: str):
        super().__init__(detail, client_message)  # both in args: it pickles
        self.client_message = client_message

    def __str__(self) -> str:
        return str(self.args[0])


class Dispatcher(Protocol):
    """Enqueues units of work (``broker.dispatch.CeleryDispatcher`` in production)."""

    def enqueue_turn(self, response_id: str, turn: int, *, retry: bool = False) -> None:
        """Queue turn ``turn`` of a response on the ``inference`` queue.

        ``retry``: the turn is queued again after its worker died (a fresh task id). Raises
        :class:`QueueUnavailableError` when the broker cannot be reached.
        """

    def enqueue_tools(
        self, response_id: str, calls: Sequence[tuple[str, str]], *, then_turn: int
    ) -> None:
        """Queue ``(call_id, queue)`` tool calls in parallel, then turn ``then_turn``."""

    def revoke_response(self, response_id: str, turn: int, call_ids: Sequence[str] = ()) -> None:
        """Best effort: drop queued work of a cancelled response (the status is the real stop)."""
