"""A ``tools.internal`` worker initializes its internal tools when it starts and shuts them down
when it stops; a tool that fails to initialize is left out and the worker serves anyway.

Each test runs its own worker process under the test's key prefix (its own queues), so the session
fleet never sees it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.config import Settings
from broker.celery_app import make_celery
from tests.support.celery_apps import close_celery


def _wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _marks(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_tool_worker_initializes_tools_at_start_and_shuts_them_down_at_stop(
    redis_url: str, key_prefix: str, tmp_path: Path, pool: str, process_environ: dict[str, str]
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    log = tmp_path / "worker.log"
    env = dict(process_environ)
    env.update(
        ANTWORT_REDIS_URL=redis_url,
        ANTWORT_KEY_PREFIX=key_prefix,
        ANTWORT_INTERNAL_TOOL_MODULES="tests.support.lifecycle_tools",
        LIFECYCLE_MARKER_DIR=str(marks),
    )
    argv = [sys.executable, "-m", "workers.main", "--queues=tools.internal", f"--pool={pool}"]
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [*argv, "--concurrency=1", "--loglevel=INFO"], env=env, stdout=out, stderr=out
        )
    celery = make_celery(Settings(redis_url=redis_url, key_prefix=key_prefix))
    try:
        # Initialized at start, before any task arrived (not lazily on the first one).
        _wait_for(lambda: len(_marks(marks)) >= 2, 60, "the tools to initialize")
        time.sleep(0.5)
        assert worker.poll() is None, log.read_text()
        init = _marks(marks)
        assert [m.rsplit(".", 1)[0] for m in init] == ["lifecycle_broken.init", "lifecycle_ok.init"]
        pid = int(init[1].rsplit(".", 1)[1])
        assert (pid == worker.pid) == (pool == "threads")  # prefork: in the pool child

        # The broken tool was left out and the worker serves tasks all the same.
        # (Tool tasks store no Celery result; the worker's INFO log says how the task ended.)
        result = celery.send_task(  # as the fleet sends it (a result would be subscribed to)
            "tools.run_call",
            args=["resp_missing", "call_1"],
            queue="tools.internal",
            ignore_result=True,
        )
        _wait_for(
            lambda: (
                f"[{result.id}] succeeded" in log.read_text() and "'skipped'" in log.read_text()
            ),
            60,
            "the task to run",
        )
        assert "lifecycle_broken failed to initialize; left out" in log.read_text()

        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        close_celery(celery)
    after = [m.rsplit(".", 1)[0] for m in _marks(marks)]
    assert after == ["lifecycle_broken.init", "lifecycle_ok.init", "lifecycle_ok.shutdown"]
