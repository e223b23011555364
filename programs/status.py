"""``antwort status``: the fleet now, for the person on call (``--json`` for scripts).

Everything comes from Redis in a few round trips: the queues and their depth, the oldest
message in each and its age, the workers alive on each queue with their metrics URLs (a scrape
config can be generated from them), the responses in flight, and the recent failures by kind.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

from app.fleet import QUEUES
from app.store import ResponseStore
from broker.telemetry import read_message


def fleet_status(store: ResponseStore) -> dict[str, Any]:
    """The fleet's state as one JSON-able dict."""
    now = time.time()
    depths = store.queue_depths(QUEUES)
    urls = store.metrics_urls()
    return {
        "queues": [_queue(store, queue, depths[queue], urls, now) for queue in QUEUES],
        "responses_in_flight": store.in_flight(),
        "recent_failures": _failures(store.recent_failures(), now),
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


def render(status: dict[str, Any]) -> str:
    """The status as text for a terminal."""
    lines = [f"responses in flight: {status['responses_in_flight']}", "", "queues:"]
    for queue in status["queues"]:
        oldest = queue["oldest"]
        waited = ""
        if oldest is not None:
            age = "?" if oldest["age_seconds"] is None else f"{oldest['age_seconds']:g} s"
            waited = f"  oldest: {oldest['response_id']} ({oldest['task']}), waiting {age}"
        lines.append(
            f"  {queue['name']:<15} depth {queue['depth']:<5} workers {len(queue['workers'])}"
            + waited
        )
        for worker in queue["workers"]:
            urls = ", ".join(worker["metrics_urls"]) or "no metrics URL"
            lines.append(f"    {worker['name']}  {urls}")
    lines += ["", "recent failures:" if status["recent_failures"] else "recent failures: none"]
    for failure in status["recent_failures"]:
        lines.append(
            f"  {failure['kind']:<15} {failure['code']:<20} x{failure['count']}"
            f"  last {failure['last_seconds_ago']:g} s ago"
        )
    return "\n".join(lines)


def print_status(store: ResponseStore, *, as_json: bool) -> None:
    """Print the status, as JSON or as text."""
    status = fleet_status(store)
    print(json.dumps(status, indent=2) if as_json else render(status))
