"""The gateway in-process: ``create_app`` with recording queues on real Redis, Flask's client."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from openai.types import ErrorObject
from werkzeug.test import TestResponse

from app.config import Settings
from app.dispatch import Dispatcher
from gateway.factory import create_app
from tests.support.dispatch import RecordingDispatcher, RecordingJobQueue
from tests.support.hub import stop_hub


@pytest.fixture
def dispatcher() -> RecordingDispatcher:
    return RecordingDispatcher()


@pytest.fixture
def make_app(
    make_settings: Callable[..., Settings],
    redis_client: redis.Redis,
    dispatcher: RecordingDispatcher,
) -> Iterator[Callable[..., Flask]]:
    """A gateway on this test's Redis prefix that queues nothing; settings as keywords.

    ``queue_with``: a dispatcher that does queue, instead.

    A ``client`` given is the gateway's own: closed, with its pool, after its hub stops (which
    uses it last).
    """
    apps: list[tuple[Flask, redis.Redis | None]] = []

    def make(
        *, client: redis.Redis | None = None, queue_with: Dispatcher | None = None, **overrides: Any
    ) -> Flask:
        app = create_app(
            make_settings(**overrides),
            dispatcher=queue_with or dispatcher,
            redis_client=client or redis_client,
            job_queue=RecordingJobQueue(),
        )
        apps.append((app, client))
        return app

    yield make
    for app, client in apps:
        gw = app.extensions["antwort"]
        gw.models.close()
        stop_hub(gw.hub, gw.store)
        if client is not None:
            client.close()
            client.connection_pool.disconnect()  # a pool given to the client is not its own


@pytest.fixture
def web(make_app: Callable[..., Flask]) -> FlaskClient:
    return make_app().test_client()


def error_of(response: TestResponse, status: int) -> ErrorObject:
    """The response is ``status`` with exactly OpenAI's error body; returns its error."""
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "application/json"
    body = response.get_json()
    assert isinstance(body, dict) and set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    error = ErrorObject.model_validate(body["error"])
    assert error.message and error.type
    return error
