"""Cost by conversation depth: ``.venv/bin/python -m bench.chains``.

Its own fleet (see ``bench.fleet``: the machine's Redis db 14, the simulator at zero delay, one
gateway, one inference worker, one ``tools.internal`` worker) and chains of ``--depth`` responses
linked by ``previous_response_id`` (``--via conversation``: each in one conversation, made
first, ``conversation`` naming it), one after another:

- ``plain``: each response one turn, a 50-word ask answered in 50 words;
- ``tool``: each response two turns, the model calls the built-in ``calculator`` and then
  answers with its result;

each created sync (``stream: false``) and streamed (``stream: true``, the body read to
``data: [DONE]``); ``--kinds tool`` runs the tool chains alone. The fleet's added time of a
response = its time through the fleet minus the model's own time for the same calls: the same
Chat Completions requests (the chain so far, as the worker builds them) sent to the simulator
directly, just before the response, so both see the same moment of the shared machine. Reported
per depth band (0-9 … 190-199) as p50 over ``--chains`` chains; the target: the band 190-199
costs at most 1.5 x the band 0-9. Beside it, the fleet's CPU time per response, a band's mean
(gateway, inference and tool workers: their processes' user + system time across the response,
which the kernel counts in 10 ms ticks; not Redis, which the machine's other users share, nor
the simulator): what the fleet does per response, which the machine's other load does not
stretch as it stretches wall time. And what Redis holds for it all at the end (``stored_mb``).
Writes ``bench/results/chains.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import psutil
import redis

from app.providers.translate import ModelRequest, build_chat_body
from bench.fleet import REDIS_URL, Fleet
from bench.run import RESULTS, provenance

WORDS = " ".join(f"w{i}" for i in range(44))
BAND = 10
KINDS = ("plain", "tool")
VIAS = ("previous", "conversation")
TARGET_RATIO = 1.5
CALCULATOR = {
    "type": "function",
    "name": "calculator",
    "parameters": {
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
}


class Http:
    """One keep-alive connection, read to the end of each body (the standard library's client)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
        self.path = parts.path.rstrip("/")

    def post(self, path: str, body: dict[str, Any]) -> bytes:
        payload = json.dumps(body)
        self.connection.request(
            "POST", self.path + path, payload, {"Content-Type": "application/json"}
        )
        answer = self.connection.getresponse()
        data = answer.read()
        if answer.status != 200:
            raise RuntimeError(f"HTTP {answer.status}: {data[:300]!r}")
        return data


def ask(kind: str, index: int) -> str:
    """A 50-word ask; a ``tool`` ask names the calculator and its expression."""
    if kind == "tool":
        return f"Step {index}: calculator expression={index}*7 {WORDS}"
    return f"Step {index}: {WORDS} [tokens=50]"


@dataclass
class Chain:
    """One chain's state: what the model sees so far, the last response."""

    kind: str
    stream: bool
    items: list[dict[str, Any]] = field(default_factory=list)
    previous: str | None = None
    conversation: str | None = None
    """The conversation every response is in (``--via conversation``), else None."""
    added_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)

    def model_calls(
        self, user: dict[str, Any], output: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The Chat Completions bodies the worker sends for this response's turns."""
        tools = [CALCULATOR] if self.kind == "tool" else []
        first = [*self.items, user]
        bodies = [build_chat_body(_model_request(first, tools))]
        if self.kind == "tool":
            calls = [i for i in output if i["type"] in ("function_call", "function_call_output")]
            bodies.append(build_chat_body(_model_request([*first, *calls], tools)))
        return bodies


def _model_request(items: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelRequest:
    return ModelRequest(model="antwort-sim", instructions=None, items=items, tools=tools)


def final_response(raw: bytes, stream: bool) -> dict[str, Any]:
    """The response object of a sync answer, or of a stream's terminal event."""
    if not stream:
        body: dict[str, Any] = json.loads(raw)
        return body
    for line in reversed(raw.split(b"\n")):
        if line.startswith(b"data: {") and b'"response.completed"' in line:
            final: dict[str, Any] = json.loads(line[6:])["response"]
            return final
    raise RuntimeError(f"no response.completed in the stream: {raw[-300:]!r}")


def cpu_seconds(procs: list[psutil.Process]) -> float:
    """The user + system CPU time of ``procs`` so far."""
    return sum(sum(proc.cpu_times()[:2]) for proc in procs)


def step(chain: Chain, index: int, fleet: Http, model: Http, procs: list[psutil.Process]) -> None:
    """One response of the chain, paired with the model's own calls for it."""
    user = {"type": "message", "role": "user", "content": ask(chain.kind, index)}
    body: dict[str, Any] = {"model": "antwort-sim", "input": [user], "stream": chain.stream}
    if chain.kind == "tool":
        body["tools"] = [{"type": "internal", "name": "calculator"}]
    if chain.conversation is not None:
        body["conversation"] = chain.conversation
    elif chain.previous is not None:
        body["previous_response_id"] = chain.previous
    cpu = cpu_seconds(procs)
    start = time.perf_counter()
    response = final_response(fleet.post("/v1/responses", body), chain.stream)
    total = time.perf_counter() - start
    chain.cpu_ms.append((cpu_seconds(procs) - cpu) * 1000)
    if response["status"] != "completed":
        raise RuntimeError(f"{chain.kind} step {index}: {response['status']}")
    calls = chain.model_calls(user, response["output"])
    start = time.perf_counter()
    for call in calls:
        model.post("/chat/completions", call)
    own = time.perf_counter() - start
    chain.added_ms.append((total - own) * 1000)
    chain.items += [user, *response["output"]]
    chain.previous = response["id"]


def bands(
    samples: list[list[float]],
    depth: int,
    *,
    name: str = "added_p50_ms",
    stat: Callable[[list[float]], float] = statistics.median,
) -> list[dict[str, Any]]:
    """p50 of the added time per band of depths, over all chains (or ``name``: ``stat``)."""
    rows = []
    for low in range(0, depth, BAND):
        values = [chain[d] for chain in samples for d in range(low, min(low + BAND, depth))]
        rows.append({"band": f"{low}-{low + BAND - 1}", name: round(stat(values), 2)})
    return rows


def run(  # noqa: PLR0913 - the fleet, the model, and what to run
    fleet_url: str,
    model_url: str,
    depth: int,
    chains: int,
    procs: list[psutil.Process],
    kinds: Sequence[str] = KINDS,
    *,
    via: str = "previous",
) -> dict[str, Any]:
    fleet, model = Http(fleet_url), Http(model_url)
    added: dict[str, list[list[float]]] = {}
    cpu: dict[str, list[list[float]]] = {}
    for _ in range(chains):
        for kind in kinds:
            for stream in (False, True):
                chain = Chain(kind=kind, stream=stream)
                if via == "conversation":
                    chain.conversation = json.loads(fleet.post("/v1/conversations", {}))["id"]
                for index in range(depth):
                    step(chain, index, fleet, model, procs)
                name = f"{kind} {'streamed' if stream else 'sync'}"
                added.setdefault(name, []).append(chain.added_ms)
                cpu.setdefault(name, []).append(chain.cpu_ms)
    results: dict[str, Any] = {}
    for name, samples in added.items():
        rows = bands(samples, depth)
        ratio = round(rows[-1]["added_p50_ms"] / rows[0]["added_p50_ms"], 2)
        # the kernel counts CPU time in ticks of 10 ms: a band's mean, not one response's
        cpu_rows = bands(cpu[name], depth, name="cpu_mean_ms", stat=statistics.mean)
        cpu_ratio = round(cpu_rows[-1]["cpu_mean_ms"] / cpu_rows[0]["cpu_mean_ms"], 2)
        results[name] = {
            "bands": rows,
            "ratio_last_to_first": ratio,
            "meets": ratio <= 1.5,
            "cpu_bands": cpu_rows,
            "cpu_ratio_last_to_first": cpu_ratio,
        }
    return results


def stored_mb(prefix: str) -> float:
    """What Redis holds under the fleet's keys (``MEMORY USAGE`` of each), in MB."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        total = sum(client.memory_usage(key) or 0 for key in client.scan_iter(f"{prefix}*", 1000))
    finally:
        client.close()
    return round(total / 1e6, 1)


def table(results: dict[str, Any], *, cpu: bool = False) -> str:
    names = list(results)
    bands_key, value, ratio = (
        ("cpu_bands", "cpu_mean_ms", "cpu_ratio_last_to_first")
        if cpu
        else ("bands", "added_p50_ms", "ratio_last_to_first")
    )
    lines = ["| depth | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for i, row in enumerate(next(iter(results.values()))[bands_key]):
        cells = [f"{results[n][bands_key][i][value]:.2f}" for n in names]
        lines.append(f"| {row['band']} | " + " | ".join(cells) + " |")
    lines.append("| last / first | " + " | ".join(
        f"{results[n][ratio]}" for n in names) + " |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.chains")
    parser.add_argument("--depth", type=int, default=200)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--via", choices=VIAS, default="previous", help="how responses link")
    parser.add_argument("--out", default="chains.json", help="file name in bench/results/")
    args = parser.parse_args(argv)
    fleet = Fleet(inference_workers=1, worker_threads=8, tool_workers=1, tool_threads=4)
    fleet.start()
    procs = [
        psutil.Process(pid) for role, pids in fleet.pids().items() if role != "sim" for pid in pids
    ]
    warm: Callable[[], dict[str, Any]] = lambda: run(  # noqa: E731
        fleet.gateway_url, f"{fleet.sim_url}/v1", 3, 1, procs, via=args.via
    )
    try:
        warm()
        results = run(
            fleet.gateway_url,
            f"{fleet.sim_url}/v1",
            args.depth,
            args.chains,
            procs,
            args.kinds,
            via=args.via,
        )
        stored = stored_mb(fleet.prefix)
    finally:
        fleet.stop()
    record = {
        **provenance("bench.chains", fleet=fleet),
        "measure": "fleet time minus the same model calls made directly, p50 ms per depth band",
        "cpu_measure": "gateway + workers' CPU time (user + system) per response, mean ms per band",
        "via": args.via,
        "target": f"band {args.depth - BAND}-{args.depth - 1} <= {TARGET_RATIO} x band 0-9",
        "results": results,
        "stored_mb": stored,
        "stored_measure": "MEMORY USAGE of every key of the fleet after the runs (warm-up too)",
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / args.out).write_text(json.dumps(record, indent=2) + "\n")
    print(table(results))
    print()
    print(table(results, cpu=True))
    print(f"\nRedis holds {stored} MB under the fleet's keys")


if __name__ == "__main__":
    main()
