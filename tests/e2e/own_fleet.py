"""A fleet of its own for a test module: its own key prefix, port and settings.

The session's fleet (``conftest.fleet``) is shared; tests that need processes started with
other settings (JSON logs, tracing) or a fleet they may empty of workers start one of these.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import redis

from programs.supervisor import free_port
from tests.conftest import delete_prefix
from tests.e2e.conftest import Fleet, wait_ready


@contextmanager
def own_fleet(
    base_env: dict[str, str],
    log_dir: Path,
    *,
    queues: tuple[str, ...] = ("inference", "tools.internal"),
    loglevel: str | None = "WARNING",
    **env: str,
) -> Iterator[Fleet]:
    """A gateway and one worker per queue, on ``base_env`` (the session fleet's) with ``env``;
    the workers log at ``loglevel`` (None: at ``ANTWORT_LOG_LEVEL``'s)."""
    prefix = f"antwort-e2e-{uuid.uuid4().hex[:8]}:"
    fleet_env = {**base_env, "ANTWORT_KEY_PREFIX": prefix, "ANTWORT_PORT": str(free_port()), **env}
    workers = [(queue, (queue,)) for queue in queues]
    try:
        with _running(fleet_env, log_dir, workers, loglevel=loglevel) as running:
            yield running
    finally:
        client = redis.Redis.from_url(fleet_env["ANTWORT_REDIS_URL"])
        delete_prefix(client, prefix)
        client.close()


@contextmanager
def small_fleet(
    base_env: dict[str, str], log_dir: Path, sim_url: str, **env: str
) -> Iterator[Fleet]:
    """A gateway, an inference worker and an internal-tools worker on Redis of ``env``'s.

    ``env`` names the Redis (``ANTWORT_REDIS_URL``, ``ANTWORT_BROKER_URL``) and anything else;
    the key prefix is a fresh one and the model the simulator. The caller empties its Redis.
    """
    fleet_env = {
        **base_env,
        "ANTWORT_KEY_PREFIX": f"antwort-e2e-{uuid.uuid4().hex[:8]}:",
        "ANTWORT_LLM_BASE_URL": sim_url,
        "ANTWORT_DEFAULT_MODEL": "antwort-sim",
        "ANTWORT_PORT": str(free_port()),
        "ANTWORT_INFERENCE_CONCURRENCY": "4",
        "ANTWORT_LOG_LEVEL": "warning",
        **env,
    }
    with _running(
        fleet_env, log_dir, [("worker-0", ()), ("tools-0", ("tools.internal",))]
    ) as running:
        yield running


def assert_a_chord_and_a_stream_complete(fleet: Fleet) -> dict[str, Any]:
    """A response whose turn calls two tools at once (a chord: Celery's queues and its result
    backend) completes, and so does the same one streamed; the first response."""
    body = {
        "input": "use calculator expression=6*7 and unit_convert",
        "tools": [
            {"type": "internal", "name": "calculator"},
            {"type": "internal", "name": "unit_convert"},
        ],
    }
    created = httpx.post(f"{fleet.base_url}/v1/responses", json=body, timeout=60)
    response: dict[str, Any] = created.json()
    assert response["status"] == "completed", response
    outputs = [item for item in response["output"] if item["type"] == "function_call_output"]
    assert len(outputs) == 2  # the two calls ran as a chord
    streamed = httpx.post(
        f"{fleet.base_url}/v1/responses", json={**body, "stream": True}, timeout=60
    )
    assert "event: response.completed" in streamed.text, streamed.text[-2000:]
    return response


@contextmanager
def _running(
    env: dict[str, str],
    log_dir: Path,
    workers: Sequence[tuple[str, tuple[str, ...]]],
    *,
    loglevel: str | None = "WARNING",
) -> Iterator[Fleet]:
    """A gateway on ``env``'s port and the named workers (``start_worker``'s arguments), until
    the block ends."""
    running = Fleet(base_url=f"http://127.0.0.1:{env['ANTWORT_PORT']}", env=env, log_dir=log_dir)
    try:
        running.spawn("gateway", [sys.executable, "-m", "programs.cli", "gateway"])
        for name, args in workers:
            running.start_worker(name, *args, loglevel=loglevel)
        wait_ready(running.base_url)
        yield running
    finally:
        running.stop_all()
