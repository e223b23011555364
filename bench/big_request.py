"""A large create and everyone else: does one client's big request stall its gateway process?

One gateway process and one inference worker (16 threads) on a private fleet with two tenants' keys.
Tenant B probes the gateway all along: ``/healthz`` in a loop (a 10 ms rest between two) and, on a
connection of its own, a streamed response (``hello [tokens=5]``) one after another, timed to its
first event; and Redis itself, a ``PING`` every 10 ms. First on the idle gateway for ``--seconds``;
then tenant A posts ``--requests`` background creates one after another, each of ``--items``
one-word user messages (450,000: a 15.8 MB body, under the 16 MiB body limit), and cancels each once
it is stored (what the worker then does with it is not the point), while B probes on (``--parts``:
each create's input is one user message of ``--items`` one-word text parts instead; 400,000: 15.2
MB; ``--wide PARTS``: user messages of PARTS parts each, ``--items`` parts in all). ``--runs``:
A's responses run to their end instead (polled), so the inference worker takes them too;
``--continues``: then a short response continues each (its history is the long one). The
figures are B's: its ``/healthz`` and first-event latencies, idle and while A's creates were taken;
and each process's peak RSS meanwhile, Redis's longest calls (its slow log: Redis serves no one else
during a call) and the turns the sweeper ran again because their lease lapsed (the workers' logs).
``--at-once K``: A's creates come from K clients at once. ``--b-large N``: a second after A's begin,
B posts N large creates of its own (the same body), one after another, each cancelled once stored:
how long B's wait for its process's large-body place, behind A's (timed to the answer).
``--conversation``: A's creates belong to one conversation (made first) and run to their end, so
each one's final write adds its items to the conversation. ``--websocket``: A's creates are
``response.create`` messages instead, each client on a WebSocket of its own, and run to their end
(streamed): what the gateway keeps of a large message while it waits for the place and while its
response runs. ``--sync``: A's creates are answered when their responses are done (the gateway waits
for each). ``--schema PROPERTIES``: A's input is one short message instead, and its ``text.format``
a JSON schema of PROPERTIES string properties (150,000: 12.2 MB), which every answer, event and
record of the response echoes.

    .venv/bin/python -m bench.big_request            # writes bench/results/big-request.json
"""

from __future__ import annotations

import argparse
import json
import platform
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import redis
from websockets.sync.client import connect

from bench.fairness import TenantFleet
from bench.fleet import REDIS_URL, RssSampler, SlowLog
from bench.stats import percentiles

RESULTS = Path(__file__).resolve().parent / "results"
A = {"Authorization": "Bearer ka", "Content-Type": "application/json"}
B = {"Authorization": "Bearer kb"}


class Probes:
    """Tenant B's probes, in two threads, until stopped; each probe's latency in ms."""

    def __init__(self, url: str):
        self.url = url
        self.health: list[float] = []
        self.first_event: list[float] = []
        self.redis_ping: list[float] = []
        self.failed = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._healthz, daemon=True),
            threading.Thread(target=self._streams, daemon=True),
            threading.Thread(target=self._redis, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _healthz(self) -> None:
        with httpx.Client(timeout=60.0) as client:
            while not self._stop.is_set():
                start = time.perf_counter()
                try:
                    client.get(f"{self.url}/healthz").raise_for_status()
                    self.health.append((time.perf_counter() - start) * 1000)
                except httpx.HTTPError:
                    self.failed += 1
                time.sleep(0.01)

    def _redis(self) -> None:
        """Redis's own answer to another client (a ``PING``), every 10 ms."""
        client = redis.Redis.from_url(REDIS_URL)
        while not self._stop.is_set():
            start = time.perf_counter()
            try:
                client.ping()
                self.redis_ping.append((time.perf_counter() - start) * 1000)
            except redis.RedisError:  # BUSY: a script ran past busy-reply-threshold
                self.failed += 1
            time.sleep(0.01)

    def _streams(self) -> None:
        body = {"model": "antwort-sim", "input": "hello [tokens=5]", "stream": True}
        with httpx.Client(timeout=60.0, headers=B) as client:
            while not self._stop.is_set():
                start = time.perf_counter()
                first = None
                try:
                    with client.stream("POST", f"{self.url}/v1/responses", json=body) as answer:
                        answer.raise_for_status()
                        for line in answer.iter_lines():
                            if first is None and line.startswith("data:"):
                                first = (time.perf_counter() - start) * 1000
                except httpx.HTTPError:
                    self.failed += 1
                if first is not None:
                    self.first_event.append(first)

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)
        return {
            "healthz_ms": percentiles(self.health) | {"max": round(max(self.health), 1)},
            "first_event_ms": percentiles(self.first_event)
            | {"max": round(max(self.first_event), 1)},
            "redis_ping_ms": percentiles(self.redis_ping) | {"max": round(max(self.redis_ping), 1)},
            "probes": {"healthz": len(self.health), "streams": len(self.first_event)},
            "failed": self.failed,
        }


