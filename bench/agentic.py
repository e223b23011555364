"""The agentic loop's benchmarks (issue 4, section 6); ``python -m bench.run --only agentic``.

Its own fleet: the simulator at zero delay, one gateway, one inference worker, ``tools.internal``
workers with the tools of ``bench.tools``. Then:

(a) ``orchestration``: one response = model turn → one instant tool → model turn, posted
    sequentially through the fleet, against the same loop run in this process (the same
    ``advance_response``/``run_tool_call`` code on the same Redis, tool calls and turns called
    directly instead of queued). Orchestration cost per turn = (fleet p50 − in-process p50) / 2
    turns. The model's own time inside the in-process loop is measured too.
(b) ``parallel``: one turn calling 8 tools of 200 ms each; the tool phase is the time from the
    last ``function_call`` item done to the first ``function_call_output`` item added (the next
    turn starts after every result is in), read off the SSE stream.
(c) ``scaling``: tool calls per second with 1, 2 and 4 tool worker processes of 4 threads on
    500 ms I/O-bound tools (8 calls per response, a few responses in flight).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from app.config import Settings
from app.fleet import make_run_deps, make_tool_deps
from app.providers.chunks import Chunk
from app.providers.translate import ModelRequest
from app.responses import create_response
from app.run import ModelProvider, RunDeps, advance_response
from app.tool_calls import ToolDeps, run_tool_call
from bench.fleet import REDIS_URL, Fleet
from bench.stats import percentiles
from bench.tools import IO_BOUND, IO_SECONDS, PARALLEL, PARALLEL_SECONDS

TURNS_PER_RESPONSE = 2
SCALING_THREADS = 4
ORCHESTRATION_TARGET_MS = 10.0
TOOL_PHASE_TARGET_MS = 300.0


def request_body(tools: Sequence[str], **extra: Any) -> dict[str, Any]:
    """A response whose first turn calls every tool in ``tools``."""
    return {
        "model": "antwort-sim",
        "input": " ".join(tools),
        "tools": [{"type": "internal", "name": name} for name in tools],
        **extra,
    }


def _post(client: httpx.Client, url: str, body: dict[str, Any], calls: int) -> None:
    answer = client.post(f"{url}/v1/responses", json=body)
    answer.raise_for_status()
    response = answer.json()
    results = [i for i in response["output"] if i["type"] == "function_call_output"]
    assert response["status"] == "completed" and len(results) == calls, response


# (a) ------------------------------------------------------------------------------------------


class InlineDispatcher:
    """The fleet's hand-offs, kept for the in-process driver to carry out."""

    def __init__(self) -> None:
        self.next: tuple[list[str], int] | None = None

    def enqueue_turn(self, response_id: str, turn: int, *, retry: bool = False) -> None:
        self.next = ([], turn)

    def enqueue_tools(
        self, response_id: str, calls: Sequence[tuple[str, str]], *, then_turn: int
    ) -> None:
        self.next = ([call_id for call_id, _ in calls], then_turn)

    def revoke_response(self, response_id: str, turn: int, call_ids: Sequence[str] = ()) -> None:
        pass


class TimedProvider:
    """The real provider, adding up the time spent inside the model's streams."""

    def __init__(self, inner: ModelProvider) -> None:
        self.inner = inner
        self.seconds = 0.0

    def stream(self, request: ModelRequest) -> Iterator[Chunk]:
        started = time.perf_counter()
        try:
            yield from self.inner.stream(request)
        finally:
            self.seconds += time.perf_counter() - started


@dataclass
class InlineLoop:
    """The agentic loop in this process: the fleet's code, without queues or a gateway."""

    settings: Settings
    deps: RunDeps
    tools: ToolDeps
    dispatcher: InlineDispatcher
    provider: TimedProvider

    @classmethod
    def make(cls, fleet: Fleet) -> InlineLoop:
        settings = Settings(
            redis_url=REDIS_URL,
            key_prefix=f"{fleet.prefix}inline:",
            llm_base_url=f"{fleet.sim_url}/v1",
            default_model="antwort-sim",
            llm_max_retries=0,
            internal_tool_modules="bench.tools",
        )
        dispatcher = InlineDispatcher()
        deps = make_run_deps(settings, dispatcher=dispatcher)
        provider = TimedProvider(deps.provider)
        deps = RunDeps(
            store=deps.store,
            provider=provider,
            settings=settings,
            dispatcher=dispatcher,
            leases=deps.leases,
        )
        return cls(settings, deps, make_tool_deps(settings), dispatcher, provider)

    def run(self, body: dict[str, Any]) -> tuple[float, float]:
        """One response from creation to its end: (seconds, of which in the model)."""
        model_before = self.provider.seconds
        started = time.perf_counter()
        response, _ = create_response(self.deps.store, self.dispatcher, self.settings, body)
        turn = 0
        while self.dispatcher.next is not None:
            calls, turn = self.dispatcher.next
            self.dispatcher.next = None
            for call_id in calls:
                run_tool_call(self.tools, response.id, call_id)
            advance_response(self.deps, response.id, turn)
        elapsed = time.perf_counter() - started
        assert self.deps.store.get(response.id).response.status == "completed"
        return elapsed, self.provider.seconds - model_before


