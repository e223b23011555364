"""MCP benchmark: ``.venv/bin/python -m bench.mcp [--quick]`` (or ``bench.run --only mcp``).

Starts a streamable-HTTP test MCP server (``tests/support/mcp_servers.py``) and one
``tools.mcp`` worker (``python -m workers.main --queues tools.mcp``, thread pool) on the machine's
Redis (db 14, unique key prefix), then measures the ``echo`` tool:

(a) ``direct``: the SDK's ``Client.call_tool`` in this process over one warm session;
(b) ``executor``: the fleet's synchronous ``McpExecutor`` (its own loop thread, pooled session)
    in this process — the cost the fleet's MCP layer adds to a call;
(c) ``task``: one ``tools.run_call`` task through the broker to the ``tools.mcp`` worker until
    its result is stored in Redis — a call as the fleet runs it (queueing included), each paired
    with a direct SDK call made just before it (the added cost is read against the pair);
(d) ``throughput``: calls per second from that one worker with many tasks queued at once.

Results go to ``bench/results/mcp.json`` (``results/quick/`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from bench.fleet import REDIS_URL, ROOT

RESULTS = Path(__file__).resolve().parent / "results"
ADDED_P50_TARGET_MS = 5.0


def percentiles(values: list[float]) -> dict[str, float]:
    """p50/p90/p99 in ms, rounded."""
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {
        "p50": at(0.5),
        "p90": at(0.9),
        "p99": at(0.99),
        "mean": round(statistics.mean(values), 3),
    }


async def _direct(url: str, n: int) -> list[float]:
    from mcp import Client

    async with Client(url, cache=None) as client:
        for _ in range(20):
            await client.call_tool("echo", {"text": "warm"})
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            await client.call_tool("echo", {"text": "x"})
            samples.append((time.perf_counter() - started) * 1000)
    return samples


def bench_direct(url: str, n: int) -> list[float]:
    """(a) the SDK alone."""
    return asyncio.run(_direct(url, n))


async def _direct_concurrent(url: str, n: int, width: int) -> float:
    from mcp import Client

    async with Client(url, cache=None) as client:
        await client.call_tool("echo", {"text": "warm"})
        started = time.perf_counter()
        for _ in range(n // width):
            await asyncio.gather(*(client.call_tool("echo", {"text": "x"}) for _ in range(width)))
        return (n // width) * width / (time.perf_counter() - started)


def bench_server_ceiling(url: str, n: int, width: int = 32) -> dict[str, Any]:
    """What the test server itself answers per second (the SDK, ``width`` calls at once)."""
    rate = asyncio.run(_direct_concurrent(url, n, width))
    return {"calls": n, "in_flight": width, "calls_per_s": round(rate, 1)}


def bench_executor(url: str, n: int) -> list[float]:
    """(b) the fleet's executor, in process."""
    from app.config import Settings
    from app.tools.base import McpToolRef, ToolCall, ToolDefinition, ToolKind
    from app.tools.mcp.client import McpClient
    from app.tools.mcp.executor import McpExecutor
    from app.tools.mcp.security import Sealer
    from app.tools.mcp.servers import McpServers

    client = McpClient()
    executor = McpExecutor(McpServers(Settings(), sealer=Sealer(b"bench")), client)
    tool = ToolDefinition(
        name="echo",
        kind=ToolKind.MCP,
        mcp=McpToolRef(server_label="b", tool_name="echo", server_url=url),
    )
    call = ToolCall(id="c", name="echo", arguments='{"text": "x"}')
    try:
        for _ in range(20):
            executor.execute(call, tool)
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            result = executor.execute(call, tool)
            samples.append((time.perf_counter() - started) * 1000)
            assert not result.is_error, result.output
    finally:
        client.close()
    return samples


class DirectProbe:
    """One warm SDK session on a loop thread of this process, for calls paired with tasks.

    Each call is timed inside the loop (the hand-off from the calling thread is not counted),
    so a task and the direct call measured just before it see the same state of the machine.
    """

    def __init__(self, url: str):
        from mcp import Client

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._client = Client(url, cache=None)
        self._run(self._client.__aenter__())
        for _ in range(20):
            self.call()

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(60)

    async def _timed(self) -> float:
        started = time.perf_counter()
        await self._client.call_tool("echo", {"text": "x"})
        return (time.perf_counter() - started) * 1000

    def call(self) -> float:
        """One echo call; its ms."""
        return float(self._run(self._timed()))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._run(self._client.__aexit__(None, None, None))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


