"""CPU per streamed response, per process: ``python -m bench.cpu [--tokens 100] [--responses 400]``.

Starts its own fleet (by default one inference worker of 32 threads), streams ``--responses``
answers of ``--tokens`` tokens with ``--in-flight`` (8) at a time, and reads each process's CPU
time (user + system) before and after: where a response's cost goes across gateway, worker,
simulator, Redis and the load client. Written to ``bench/results/<--out>`` (``cpu.json``).

Redis, the one process every response of a fleet goes through, is also asked what it did
(``INFO commandstats`` before and after): each command's calls and microseconds a response,
the commands scripts run counted inside their ``EVALSHA`` and again on their own.
``--redis-scripts`` has Redis log every command while measuring (``slowlog-log-slower-than
0``, its settings put back after) to split the scripts' time by script. The calls are exact;
the microseconds are Redis's clock around each command, so on a machine whose cores the fleet
oversubscribes they include time the system gave the core to another process. The machine's
Redis is shared: what others send it meanwhile counts too.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import json
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

import psutil
import redis

from app.store.scripts import lua_source
from bench.clients import Connection, address, consume
from bench.fleet import REDIS_URL, Fleet, SlowLog, add_settings_option

RESULTS = Path(__file__).resolve().parent / "results"


def _redis_server() -> psutil.Process | None:
    for proc in psutil.process_iter(["name", "cmdline"]):
        if "redis-server" in (proc.info["name"] or "") and "6379" in " ".join(
            proc.info["cmdline"] or []
        ):
            return proc
    return None


def _cpu_seconds(procs: dict[str, list[psutil.Process]]) -> dict[str, tuple[float, float]]:
    """Each role's CPU time so far, read once per process: (user + system, system)."""
    times = {role: [p.cpu_times() for p in ps] for role, ps in procs.items()}
    return {
        role: (sum(t.user + t.system for t in ts), sum(t.system for t in ts))
        for role, ts in times.items()
    }


def _ms_per_response(
    before: dict[str, tuple[float, float]],
    after: dict[str, tuple[float, float]],
    responses: int,
    part: int,
) -> dict[str, float]:
    """Milliseconds per response of each role between two readings (part 0: all, 1: system)."""
    return {
        role: round((after[role][part] - before[role][part]) / responses * 1000, 2)
        for role in after
    }


def script_names() -> dict[str, str]:
    """The store's scripts by the SHA1 that ``EVALSHA`` names them with."""
    lua = resources.files("app.store") / "lua"
    names = [path.name.removesuffix(".lua") for path in lua.iterdir() if path.name.endswith(".lua")]
    return {hashlib.sha1(lua_source(name).encode()).hexdigest(): name for name in names}


def _per_response(totals: dict[str, list[int]], responses: int) -> dict[str, dict[str, float]]:
    """``name → [calls, usec]`` as calls and microseconds a response, the costliest first."""
    costs = {
        name: {"calls": round(calls / responses, 2), "usec": round(usec / responses, 1)}
        for name, (calls, usec) in totals.items()
        if calls > 0
    }
    return dict(sorted(costs.items(), key=lambda item: -item[1]["usec"]))


def command_costs(
    before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]], responses: int
) -> dict[str, dict[str, float]]:
    """Each command's calls and microseconds a response between two ``INFO commandstats``."""
    totals = {}
    for name, stats in after.items():
        earlier = before.get(name, {"calls": 0, "usec": 0})
        totals[name.removeprefix("cmdstat_")] = [
            stats["calls"] - earlier["calls"],
            stats["usec"] - earlier["usec"],
        ]
    return _per_response(totals, responses)


def script_costs(
    entries: list[dict[str, Any]], names: dict[str, str], responses: int
) -> dict[str, dict[str, float]]:
    """Each script's calls and microseconds a response, from the slow log's ``EVALSHA``s."""
    totals: dict[str, list[int]] = {}
    for entry in entries:
        command = entry["command"]
        text = command.decode(errors="replace") if isinstance(command, bytes) else command
        words = text.split(maxsplit=2)
        if len(words) > 1 and words[0].lower() == "evalsha":
            total = totals.setdefault(names.get(words[1].lower(), words[1]), [0, 0])
            total[0] += 1
            total[1] += entry["duration"]
    return _per_response(totals, responses)


