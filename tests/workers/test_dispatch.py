"""What the dispatcher puts on the queues: the task messages themselves, read back from Redis."""

from __future__ import annotations

import base64
import json
from typing import Any

import redis

from app.config import Settings
from workers.celery_app import make_celery
from workers.dispatch import CeleryDispatcher


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
