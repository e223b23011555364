"""Fairness: tenant A floods the fleet, tenant B's time to first event stays near an idle fleet's.

One gateway and one inference worker (16 threads) on a private fleet with two tenants' keys.
Tenant B sends probe responses (streamed, ``hello [tokens=20]``, each on a warm connection of
its own), one every ``--spacing`` s, each timed to its first event from the fleet:
``response.in_progress``, the first event a worker writes (``response.created`` comes from the
gateway before the turn is queued, so it says nothing of the queue), and to its first text
delta. First on the idle fleet; then tenant A
posts ``--flood`` background responses (each waits ``--flood-ttft-ms`` for its model) and B
probes again while A's backlog is still there. Run once with the fair share as ``--cap`` says
(``auto``, the default: ``ANTWORT_TENANT_MAX_RUNNING`` unset, as a fleet has it out of the box;
or a number) and once with it off (``0``), to show what it prevents.

With ``--flood-kind counts`` A floods with token counts instead (``POST
/v1/responses/input_tokens``, ``--flood`` requests at once, each waiting for its answer and
sent again, until B's probes end): jobs a request waits for, which take a tenant's places too.

With ``--flood-kind tools`` the fleet has an internal-tools worker of 16 threads too, and A's
background responses each call eight I/O-bound tools at once (``io_1`` … ``io_8`` of
``bench.tools``, 500 ms each); B's probes call ``instant`` and are timed to their first text
delta, which follows the tool's round. ``--cap`` is then ``ANTWORT_TENANT_MAX_TOOL_CALLS`` (the
fair share of each tool queue; the responses' own stays unset), and the run to compare sets it
to 0.

    .venv/bin/python -m bench.fairness            # writes bench/results/fairness.json
    .venv/bin/python -m bench.fairness --flood-kind counts --flood 200  # fairness-counts.json
    .venv/bin/python -m bench.fairness --flood-kind tools --flood 60    # fairness-tools.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis

from app.keys import Keys
from bench.fleet import REDIS_URL, Fleet
from bench.stats import percentiles

RESULTS = Path(__file__).resolve().parent / "results"
A = {"Authorization": "Bearer ka"}
B = {"Authorization": "Bearer kb"}


@dataclass
class TenantFleet(Fleet):
    """The benchmark fleet with two tenants and a fair share of ``cap`` (0: off; None: unset)."""

    cap: int | None = None
    tool_cap: int | None = None
    """``ANTWORT_TENANT_MAX_TOOL_CALLS`` (None: unset)."""

    def env(self) -> dict[str, str]:
        env = super().env()  # no ANTWORT_* of the caller's: unset is unset
        env.update(
            ANTWORT_API_KEYS="team-a:ka,team-b:kb",
            ANTWORT_QUEUED_GRACE_SECONDS="600",  # a long backlog is the point, not a lost turn
        )
        if self.cap is not None:
            env["ANTWORT_TENANT_MAX_RUNNING"] = str(self.cap)
        if self.tool_cap is not None:
            env["ANTWORT_TENANT_MAX_TOOL_CALLS"] = str(self.tool_cap)
        return env


PROBE = {"input": "hello [tokens=20]", "stream": True}
TOOL_PROBE = {
    "input": "[call instant {}]",
    "tools": [{"type": "internal", "name": "instant"}],
    "stream": True,
}
IO_TOOLS = [f"io_{i}" for i in range(1, 9)]


def probe(client: httpx.Client, url: str, body: dict[str, Any] = PROBE) -> tuple[float, float]:
    """B's streamed response: ms to ``response.in_progress``, ms to the first text delta."""
    t0 = time.perf_counter()
    started = delta = None
    with client.stream("POST", f"{url}/v1/responses", json=body, headers=B) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            now = time.perf_counter()
            if started is None and line == "event: response.in_progress":
                started = now
            if delta is None and line == "event: response.output_text.delta":
                delta = now
    assert started is not None and delta is not None, "a probe without events"
    return (started - t0) * 1000, (delta - t0) * 1000


def probes(
    clients: list[httpx.Client], url: str, spacing: float, body: dict[str, Any] = PROBE
) -> list[tuple[float, float]]:
    """A probe on each (warm) client, started ``spacing`` s apart."""
    with ThreadPoolExecutor(max_workers=len(clients)) as pool:
        futures = []
        for client in clients:
            futures.append(pool.submit(probe, client, url, body))
            time.sleep(spacing)
        return [future.result() for future in futures]


def flood(url: str, count: int, ttft_ms: int, *, tools: bool = False) -> float:
    """A's background responses, posted 16 at a time; seconds it took.

    ``tools``: each calls the eight ``io_*`` tools at once instead of waiting for its model.
    """
    body: dict[str, Any] = {"input": f"flood [ttft_ms={ttft_ms}] [tokens=20]", "background": True}
    if tools:
        body["input"] = " ".join(f"[call {name} {{}}]" for name in IO_TOOLS)
        body["tools"] = [{"type": "internal", "name": name} for name in IO_TOOLS]
    local = threading.local()

    def post(_: int) -> None:
        if not hasattr(local, "client"):
            local.client = httpx.Client(timeout=60.0)
        local.client.post(f"{url}/v1/responses", json=body, headers=A).raise_for_status()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(post, range(count)))
    return time.perf_counter() - t0


