"""Sandbox benchmarks: ``.venv/bin/python -m bench.run --only sandbox [--quick]``.

(e) ``sandbox_latency``: start-to-result of a trivial script (``print(1)``) run sequentially,
    by the bubblewrap runner alone and by the executor with a container (files restored from
    and saved to Redis). Target: under 100 ms at p50. For scale, the floor: the same ``bwrap``
    command running ``python3 -I -S -c pass`` (no runner, no limits, no uid switch). And the
    hosted shell through the executor: a call of one command (``echo 1``) and of three (each
    command a sandbox run of its own).
(f) ``sandbox_throughput``: code interpreter calls per second from one ``tools.sandbox`` worker
    (a real ``antwort worker --queues tools.sandbox`` process with its default pool): calls are
    stored on responses and queued as tool tasks, as the loop does, and timed until every
    result is stored.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from app.config import Settings
from app.fleet import make_store
from app.protocol.response import ResponseObject, ResponseStatus
from app.tools.base import ToolCall
from app.tools.registry import KINDS
from app.tools.sandbox.executor import ContainerFiles, SandboxExecutor, make_sandbox
from app.tools.sandbox.runner import SandboxRequest
from bench.fleet import REDIS_URL, ROOT
from broker.celery_app import make_celery

LATENCY_TARGET_MS = 100.0
TRIVIAL = "print(1)"


def _percentiles(values_ms: list[float]) -> dict[str, float]:
    ordered = sorted(values_ms)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"p50": round(pick(0.5), 2), "p90": round(pick(0.9), 2), "p99": round(pick(0.99), 2)}


def bench_latency(settings: Settings, n: int) -> dict[str, Any]:
    """Sequential trivial runs: the runner alone, then the executor with a container."""
    sandbox = make_sandbox(settings)
    store = make_store(settings)
    executor = SandboxExecutor(
        sandbox, ContainerFiles(store.redis, store.keys, ttl_seconds=600), tools={}
    )
    tool = KINDS.definitions([{"type": "code_interpreter", "container": f"cntr_bench{n}"}])
    call = ToolCall(id="ci_bench", name="code_interpreter", arguments=json.dumps({"code": TRIVIAL}))
    shell = KINDS.definitions([_hosted_shell(f"cntr_benchsh{n}")])["shell"]
    one, three = _shell_call(["echo 1"]), _shell_call(["echo 1", "echo 2", "echo 3"])
    for _ in range(5):  # warm-up: page cache, lock files
        sandbox.run(SandboxRequest(code=TRIVIAL))
    raw: list[float] = []
    with_container: list[float] = []
    floor: list[float] = []
    shell_ms: dict[int, list[float]] = {1: [], 3: []}
    bare = [*sandbox.command()[:-1], "pass"]  # the same bwrap and Python, without the runner
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(bare, check=True)
        floor.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        outcome = sandbox.run(SandboxRequest(code=TRIVIAL))
        raw.append((time.perf_counter() - t0) * 1000)
        assert outcome.is_ok and outcome.stdout == "1\n", outcome
        t0 = time.perf_counter()
        result = executor.execute(call, tool["code_interpreter"])
        with_container.append((time.perf_counter() - t0) * 1000)
        assert not result.is_error, result
        for commands, shell_call in ((1, one), (3, three)):
            t0 = time.perf_counter()
            result = executor.execute(shell_call, shell)
            shell_ms[commands].append((time.perf_counter() - t0) * 1000)
            assert not result.is_error and result.output.endswith(f"{commands}\n[exit 0]"), result
    return {
        "runs": n,
        "script": TRIVIAL,
        "runner_ms": _percentiles(raw),
        "executor_with_container_ms": _percentiles(with_container),
        "floor_bwrap_python_pass_ms": _percentiles(floor),
        "hosted_shell_1_command_ms": _percentiles(shell_ms[1]),
        "hosted_shell_3_commands_ms": _percentiles(shell_ms[3]),
        "target_p50_ms": LATENCY_TARGET_MS,
    }


def _hosted_shell(container: str) -> dict[str, Any]:
    return {
        "type": "shell",
        "environment": {"type": "container_reference", "container_id": container},
    }


def _shell_call(commands: list[str]) -> ToolCall:
    return ToolCall(id="sh_bench", name="shell", arguments=json.dumps({"commands": commands}))


def _stage_call(settings: Settings, index: int) -> tuple[str, str]:
    """A response holding one code interpreter call waiting for its result."""
    store = make_store(settings)
    rid = f"resp_bench{uuid.uuid4().hex}"
    item_id = f"ci_bench{index}"
    item = {
        "id": item_id,
        "type": "code_interpreter_call",
        "status": "interpreting",
        "code": TRIVIAL,
        "container_id": f"cntr_bench_{rid}",
        "outputs": None,
    }
    response = ResponseObject(
        id=rid,
        created_at=int(time.time()),
        status=ResponseStatus.IN_PROGRESS,
        model="bench",
        tools=[{"type": "code_interpreter", "container": f"cntr_bench_{rid}"}],
        output=[item],
    )
    store.create(response, inputs=[], extra={}, events=[])
    return rid, item_id


def bench_throughput(settings: Settings, env: dict[str, str], calls: int) -> dict[str, Any]:
    """Calls per second of one tools.sandbox worker, queue to stored result."""
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-sandbox-{os.getpid()}.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "workers.main", "--queues=tools.sandbox", "--loglevel=WARNING"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    store = make_store(settings)
    celery = make_celery(settings)
    try:
        staged = [_stage_call(settings, i) for i in range(calls)]
        _wait_for_worker(store, worker)
        t0 = time.perf_counter()
        for rid, call_id in staged:
            celery.send_task("tools.run_call", args=[rid, call_id], queue="tools.sandbox")
        pending = set(staged)
        deadline = time.monotonic() + 30 + calls
        while pending and time.monotonic() < deadline:
            pending = {p for p in pending if store.tool_results(p[0], [p[1]])[0] is None}
            time.sleep(0.01)
        elapsed = time.perf_counter() - t0
        errors = sum(
            json.loads(store.tool_results(rid, [cid])[0] or '{"is_error": true}')["is_error"]
            for rid, cid in staged
        )
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    done = calls - len(pending)
    return {
        "calls": calls,
        "completed": done,
        "errors": errors,
        "seconds": round(elapsed, 2),
        "calls_per_s": round(done / elapsed, 1),
        "worker": "antwort worker --queues tools.sandbox (prefork, concurrency 2: the default)",
        "worker_log": str(log),
    }


def _wait_for_worker(store: Any, worker: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while store.live_workers("tools.sandbox") < 1:
        if worker.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the tools.sandbox worker did not start")
        time.sleep(0.1)
    time.sleep(1.0)  # the pool children are forked after the heartbeat starts


def run(quick: bool) -> dict[str, Any]:
    """Both sandbox figures, under a private key prefix that is flushed afterwards."""
    prefix = f"antwort-bench-sandbox-{uuid.uuid4().hex[:8]}:"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTWORT_")}
    env.update(ANTWORT_REDIS_URL=REDIS_URL, ANTWORT_KEY_PREFIX=prefix)
    settings = Settings(redis_url=REDIS_URL, key_prefix=prefix)
    try:
        latency = bench_latency(settings, 20 if quick else 200)
        throughput = bench_throughput(settings, env, 20 if quick else 200)
    finally:
        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.unlink(*keys)
        client.close()
    return {"sandbox_latency": latency, "sandbox_throughput": throughput}
