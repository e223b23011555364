"""``antwort worker``: a Celery worker on the given queues, with a liveness heartbeat.

Also the Celery app for ``celery -A workers.main`` (flower, inspect).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import logging
import os
import socket
import threading
import time
from typing import get_args

import redis

from app.config import LogLevel, Settings
from app.fleet import QUEUES, make_store
from app.refusals import described
from app.store import ResponseStore
from app.store.fleet import HEARTBEAT_SECONDS
from app.telemetry import logs, tracing
from app.tools.sandbox.executor import check_sandbox
from broker import telemetry
from broker.celery_app import make_celery
from broker.dispatch import make_dispatcher
from broker.telemetry import instrument_celery
from workers.telemetry import MetricsServer

logger = logging.getLogger(__name__)

settings = Settings()
celery = make_celery(settings, include=["workers.tasks"])

LEVELS = tuple(level.upper() for level in get_args(LogLevel))
"""What ``--loglevel`` takes, in any case (``ANTWORT_LOG_LEVEL``'s levels)."""
_DEFAULT_POOL = {"inference": "threads", "tools.mcp": "threads", "tools.internal": "threads"}


_M_ARENA_MAX = -8  # glibc's mallopt parameter


def limit_malloc_arenas(arenas: int = 2) -> None:
    """Cap glibc's malloc arenas before the pool's threads exist.

    glibc gives threads their own arenas (up to eight per core); a thread pool of hundreds of
    turns then holds several mostly empty arenas, megabytes each. Two are plenty for threads that
    spend their time waiting on sockets. ``MALLOC_ARENA_MAX`` in the environment wins.
    """
    if "MALLOC_ARENA_MAX" in os.environ:
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(_M_ARENA_MAX, arenas)
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass


_FORGET_EVERY = 30
"""Heartbeats between two clean-ups of the metrics URLs of workers that are gone."""


def _heartbeat(
    store: ResponseStore, queues: list[str], hostname: str, metrics_url: str, threads: int
) -> None:
    beats = 0
    while True:
        try:
            for queue in queues:  # the threads: the fair share's size (app.fairness)
                store.heartbeat_worker(queue, hostname, threads=threads)
            # again each beat: a Redis that restarted empty learns it back
            store.register_metrics_url(hostname, metrics_url)
            beats += 1
            if beats % _FORGET_EVERY == 0:
                store.forget_metrics_urls(QUEUES)
                store.forget_worker_threads(QUEUES)
        except redis.RedisError as exc:  # Redis away, or full: its message says all, each beat
            logger.warning("worker heartbeat failed: %s", described(exc))
        except Exception:
            logger.warning("worker heartbeat failed", exc_info=True)
        time.sleep(HEARTBEAT_SECONDS)


def install_tool_lifecycle(pool: str) -> None:
    """Initialize internal tools when the worker starts and shut them down when it stops.

    With prefork every pool child holds its own tools (clients opened before a fork would be
    shared); the other pools run tasks in the main process.
    """
    from celery import signals

    from workers.tasks import start_tools, stop_tools

    def start(**_: object) -> None:
        start_tools()

    def stop(**_: object) -> None:
        stop_tools()

    if pool == "prefork":
        signals.worker_process_init.connect(start, weak=False)
        signals.worker_process_shutdown.connect(stop, weak=False)
    else:
        signals.worker_init.connect(start, weak=False)
        signals.worker_shutdown.connect(stop, weak=False)


def install_telemetry(pool: str, hostname: str, store: ResponseStore) -> None:
    """Log as ``ANTWORT_LOG_FORMAT`` says, record every task; prefork children serve metrics.

    Tasks' starts are stamped on ``store``'s clock, the fleet's (:mod:`broker.telemetry`).
    With prefork each pool child runs tasks, so each serves its metrics on a port of its own
    (:func:`workers.telemetry.child_port`) and registers it under ``hostname/pid``.
    """
    from billiard.process import current_process
    from celery import signals

    from workers.telemetry import TaskRecorder, child_port, process_name

    def setup_logging(loglevel: str | int | None = None, **_: object) -> None:
        logs.configure(settings.log_format, loglevel or settings.log_level.upper())

    servers: list[MetricsServer] = []  # this pool child's, stopped when the child stops

    def serve_child_metrics(**_: object) -> None:
        index: int = current_process().index  # type: ignore[attr-defined]
        servers.append(MetricsServer(settings, port=child_port(settings, index)))
        servers[-1].register(make_store(settings), process_name(hostname))

    def stop_child_metrics(**_: object) -> None:
        while servers:
            servers.pop().stop()

    signals.setup_logging.connect(setup_logging, weak=False)
    # a message's send and its start on one clock, the fleet's, whatever each host's says
    telemetry.use_clock(store.now)
    TaskRecorder().install()
    if pool == "prefork":
        signals.worker_process_init.connect(serve_child_metrics, weak=False)
        signals.worker_process_shutdown.connect(stop_child_metrics, weak=False)


def install_tracing(service: str) -> None:
    """Trace tasks and model calls when the ``OTEL_*`` environment asks (app.telemetry.tracing).

    A prefork child exports what it buffered before it exits.
    """
    if not tracing.setup(service):
        return
    from celery import signals
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    instrument_celery()
    HTTPXClientInstrumentor().instrument()

    def flush(**_: object) -> None:
        tracing.shutdown()

    signals.worker_process_shutdown.connect(flush, weak=False)


def main(argv: list[str] | None = None) -> None:
    """Run a worker consuming ``--queues``."""
    parser = argparse.ArgumentParser(prog="antwort worker")
    parser.add_argument("--queues", default="inference")
    parser.add_argument("--concurrency", type=int, default=None)
    parser.add_argument("--pool", default=None, help="threads | prefork | solo")
    parser.add_argument(
        "--loglevel", type=str.upper, choices=LEVELS, help="default: ANTWORT_LOG_LEVEL"
    )
    args = parser.parse_args(argv)
    args.loglevel = (args.loglevel or settings.log_level).upper()
    logs.configure(settings.log_format, args.loglevel)  # Celery's start warnings included
    queues = [q.strip() for q in args.queues.split(",") if q.strip()]
    unknown = sorted(set(queues) - set(QUEUES))
    if unknown:
        parser.error(f"unknown queue(s) {unknown}; known: {', '.join(QUEUES)}")
    if "tools.sandbox" in queues:
        check_sandbox(settings)  # no bubblewrap: refuse to start, saying how to install it
    limit_malloc_arenas()
    pool = args.pool or ("threads" if all(q in _DEFAULT_POOL for q in queues) else "prefork")
    concurrency = args.concurrency or (settings.inference_concurrency if pool == "threads" else 2)
    hostname = f"{'+'.join(queues)}@{socket.gethostname()}.{os.getpid()}"
    metrics = MetricsServer(settings, port=settings.metrics_port)
    store = make_store(settings)  # the heartbeat's, and the clock its stamps are read off
    install_telemetry(pool, hostname, store)
    install_tracing(f"antwort-{'+'.join(queues)}")
    threading.Thread(
        target=_heartbeat, args=(store, queues, hostname, metrics.url, concurrency), daemon=True
    ).start()
    if "inference" in queues:
        from workers.tasks import start_sweeper

        start_sweeper(make_dispatcher(celery, settings))
    if any(queue.startswith("tools.") for queue in queues):
        install_tool_lifecycle(pool)
    try:
        _run_worker(queues, pool=pool, concurrency=concurrency, hostname=hostname, args=args)
    finally:
        metrics.stop()
        tracing.shutdown()


def _run_worker(
    queues: list[str], *, pool: str, concurrency: int, hostname: str, args: argparse.Namespace
) -> None:
    quiet = ["--quiet"] if settings.log_format == "json" else []  # no banner among the JSON
    celery.worker_main(
        [
            *quiet,
            "worker",
            f"--queues={','.join(queues)}",
            f"--pool={pool}",
            f"--concurrency={concurrency}",
            f"--hostname={hostname}",
            f"--loglevel={args.loglevel}",
            "--without-gossip",
            "--without-mingle",
        ]
    )


if __name__ == "__main__":
    main()
