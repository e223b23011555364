"""What the dispatcher puts on the queues: the task messages themselves, read back from Redis."""

from __future__ import annotations

import base64
import gc
import json
from collections.abc import Callable, Iterator
from importlib.metadata import version
from typing import Any

import pytest
import redis
from celery import signature
from celery._state import _task_stack

from app.config import Settings
from broker.celery_app import make_celery
from broker.dispatch import CeleryDispatcher, make_dispatcher
from broker.publish import SendTaskPublisher, TaskPublisher, make_publisher, send_options
from broker.telemetry import SENT_AT
from tests.support.celery_apps import close_celery
from tests.support.sockets import connections_to, redis_port


def test_close_celery_closes_every_connection_the_app_opened(
    redis_url: str, key_prefix: str
) -> None:
    # Celery's close() drops its pool with the connections in it, each in a reference cycle of
    # kombu's: the garbage collector closed their sockets, sometimes before redis-py did, and
    # then its ResourceWarning failed whichever later test it ran in
    port = redis_port(redis_url)
    before = connections_to({port})
    celery = make_celery(Settings(redis_url=redis_url, key_prefix=key_prefix))
    SendTaskPublisher(celery).publish(
        "responses.run_turn", ["resp_f", 1], task_id="resp_f:t1:infer", queue="inference"
    )
    opened = connections_to({port}) - before
    assert opened

    close_celery(celery)

    assert not opened & connections_to({port})


def test_a_chord_s_results_collected_after_the_close_open_no_connection(
    redis_url: str, key_prefix: str, redis_client: redis.Redis, redis_connects: Callable[[], int]
) -> None:
    # Celery's Redis backend subscribed to a chord's members' result channels as it sent it
    # (its GroupResult), and a result's __del__ unsubscribes: collected after the close, it
    # connected again, and when the collector finalized that socket before its connection, the
    # ResourceWarning failed whichever test ran then (stops 38 and 40). The fleet's backend
    # (broker/results.py) subscribes to none, so there is nothing to drop.
    settings = Settings(redis_url=redis_url, key_prefix=key_prefix)
    _send_a_chord_and_close(settings, redis_client)
    close_celery(make_celery(settings))  # the next test's app: the closed one is current no more
    connects = redis_connects()

    gc.collect()  # the closed app and the chord's results, in reference cycles, go now

    assert redis_connects() == connects


def _send_a_chord_and_close(settings: Settings, client: redis.Redis) -> None:
    celery = make_celery(settings)
    make_dispatcher(celery, settings, client).enqueue_tools(
        "resp_g", [("call_1", "tools.internal"), ("call_2", "tools.mcp")], then_turn=1
    )
    close_celery(celery)


def _messages(client: redis.Redis, key_prefix: str, queue: str) -> list[dict[str, Any]]:
    raw = client.lrange(f"{key_prefix}celery:{queue}", 0, -1)
    return [json.loads(item) for item in reversed(raw)]  # LPUSH: oldest last


def _body(message: dict[str, Any]) -> list[Any]:
    return list(json.loads(base64.b64decode(message["body"])))


@pytest.fixture(params=[True, False], ids=["fast_publish", "send_task"])
def fleet_dispatcher(
    redis_url: str, key_prefix: str, redis_client: redis.Redis, request: Any
) -> Iterator[CeleryDispatcher]:
    """The dispatcher the gateway builds, with each value of ``ANTWORT_FAST_PUBLISH``."""
    settings = Settings(redis_url=redis_url, key_prefix=key_prefix, fast_publish=request.param)
    celery = make_celery(settings)
    try:
        yield make_dispatcher(celery, settings, redis_client)
    finally:
        close_celery(celery)


def test_a_single_call_links_the_next_turn_to_its_task(
    fleet_dispatcher: CeleryDispatcher, key_prefix: str, redis_client: redis.Redis
) -> None:
    fleet_dispatcher.enqueue_tools("resp_a", [("call_1", "tools.mcp")], then_turn=1)

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
    fleet_dispatcher: CeleryDispatcher, key_prefix: str, redis_client: redis.Redis
) -> None:
    fleet_dispatcher.enqueue_tools(
        "resp_b", [("call_1", "tools.internal"), ("call_2", "tools.mcp")], then_turn=2
    )

    [first] = _messages(redis_client, key_prefix, "tools.internal")
    [second] = _messages(redis_client, key_prefix, "tools.mcp")
    assert [first["headers"]["id"], second["headers"]["id"]] == ["resp_b:call_1", "resp_b:call_2"]
    for message in (first, second):
        _args, _kwargs, embed = _body(message)
        assert embed["callbacks"] is None
        assert embed["chord"]["task"] == "responses.run_turn"
        assert embed["chord"]["options"]["task_id"] == "resp_b:t2:infer"


def test_a_chord_leaves_no_subscription_or_pending_result_behind(
    fleet_dispatcher: CeleryDispatcher, key_prefix: str, redis_client: redis.Redis
) -> None:
    # Celery's Redis backend subscribed the sender to each member's result channel as it
    # recorded the chord, and held the results pending: nobody waits on them, so a worker kept
    # both for good (celery#4824; 4.3 KB and two channels a two-call chord). The group's
    # barrier subscribed again as it sent each member; the result unsubscribed as it went, but
    # nobody read the replies, so redis-py kept every channel (474 B a two-call chord, the
    # soak's inference worker some 2,000 channels a thread after 30 minutes).
    for turn in range(1, 4):
        fleet_dispatcher.enqueue_tools(
            "resp_h",
            [(f"call_{turn}a", "tools.internal"), (f"call_{turn}b", "tools.mcp")],
            then_turn=turn,
        )
    gc.collect()  # the members' results, which unsubscribe as they go

    assert redis_client.pubsub_channels(f"{key_prefix}*") == []
    consumer = fleet_dispatcher.celery.backend.result_consumer
    assert not consumer.subscribed_to
    assert consumer._pubsub is None  # no pub/sub connection: nothing subscribed, nothing unread


