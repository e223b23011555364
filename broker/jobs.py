"""``app.jobs.JobQueue`` over Celery."""

from __future__ import annotations

from celery import Celery

from app.jobs import JobKind
from broker.dispatch import broker_sends
from broker.routing import INFERENCE_QUEUE, JOB_TASKS, job_task_id


class CeleryJobQueue:
    """Sends a job's task by name to the ``inference`` queue."""

    def __init__(self, celery: Celery):
        self.celery = celery

    def enqueue_job(self, kind: JobKind, job_id: str) -> None:
        """Queue the job (its id is the task's: a job is done once).

        :class:`app.dispatch.QueueUnavailableError` if the broker is away.
        """
        with broker_sends(f"{kind} job {job_id}"):
            self.celery.send_task(
                JOB_TASKS[kind],
                args=[job_id],
                task_id=job_task_id(kind, job_id),
                queue=INFERENCE_QUEUE,
                ignore_result=True,  # the answer comes back through the store, not Celery
            )
