"""What the dispatcher puts on the queues: the task messages themselves, read back from Redis."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import redis
from celery import signature
from celery._state import _task_stack

from app.config import Settings
from workers.celery_app import make_celery
from workers.dispatch import CeleryDispatcher, send_options
from workers.publish import TaskPublisher


def _messages(client: redis.Redis, key_prefix: str, queue: str) -> list[dict[str, Any]]:
    raw = client.lrange(f"{key_prefix}celery:{queue}", 0, -1)
    return [json.loads(item) for item in reversed(raw)]  # LPUSH: oldest last


def _body(message: dict[str, Any]) -> list[Any]:
    return list(json.loads(base64.b64decode(message["body"])))


def test_a_single_call_links_the_next_turn_to_its_task(
    redis_url: str, key_prefix: str, redis_client: redis.Redis
) -> None:
    celery = make_celery(Settings(redis_url=redis_url, key_prefix=key_prefix))
    try:
        CeleryDispatcher(celery).enqueue_tools("resp_a", [("call_1", "tools.mcp")], then_turn=1)
    finally:
        celery.close()

    [message] = _messages(redis_client, key_prefix, "tools.mcp")
    assert message["headers"]["id"] == "resp_a:call_1"
    assert message["headers"]["argsrepr"] == "['resp_a', 'call_1']"
    args, _kwargs, embed = _body(message)
    assert args == ["resp_a", "call_1"]
    [callback] = embed["callbacks"]
    assert callback["task"] == "responses.run_turn"
    assert callback["args"] == ["resp_a", 1] and callback["immutable"] is True
    assert callback["options"]["task_id"] == "resp_a:t1:infer"
    assert callback["options"]["queue"] == "inference"
    assert embed["chord"] is None


def test_several_calls_are_a_chord_whose_body_is_the_next_turn(
    redis_url: str, key_prefix: str, redis_client: redis.Redis
) -> None:
    celery = make_celery(Settings(redis_url=redis_url, key_prefix=key_prefix))
    try:
        CeleryDispatcher(celery).enqueue_tools(
            "resp_b", [("call_1", "tools.internal"), ("call_2", "tools.mcp")], then_turn=2
        )
    finally:
        celery.close()

    [first] = _messages(redis_client, key_prefix, "tools.internal")
    [second] = _messages(redis_client, key_prefix, "tools.mcp")
    assert [first["headers"]["id"], second["headers"]["id"]] == ["resp_b:call_1", "resp_b:call_2"]
    for message in (first, second):
        _args, _kwargs, embed = _body(message)
        assert embed["callbacks"] is None
        assert embed["chord"]["task"] == "responses.run_turn"
        assert embed["chord"]["options"]["task_id"] == "resp_b:t2:infer"


def _comparable(message: dict[str, Any]) -> dict[str, Any]:
    """A message without what differs from one send to the next (its delivery tag)."""
    properties = dict(message["properties"])
    properties.pop("delivery_tag")
    # send_task lets its send options (argsrepr, kwargsrepr) spill into the properties too;
    # the worker reads them from the headers
    properties.pop("argsrepr", None)
    properties.pop("kwargsrepr", None)
    return {**message, "properties": properties, "body": _body(message)}


def test_published_messages_are_the_ones_send_task_writes(
    redis_url: str, key_prefix: str, redis_client: redis.Redis
) -> None:
    celery = make_celery(Settings(redis_url=redis_url, key_prefix=key_prefix))
    dispatcher = CeleryDispatcher(celery)
    try:
        dispatcher.enqueue_turn("resp_c", 3)
        args: list[str | int] = ["resp_c", 3]
        celery.send_task(
            "responses.run_turn",
            args=args,
            task_id="resp_c:t3:infer",
            queue="inference",
            ignore_result=True,
            **send_options(args),
        )
        dispatcher.enqueue_tools("resp_c", [("call_9", "tools.mcp")], then_turn=4)
        callback = signature(
            "responses.run_turn",
            args=["resp_c", 4],
            queue="inference",
            task_id="resp_c:t4:infer",
            immutable=True,
            app=celery,
            **send_options(["resp_c", 4]),
        )
        signature(
            "tools.run_call",
            args=["resp_c", "call_9"],
            queue="tools.mcp",
            task_id="resp_c:call_9",
            app=celery,
            **send_options(["resp_c", "call_9"]),
        ).apply_async(link=callback)
    finally:
        celery.close()

    for queue in ("inference", "tools.mcp"):
        ours, celerys = _messages(redis_client, key_prefix, queue)
        assert _comparable(ours) == _comparable(celerys)


def test_a_task_sent_by_a_running_task_is_its_child(
    redis_url: str, key_prefix: str, redis_client: redis.Redis
) -> None:
    celery = make_celery(Settings(redis_url=redis_url, key_prefix=key_prefix))

    @celery.task(name="tests.parent")
    def parent() -> None:
        """The task that is running."""

    running = celery.tasks["tests.parent"]
    running.push_request(id="resp_d:t0:infer", root_id="resp_d:root", called_directly=False)
    _task_stack.push(running)
    try:
        CeleryDispatcher(celery).enqueue_turn("resp_d", 1)
    finally:
        _task_stack.pop()
        running.pop_request()
        celery.close()

    [message] = _messages(redis_client, key_prefix, "inference")
    assert message["headers"]["parent_id"] == "resp_d:t0:infer"
    assert message["headers"]["root_id"] == "resp_d:root"


def test_the_publisher_borrows_connections_from_a_blocking_pool_of_the_configured_size(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTWORT_REDIS_MAX_CONNECTIONS", "7")
    celery = make_celery(Settings(redis_url=redis_url, key_prefix=key_prefix))
    try:
        pool = TaskPublisher(celery).redis.connection_pool
    finally:
        celery.close()

    # redis-py's default pool raises once 100 connections are out: a burst of sends would fail
    assert isinstance(pool, redis.BlockingConnectionPool)
    assert pool.max_connections == 7