def _comparable(message: dict[str, Any]) -> dict[str, Any]:
    """A message without what differs from one send to the next (its delivery tag)."""
    properties = dict(message["properties"])
    properties.pop("delivery_tag")
    # send_task lets its send options (argsrepr, kwargsrepr) spill into the properties too;
    # the worker reads them from the headers
    properties.pop("argsrepr", None)
    properties.pop("kwargsrepr", None)
    headers = dict(message["headers"])
    assert isinstance(headers.pop(SENT_AT), float)  # when it was sent (the queue wait)
    return {**message, "headers": headers, "properties": properties, "body": _body(message)}


def test_published_messages_are_the_ones_send_task_writes(
    redis_url: str, key_prefix: str, redis_client: redis.Redis
) -> None:
    celery = make_celery(Settings(redis_url=redis_url, key_prefix=key_prefix))
    dispatcher = CeleryDispatcher(celery, TaskPublisher(celery, redis_client))
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
            # said, not left to the task's own default: known only where the task is (a
            # worker's process, or this one once a test imported workers.tasks)
            ignore_result=True,
            **send_options(["resp_c", "call_9"]),
        ).apply_async(link=callback)
    finally:
        close_celery(celery)

    for queue in ("inference", "tools.mcp"):
        ours, celerys = _messages(redis_client, key_prefix, queue)
        assert _comparable(ours) == _comparable(celerys)


def test_a_task_sent_by_a_running_task_is_its_child(
    fleet_dispatcher: CeleryDispatcher, key_prefix: str, redis_client: redis.Redis
) -> None:
    celery = fleet_dispatcher.celery

    @celery.task(name="tests.parent", shared=False)
    def parent() -> None:
        """The task that is running."""

    running = celery.tasks["tests.parent"]
    running.push_request(id="resp_d:t0:infer", root_id="resp_d:root", called_directly=False)
    _task_stack.push(running)
    try:
        fleet_dispatcher.enqueue_turn("resp_d", 1)
    finally:
        _task_stack.pop()
        running.pop_request()

    [message] = _messages(redis_client, key_prefix, "inference")
    assert message["headers"]["parent_id"] == "resp_d:t0:infer"
    assert message["headers"]["root_id"] == "resp_d:root"


def test_the_publisher_borrows_connections_from_a_blocking_pool_of_the_configured_size(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTWORT_REDIS_MAX_CONNECTIONS", "7")
    celery = make_celery(Settings(redis_url=redis_url, key_prefix=key_prefix))
    try:
        publisher = make_publisher(celery, Settings(redis_url=redis_url, key_prefix=key_prefix))
        assert isinstance(publisher, TaskPublisher)
        pool = publisher.redis.connection_pool
    finally:
        close_celery(celery)

    # redis-py's default pool raises once 100 connections are out: a burst of sends would fail
    assert isinstance(pool, redis.BlockingConnectionPool)
    assert pool.max_connections == 7


def test_the_fast_publish_setting_picks_the_publisher(redis_url: str, key_prefix: str) -> None:
    fast = Settings(redis_url=redis_url, key_prefix=key_prefix)
    slow = Settings(redis_url=redis_url, key_prefix=key_prefix, fast_publish=False)
    celery = make_celery(fast)
    try:
        assert isinstance(make_dispatcher(celery, fast).publisher, TaskPublisher)
        assert isinstance(make_dispatcher(celery, slow).publisher, SendTaskPublisher)
    finally:
        close_celery(celery)


def test_both_publishers_write_the_same_messages(
    redis_url: str, key_prefix: str, redis_client: redis.Redis
) -> None:
    celery = make_celery(Settings(redis_url=redis_url, key_prefix=key_prefix))
    try:
        for publisher in (TaskPublisher(celery, redis_client), SendTaskPublisher(celery)):
            dispatcher = CeleryDispatcher(celery, publisher)
            dispatcher.enqueue_turn("resp_e", 1)
            dispatcher.enqueue_tools("resp_e", [("call_1", "tools.internal")], then_turn=2)
    finally:
        close_celery(celery)

    for queue in ("inference", "tools.internal"):
        fast, celerys = _messages(redis_client, key_prefix, queue)
        assert _comparable(fast) == _comparable(celerys)


PUBLISHER_PINS = {"celery": "5.7.0", "kombu": "5.7.0"}
"""The versions ``TaskPublisher``'s messages were last compared with ``send_task``'s."""


def test_the_publisher_runs_on_the_celery_and_kombu_it_was_compared_with() -> None:
    # TaskPublisher writes Celery's message layout by hand, which is no public API. When celery
    # or kombu move, run test_published_messages_are_the_ones_send_task_writes (and the e2e suite
    # with --speedups=off against the default) on the new versions, then move these pins.
    installed = {name: version(name) for name in PUBLISHER_PINS}
    assert installed == PUBLISHER_PINS, (
        "celery/kombu changed: re-verify broker/publish.py's messages against send_task's "
        "before moving PUBLISHER_PINS (or set ANTWORT_FAST_PUBLISH=0)"
    )
