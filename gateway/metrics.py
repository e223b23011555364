"""``/metrics``: this gateway's metrics in Prometheus text format (``prometheus_client``).

Under gunicorn every worker process records into files of its own in
``PROMETHEUS_MULTIPROC_DIR`` (set by ``gateway/gunicorn_conf.py``), and a scrape of any of them
reads all of them: one answer for the whole gateway. Without that directory (a gateway in one
process, tests) the process's own registry answers. Queue depths and live workers are read from
Redis at scrape time (:class:`app.telemetry.metrics.FleetCollector`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

from flask import Blueprint, Flask, Response, g, request
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from app.fleet import QUEUES
from app.store import ResponseStore
from app.telemetry import logs
from app.telemetry import metrics as m
from gateway.context import gateway

blueprint = Blueprint("metrics", __name__)


def make_registry(store: ResponseStore) -> CollectorRegistry:
    """What ``/metrics`` renders: every process's metrics, and the fleet's state in Redis."""
    fleet = m.FleetCollector(
        queue_depths=lambda: store.queue_depths(QUEUES),
        live_workers=lambda: {queue: store.live_workers(queue) for queue in QUEUES},
    )
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(_Default())
    registry.register(fleet)
    return registry


class _Default(Collector):
    """The process's own default registry, as one collector of the scrape registry."""

    def collect(self) -> Iterable[Metric]:
        """Everything the default registry holds."""
        return REGISTRY.collect()


def register(app: Flask) -> None:
    """Time every request; what its logs say carries the response it is about."""

    @app.before_request
    def _start_timer() -> None:
        g.antwort_started = time.perf_counter()
        response_id = (request.view_args or {}).get("response_id")
        if response_id is not None:
            g.antwort_log = logs.push({"response_id": response_id})

    @app.teardown_request
    def _unbind(_: BaseException | None) -> None:
        token = g.pop("antwort_log", None)
        if token is not None:
            logs.pop(token)

    @app.after_request
    def _count(response: Response) -> Response:
        started = g.get("antwort_started")
        if started is not None:
            route = request.url_rule.rule if request.url_rule else "unmatched"
            method, status = m.method_label(request.method), str(response.status_code)
            m.HTTP_REQUEST_SECONDS.labels(method, route, status).observe(
                time.perf_counter() - started
            )
        return response


@blueprint.get("/metrics")
def metrics() -> Response:
    """The metrics of this gateway (all its processes) and of the fleet's queues."""
    return Response(generate_latest(gateway().metrics), mimetype=CONTENT_TYPE_LATEST)
