"""WebSocket mode vs HTTP for a tool-call loop: ``.venv/bin/python -m bench.websocket``.

Starts its own fleet (see ``bench.fleet``: the machine's Redis db 14, the simulator at zero delay,
one gateway, one inference worker) and runs the same agent loop both ways: a first response in
which the model calls ``get_weather``, then ``--turns`` continuations that each send the call's
output plus a user message that makes the model call it again.

- ``websocket``: one connection, ``response.create`` with ``store: false`` and
  ``previous_response_id`` (the connection's cached context);
- ``http``: ``POST /v1/responses`` with ``stream: true``, ``store: true`` and
  ``previous_response_id`` (the chain is read from Redis), on one keep-alive connection.

Per-turn time = send → terminal event. Writes ``bench/results/websocket.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

from bench.fleet import Fleet
from bench.run import RESULTS, provenance

TOOL = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
TERMINAL = ("response.completed", "response.failed", "response.incomplete")

Turn = Callable[[dict[str, Any]], dict[str, Any]]


def turn_body(previous: dict[str, Any] | None, index: int) -> dict[str, Any]:
    """The request of turn ``index``: the previous call's output and a new ask."""
    ask = {"role": "user", "content": f"get_weather city=City{index}"}
    if previous is None:
        return {"input": [ask], "tools": [TOOL]}
    [call] = [item for item in previous["output"] if item["type"] == "function_call"]
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
    return {"input": [output, ask], "tools": [TOOL], "previous_response_id": previous["id"]}


def websocket_turn(connection: ClientConnection) -> Turn:
    def run(body: dict[str, Any]) -> dict[str, Any]:
        connection.send(json.dumps({"type": "response.create", "store": False, **body}))
        while True:
            event = json.loads(connection.recv(timeout=60))
            if event["type"] in TERMINAL:
                final: dict[str, Any] = event["response"]
                return final
            if event["type"] == "error" and "status" in event:
                raise RuntimeError(event)

    return run


def http_turn(client: httpx.Client, base_url: str) -> Turn:
    def run(body: dict[str, Any]) -> dict[str, Any]:
        payload = {**body, "stream": True, "store": True}
        with client.stream("POST", f"{base_url}/v1/responses", json=payload) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    event = json.loads(line[6:])
                    if event["type"] in TERMINAL:
                        final: dict[str, Any] = event["response"]
                        return final
        raise RuntimeError("stream ended without a terminal event")

    return run


def loop(run: Turn, turns: int) -> list[float]:
    """Seconds per turn of one agent loop."""
    seconds: list[float] = []
    previous = None
    for index in range(turns + 1):
        start = time.perf_counter()
        previous = run(turn_body(previous, index))
        seconds.append(time.perf_counter() - start)
        if previous["status"] != "completed":
            raise RuntimeError(f"turn {index} ended {previous['status']}")
    return seconds


def summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    return {
        "turns": len(ms),
        "p50_ms": round(statistics.median(ms), 2),
        "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 2),
        "mean_ms": round(statistics.fmean(ms), 2),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.websocket")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--loops", type=int, default=5)
    args = parser.parse_args(argv)
    fleet = Fleet(inference_workers=1, worker_threads=8)
    fleet.start()
    try:
        socket_url = fleet.gateway_url.replace("http://", "ws://") + "/v1/responses"
        measured: dict[str, list[float]] = {"websocket": [], "http": []}
        with connect(socket_url, proxy=None) as ws, httpx.Client(timeout=60) as client:
            loop(websocket_turn(ws), 2)  # warm-up
            loop(http_turn(client, fleet.gateway_url), 2)
            for _ in range(args.loops):
                measured["websocket"] += loop(websocket_turn(ws), args.turns)
                measured["http"] += loop(http_turn(client, fleet.gateway_url), args.turns)
    finally:
        fleet.stop()
    result = {
        **provenance("bench.websocket", fleet=fleet),
        "per_turn": {mode: summary(seconds) for mode, seconds in measured.items()},
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "websocket.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["per_turn"], indent=2))


if __name__ == "__main__":
    main()
