"""``app.compaction.CompactionQueue`` over Celery."""

from __future__ import annotations

from celery import Celery

from broker.dispatch import broker_sends
from broker.routing import COMPACT, INFERENCE_QUEUE, compaction_task_id


class CeleryCompactionQueue:
    """Sends ``responses.compact`` by name to the ``inference`` queue."""

    def __init__(self, celery: Celery):
        self.celery = celery

    def enqueue_compaction(self, compaction_id: str) -> None:
        """Queue the job (its id is the task id: a job is summarised once).

        :class:`app.dispatch.QueueUnavailableError` if the broker is away.
        """
        with broker_sends(f"compaction {compaction_id}"):
            self.celery.send_task(
                COMPACT,
                args=[compaction_id],
                task_id=compaction_task_id(compaction_id),
                queue=INFERENCE_QUEUE,
                ignore_result=True,  # the answer comes back through the store, not Celery
            )
