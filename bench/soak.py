"""Memory under a long mixed load: ``.venv/bin/python -m bench.soak [--minutes 15]``.

Starts its own fleet (see ``bench.fleet``: the machine's Redis db 14, the simulator at zero
delay, one gateway, one inference worker, one ``tools.internal`` worker with ``bench.tools``)
and keeps ``--clients`` clients busy with a mix of what users do, each result checked:

- a streamed answer, read to its terminal event;
- a sync create whose model calls the ``instant`` tool, then answers;
- a background create, polled to its end, then deleted;
- a slow background create, cancelled while it streams;
- a ``previous_response_id`` chain, up to 8 deep, then a new one;
- a WebSocket ``response.create``, read to its terminal event.

``--wide`` adds a ``tools.mcp`` worker with the example MCP server, a ``tools.sandbox`` worker,
and what the rest of the API sees (each checked too):

- MCP calls, each under one of ``--mcp-tokens`` authorization tokens (a session each, so the
  worker's bounded pool of sessions keeps closing and opening them);
- a ``code_interpreter`` run;
- a conversation: three turns, its items listed, one deleted, then the conversation;
- ``/v1/responses/compact`` and ``/v1/responses/input_tokens``;
- a ``store: false`` client-function round: the call, then its output sent with the items;
- a background stream dropped after a few events and resumed with ``starting_after``: no
  sequence number missing or repeated;
- a four-deep ``previous_response_id`` chain over one WebSocket, ``store`` true and false in turn.

Every process's RSS is sampled every ``--interval`` seconds. The first ``--warmup`` minutes are
left out (pools, caches and the allocator fill up there); over the rest each process gets its
growth and a least-squares slope in MB an hour. Writes ``bench/results/soak.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx
import psutil
from websockets.sync.client import ClientConnection, connect

from bench.fleet import Fleet
from bench.run import RESULTS, provenance

TERMINAL = ("response.completed", "response.failed", "response.incomplete")
INSTANT = [{"type": "internal", "name": "instant"}]
CHAIN_DEPTH = 8
INTERPRETER = [{"type": "code_interpreter", "container": {"type": "auto"}}]
LOOKUP = [
    {
        "type": "function",
        "name": "lookup",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
]


def slope_mb_per_hour(samples: Sequence[tuple[float, float]]) -> float:
    """The least-squares slope of ``(seconds, MB)`` samples, in MB an hour (0 for < 2)."""
    if len(samples) < 2:
        return 0.0
    mean_t = sum(t for t, _ in samples) / len(samples)
    mean_m = sum(m for _, m in samples) / len(samples)
    spread = sum((t - mean_t) ** 2 for t, _ in samples)
    if spread == 0:
        return 0.0
    covariance = sum((t - mean_t) * (m - mean_m) for t, m in samples)
    return round(covariance / spread * 3600, 2)


class Mix:
    """One client's loop over the user actions; outcomes are counted by action."""

    def __init__(self, url: str, deadline: float, outcomes: Counter[str], lock: threading.Lock):
        self.url = url
        self.deadline = deadline
        self.outcomes = outcomes
        self.lock = lock
        self.client = httpx.Client(base_url=url, timeout=60)
        self.socket_url = url.replace("http://", "ws://") + "/v1/responses"
        self.previous: str | None = None
        self.depth = 0

    def actions(self) -> list[Callable[[], bool]]:
        return [
            self.streamed,
            self.tool,
            self.background,
            self.cancelled,
            self.chain,
            self.websocket,
        ]

    def run(self) -> None:
        actions = self.actions()
        while time.time() < self.deadline:
            action = random.choice(actions)
            try:
                ok = action()
            except (httpx.HTTPError, OSError, ValueError, KeyError, TimeoutError):
                ok = False
            with self.lock:
                self.outcomes[f"{action.__name__} {'ok' if ok else 'failed'}"] += 1
        self.client.close()

    def streamed(self) -> bool:
        body = {"input": "hello [tokens=50]", "stream": True}
        with self.client.stream("POST", "/v1/responses", json=body) as answer:
            seen = list(sse_events(answer))
        return bool(seen) and seen[-1]["type"] == "response.completed"

    def tool(self) -> bool:
        body = {"input": "use instant", "tools": INSTANT}
        response = self.client.post("/v1/responses", json=body).json()
        kinds = [item["type"] for item in response["output"]]
        return response["status"] == "completed" and kinds == [
            "function_call",
            "function_call_output",
            "message",
        ]

    def background(self) -> bool:
        body = {"input": "later [tokens=20]", "background": True}
        response = self.client.post("/v1/responses", json=body).json()
        for _ in range(600):
            response = self.client.get(f"/v1/responses/{response['id']}").json()
            if response["status"] not in ("queued", "in_progress"):
                break
            time.sleep(0.02)
        self.client.delete(f"/v1/responses/{response['id']}")
        return bool(response["status"] == "completed")

    def cancelled(self) -> bool:
        body = {"input": "slow [tokens=200] [delay_ms=5]", "background": True}
        response = self.client.post("/v1/responses", json=body).json()
        time.sleep(0.1)
        cancelled = self.client.post(f"/v1/responses/{response['id']}/cancel").json()
        return cancelled["status"] in ("cancelled", "completed")

    def chain(self) -> bool:
        body: dict[str, Any] = {"input": f"turn {self.depth} [tokens=10]"}
        if self.previous is not None and self.depth < CHAIN_DEPTH:
            body["previous_response_id"] = self.previous
        else:
            self.depth = 0
        response = self.client.post("/v1/responses", json=body).json()
        self.previous, self.depth = response["id"], self.depth + 1
        return bool(response["status"] == "completed")

    def websocket(self) -> bool:
        with connect(self.socket_url, proxy=None, open_timeout=30) as ws:
            ws.send(json.dumps({"type": "response.create", "input": "socket [tokens=20]"}))
            return ended(ws)["type"] == "response.completed"


