"""gunicorn settings of the gateway: gevent workers that hold thousands of SSE streams.

Metrics: every worker process records into files of its own in ``PROMETHEUS_MULTIPROC_DIR``
(prometheus_client's multiprocess mode), and ``/metrics`` in any of them adds them all up. The
directory must be in the environment before prometheus_client is imported (by the app, which
gunicorn loads after this file): ``antwort gateway`` makes a fresh one before it starts gunicorn
(``programs.cli``) and says so (``ANTWORT_METRICS_DIR_OWNED``), and the master removes it on
exit; an operator's own directory is emptied of a previous run's files. A worker that
exits has its live gauges dropped (``mark_process_dead``).
"""

import os
import shutil
from pathlib import Path
from typing import Any

from gevent import monkey

monkey.patch_all()  # before redis or flask is imported (gevent/gevent#1016; gateway/__init__)

from app.telemetry import logs  # noqa: E402 - after the patch

worker_class = "gateway.worker.EdgeWorker"  # gevent's, with the edge bounded
workers = int(os.environ.get("ANTWORT_GATEWAY_WORKERS", "1"))
worker_connections = int(os.environ.get("ANTWORT_GATEWAY_CONNECTIONS", "4000"))
# A burst of connects waits in the listen queue, not dropped (its clients retry 1 s, 3 s later):
# as long as the connections a worker holds, never below gunicorn's 2048; the kernel caps it
# (net.core.somaxconn).
backlog = max(2048, worker_connections)
bind = f"{os.environ.get('ANTWORT_HOST', '127.0.0.1')}:{os.environ.get('ANTWORT_PORT', '8080')}"
keepalive = 75  # a keep-alive connection idles at most ANTWORT_HEADER_TIMEOUT_SECONDS (worker)
timeout = 60  # gevent workers heartbeat between requests; long SSE streams are not cut by this
graceful_timeout = 10
accesslog = None
errorlog = "-"
loglevel = os.environ.get("ANTWORT_LOG_LEVEL", "info").strip().lower()  # Settings.log_level
_json_logs = logs.gunicorn_config(os.environ.get("ANTWORT_LOG_FORMAT", "text"), loglevel)
if _json_logs is not None:
    logconfig_dict = _json_logs

_METRICS_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
if _METRICS_DIR:  # a previous run's files would add up with this run's
    for stale in Path(_METRICS_DIR).glob("*.db"):
        stale.unlink()


def child_exit(server: Any, worker: Any) -> None:
    """A gateway worker exited: its live gauges (open streams) no longer count."""
    if not _METRICS_DIR:
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def on_exit(server: Any) -> None:
    """The gateway stops: remove the metrics directory it made."""
    if _METRICS_DIR and os.environ.get("ANTWORT_METRICS_DIR_OWNED") == "1":
        shutil.rmtree(_METRICS_DIR, ignore_errors=True)