def _compare(
    fleet: Fleet, loop: InlineLoop, body: dict[str, Any], *, calls: int, n: int
) -> dict[str, list[float]]:
    """ms per response through the fleet and in process (and the model's part of the latter)."""
    times: dict[str, list[float]] = {"fleet": [], "inline": [], "model": []}
    with httpx.Client(timeout=60.0) as client:
        for _ in range(10):  # warm-up: connections, imports, caches
            _post(client, fleet.gateway_url, body, calls=calls)
            loop.run(body)
        for _ in range(n):  # interleaved, so both see the same machine state
            started = time.perf_counter()
            _post(client, fleet.gateway_url, body, calls=calls)
            times["fleet"].append((time.perf_counter() - started) * 1000)
            total, model = loop.run(body)
            times["inline"].append(total * 1000)
            times["model"].append(model * 1000)
    return times


def bench_orchestration(fleet: Fleet, n: int) -> dict[str, Any]:
    body = request_body(["instant"])
    loop = InlineLoop.make(fleet)
    agentic = {k: percentiles(v) for k, v in _compare(fleet, loop, body, calls=1, n=n).items()}
    plain_body = {"model": "antwort-sim", "input": "hello [tokens=5]"}
    plain = {k: percentiles(v) for k, v in _compare(fleet, loop, plain_body, calls=0, n=n).items()}
    agentic_gap = agentic["fleet"]["p50"] - agentic["inline"]["p50"]
    plain_gap = plain["fleet"]["p50"] - plain["inline"]["p50"]
    return {
        "responses_each": n,
        "turns_per_response": TURNS_PER_RESPONSE,
        "request": body,
        "fleet_ms_per_response": agentic["fleet"],
        "in_process_ms_per_response": agentic["inline"],
        "model_ms_per_response_in_process": agentic["model"],
        "orchestration_ms_per_turn_p50": round(agentic_gap / TURNS_PER_RESPONSE, 2),
        "in_process_loop_ms_per_turn_p50": round(
            (agentic["inline"]["p50"] - agentic["model"]["p50"]) / TURNS_PER_RESPONSE, 2
        ),
        "plain_request": plain_body,
        "plain_fleet_ms_per_response": plain["fleet"],
        "plain_in_process_ms_per_response": plain["inline"],
        "tool_round_ms_p50": round(agentic_gap - plain_gap, 2),
        "note": "fleet: POST /v1/responses (not streamed) until its JSON arrives: gateway, "
        "inference queue, tool queue (chord), inference queue again. In process: the same "
        "advance_response/run_tool_call on the same Redis with calls and turns made directly; the "
        "in-process loop time per turn is its store writes, events and lease, the model's own "
        "time left out. tool_round: what the tool round trip (tool task, chord, the next turn's "
        "hop) adds over a plain one-turn response's fleet-vs-in-process gap.",
    }


# (b) ------------------------------------------------------------------------------------------


def _parallel_once(client: httpx.Client, url: str) -> tuple[float, float]:
    """(tool phase ms, whole response ms) of one streamed response calling the 8 tools."""
    body = request_body(PARALLEL, stream=True)
    started = time.perf_counter()
    last_call_done = first_result = None
    with client.stream("POST", f"{url}/v1/responses", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            kind = event.get("item", {}).get("type")
            if event["type"] == "response.output_item.done" and kind == "function_call":
                last_call_done = time.perf_counter()
            if event["type"] == "response.output_item.added" and kind == "function_call_output":
                first_result = first_result or time.perf_counter()
            if event["type"] == "response.completed":
                assert len(event["response"]["output"]) == 2 * len(PARALLEL) + 1
    assert last_call_done is not None and first_result is not None, "no tool phase seen"
    return (first_result - last_call_done) * 1000, (time.perf_counter() - started) * 1000


def bench_parallel(fleet: Fleet, n: int) -> dict[str, Any]:
    with httpx.Client(timeout=60.0) as client:
        for _ in range(3):
            _parallel_once(client, fleet.gateway_url)
        runs = [_parallel_once(client, fleet.gateway_url) for _ in range(n)]
    return {
        "responses": n,
        "tools": len(PARALLEL),
        "tool_seconds_each": PARALLEL_SECONDS,
        "tool_worker_threads": fleet.tool_threads,
        "tool_phase_ms": percentiles([phase for phase, _ in runs]),
        "response_ms": percentiles([whole for _, whole in runs]),
        "note": "tool phase: last function_call output_item.done → first function_call_output "
        "output_item.added on the SSE stream (the chord's callback turn adds the results).",
    }


# (c) ------------------------------------------------------------------------------------------


def _throughput(fleet: Fleet, responses: int, clients: int) -> float:
    """Tool calls per second while ``clients`` post ``responses`` 8-call responses."""
    body = request_body(IO_BOUND)
    local = threading.local()

    def one(_: int) -> None:
        if not hasattr(local, "client"):
            local.client = httpx.Client(timeout=300.0)
        _post(local.client, fleet.gateway_url, body, calls=len(IO_BOUND))

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, range(clients)))  # warm-up
        started = time.perf_counter()
        list(pool.map(one, range(responses)))
        elapsed = time.perf_counter() - started
    return responses * len(IO_BOUND) / elapsed


