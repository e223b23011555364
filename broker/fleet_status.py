"""The fleet now, from Redis in a few round trips: queues, workers, responses in flight, failures.

Read by ``antwort status`` (:mod:`programs.status`) and by the gateway's console
(:mod:`gateway.console`, without what belongs to tenants or to the operator).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from app.fairness import INFERENCE, cap_of
from app.fleet import QUEUES
from app.store import ResponseStore
from app.store.base import text
from app.tool_share import queue_and_tenant
from broker.telemetry import read_message


def fleet_status(store: ResponseStore) -> dict[str, Any]:
    """The fleet's state as one JSON-able dict."""
    now = store.now()
    depths = store.queue_depths(QUEUES)
    urls = store.metrics_urls()
    return {
        "queues": [_queue(store, queue, depths[queue], urls, now) for queue in QUEUES],
        "responses_in_flight": store.in_flight(),
        "fair_share": _fair_share(store),
        "recent_failures": _failures(store.recent_failures(), now),
    }


def _fair_share(store: ResponseStore) -> dict[str, Any]:
    """The cap the gateways last applied (``app.fairness``) and how many responses wait parked.

    ``parked``: for a place on the fleet; ``parked_for_tools``: for a place on a tool queue
    (:mod:`app.tool_share`).

    ``mode`` None: no gateway capped a response in the last day (one tenant, or set off).
    """
    keys = store.keys
    caps_count, parked_count = len(keys.fair_share_caps), len(keys.parked_tenant_sets)
    pipe = store.redis.pipeline(transaction=False)
    for cap_key in keys.fair_share_caps:
        pipe.get(cap_key)
    for parked_tenants in [*keys.parked_tenant_sets, *keys.tool_parked_tenant_sets]:
        pipe.smembers(parked_tenants)
    answers = pipe.execute()
    caps = answers[:caps_count]
    parked_sets = answers[caps_count : caps_count + parked_count]
    tool_parked_sets = answers[caps_count + parked_count :]
    raw = next((cap for cap in caps if cap is not None), None)
    mode = None if raw is None else text(raw)
    threads = store.live_threads(INFERENCE)
    tenants = sorted({text(name) for members in parked_sets for name in members})
    queue_tenants = sorted({text(entry) for members in tool_parked_sets for entry in members})
    pipe = store.redis.pipeline(transaction=False)
    for tenant in tenants:
        pipe.zcard(keys.tenant_parked(tenant))
    for entry in queue_tenants:
        queue, tenant = queue_and_tenant(entry)
        pipe.zcard(keys.tenant_tool_parked(tenant, queue))
    counts = [int(count) for count in pipe.execute()] if tenants or queue_tenants else []
    return {
        "mode": mode,
        "cap": None if mode is None else cap_of(mode, threads),
        "live_inference_threads": threads,
        "parked": sum(counts[: len(tenants)]),
        "parked_for_tools": sum(counts[len(tenants) :]),
    }


def _queue(
    store: ResponseStore, queue: str, depth: int, urls: dict[str, str], now: float
) -> dict[str, Any]:
    workers = [
        {
            "name": name,
            "last_heartbeat_seconds_ago": round(now - beat, 1),
            "metrics_urls": sorted(
                url for process, url in urls.items() if process.split("/")[0] == name
            ),
        }
        for name, beat in sorted(store.workers_alive(queue).items())
    ]
    oldest: dict[str, Any] | None = None
    raw = store.oldest_queued(queue) if depth else None
    message = read_message(raw) if raw is not None else None
    if message is not None:
        age = None if message.sent_at is None else round(max(0.0, now - message.sent_at), 1)
        oldest = {"task": message.task, "response_id": message.response_id, "age_seconds": age}
    return {"name": queue, "depth": depth, "oldest": oldest, "workers": workers}


def _failures(entries: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """Failures by kind and code: how many, and how long ago the last one was."""
    counts = Counter((str(e.get("kind")), str(e.get("code"))) for e in entries)
    last: dict[tuple[str, str], float] = {}
    for entry in entries:  # newest first
        last.setdefault((str(entry.get("kind")), str(entry.get("code"))), float(entry["at"]))
    return [
        {
            "kind": kind,
            "code": code,
            "count": count,
            "last_seconds_ago": round(now - last[(kind, code)], 1),
        }
        for (kind, code), count in counts.most_common()
    ]


def console_fleet(store: ResponseStore) -> dict[str, Any]:
    """:func:`fleet_status` as any tenant may see it: no response ids, no metrics URLs."""
    status = fleet_status(store)
    for queue in status["queues"]:
        if queue["oldest"] is not None:
            queue["oldest"] = {"age_seconds": queue["oldest"]["age_seconds"]}
        for worker in queue["workers"]:
            del worker["metrics_urls"]
    return {"object": "console.fleet", **status}
