"""Closing a Celery app a test made, connections and all."""

from __future__ import annotations

from celery import Celery


def close_celery(celery: Celery) -> None:
    """Close the broker's connections and the result backend's (a link's send opened them).

    ``Celery.close()`` only drops the broker's pool: its connections, in reference cycles of
    kombu's, were left for the garbage collector. They are closed here first.
    """
    consumer = celery.backend.result_consumer
    consumer.stop()
    # A chord's results hold subscriptions (the Redis backend's GroupResult subscribes to each
    # member) and drop them in __del__, which reconnected the stopped consumer when the
    # collector got to them, in a later test: forgotten, there is nothing left to drop.
    consumer.subscribed_to.clear()
    celery.pool.force_close_all()
    celery.close()
    celery.backend.client.connection_pool.disconnect()
