"""``app.dispatch.Dispatcher`` over Celery: turn tasks and tool chords."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator, Sequence

import redis
from celery import Celery, chord, signature
from kombu.exceptions import OperationalError

from app.config import Settings
from app.dispatch import QueueRefusedError, QueueUnavailableError
from app.refusals import queue_message, refusal_of
from broker.publish import Publisher, make_publisher, send_options
from broker.routing import INFERENCE_QUEUE, RUN_TOOL_CALL, RUN_TURN, tool_task_id, turn_task_id


@contextlib.contextmanager
def broker_sends(what: str) -> Iterator[None]:
    """Sends whose failure on the broker's connection is a :class:`QueueUnavailableError`.

    Either publisher has ridden out a short outage by then: the direct one as every Redis
    command of the fleet does (``redis_outage_seconds``), Celery's with its publish retry policy.
    A message the broker's Redis refused (out of memory, unable to save to its disk: see
    :mod:`app.refusals`) is a :class:`QueueRefusedError`; kombu's publish wraps the refusal in an
    ``OperationalError``.
    """
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise QueueUnavailableError(f"could not queue {what}: {exc}") from exc
    except (redis.ResponseError, OperationalError) as exc:
        cause = exc.__cause__ if isinstance(exc, OperationalError) and exc.__cause__ else exc
        why = refusal_of(cause)
        if why is not None:
            raise QueueRefusedError(f"could not queue {what}: {cause}", queue_message(why)) from exc
        if isinstance(exc, OperationalError):
            raise QueueUnavailableError(f"could not queue {what}: {exc}") from exc
        raise


class CeleryDispatcher:
    """Sends tasks by name, so the sender never imports the task code.

    A turn and a single call go through ``publisher`` (:func:`make_dispatcher` picks it from the
    settings); a chord goes through Celery.
    """

    def __init__(self, celery: Celery, publisher: Publisher):
        self.celery = celery
        self.publisher = publisher

    def enqueue_turn(self, response_id: str, turn: int, *, retry: bool = False) -> None:
        """Queue a turn on ``inference``; :class:`QueueUnavailableError` if the broker is away."""
        task_id = turn_task_id(response_id, turn)
        if retry:
            task_id += f":r{secrets.token_hex(4)}"
        with broker_sends(f"turn {turn} of {response_id}"):
            self.publisher.publish(
                RUN_TURN,
                [response_id, turn],
                task_id=task_id,
                queue=INFERENCE_QUEUE,
                ignore_result=True,  # nobody waits on a turn's Celery result
            )

    def enqueue_tools(
        self, response_id: str, calls: Sequence[tuple[str, str]], *, then_turn: int
    ) -> None:
        """A chord: the calls in parallel on their kinds' queues, then the next turn.

        A single call links the next turn directly.
        """
        callback = signature(
            RUN_TURN,
            args=[response_id, then_turn],
            queue=INFERENCE_QUEUE,
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
                RUN_TOOL_CALL,
                [response_id, call_id],
                task_id=tool_task_id(response_id, call_id),
                queue=queue,
                ignore_result=True,  # as a chord's members: nobody waits on it
                link=dict(callback),
            )
            return
        header = [
            signature(
                RUN_TOOL_CALL,
                args=[response_id, call_id],
                queue=queue,
                task_id=tool_task_id(response_id, call_id),
                app=self.celery,
                # No sender waits on a member: a sender outside a worker would subscribe to
                # each one's result channel (the chord counts its members regardless).
                ignore_result=True,
                **send_options([response_id, call_id]),
            )
            for call_id, queue in calls
        ]
        chord(header, app=self.celery)(callback)

    def revoke_response(self, response_id: str, turn: int, call_ids: Sequence[str] = ()) -> None:
        """Best effort; the cancelled status is what really stops the work."""
        ids = [turn_task_id(response_id, turn), *(tool_task_id(response_id, c) for c in call_ids)]
        self.celery.control.revoke(ids)


def make_dispatcher(
    celery: Celery, settings: Settings, client: redis.Redis | None = None
) -> CeleryDispatcher:
    """The dispatcher of a process, its sends made as ``settings`` say (``fast_publish``).

    ``client``: a Redis client whose pool the fast publisher's sends may share.
    """
    return CeleryDispatcher(celery, make_publisher(celery, settings, client))