class RedisAccount:
    """What Redis did between ``start`` and ``stop`` (``with_scripts``: by script too)."""

    SLOWLOG_LEN = 1_000_000

    def __init__(self, client: redis.Redis, *, with_scripts: bool):
        self.client = client
        self.with_scripts = with_scripts
        self._slow_log = SlowLog(client, slower_than_us=0, length=self.SLOWLOG_LEN)
        self._before: dict[str, dict[str, Any]] = {}
        self._after: dict[str, dict[str, Any]] = {}
        self._entries: list[dict[str, Any]] = []

    def start(self) -> None:
        if self.with_scripts:
            self._slow_log.start()
        self._before = self.client.info("commandstats")

    def stop(self) -> None:
        self._after = self.client.info("commandstats")
        if self.with_scripts:
            self._entries = self._slow_log.stop()

    def figures(self, responses: int) -> dict[str, Any]:
        figures: dict[str, Any] = {"commands": command_costs(self._before, self._after, responses)}
        if self.with_scripts:
            figures["scripts"] = script_costs(self._entries, script_names(), responses)
        return figures


async def _stream_all(url: str, tokens: int, count: int, in_flight: int) -> None:
    """``count`` streamed responses, ``in_flight`` at a time, each checked event by event."""
    body = {"model": "antwort-sim", "input": f"hi [tokens={tokens}]", "stream": True}
    host, port = address(url)
    todo = iter(range(count))

    async def worker() -> None:
        connection = Connection(host, port)
        try:
            for _ in todo:
                result = await consume(connection, body)
                assert result.ok, result.error
        finally:
            connection.close()

    await asyncio.gather(*(worker() for _ in range(in_flight)))


def measure(
    fleet: Fleet, tokens: int, responses: int, in_flight: int = 8, *, redis_scripts: bool = False
) -> dict[str, Any]:
    """Start ``fleet``, stream the responses through it and read what each process spent."""
    account = RedisAccount(redis.Redis.from_url(REDIS_URL), with_scripts=redis_scripts)
    fleet.start()
    try:
        procs = {role: [psutil.Process(p) for p in pids] for role, pids in fleet.pids().items()}
        redis_proc = _redis_server()
        if redis_proc is not None:
            procs["redis"] = [redis_proc]
        procs["client"] = [psutil.Process()]
        asyncio.run(_stream_all(fleet.gateway_url, tokens, 50, in_flight))  # warm-up
        account.start()
        try:
            before, started = _cpu_seconds(procs), time.perf_counter()
            asyncio.run(_stream_all(fleet.gateway_url, tokens, responses, in_flight))
            elapsed = time.perf_counter() - started
            after = _cpu_seconds(procs)
        finally:
            account.stop()
    finally:
        fleet.stop()
    per_response = _ms_per_response(before, after, responses, 0)
    return {
        "tokens": tokens,
        "responses": responses,
        "in_flight": in_flight,
        "responses_per_s": round(responses / elapsed, 1),
        "cpu_ms_per_response": per_response,
        "cpu_ms_per_response_total": round(sum(per_response.values()), 2),
        "system_ms_per_response": _ms_per_response(before, after, responses, 1),
        "redis_per_response": account.figures(responses),
        "settings": fleet.settings,
        "fleet": {"commands": [" ".join(argv) for argv in fleet.commands().values()]},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu")
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--responses", type=int, default=400)
    parser.add_argument("--in-flight", type=int, default=8, help="concurrent clients")
    parser.add_argument("--workers", type=int, default=1, help="inference worker processes")
    parser.add_argument("--threads", type=int, default=32, help="threads per inference worker")
    add_settings_option(parser)
    parser.add_argument(
        "--redis-scripts",
        action="store_true",
        help="split Redis's script time by script (logs every command while measuring)",
    )
    parser.add_argument("--out", default="cpu.json", help="file in bench/results/")
    args = parser.parse_args(argv)
    settings = dict(args.settings)
    fleet = Fleet(inference_workers=args.workers, worker_threads=args.threads, settings=settings)
    figures = measure(
        fleet, args.tokens, args.responses, args.in_flight, redis_scripts=args.redis_scripts
    )
    figures["command"] = ".venv/bin/python -m bench.cpu " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    figures["date"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / args.out).write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
