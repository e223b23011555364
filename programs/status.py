"""``antwort status``: the fleet now, for the person on call (``--json`` for scripts).

Everything comes from Redis in a few round trips: the queues and their depth, the oldest
message in each and its age, the workers alive on each queue with their metrics URLs (a scrape
config can be generated from them), the responses in flight, the fair share (its cap and the
responses parked), and the recent failures by kind.
"""

from __future__ import annotations

import json
from typing import Any

from app.store import ResponseStore
from broker.fleet_status import fleet_status


def render(status: dict[str, Any]) -> str:
    """The status as text for a terminal."""
    lines = [
        f"responses in flight: {status['responses_in_flight']}",
        _fair_share_line(status["fair_share"]),
        "",
        "queues:",
    ]
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


def _fair_share_line(fair: dict[str, Any]) -> str:
    threads = f"{fair['live_inference_threads']} live inference threads"
    if fair["mode"] is None:
        line = f"fair share: not applied ({threads})"
    else:
        how = "auto, " if fair["mode"] == "auto" else ""
        line = f"fair share: {how}{fair['cap']} responses a tenant ({threads}); "
        line += f"{fair['parked']} parked"
    if fair.get("parked_for_tools"):  # app.tool_share: each response created says if it applies
        line += f"; {fair['parked_for_tools']} waiting for a place on a tool queue"
    return line


def print_status(store: ResponseStore, *, as_json: bool) -> None:
    """Print the status, as JSON or as text."""
    status = fleet_status(store)
    print(json.dumps(status, indent=2) if as_json else render(status))