class TaskBench:
    """Tool tasks against a real ``tools.mcp`` worker process."""

    def __init__(self, url: str, prefix: str):
        from app.config import Settings
        from app.fleet import make_redis, make_store
        from broker.celery_app import make_celery
        from broker.publish import TaskPublisher

        self.settings = Settings(redis_url=REDIS_URL, key_prefix=prefix)
        self.store = make_store(self.settings)
        self.celery = make_celery(self.settings)
        self.publisher = TaskPublisher(self.celery, make_redis(self.settings, broker=True))
        self.url = url

    def response_with_calls(self, count: int) -> str:
        """A stored in-progress response whose output holds ``count`` unanswered echo calls."""
        from app.protocol.response import ResponseObject, ResponseStatus
        from app.tools.mcp.presenter import call_item

        listing = {
            "id": "mcpl_bench",
            "type": "mcp_list_tools",
            "server_label": "b",
            "tools": [{"name": "echo", "input_schema": {"type": "object"}, "description": None}],
            "error": None,
        }
        calls = [
            call_item(f"mcp_{i:06d}", server_label="b", name="echo", arguments='{"text": "x"}')
            for i in range(count)
        ]
        response = ResponseObject(
            id="resp_bench" + uuid.uuid4().hex,
            created_at=int(time.time()),
            status=ResponseStatus.IN_PROGRESS,
            model="bench",
            tools=[
                {
                    "type": "mcp",
                    "server_label": "b",
                    "server_url": self.url,
                    "require_approval": "never",
                }
            ],  # fmt: skip
            output=[listing, *calls],
        )
        self.store.create(response, inputs=[], extra={}, events=[])
        return response.id

    def send(self, response_id: str, call_id: str) -> None:
        """Queue the call's task as the fleet's dispatcher sends a single call's task (its link to
        the next turn left out: no inference worker runs here)."""
        from broker.routing import tool_task_id

        self.publisher.publish(
            "tools.run_call",
            [response_id, call_id],
            task_id=tool_task_id(response_id, call_id),
            queue="tools.mcp",
        )

    def wait(
        self, response_id: str, call_ids: list[str], timeout: float = 120, poll: float = 0.005
    ) -> None:
        """Poll until every call's result is stored (for the throughput run)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            results = self.store.tool_results(response_id, call_ids)
            if all(r is not None for r in results):
                assert all('"is_error": false' in str(r) for r in results), results[:1]
                return
            time.sleep(poll)
        raise TimeoutError("tool results did not arrive")

    def latency(self, n: int, probe: DirectProbe) -> tuple[list[float], list[float]]:
        """(c) one task at a time, enqueue → result stored; (task ms, paired direct ms).

        Each call is in a response of its own (a turn that called one tool), stored before the
        clock starts. The clock stops at the Redis keyspace notification of the result's SET:
        polling for it would take CPU from the worker and the server on a 2-core box. Right
        before each task, ``probe`` makes one direct SDK call to the same server: the box's
        speed drifts from minute to minute, and the pair sees the same minute.
        """
        samples, paired = [], []
        keys = self.store.keys
        with _keyspace_events(self.store.redis):
            pubsub = self.store.redis.pubsub(ignore_subscribe_messages=True)
            try:
                for i in range(n + 20):
                    rid = self.response_with_calls(1)
                    call_id = "mcp_000000"
                    channel = f"__keyspace@{_DB}__:{keys.tool_results(rid)}"
                    pubsub.subscribe(channel)
                    direct = probe.call()
                    started = time.perf_counter()
                    self.send(rid, call_id)
                    message = None
                    while message is None and time.perf_counter() - started < 60:
                        message = pubsub.get_message(timeout=60)  # None: a confirmation
                    elapsed = (time.perf_counter() - started) * 1000
                    assert message is not None and message["data"] == b"hset", message
                    pubsub.unsubscribe(channel)
                    self.wait(rid, [call_id])  # stored, and not an error
                    if i >= 20:  # the first calls warm the worker's session
                        samples.append(elapsed)
                        paired.append(direct)
            finally:
                pubsub.close()
        return samples, paired

    def throughput(self, n: int, per_response: int = 8) -> dict[str, Any]:
        """(d) ``n`` tasks queued at once (``per_response`` calls per response, as a turn's
        parallel calls); calls per second until the last result is stored."""
        batches = [
            (self.response_with_calls(per_response), [f"mcp_{i:06d}" for i in range(per_response)])
            for _ in range(n // per_response)
        ]
        started = time.perf_counter()
        for rid, call_ids in batches:
            for call_id in call_ids:
                self.send(rid, call_id)
        for rid, call_ids in batches:
            self.wait(rid, call_ids, timeout=600)
        elapsed = time.perf_counter() - started
        calls = len(batches) * per_response
        return {
            "calls": calls,
            "seconds": round(elapsed, 3),
            "calls_per_s": round(calls / elapsed, 1),
        }


_DB = int(REDIS_URL.rsplit("/", 1)[1])


@contextlib.contextmanager
def _keyspace_events(client: redis.Redis) -> Iterator[None]:
    """Keyspace notifications for hash commands while the block runs (restored after)."""
    before = client.config_get("notify-keyspace-events")["notify-keyspace-events"]
    client.config_set("notify-keyspace-events", "Kh")
    try:
        yield
    finally:
        client.config_set("notify-keyspace-events", before)


def start_worker(prefix: str, threads: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTWORT_")}
    env.update(
        ANTWORT_REDIS_URL=REDIS_URL,
        ANTWORT_KEY_PREFIX=prefix,
        ANTWORT_MCP_ALLOWED_HOSTS="127.0.0.1",
        ANTWORT_MCP_SECRET_KEY="bench",
        ANTWORT_LOG_LEVEL="warning",
    )
    argv = [sys.executable, "-m", "workers.main", "--queues", "tools.mcp", "--pool", "threads",
            "--concurrency", str(threads), "--loglevel", "WARNING"]  # fmt: skip
    with open(log, "wb") as out:
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def wait_worker(prefix: str, timeout: float = 60) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if client.zcard(f"{prefix}workers:tools.mcp"):
                time.sleep(1.0)  # the heartbeat comes before the consumer is ready
                return
            time.sleep(0.1)
    finally:
        client.close()
    raise RuntimeError("the tools.mcp worker did not start")


def flush(prefix: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
    finally:
        client.close()


def run(quick: bool) -> dict[str, Any]:
    """Every measurement; the figures as one dict."""
    from tests.support.mcp_servers import start_server

    n, n_tasks, n_throughput, threads = (50, 30, 100, 16) if quick else (500, 200, 1000, 32)
    prefix = f"antwort-bench-mcp-{uuid.uuid4().hex[:8]}:"
    log = Path(f"/tmp/{prefix.rstrip(':')}-worker.log")
    server = start_server("streamable-http", name="bench")
    worker = start_worker(prefix, threads, log)
    try:
        direct = percentiles(bench_direct(server.url, n))
        executor = percentiles(bench_executor(server.url, n))
        direct_again = percentiles(bench_direct(server.url, n))  # the box's load drifts
        ceiling = bench_server_ceiling(server.url, n_throughput // 2)
        wait_worker(prefix)
        tasks = TaskBench(server.url, prefix)
        probe = DirectProbe(server.url)
        try:
            task_samples, paired_samples = tasks.latency(n_tasks, probe)
        finally:
            probe.close()
        task, paired = percentiles(task_samples), percentiles(paired_samples)
        throughput = tasks.throughput(n_throughput)
    finally:
        worker.terminate()
        worker.wait(30)
        server.stop()
        flush(prefix)
    best = min(direct["p50"], direct_again["p50"])
    return {
        "direct_sdk_ms": direct,
        "executor_ms": executor,
        "direct_sdk_again_ms": direct_again,
        "tool_task_ms": task,
        "direct_sdk_paired_ms": paired,
        "added_ms_p50_executor": round(executor["p50"] - best, 3),
        "added_ms_p50_tool_task": round(task["p50"] - best, 3),
        "added_ms_p50_tool_task_paired": round(task["p50"] - paired["p50"], 3),
        "server_ceiling_sdk_direct": ceiling,
        "target_added_ms_p50": ADDED_P50_TARGET_MS,
        "one_worker_throughput": {**throughput, "threads": threads},
        "worker_log": str(log),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp")
    parser.add_argument("--quick", action="store_true", help="small counts (~30 s)")
    args = parser.parse_args(argv)
    command = ".venv/bin/python -m bench.mcp" + (" --quick" if args.quick else "")
    figures = run(args.quick)
    outdir = RESULTS / "quick" if args.quick else RESULTS
    outdir.mkdir(parents=True, exist_ok=True)
    record = {
        "command": command,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "note": "measured on a shared 2-core box while other engineers ran their suites",
        "mcp": figures,
    }
    (outdir / "mcp.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
