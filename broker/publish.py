"""Task messages written straight onto the broker's queue lists (``ANTWORT_FAST_PUBLISH``).

``send_task`` spends most of a send on generic work: building a producer from a pool, merging
routing and retry options, running the publish signals, and serialising the message through
kombu's layers. A turn or a tool call costs at least one send on its critical path (the gateway
queues the first turn, a turn queues its tool calls, a call's task queues the next turn through
its link), so :class:`TaskPublisher` writes the same message — Celery's task protocol 2 in
kombu's Redis envelope, as ``send_task`` writes it for a task to the anonymous exchange — with
one ``json.dumps`` and one LPUSH. Workers consume it like any other Celery message (the same
Celery worker).

Measured gain (README, Benchmarks; on this project's 2-core VM): 0.14 ms per send against
``send_task``'s 0.42 ms, of which the LPUSH itself took 0.1 ms.

What it depends on: Celery's message layout, which is not a public API. A test pins the message
to ``send_task``'s own, field by field, and a canary test pins the celery and kombu versions it
was compared against: when they change, re-run that comparison before you move the pins. With
``ANTWORT_FAST_PUBLISH=0`` every send goes through :class:`SendTaskPublisher` (Celery's
``send_task``) instead.

Only what the fleet sends is covered: positional arguments, a task id, a queue, a link. Chords and
anything else go through Celery.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import uuid
from typing import Any, Protocol

import redis
from celery import Celery, signature

from app.config import Settings
from app.fleet import make_redis
from app.telemetry import tracing
from broker import telemetry
from broker.telemetry import SENT_AT

_EMPTY_EMBED = {"errbacks": None, "chain": None, "chord": None}


class Publisher(Protocol):
    """Sends one task message: what :class:`broker.dispatch.CeleryDispatcher` needs of a sender."""

    def publish(
        self,
        name: str,
        args: list[str | int],
        *,
        task_id: str,
        queue: str,
        ignore_result: bool | None = None,
        link: dict[str, Any] | None = None,
    ) -> None:
        """Queue task ``name`` with ``args`` on ``queue``; ``link`` runs after it succeeds."""


def send_options(args: list[str | int]) -> dict[str, Any]:
    """The options every task is sent with, to spare the sender work Celery would do per send.

    * ``argsrepr``/``kwargsrepr``: what flower and the logs show of a task's arguments (ids and
      numbers), made directly; Celery's generic ``saferepr`` is a noticeable part of a send.
    * ``declare=[]``: no queue declaration before the publish. A task goes to the anonymous
      exchange with its queue's name as routing key, which kombu's Redis transport turns into an
      LPUSH on the queue's list; the declaration (a copy of the queue bound to the channel, then
      a cache lookup) adds nothing to that and was a sixth of a send's cost. Workers declare
      their queues when they start.
    """
    return {"argsrepr": repr(args), "kwargsrepr": "{}", "declare": []}


def make_publisher(
    celery: Celery, settings: Settings, client: redis.Redis | None = None
) -> Publisher:
    """The publisher ``settings.fast_publish`` asks for.

    ``client``: the fast one's Redis; by default one of the broker's, as the settings name it.
    """
    if settings.fast_publish:
        return TaskPublisher(celery, client or make_redis(settings, broker=True))
    return SendTaskPublisher(celery)


class SendTaskPublisher:
    """Sends through Celery's ``send_task``: the reference :class:`TaskPublisher` is pinned to."""

    def __init__(self, celery: Celery):
        self._celery = celery

    def publish(
        self,
        name: str,
        args: list[str | int],
        *,
        task_id: str,
        queue: str,
        ignore_result: bool | None = None,
        link: dict[str, Any] | None = None,
    ) -> None:
        """Queue task ``name`` with ``args`` on ``queue``; ``link`` runs after it succeeds."""
        options: dict[str, Any] = send_options(args)
        if ignore_result is not None:
            options["ignore_result"] = ignore_result
        self._celery.send_task(
            name,
            args=args,
            task_id=task_id,
            queue=queue,
            link=signature(link, app=self._celery) if link else None,
            **options,
        )


class TaskPublisher:
    """Publishes task messages for ``celery``'s workers through ``client``, of the broker's Redis.

    ``client`` is one the fleet builds (``make_redis``): a burst of sends beyond its pool waits
    for a connection instead of failing, as store writes do.
    """

    def __init__(self, celery: Celery, client: redis.Redis):
        self._celery = celery
        options = celery.conf.broker_transport_options or {}
        self._prefix = str(options.get("global_keyprefix", ""))
        self.redis = client
        self._origin = f"gen{os.getpid()}@{socket.gethostname()}"  # as Celery names a sender
        self._reply_to = str(celery.thread_oid)

    def publish(
        self,
        name: str,
        args: list[str | int],
        *,
        task_id: str,
        queue: str,
        ignore_result: bool | None = None,
        link: dict[str, Any] | None = None,
    ) -> None:
        """Queue task ``name`` with ``args`` on ``queue``; ``link`` runs after it succeeds."""
        root_id: str | None = task_id
        parent_id: str | None = None
        parent = self._celery.current_worker_task  # sent from inside a task: its child
        if parent is not None:
            parent_id = parent.request.id
            root_id = parent.request.root_id or parent_id
        args_repr = repr(args)
        body = json.dumps([args, {}, {"callbacks": [link] if link else None, **_EMPTY_EMBED}])
        message = {
            "body": base64.b64encode(body.encode()).decode(),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {
                "lang": "py",
                "task": name,
                "id": task_id,
                "shadow": None,
                "eta": None,
                "expires": None,
                "group": None,
                "group_index": None,
                "retries": 0,
                "timelimit": [None, None],
                "root_id": root_id,
                "parent_id": parent_id,
                "argsrepr": args_repr,
                "kwargsrepr": "{}",
                "origin": self._origin,
                "ignore_result": ignore_result,
                "replaced_task_nesting": 0,
                "stamped_headers": None,
                "stamps": {},
                SENT_AT: telemetry.now(),
                **tracing.carrier(),  # the current span's context (nothing when tracing is off)
            },
            "properties": {
                "correlation_id": task_id,
                "reply_to": self._reply_to,
                "delivery_mode": 2,
                "delivery_info": {"exchange": "", "routing_key": queue},
                "priority": 0,
                "body_encoding": "base64",
                "delivery_tag": str(uuid.uuid4()),
            },
        }
        self.redis.lpush(self._prefix + queue, json.dumps(message))
