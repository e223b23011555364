"""``create_app``: the Flask app with its collaborators wired in."""

from __future__ import annotations

import redis
from flask import Flask

from app.compaction import CompactionQueue
from app.config import Settings
from app.dispatch import Dispatcher
from app.fleet import make_provider, make_redis, make_store
from app.keys import Keys
from app.relay import EventHub
from broker.celery_app import make_celery
from broker.compaction import CeleryCompactionQueue
from broker.dispatch import make_dispatcher
from gateway import auth, compact, errors, health, metrics, models, openapi, responses, ws
from gateway.body_deadline import bound_body_reads
from gateway.context import Gateway


def create_app(
    settings: Settings | None = None,
    *,
    dispatcher: Dispatcher | None = None,
    redis_client: redis.Redis | None = None,
    compaction_queue: CompactionQueue | None = None,
) -> Flask:
    """Build the gateway; collaborators default to those the settings describe."""
    settings = settings or Settings()
    client = redis_client or make_redis(settings)
    if dispatcher is None or compaction_queue is None:
        celery = make_celery(settings)
        # the dispatcher's sends share the gateway's Redis pool
        dispatcher = dispatcher or make_dispatcher(celery, settings, client)
        compaction_queue = compaction_queue or CeleryCompactionQueue(celery)
    app = Flask("antwort-gateway")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.json.ensure_ascii = False  # type: ignore[attr-defined]
    app.extensions["antwort"] = Gateway(
        settings=settings,
        store=make_store(settings, client),
        # the hub's own client fails fast when Redis goes: the hub reconnects by itself and
        # then has its followers catch up (app.relay)
        hub=EventHub(
            redis_client or make_redis(settings, rides_out_outages=False), Keys(settings.key_prefix)
        ),
        dispatcher=dispatcher,
        models=models.ModelLister(make_provider(settings), default_model=settings.default_model),
        metrics=metrics.Metrics(),
    )
    errors.register(app)
    auth.register(app, settings.api_key_set)
    metrics.register(app)
    blueprints = (responses, models, health, metrics, openapi)
    for module in blueprints:
        app.register_blueprint(module.blueprint)
    compact.register(app, compaction_queue)
    ws.register(app, settings)
    app.wsgi_app = bound_body_reads(app.wsgi_app, settings.body_timeout_seconds)  # type: ignore[method-assign,assignment]
    return app
