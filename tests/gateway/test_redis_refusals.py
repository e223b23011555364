"""A Redis that refuses writes for now (``app.refusals``): the gateway answers 503, never a 500.

Out of memory (``maxmemory``, ``noeviction``: every write that would grow it, scripts' included),
unable to save to its disk (``MISCONF``: every write), too few replicas (``NOREPLICAS``: every
write). Nothing is wrong with the request or the fleet's code, and Redis takes writes again once
an operator (or time) fixes it: the client is told to retry, as for a store it cannot reach.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from flask import Flask

from app.config import Settings
from broker.celery_app import make_celery
from broker.dispatch import make_dispatcher
from tests.gateway.conftest import error_of
from tests.support.celery_apps import close_celery
from tests.support.private_redis import PrivateRedis

BODIES = [
    pytest.param({"input": "hi"}, id="sync"),
    pytest.param({"input": "hi", "stream": True}, id="streamed"),
    pytest.param({"input": "hi", "background": True}, id="background"),
]


QUEUE_REFUSED = {
    "memory": "The server's task queue is out of memory right now; please retry later.",
    "disk": "The server's task queue cannot save to its disk right now; please retry later.",
    "replicas": "The server's task queue has too few replicas in reach right now; please retry "
    "later.",
}


@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize(
    ("why", "store_too", "fast_publish"),
    [
        ("memory", True, True),
        ("memory", False, True),
        ("memory", False, False),
        ("disk", False, True),
        ("replicas", False, False),
    ],
    ids=[
        "memory-one-redis",
        "memory-broker-alone",
        "memory-broker-alone-send_task",
        "disk-broker-alone",
        "replicas-broker-alone-send_task",
    ],
)
def test_a_create_whose_turn_redis_refuses_fails_the_response_and_is_503_to_retry(  # noqa: PLR0913
    private_redis: PrivateRedis,  # first: stopped after the gateway that uses it
    make_app: Callable[..., Flask],
    make_settings: Callable[..., Settings],
    redis_client: redis.Redis,
    key_prefix: str,
    caplog: pytest.LogCaptureFixture,
    body: dict[str, Any],
    why: str,
    store_too: bool,
    fast_publish: bool,
) -> None:
    """The broker's Redis refuses the first turn's message: the stored response is
    failed, so that the client's retry is its only run, and the client is told to retry (503,
    ``Retry-After``), with no traceback logged; once Redis has room, creates are served again.

    It was a 500 ("The server could not queue the response.", or "The server had an error"
    when the failure's record was refused too), with a traceback per request.

    ``store_too``: the store on that Redis as well (one URL for both, the default). Its scripts
    may still write: Redis refuses a script's write for memory only until the script has written
    once (then the rest must run, for atomicity), so a create's script gets through. (Refused
    for its disk or its replicas, a create's script is refused too: the next test.)
    """
    settings = {"broker_url": private_redis.url, "fast_publish": fast_publish}
    client = redis.Redis.from_url(private_redis.url) if store_too else None
    celery = make_celery(make_settings(**settings))
    try:
        web = make_app(
            client=client,
            queue_with=make_dispatcher(celery, make_settings(**settings)),
            **settings,
        ).test_client()
        private_redis.refuse_writes(why)

        answer = web.post("/v1/responses", json={"model": "antwort-sim", **body})

        error = error_of(answer, 503)
        assert (error.type, error.code) == ("server_error", "service_unavailable")
        assert error.message == QUEUE_REFUSED[why]
        assert answer.headers["Retry-After"] == "1"
        assert "Traceback" not in caplog.text
        records = (client or redis_client).keys(f"{key_prefix}r:resp_*[0-9a-f]")
        [record] = records  # the record alone, not its lists
        stored = web.get(f"/v1/responses/{record.decode().rpartition(':')[2]}").get_json()
        assert stored["status"] == "failed", stored
        private_redis.take_writes()
        served = web.post(
            "/v1/responses", json={"model": "antwort-sim", **body, "background": True}
        )
        assert served.status_code == 200, served.get_data(as_text=True)
    finally:
        close_celery(celery)


STORE_REFUSED = {
    "memory": "The server's store is out of memory right now; please retry later.",
    "disk": "The server's store cannot save to its disk right now; please retry later.",
    "replicas": "The server's store has too few replicas in reach right now; please retry later.",
}


@pytest.mark.parametrize("why", ["disk", "replicas"])
def test_a_create_the_store_refuses_is_503_and_stores_nothing(
    private_redis: PrivateRedis,
    make_app: Callable[..., Flask],
    redis_client: redis.Redis,
    key_prefix: str,
    caplog: pytest.LogCaptureFixture,
    why: str,
) -> None:
    """Refused for its disk or its replicas, Redis refuses the create's own script: 503 to
    retry, nothing stored, no traceback. It was a 500, "The server had an error"."""
    client = redis.Redis.from_url(private_redis.url)
    web = make_app(client=client).test_client()
    private_redis.refuse_writes(why)

    answer = web.post("/v1/responses", json={"model": "antwort-sim", "input": "hi"})

    error = error_of(answer, 503)
    assert error.message == STORE_REFUSED[why]
    assert "Traceback" not in caplog.text
    assert client.keys(f"{key_prefix}r:*") == []


WRITES = [
    pytest.param(
        "/v1/conversations/{conversation}/items",
        {"items": [{"role": "user", "content": "x"}]},
        id="items",
    ),
    pytest.param(
        "/v1/conversations/{conversation}", {"metadata": {"topic": "x"}}, id="conversation"
    ),
    pytest.param("/v1/responses/{response}/cancel", None, id="cancel"),
    pytest.param(
        "/v1/responses/input_tokens", {"model": "antwort-sim", "input": "hi"}, id="input-tokens"
    ),
]


@pytest.mark.parametrize(
    ("why", "route", "body"),
    [pytest.param("memory", *write.values, id=f"memory-{write.id}") for write in WRITES]
    + [pytest.param(why, *WRITES[0].values, id=f"{why}-items") for why in ("disk", "replicas")],
)
def test_any_write_redis_refuses_is_503_to_retry(
    private_redis: PrivateRedis,
    make_app: Callable[..., Flask],
    caplog: pytest.LogCaptureFixture,
    why: str,
    route: str,
    body: dict[str, Any] | None,
) -> None:
    """Whatever route's write Redis refuses: 503 with ``Retry-After``, no traceback.

    Each was a 500, "The server had an error", with a traceback logged per request.
    """
    web = make_app(client=redis.Redis.from_url(private_redis.url)).test_client()
    conversation = web.post("/v1/conversations", json={}).get_json()["id"]
    response = web.post(
        "/v1/responses", json={"model": "antwort-sim", "input": "hi", "background": True}
    ).get_json()["id"]
    private_redis.refuse_writes(why)

    answer = web.post(route.format(conversation=conversation, response=response), json=body)

    error = error_of(answer, 503)
    assert (error.type, error.code) == ("server_error", "service_unavailable")
    assert error.message == STORE_REFUSED[why]
    assert answer.headers["Retry-After"] == "1"
    assert "Traceback" not in caplog.text
    assert "answered 503, the store " in caplog.text  # with why, for the operator
