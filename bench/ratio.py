"""The fleet's rate against the model server's own: ``python -m bench.ratio [--rounds 3]``.

Issue 20 §5's figure. One fleet (as core (b): one gateway process, one inference worker per core
of 64 threads, the simulator at zero delay), then, in alternating rounds on the same rig:

- **direct**: 50 clients stream 100-token Chat Completions from the simulator itself (the very
  request an inference worker makes for one response), read to ``data: [DONE]``;
- **fleet**: 50 clients stream 100-token responses through the gateway (``POST /v1/responses``,
  ``stream: true``), every event checked (``bench.clients``).

Each round measures both for ``--seconds`` and the CPU seconds every process spent (fleet:
gateway and workers; both: simulator, Redis, load client). The ratio is fleet/direct per round,
so both sides see the same minute of the machine; the median of the rounds is the figure.
Written to ``bench/results/ratio.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import statistics
import sys
from typing import Any

import psutil

from bench.cpu import _redis_server
from bench.fleet import Fleet, parse_setting, raise_nofile
from bench.run import RESULTS, machine, run_clients


def _cpu(procs: dict[str, list[psutil.Process]]) -> dict[str, float]:
    return {
        role: sum(p.cpu_times().user + p.cpu_times().system for p in ps)
        for role, ps in procs.items()
    }


def measure(
    url: str, procs: dict[str, list[psutil.Process]], args: argparse.Namespace, *, direct: bool
) -> dict[str, Any]:
    """One side of a round: its rate and the CPU milliseconds per response of every process."""
    before = _cpu(procs)
    argv = ["throughput", "--url", url, "--clients", str(args.clients),
            "--seconds", str(args.seconds), "--tokens", str(args.tokens)]  # fmt: skip
    result, _ = run_clients([*argv, "--direct"] if direct else argv, timeout=args.seconds + 120)
    after = _cpu(procs)
    done = max(1, result["completed_total"])
    cpu = {role: round((after[role] - before[role]) * 1000 / done, 2) for role in after}
    cpu["client"] = round(result["client_cpu_s"] * 1000 / done, 2)
    return {
        "responses_per_s": result["responses_per_s"],
        "completed": result["completed_total"],
        "failed": result["failed"],
        "errors": result["errors"],
        "latency_ms": result["response_latency_ms"],
        "cpu_ms_per_response": cpu,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.ratio")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--set", action="append", default=[], metavar="ANTWORT_NAME=VALUE")
    parser.add_argument("--out", default="ratio.json", help="file in bench/results/")
    args = parser.parse_args(argv)
    raise_nofile()
    settings = dict(parse_setting(text) for text in args.set)
    cores = os.cpu_count() or 2
    fleet = Fleet(inference_workers=cores, worker_threads=64, settings=settings)
    fleet.start()
    rounds = []
    try:
        procs = {role: [psutil.Process(p) for p in pids] for role, pids in fleet.pids().items()}
        redis_proc = _redis_server()
        if redis_proc is not None:
            procs["redis"] = [redis_proc]
        for index in range(args.rounds):
            sides = ["direct", "fleet"] if index % 2 == 0 else ["fleet", "direct"]
            row: dict[str, Any] = {}
            for side in sides:
                url = fleet.sim_url if side == "direct" else fleet.gateway_url
                row[side] = measure(url, procs, args, direct=side == "direct")
            row["ratio"] = round(
                row["fleet"]["responses_per_s"] / max(0.1, row["direct"]["responses_per_s"]), 3
            )
            print(json.dumps({"round": index, **row}), file=sys.stderr)
            rounds.append(row)
    finally:
        fleet.stop()
    record = {
        "command": shlex.join([".venv/bin/python", "-m", "bench.ratio", *(argv or sys.argv[1:])]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "fleet": {role: shlex.join(cmd) for role, cmd in fleet.commands().items()},
        "settings": settings,
        "rounds": rounds,
        "ratio_median": statistics.median(r["ratio"] for r in rounds),
        "fleet_per_s_median": statistics.median(r["fleet"]["responses_per_s"] for r in rounds),
        "direct_per_s_median": statistics.median(r["direct"]["responses_per_s"] for r in rounds),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / args.out).write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k != "rounds"}, indent=2))


if __name__ == "__main__":
    main()
