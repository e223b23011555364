"""Task messages written straight onto the broker's queue lists.

``send_task`` spends most of a send on generic work: building a producer from a pool, merging
routing and retry options, running the publish signals, and serialising the message through
kombu's layers; of about 0.42 ms per send here, the LPUSH that really sends it took 0.1 ms. A turn
or a tool call costs at least one send on its critical path (the gateway queues the first turn,
a turn queues its tool calls, a call's task queues the next turn through its link), so
:class:`TaskPublisher` writes the same message — Celery's task protocol 2 in kombu's Redis
envelope, as ``send_task`` writes it for a task to the anonymous exchange — with one
``json.dumps`` and one LPUSH. Workers consume it like any other Celery message (the same Celery
worker; a test pins the message to ``send_task``'s own, field by field).

Only what the fleet sends is covered: positional arguments, a task id, a queue, a link. Chords and
anything else go through Celery.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import uuid
from typing import Any

import redis
from celery import Celery

from app.config import Settings
from app.fleet import make_redis

_EMPTY_EMBED = {"errbacks": None, "chain": None, "chord": None}


class TaskPublisher:
    """Publishes task messages for ``celery``'s workers through a client of the broker's Redis.

    ``client`` defaults to one built as the fleet builds its clients (``make_redis``): a burst of
    sends beyond its pool waits for a connection instead of failing, as store writes do.
    """

    def __init__(self, celery: Celery, client: redis.Redis | None = None):
        self._celery = celery
        options = celery.conf.broker_transport_options or {}
        self._prefix = str(options.get("global_keyprefix", ""))
        self.redis = client or make_redis(Settings(redis_url=str(celery.conf.broker_url)))
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