def sse_events(answer: httpx.Response) -> Iterator[dict[str, Any]]:
    """The events of a streamed answer, as they come."""
    for line in answer.iter_lines():
        if line.startswith("data: {"):
            yield json.loads(line[6:])


def ended(ws: ClientConnection) -> dict[str, Any]:
    """The event that ends a socket's ``response.create``: terminal, or an ``error``."""
    while True:
        event: dict[str, Any] = json.loads(ws.recv(timeout=60))
        if event["type"] in (*TERMINAL, "error"):
            return event


def answer_text(response: dict[str, Any]) -> str:
    """The text of a response's last output item, a message."""
    return str(response["output"][-1]["content"][0]["text"])


class WideMix(Mix):
    """:class:`Mix` and the rest of the API: MCP, the sandbox, conversations, compaction, token
    counts, ``store: false`` rounds, resumed streams and WebSocket chains."""

    def __init__(self, url: str, deadline: float, outcomes: Counter[str], lock: threading.Lock,
                 *, mcp_url: str, mcp_tokens: int):  # fmt: skip
        super().__init__(url, deadline, outcomes, lock)
        self.mcp_url = mcp_url
        self.mcp_tokens = mcp_tokens

    def actions(self) -> list[Callable[[], bool]]:
        return [
            *super().actions(),
            self.mcp,
            self.code,
            self.conversation,
            self.compact,
            self.count_tokens,
            self.unstored_round,
            self.resumed,
            self.socket_chain,
        ]

    def mcp(self) -> bool:
        server = {
            "type": "mcp",
            "server_label": "example",
            "server_url": self.mcp_url,
            "require_approval": "never",
            "authorization": f"token-{random.randrange(self.mcp_tokens)}",
        }
        body = {"input": "echo add text=hello a=2 b=40", "tools": [server]}
        response = self.client.post("/v1/responses", json=body).json()
        calls = {item["name"]: item for item in response["output"] if item["type"] == "mcp_call"}
        return bool(
            response["status"] == "completed"
            and calls["echo"]["output"] == "hello"
            and json.loads(calls["add"]["output"]) == {"sum": 42}
        )

    def code(self) -> bool:
        body = {"input": "please use code_interpreter code=```print(6*7)```", "tools": INTERPRETER}
        response = self.client.post("/v1/responses", json=body).json()
        return response["status"] == "completed" and answer_text(response) == "Tool results: 42"

    def conversation(self) -> bool:
        conversation = self.client.post("/v1/conversations", json={}).json()["id"]
        for turn in range(3):
            body = {"input": f"turn {turn} [tokens=10]", "conversation": conversation}
            if self.client.post("/v1/responses", json=body).json()["status"] != "completed":
                return False
        path = f"/v1/conversations/{conversation}"
        items = self.client.get(f"{path}/items", params={"limit": 100}).json()["data"]
        removed = self.client.delete(f"{path}/items/{items[0]['id']}")
        deleted = self.client.delete(path).json()
        return len(items) == 6 and removed.status_code == 200 and deleted["deleted"] is True

    def compact(self) -> bool:
        history = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 20}
            for i in range(8)
        ]
        body = {"model": "antwort-sim", "input": history}  # compact has no default model
        answer = self.client.post("/v1/responses/compact", json=body)
        return answer.status_code == 200 and bool(answer.json()["output"])

    def count_tokens(self) -> bool:
        body = {"input": "how many tokens is this " * 10, "tools": LOOKUP}
        answer = self.client.post("/v1/responses/input_tokens", json=body)
        return answer.status_code == 200 and answer.json()["input_tokens"] > 0

    def unstored_round(self) -> bool:
        asked: list[dict[str, Any]] = [{"role": "user", "content": "use lookup"}]
        body = {"input": asked, "tools": LOOKUP, "store": False}
        first = self.client.post("/v1/responses", json=body).json()
        (call,) = first["output"]
        result = {"type": "function_call_output", "call_id": call["call_id"], "output": "found"}
        body["input"] = [*asked, call, result]
        second = self.client.post("/v1/responses", json=body).json()
        return bool(
            call["type"] == "function_call"
            and second["status"] == "completed"
            and answer_text(second) == "Tool results: found"
        )

    def resumed(self) -> bool:
        body = {"input": "resume me [tokens=100] [delay_ms=2]", "background": True, "stream": True}
        with self.client.stream("POST", "/v1/responses", json=body) as answer:
            seen = list(itertools.islice(sse_events(answer), 5))  # then the connection drops
        response_id = seen[0]["response"]["id"]
        params = {"stream": "true", "starting_after": seen[-1]["sequence_number"]}
        with self.client.stream("GET", f"/v1/responses/{response_id}", params=params) as answer:
            seen += sse_events(answer)
        numbers = [event["sequence_number"] for event in seen]
        in_order = numbers == list(range(numbers[0], numbers[0] + len(numbers)))
        return in_order and seen[-1]["type"] == "response.completed"

    def socket_chain(self) -> bool:
        previous: str | None = None
        with connect(self.socket_url, proxy=None, open_timeout=30) as ws:
            for turn in range(4):
                create = {"type": "response.create", "input": f"turn {turn} [tokens=10]",
                          "store": turn % 2 == 0}  # fmt: skip
                if previous is not None:
                    create["previous_response_id"] = previous
                ws.send(json.dumps(create))
                event = ended(ws)
                if event["type"] != "response.completed":
                    return False
                previous = event["response"]["id"]
        return True


