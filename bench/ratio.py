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

``--sdk`` makes both sides' clients the official ``openai`` SDK (``chat.completions.create`` and
``responses.create``, ``stream=True``), as the outside checks that filed the issue measured: the
SDK parses every chunk into its models, so the client's own CPU, on the same two cores, becomes
part of both rates. ``--client-procs`` splits the clients over that many load processes.
Written to ``bench/results/ratio.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psutil

from bench.cpu import _redis_server
from bench.fleet import Fleet, add_settings_option, raise_nofile
from bench.run import RESULTS, provenance, run_clients


def _cpu(procs: dict[str, list[psutil.Process]]) -> dict[str, float]:
    return {
        role: sum(p.cpu_times().user + p.cpu_times().system for p in ps)
        for role, ps in procs.items()
    }


def measure(
    url: str, procs: dict[str, list[psutil.Process]], args: argparse.Namespace, *, direct: bool
) -> dict[str, Any]:
    """One side of a round: its rate and the CPU milliseconds per response of every process.

    ``--client-procs`` load processes share the clients; their figures are summed.
    """
    before = _cpu(procs)
    share = args.clients // args.client_procs
    argv = ["throughput", "--url", url, "--clients", str(share),
            "--seconds", str(args.seconds), "--tokens", str(args.tokens)]  # fmt: skip
    argv += ["--direct"] * direct + ["--sdk"] * args.sdk
    with ThreadPoolExecutor(args.client_procs) as pool:
        loads = [
            pool.submit(run_clients, argv, timeout=args.seconds + 120)
            for _ in range(args.client_procs)
        ]
        results = [load.result()[0] for load in loads]
    after = _cpu(procs)
    done = max(1, sum(r["completed_total"] for r in results))
    cpu = {role: round((after[role] - before[role]) * 1000 / done, 2) for role in after}
    cpu["client"] = round(sum(r["client_cpu_s"] for r in results) * 1000 / done, 2)
    return {
        "responses_per_s": round(sum(r["responses_per_s"] for r in results), 1),
        "completed": done,
        "failed": sum(r["failed"] for r in results),
        "errors": sorted({e for r in results for e in r["errors"]})[:10],
        "latency_ms": [r["response_latency_ms"] for r in results],
        "cpu_ms_per_response": cpu,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.ratio")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--sdk", action="store_true", help="clients: the official openai SDK")
    parser.add_argument("--client-procs", type=int, default=1, help="load processes")
    add_settings_option(parser)
    parser.add_argument("--out", default="ratio.json", help="file in bench/results/")
    args = parser.parse_args(argv)
    raise_nofile()
    settings = dict(args.settings)
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
        **provenance("bench.ratio", fleet=fleet, argv=argv),
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
