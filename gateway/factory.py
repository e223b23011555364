"""``create_app``: the Flask app with its collaborators wired in."""

from __future__ import annotations

import redis
from flask import Flask

from app.config import Settings
from app.dispatch import Dispatcher
from app.fleet import make_provider, make_redis, make_store
from app.jobs import JobQueue
from app.limits import RateLimiter
from app.model_list import ModelLister
from app.relay import EventHub
from app.tenancy import KeyStore, Limits, TenantDirectory, parse_env_keys
from broker.celery_app import make_celery
from broker.dispatch import make_dispatcher
from broker.jobs import CeleryJobQueue
from gateway import (
    auth,
    console,
    conversations,
    errors,
    health,
    jobs,
    metrics,
    models,
    openapi,
    responses,
    tracing,
    ws,
)
from gateway.body_deadline import bound_body_reads
from gateway.context import Gateway


def create_app(
    settings: Settings | None = None,
    *,
    dispatcher: Dispatcher | None = None,
    redis_client: redis.Redis | None = None,
    job_queue: JobQueue | None = None,
) -> Flask:
    """Build the gateway; collaborators default to those the settings describe."""
    settings = settings or Settings()
    client = redis_client or make_redis(settings)
    if dispatcher is None or job_queue is None:
        celery = make_celery(settings)
        # the dispatcher's sends share the gateway's Redis pool, unless the broker has its own
        sends = None if settings.broker_url else client
        dispatcher = dispatcher or make_dispatcher(celery, settings, sends)
        job_queue = job_queue or CeleryJobQueue(celery)
    app = Flask("antwort-gateway")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.json.ensure_ascii = False  # type: ignore[attr-defined]
    store = make_store(settings, client)
    tenants = TenantDirectory(
        KeyStore(client, store.keys),
        env_keys=parse_env_keys(settings.api_keys),
        defaults=Limits(
            requests_per_minute=settings.rate_limit_requests_per_minute,
            tokens_per_minute=settings.rate_limit_tokens_per_minute,
            max_in_flight=settings.rate_limit_max_in_flight,
        ),
        cache_seconds=settings.key_cache_seconds,
    )
    limiter = RateLimiter(store)
    app.extensions["antwort"] = Gateway(
        settings=settings,
        store=store,
        limiter=limiter,
        tenants=tenants,
        # the hub's own client fails fast when Redis goes: the hub reconnects by itself and
        # then has its followers catch up (app.relay)
        hub=EventHub(redis_client or make_redis(settings, rides_out_outages=False), settings.keys),
        dispatcher=dispatcher,
        models=ModelLister(make_provider(settings), default_model=settings.default_model),
        metrics=metrics.make_registry(store),
    )
    errors.register(app)
    auth.register(app, tenants, limiter, metrics_key=settings.metrics_key)
    metrics.register(app)
    tracing.register(app)
    blueprints = (
        responses.blueprint,
        conversations.blueprint,
        models.blueprint,
        health.blueprint,
        metrics.blueprint,
        openapi.blueprint,
        console.blueprint,
    )
    for blueprint in blueprints:
        app.register_blueprint(blueprint)
    jobs.register(app, job_queue)
    ws.register(app, settings)
    app.wsgi_app = bound_body_reads(app.wsgi_app, settings.body_timeout_seconds)  # type: ignore[method-assign,assignment]
    return app