def sample(fleet: Fleet) -> dict[str, float]:
    """RSS in MB of every process of the fleet, by role (a role's children numbered)."""
    found: dict[str, float] = {}
    for role, pids in fleet.pids().items():
        for index, pid in enumerate(pids):
            label = role if index == 0 else f"{role} child {index}"
            try:
                found[label] = round(psutil.Process(pid).memory_info().rss / 2**20, 1)
            except psutil.NoSuchProcess:
                continue
    return found


def summary(samples: list[tuple[float, dict[str, float]]], warmup_s: float) -> dict[str, Any]:
    """Per process: RSS after the warm-up, at the end, its peak, and its slope after warm-up."""
    start = samples[0][0]
    kept = [(t - start, rss) for t, rss in samples if t - start >= warmup_s] or [
        (samples[-1][0] - start, samples[-1][1])
    ]
    labels = sorted({label for _, rss in samples for label in rss})
    return {
        label: {
            "after_warmup_mb": kept[0][1].get(label),
            "end_mb": kept[-1][1].get(label),
            "peak_mb": max(rss.get(label, 0.0) for _, rss in samples),
            "slope_mb_per_hour": slope_mb_per_hour(
                [(t, rss[label]) for t, rss in kept if label in rss]
            ),
        }
        for label in labels
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.soak")
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=2.0, help="minutes left out")
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--wide", action="store_true", help="the whole API (see above)")
    parser.add_argument("--mcp-tokens", type=int, default=300, help="with --wide")
    parser.add_argument("--out", help="default: soak.json, soak-wide.json with --wide")
    args = parser.parse_args(argv)
    args.out = args.out or ("soak-wide.json" if args.wide else "soak.json")
    extra = 1 if args.wide else 0
    fleet = Fleet(inference_workers=1, worker_threads=16, tool_workers=1, tool_threads=8,
                  mcp_workers=extra, sandbox_workers=extra)  # fmt: skip
    outcomes: Counter[str] = Counter()
    samples: list[tuple[float, dict[str, float]]] = []
    try:
        fleet.start()
        deadline = time.time() + args.minutes * 60
        lock = threading.Lock()
        mixes = [
            WideMix(fleet.gateway_url, deadline, outcomes, lock, mcp_url=fleet.mcp_url,
                    mcp_tokens=args.mcp_tokens)
            if args.wide
            else Mix(fleet.gateway_url, deadline, outcomes, lock)
            for _ in range(args.clients)
        ]  # fmt: skip
        clients = [threading.Thread(target=mix.run) for mix in mixes]
        for client in clients:
            client.start()
        while time.time() < deadline:
            samples.append((time.time(), sample(fleet)))
            time.sleep(min(args.interval, max(0.0, deadline - time.time())))
        for client in clients:
            client.join(120)
        samples.append((time.time(), sample(fleet)))
    finally:
        fleet.stop()
    result = {
        **provenance("bench.soak", fleet=fleet),
        "minutes": args.minutes,
        "warmup_minutes": args.warmup,
        "clients": args.clients,
        "wide": args.wide,
        **({"mcp_tokens": args.mcp_tokens} if args.wide else {}),
        "outcomes": dict(sorted(outcomes.items())),
        "rss": summary(samples, args.warmup * 60),
        "samples": [{"t": round(t - samples[0][0], 1), "rss_mb": rss} for t, rss in samples],
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"outcomes": result["outcomes"], "rss": result["rss"]}, indent=2))


if __name__ == "__main__":
    main()