def large_body(
    items: int,
    conversation: str | None = None,
    *,
    sync: bool = False,
    per_message: int = 0,
    schema: int = 0,
) -> bytes:
    """A background create of ``items`` one-word user messages, as JSON (in ``conversation``).

    ``sync``: a create answered when its response is done instead; ``per_message``: user
    messages of that many one-word text parts instead, ``items`` parts in all; ``schema``: one
    short message, and a ``text.format`` JSON schema of that many string properties.
    """
    body: dict[str, Any] = {
        "model": "antwort-sim",
        "input": "Answer in JSON." if schema else large_input(items, per_message=per_message),
        "background": not sync,
    }
    if schema:
        properties = {
            f"field_{i:06d}_name": {"type": "string", "description": "a field of the record"}
            for i in range(schema)
        }
        body["text"] = {
            "format": {
                "type": "json_schema",
                "name": "record",
                "schema": {"type": "object", "properties": properties},
            }
        }
    if conversation:
        body["conversation"] = conversation
    return json.dumps(body).encode()


def large_input(items: int, *, per_message: int = 0) -> list[dict[str, Any]]:
    """``items`` one-word user messages, or (``per_message``) messages of that many text parts.

    ``items`` one-word parts in all, then (the last message holds what is left over).
    """
    if per_message:
        starts = range(0, items, per_message)
        return [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}] * count}
            for count in (min(per_message, items - start) for start in starts)
        ]
    return [{"role": "user", "content": "hi"} for _ in range(items)]


