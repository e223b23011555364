"""Closing a Celery app a test made, connections and all."""

from __future__ import annotations

from celery import Celery


def close_celery(celery: Celery) -> None:
    """Close the broker's connections and the result backend's (a link's send opened them).

    ``Celery.close()`` only drops the broker's pool: its connections, in reference cycles of
    kombu's, were left for the garbage collector. They are closed here first.
    """
    celery.backend.result_consumer.stop()
    celery.pool.force_close_all()
    celery.close()
    celery.backend.client.connection_pool.disconnect()
