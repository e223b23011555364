"""The Celery app: queues, routes and the delivery guarantees of DESIGN.md."""

from __future__ import annotations

import math
from collections.abc import Sequence

from celery import Celery
from kombu import Queue

from app.config import Settings
from app.fleet import QUEUES, require_redis
from app.keys import Keys
from app.redis_url import celery_ssl, celery_transport_options, celery_url
from broker import telemetry
from broker.results import result_backend
from broker.routing import INFERENCE_QUEUE, TASK_ROUTES


def make_celery(settings: Settings, *, include: Sequence[str] = ()) -> Celery:
    """A Celery app bound to the fleet's Redis, with every queue declared.

    ``include``: modules whose tasks the app runs (a worker's); a sender needs none, since it
    sends tasks by name.
    """
    target = require_redis(settings, broker=True)  # ANTWORT_BROKER_URL, else the store's
    url = celery_url(target)
    transport = {
        "visibility_timeout": settings.task_visibility_timeout_seconds,
        "global_keyprefix": Keys(settings.key_prefix).celery_prefix,
        **celery_transport_options(target),  # a Sentinel master's name
    }
    # No ack emulation: with it, a worker whose broker connection drops while it holds an
    # acks-late task re-pushes that message through a client the drop already cleared, and the
    # AttributeError kills the worker (celery 5.7, kombu 5.7; issue 16 §1). Without it a
    # message taken off its queue is the worker's alone: a run that dies is found by its lease
    # and the sweeper (app.lease), a first turn lost before it started by the queued watch.
    broker_transport = {**transport, "ack_emulation": False}
    tls = celery_ssl(target)
    celery = Celery("antwort", broker=url, backend=result_backend(url), include=list(include))
    celery.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_queues=[Queue(name, routing_key=name) for name in QUEUES],
        task_create_missing_queues=False,
        task_default_queue=INFERENCE_QUEUE,
        task_routes=TASK_ROUTES,
        task_ignore_result=True,  # state lives in the store; a chord counts its members regardless
        result_expires=3600,
        task_serializer="json",
        accept_content=["json"],
        broker_transport_options=broker_transport,
        result_backend_transport_options=transport,
        visibility_timeout=settings.task_visibility_timeout_seconds,
        broker_connection_retry_on_startup=True,
        # A Redis that refuses writes for now (app.refusals) refuses the consumer's BRPOP, or
        # its queue declare: the consumer connects again until Redis takes them. Without it the
        # worker stopped, "Unrecoverable error" (tests/workers/test_redis_refusals.py).
        broker_channel_error_retry=True,
        # Celery's own sends (chords, ``ANTWORT_FAST_PUBLISH=0``) ride out an outage as the
        # fleet's Redis clients do (app.fleet.outage_retry)
        task_publish_retry_policy={
            "max_retries": math.ceil(settings.redis_outage_seconds),
            "interval_start": 0,
            "interval_step": 0.2,
            "interval_max": 1.0,
        },
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        broker_pool_limit=64,
        # a Sentinel master over TLS (a rediss:// URL names its own)
        broker_use_ssl=tls,
        redis_backend_use_ssl=tls,
    )
    telemetry.install()
    return celery
