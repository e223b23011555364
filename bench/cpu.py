"""CPU per streamed response, per process: ``python -m bench.cpu [--tokens 100] [--responses 400]``.

Starts its own fleet (by default one inference worker of 32 threads), streams ``--responses``
answers of ``--tokens`` tokens with ``--in-flight`` (8) at a time, and reads each process's CPU
time (user + system) before and after: where a response's cost goes across gateway, worker,
simulator, Redis and the load client. Written to ``bench/results/<--out>`` (``cpu.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from bench.clients import Connection, address, consume
from bench.fleet import Fleet, parse_setting

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
    tokens: int,
    responses: int,
    in_flight: int = 8,
    workers: int = 1,
    threads: int = 32,
    settings: dict[str, str] | None = None,
) -> dict[str, Any]:
    fleet = Fleet(inference_workers=workers, worker_threads=threads, settings=settings or {})
    fleet.start()
    try:
        procs = {role: [psutil.Process(p) for p in pids] for role, pids in fleet.pids().items()}
        redis_proc = _redis_server()
        if redis_proc is not None:
            procs["redis"] = [redis_proc]
        procs["client"] = [psutil.Process()]
        asyncio.run(_stream_all(fleet.gateway_url, tokens, 50, in_flight))  # warm-up
        before, started = _cpu_seconds(procs), time.perf_counter()
        asyncio.run(_stream_all(fleet.gateway_url, tokens, responses, in_flight))
        elapsed = time.perf_counter() - started
        after = _cpu_seconds(procs)
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
    parser.add_argument("--set", action="append", default=[], metavar="ANTWORT_NAME=VALUE")
    parser.add_argument("--out", default="cpu.json", help="file in bench/results/")
    args = parser.parse_args(argv)
    settings = dict(parse_setting(text) for text in args.set)
    figures = measure(
        args.tokens, args.responses, args.in_flight, args.workers, args.threads, settings
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