def bench_scaling(fleet: Fleet, responses: int, clients: int) -> dict[str, Any]:
    for proc in [p for p in fleet.procs if p.role.startswith("tools")]:
        fleet.stop_role(proc.role)
    rates: dict[str, float] = {}
    for count in (1, 2, 4):
        procs = [
            fleet.spawn(f"scale{count}-tools{i}", fleet.tool_worker_command(SCALING_THREADS))
            for i in range(count)
        ]
        fleet.wait_consuming("tools.internal", procs)
        rates[str(count)] = round(_throughput(fleet, responses, clients), 2)
        for proc in procs:
            fleet.stop_role(proc.role)
    base = rates["1"]
    return {
        "tool_seconds_each": IO_SECONDS,
        "threads_per_tool_worker": SCALING_THREADS,
        "calls_per_response": len(IO_BOUND),
        "responses_per_run": responses,
        "concurrent_clients": clients,
        "tool_calls_per_s": rates,
        "ideal_tool_calls_per_s": {
            k: round(int(k) * SCALING_THREADS / IO_SECONDS, 2) for k in rates
        },
        "speedup_vs_1": {k: round(v / base, 2) for k, v in rates.items()},
    }


# the section ----------------------------------------------------------------------------------


def run_section(
    quick: bool, settings: dict[str, str] | None = None
) -> tuple[dict[str, Any], list[str], list[tuple[str, str, str]]]:
    """Start the section's fleet, measure (a)-(c); (figures, fleet commands, table rows).

    ``settings``: ``ANTWORT_*`` settings of the fleet's processes (``bench.run --set``).
    """
    n_orch, n_par = (30, 10) if quick else (200, 40)
    responses, clients = (12, 6) if quick else (48, 6)
    fleet = Fleet(
        inference_workers=1,
        worker_threads=32,
        tool_workers=1,
        tool_threads=16,
        settings=dict(settings or {}),
    )
    commands = [f"{role}: {' '.join(argv)}" for role, argv in fleet.commands().items()]
    try:
        fleet.start()
        print(f"agentic fleet up (logs: {fleet.logdir})", flush=True)
        orchestration = bench_orchestration(fleet, n_orch)
        print("orchestration:", json.dumps(orchestration), flush=True)
        parallel = bench_parallel(fleet, n_par)
        print("parallel:", json.dumps(parallel), flush=True)
        scaling = bench_scaling(fleet, responses, clients)
        print("scaling:", json.dumps(scaling), flush=True)
    finally:
        fleet.stop()
    figures = {"orchestration": orchestration, "parallel": parallel, "scaling": scaling}
    return figures, commands, rows(figures)


def rows(figures: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(metric, target, measured) rows of the summary table."""
    orch, par, scale = figures["orchestration"], figures["parallel"], figures["scaling"]
    fleet_p = "/".join(f"{v:g}" for v in orch["fleet_ms_per_response"].values())
    inline_p = "/".join(f"{v:g}" for v in orch["in_process_ms_per_response"].values())
    rates = scale["tool_calls_per_s"]
    return [
        ("(6a) orchestration cost per agentic turn, fleet vs in-process, p50",
         f"< {ORCHESTRATION_TARGET_MS:g} ms", f"{orch['orchestration_ms_per_turn_p50']:g} ms"),
        ("(6a) response (2 turns + 1 instant tool), fleet p50/p90/p99 ms", "(info)", fleet_p),
        ("(6a) same loop in one process p50/p90/p99 ms", "(info)", inline_p),
        ("(6a) in-process loop cost per turn without the model, p50", "(info)",
         f"{orch['in_process_loop_ms_per_turn_p50']:g} ms"),
        ("(6a) fleet-vs-in-process gap added by the tool round (tool hop + chord + turn hop)",
         "(info)", f"{orch['tool_round_ms_p50']:g} ms"),
        ("(6b) tool phase, 8 parallel tools of 200 ms, p50/p90/p99",
         f"< {TOOL_PHASE_TARGET_MS:g} ms",
         "/".join(f"{v:g}" for v in par["tool_phase_ms"].values()) + " ms"),
        ("(6c) tool calls/s with 1/2/4 tool workers (4 threads, 500 ms I/O tools)",
         "near-linear", "/".join(f"{rates[k]:g}" for k in ("1", "2", "4"))
         + f" (speedup {'/'.join(f'{v:g}' for v in scale['speedup_vs_1'].values())})"),
    ]  # fmt: skip
