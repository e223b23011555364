"""``/metrics`` in Prometheus text format: request counts, open streams, live workers."""

from __future__ import annotations

import threading
import time
from collections import Counter

import redis
from flask import Blueprint, Flask, Response, g, request

from app.fleet import QUEUES
from gateway.context import gateway

blueprint = Blueprint("metrics", __name__)


class Metrics:
    """In-process counters of one gateway process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, str, int]] = Counter()
        self.request_seconds: dict[tuple[str, str], float] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one finished request."""
        with self._lock:
            self.requests[(method, route, status)] += 1
            key = (method, route)
            self.request_seconds[key] = self.request_seconds.get(key, 0.0) + seconds

    def render(self, live_workers: dict[str, int]) -> str:
        """The Prometheus exposition text."""
        lines = [
            "# HELP antwort_http_requests_total HTTP requests by method, route and status.",
            "# TYPE antwort_http_requests_total counter",
        ]
        with self._lock:
            for (method, route, status), count in sorted(self.requests.items()):
                labels = f'method="{method}",route="{route}",status="{status}"'
                lines.append(f"antwort_http_requests_total{{{labels}}} {count}")
            lines += [
                "# HELP antwort_http_request_seconds_total Time spent answering requests.",
                "# TYPE antwort_http_request_seconds_total counter",
            ]
            for (method, route), seconds in sorted(self.request_seconds.items()):
                labels = f'method="{method}",route="{route}"'
                lines.append(f"antwort_http_request_seconds_total{{{labels}}} {seconds:.6f}")
        lines += [
            "# HELP antwort_live_workers Workers with a recent heartbeat, by queue.",
            "# TYPE antwort_live_workers gauge",
        ]
        lines += [f'antwort_live_workers{{queue="{q}"}} {n}' for q, n in live_workers.items()]
        return "\n".join(lines) + "\n"


def register(app: Flask) -> None:
    """Time every request."""

    @app.before_request
    def _start_timer() -> None:
        g.antwort_started = time.perf_counter()

    @app.after_request
    def _count(response: Response) -> Response:
        started = g.get("antwort_started")
        if started is not None:
            route = request.url_rule.rule if request.url_rule else "unmatched"
            gateway().metrics.observe(
                request.method, route, response.status_code, time.perf_counter() - started
            )
        return response


@blueprint.get("/metrics")
def metrics() -> Response:
    """The metrics of this gateway process."""
    gw = gateway()
    try:
        workers = {queue: gw.store.live_workers(queue) for queue in QUEUES}
    except redis.RedisError:
        workers = {}
    return Response(gw.metrics.render(workers), mimetype="text/plain; version=0.0.4")