def big_creates(
    url: str,
    requests: int,
    body: bytes,
    at_once: int = 1,
    *,
    runs: bool = False,
    continues: bool = False,
) -> dict[str, Any]:
    """A's creates of ``body``, one after another (``at_once`` clients each); each one's time.

    ``runs``: each response runs to its end (polled) rather than being cancelled once stored;
    ``continues``: then a short response continues it (``previous_response_id``: its history is
    the long input and the answer), run to its end too.
    """
    seconds: list[float] = []
    ended: list[float] = []
    statuses: list[str] = []

    def one_client() -> None:
        with httpx.Client(timeout=600.0, headers=A) as client:
            for _ in range(requests):
                start = time.perf_counter()
                answer = client.post(f"{url}/v1/responses", content=body)
                seconds.append(round(time.perf_counter() - start, 2))
                answer.raise_for_status()
                response_id = answer.json()["id"]
                if answer.json()["status"] not in ("queued", "in_progress"):  # a sync create's
                    statuses.append(answer.json()["status"])
                    ended.append(seconds[-1])
                    continue
                if not (runs or continues):
                    client.post(f"{url}/v1/responses/{response_id}/cancel")
                    time.sleep(0.5)
                    continue
                statuses.append(_ended(client, url, response_id))
                if continues:
                    more = {"model": "antwort-sim", "input": "and then?", "background": True}
                    more["previous_response_id"] = response_id
                    answer = client.post(f"{url}/v1/responses", json=more)
                    answer.raise_for_status()
                    statuses.append("then " + _ended(client, url, answer.json()["id"]))
                ended.append(round(time.perf_counter() - start, 2))

    clients = [threading.Thread(target=one_client) for _ in range(at_once)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    figures: dict[str, Any] = {"body_mb": round(len(body) / 1e6, 2)}
    figures["create_seconds"] = sorted(seconds)
    if runs or continues:
        figures |= {"ended_after_seconds": sorted(ended), "statuses": statuses}
    return figures


def big_messages(
    url: str, requests: int, items: int, at_once: int = 1, *, per_message: int = 0
) -> dict[str, Any]:
    """A's creates as WebSocket messages, one after another on ``at_once`` sockets; their times.

    Each is timed to its ``response.created`` (made a response) and to its end.
    """
    message = json.dumps(
        {
            "type": "response.create",
            "model": "antwort-sim",
            "input": large_input(items, per_message=per_message),
        }
    )
    seconds: list[float] = []
    ended: list[float] = []
    statuses: list[str] = []
    socket_url = url.replace("http://", "ws://", 1) + "/v1/responses"

    def one_client() -> None:
        headers = {"Authorization": A["Authorization"]}
        with connect(socket_url, additional_headers=headers, max_size=None) as socket:
            for _ in range(requests):
                start = time.perf_counter()
                socket.send(message)
                while True:
                    event = json.loads(socket.recv(timeout=600))
                    if event["type"] == "response.created":
                        seconds.append(round(time.perf_counter() - start, 2))
                    if event["type"] in ENDS:
                        statuses.append(event.get("response", {}).get("status", event["type"]))
                        ended.append(round(time.perf_counter() - start, 2))
                        break

    clients = [threading.Thread(target=one_client) for _ in range(at_once)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    return {
        "message_mb": round(len(message) / 1e6, 2),
        "create_seconds": sorted(seconds),
        "ended_after_seconds": sorted(ended),
        "statuses": statuses,
    }


ENDS = {"response.completed", "response.failed", "response.incomplete", "error"}
"""The events after which a WebSocket create's message is answered."""


def b_large_creates(url: str, count: int, items: int, *, after: float = 1.0) -> list[float]:
    """B's large creates, ``after`` seconds from now, one after another: each one's time."""
    body = large_body(items)
    seconds: list[float] = []
    time.sleep(after)
    with httpx.Client(timeout=600.0, headers={**B, "Content-Type": "application/json"}) as client:
        for _ in range(count):
            start = time.perf_counter()
            answer = client.post(f"{url}/v1/responses", content=body)
            seconds.append(round(time.perf_counter() - start, 2))
            answer.raise_for_status()
            client.post(f"{url}/v1/responses/{answer.json()['id']}/cancel")
    return seconds


def _ended(client: httpx.Client, url: str, response_id: str) -> str:
    """The response's status once it ended (polled), with its error's code and message."""
    while True:
        found = client.get(f"{url}/v1/responses/{response_id}").json()
        if found["status"] not in ("queued", "in_progress"):
            error = found.get("error") or {}
            return " ".join([found["status"], *error.values()])
        time.sleep(0.5)


class SlowCalls:
    """Redis's calls of ``SLOWER_THAN_US`` or longer while in the block, longest first.

    Redis serves no other client during a call, so the longest is how long every tenant's
    events and turns, fleet-wide, waited at once.
    """

    SLOWER_THAN_US = 5000

    def __init__(self) -> None:
        self._log = SlowLog(redis.Redis.from_url(REDIS_URL), slower_than_us=self.SLOWER_THAN_US)
        self.calls: list[dict[str, Any]] = []

    def __enter__(self) -> SlowCalls:
        self._log.start()
        return self

    def __exit__(self, *exc: object) -> None:
        entries = self._log.stop()
        self.calls = [
            {
                "ms": round(entry["duration"] / 1000, 1),
                "command": " ".join(entry["command"].decode(errors="replace").split()[:2])[:60],
            }
            for entry in sorted(entries, key=lambda entry: -entry["duration"])[:10]
        ]


def run(args: argparse.Namespace) -> dict[str, Any]:
    per_message = args.items if args.parts else args.wide
    fleet = TenantFleet(inference_workers=1, worker_threads=16)
    fleet.start()
    try:
        idle = Probes(fleet.gateway_url)
        time.sleep(args.seconds)
        idle_figures = idle.stop()
        loaded = Probes(fleet.gateway_url)
        b_large: list[float] = []
        b_thread = threading.Thread(
            target=lambda: b_large.extend(
                b_large_creates(fleet.gateway_url, args.b_large, args.items)
            )
        )
        conversation = None
        if args.conversation:
            made = httpx.post(f"{fleet.gateway_url}/v1/conversations", headers=A, json={})
            conversation = made.raise_for_status().json()["id"]
        with RssSampler(fleet, interval=0.05) as rss, SlowCalls() as slow:
            if args.b_large:
                b_thread.start()
            if args.websocket:
                creates = big_messages(
                    fleet.gateway_url,
                    args.requests,
                    args.items,
                    args.at_once,
                    per_message=per_message,
                )
            else:
                creates = big_creates(
                    fleet.gateway_url,
                    args.requests,
                    large_body(
                        args.items,
                        conversation,
                        sync=args.sync,
                        per_message=per_message,
                        schema=args.schema,
                    ),
                    args.at_once,
                    runs=args.runs or bool(conversation) or args.sync,
                    continues=args.continues,
                )
            if args.b_large:
                b_thread.join()
        loaded_figures = loaded.stop()
    finally:
        fleet.stop()
    run_again = sum(
        log.read_text(errors="replace").count("lost its worker")
        for log in fleet.logdir.glob("worker*.log")
    )
    return {
        "idle": idle_figures,
        "while_big_creates": loaded_figures,
        "big_creates": creates,
        "b_large_create_seconds": b_large,
        "peak_rss_mb": rss.peaks_mb(),
        "redis_slowest_calls": slow.calls,
        "turns_run_again": run_again,
        "commands": fleet.commands(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.big_request", description=__doc__)
    parser.add_argument("--items", type=int, default=450_000)
    parser.add_argument("--requests", type=int, default=3, help="creates of each A client")
    parser.add_argument("--at-once", type=int, default=1, help="A's clients, all at once")
    parser.add_argument("--seconds", type=float, default=5.0, help="the idle probes' time")
    parser.add_argument(
        "--runs", action="store_true", help="A's responses run to their end (not cancelled)"
    )
    parser.add_argument(
        "--continues",
        action="store_true",
        help="then a short response continues each (previous_response_id), run to its end",
    )
    parser.add_argument(
        "--b-large", type=int, default=0, help="B's large creates while A's go (timed)"
    )
    parser.add_argument(
        "--conversation",
        action="store_true",
        help="A's creates belong to one conversation and run to their end",
    )
    parser.add_argument(
        "--sync",
        action="store_true",
        help="A's creates are answered when their responses are done (not background)",
    )
    parser.add_argument(
        "--websocket",
        action="store_true",
        help="A's creates are WebSocket messages (a socket a client), run to their end",
    )
    parser.add_argument(
        "--parts",
        action="store_true",
        help="A's input is one user message of --items one-word text parts",
    )
    parser.add_argument(
        "--wide",
        type=int,
        default=0,
        metavar="PARTS",
        help="A's input is user messages of PARTS one-word text parts each, --items parts in all",
    )
    parser.add_argument(
        "--schema",
        type=int,
        default=0,
        metavar="PROPERTIES",
        help="A's input is one message, its text.format a JSON schema of PROPERTIES properties",
    )
    parser.add_argument("--out", default="big-request.json")
    args = parser.parse_args(argv)
    result = {"machine": {"python": platform.python_version()}, "args": vars(args), **run(args)}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / args.out).write_text(json.dumps(result, indent=2) + "\n")
    for phase in ("idle", "while_big_creates"):
        figures = result[phase]
        print(
            f"{phase}: /healthz p50 {figures['healthz_ms']['p50']} ms, p99 "
            f"{figures['healthz_ms']['p99']} ms, max {figures['healthz_ms']['max']} ms; "
            f"B's first event p50 {figures['first_event_ms']['p50']} ms, max "
            f"{figures['first_event_ms']['max']} ms; Redis PING max "
            f"{figures['redis_ping_ms']['max']} ms; failed {figures['failed']}"
        )
    print(f"A's creates: {result['big_creates']}; peak RSS MB: {result['peak_rss_mb']}")
    if args.b_large:
        print(f"B's large creates (seconds each): {result['b_large_create_seconds']}")
    print(f"Redis's slowest calls: {result['redis_slowest_calls'][:3]}")
    print(f"turns the sweeper ran again (their lease lapsed): {result['turns_run_again']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