class CountFlood:
    """A's token counts: ``count`` requests at once, each sent again once answered, until
    :meth:`stop`; each waits ``ttft_ms`` for its model (the count's one-token call)."""

    def __init__(self, url: str, count: int, ttft_ms: int):
        self.body = {"input": f"count me [ttft_ms={ttft_ms}]"}
        self.url = url
        self.answered = 0
        self.failed = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._send, daemon=True) for _ in range(count)]
        for thread in self._threads:
            thread.start()

    def _send(self) -> None:
        with httpx.Client(timeout=300.0) as client:
            while not self._stop.is_set():
                answer = client.post(
                    f"{self.url}/v1/responses/input_tokens", json=self.body, headers=A
                )
                with self._lock:
                    if answer.status_code == 200:
                        self.answered += 1
                    else:
                        self.failed += 1

    def stop(self) -> dict[str, int]:
        """Send no more (the requests on their way finish); what was answered."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=300)
        return {"answered": self.answered, "failed": self.failed}


def waiting_of_a(fleet: Fleet) -> dict[str, int]:
    """A's responses not yet started: parked (fair share) and queued on the fleet; with tools,
    its responses parked for a place on the internal tools' queue, and that queue's length."""
    client = redis.Redis.from_url(REDIS_URL)
    keys = Keys(fleet.prefix)
    try:
        waiting = {
            "parked": int(client.zcard(keys.tenant_parked("team-a"))),
            "inference_queue": int(client.llen(f"{fleet.prefix}celery:inference")),
        }
        if fleet.tool_workers:
            parked = keys.tenant_tool_parked("team-a", "tools.internal")
            waiting["parked_for_tools"] = int(client.zcard(parked))
            waiting["tools_queue"] = int(client.llen(f"{fleet.prefix}celery:tools.internal"))
        return waiting
    finally:
        client.close()


def run_one(cap: int | None, args: argparse.Namespace) -> dict[str, Any]:
    tools = args.flood_kind == "tools"
    fleet = (
        TenantFleet(inference_workers=1, worker_threads=16, tool_workers=1, tool_cap=cap)
        if tools
        else TenantFleet(inference_workers=1, worker_threads=16, cap=cap)
    )
    fleet.start()
    clients = [httpx.Client(timeout=120.0) for _ in range(args.probes)]
    url = fleet.gateway_url
    body = TOOL_PROBE if tools else PROBE
    try:
        for client in clients:  # warm-up: each client's connection open, the fleet's caches
            probe(client, url, body)
        idle = probes(clients, url, args.spacing, body)
        counts = None
        if args.flood_kind == "counts":
            counts = CountFlood(url, args.flood, args.flood_ttft_ms)
            time.sleep(2.0)  # every count sent; A's share (or every thread) taken
            flood_seconds = 0.0
        else:
            flood_seconds = flood(url, args.flood, args.flood_ttft_ms, tools=tools)
            if tools:
                time.sleep(1.0)  # A's first turns ran: its calls are on the tools' queue
        before = waiting_of_a(fleet)
        loaded = probes(clients, url, args.spacing, body)
        after = waiting_of_a(fleet)
        counted = counts.stop() if counts is not None else None
    finally:
        for client in clients:
            client.close()
        fleet.stop()
    idle_started = percentiles([s for s, _ in idle])
    loaded_started = percentiles([s for s, _ in loaded])
    idle_delta = percentiles([d for _, d in idle])
    loaded_delta = percentiles([d for _, d in loaded])
    setting = "tenant_max_tool_calls" if tools else "tenant_max_running"
    return {
        setting: "unset (auto)" if cap is None else cap,
        "idle_first_event_ms": idle_started,
        "idle_first_delta_ms": idle_delta,
        "flood_first_event_ms": loaded_started,
        "flood_first_delta_ms": loaded_delta,
        "ratio_p50_first_event": round(loaded_started["p50"] / idle_started["p50"], 2),
        "ratio_p50_first_delta": round(loaded_delta["p50"] / idle_delta["p50"], 2),
        "flood_post_seconds": round(flood_seconds, 2),
        "a_waiting_before_probes": before,
        "a_waiting_after_probes": after,
        "a_counts": counted,
        "commands": fleet.commands(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.fairness", description=__doc__)
    parser.add_argument("--flood", type=int, default=1000)
    parser.add_argument("--flood-ttft-ms", type=int, default=400)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--spacing", type=float, default=0.25)
    parser.add_argument(
        "--cap", default="auto", help="ANTWORT_TENANT_MAX_RUNNING; auto (default): unset"
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip the run with it off")
    parser.add_argument(
        "--flood-kind",
        choices=["responses", "counts", "tools"],
        default="responses",
        help="A's flood: background responses, token counts waited for (fairness-counts.json), "
        "or background responses calling eight tools each (fairness-tools.json)",
    )
    args = parser.parse_args(argv)
    runs = [run_one(None if args.cap == "auto" else int(args.cap), args)]
    if not args.no_baseline:
        runs.append(run_one(0, args))
    result = {
        "machine": {"python": platform.python_version(), "cpus": _cpus()},
        "args": vars(args),
        "runs": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    name = {"responses": "fairness.json", "counts": "fairness-counts.json"}.get(
        args.flood_kind, "fairness-tools.json"
    )
    (RESULTS / name).write_text(json.dumps(result, indent=2) + "\n")
    for run in runs:
        cap = run.get("tenant_max_running", run.get("tenant_max_tool_calls"))
        print(
            f"cap {cap}: B's first event p50 idle "
            f"{run['idle_first_event_ms']['p50']} ms, under A's flood "
            f"{run['flood_first_event_ms']['p50']} ms (x{run['ratio_p50_first_event']}); "
            f"first delta p50 idle {run['idle_first_delta_ms']['p50']} ms, under A's flood "
            f"{run['flood_first_delta_ms']['p50']} ms (x{run['ratio_p50_first_delta']}); "
            f"A waiting {run['a_waiting_before_probes']} → {run['a_waiting_after_probes']}"
        )
    return 0


def _cpus() -> int:
    return os.cpu_count() or 0


if __name__ == "__main__":
    raise SystemExit(main())
