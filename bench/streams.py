"""Open streams on one gateway process: ``.venv/bin/python -m bench.streams --counts 1000,10000``.

Its own fleet (see ``bench.fleet``: the machine's Redis db 14, one gateway process, one inference
worker with a thread per response). For each count N: ``N / --per-response`` background
responses whose model waits ``--ramp-seconds`` before its first token and then sends ``--tokens``
tokens ``--token-ms`` apart; then ``--procs`` client processes (asyncio, hand-spoken HTTP/1.1,
loopback) open N SSE streams on them (``GET /v1/responses/{id}?stream=true``: replay, then live)
and hold ``--websockets`` idle WebSockets besides (each after ``--websocket-turns`` responses of
its own; none by default), while this process asks ``/healthz`` every
50 ms and samples the gateway's RSS and CPU. Every stream is checked: sequence numbers 0, 1, 2 …
without a gap or a repeat, ``response.completed`` last, then ``data: [DONE]``. A WebSocket counts
as held when it still answers a ping at the end. The relay's cost per event = the gateway's CPU
time over the events it delivered. Bounded: each run ends after ``--max-seconds``. Writes
``bench/results/streams-scale.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config import Settings
from bench.clients import Connection, StreamResult, _Check, address
from bench.fleet import Fleet, RssSampler, add_settings_option, raise_nofile
from bench.run import RESULTS, provenance
from bench.stats import percentiles


@dataclass
class ScaleFleet(Fleet):
    """The benchmark's fleet with a gateway sized for ``connections``."""

    connections: int = 4000

    def env(self) -> dict[str, str]:
        env = super().env()
        env["ANTWORT_GATEWAY_CONNECTIONS"] = str(self.connections)
        # idle WebSockets held on purpose, up to --max-seconds: not closed as idle before that
        env["ANTWORT_WEBSOCKET_IDLE_SECONDS"] = "3600"
        # A per-client-address connection cap, where the edge has one: every client here is
        # 127.0.0.1, so the cap is set as high as the gateway's connections.
        for name in Settings.model_fields:
            if "per_client" in name or "per_address" in name:
                env[f"ANTWORT_{name.upper()}"] = str(self.connections)
        return env


# client side (a process of its own) -----------------------------------------------------------


async def follow(url: str, response_id: str, seconds: float) -> StreamResult:
    """Read one response's stream to its end and check every event."""
    host, port = address(url)
    result = StreamResult(t_start=time.monotonic())
    check = _Check(result)
    connection = Connection(host, port)
    try:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
        connection.reader, connection.writer = reader, writer
        writer.write(
            f"GET /v1/responses/{response_id}?stream=true HTTP/1.1\r\nHost: {host}\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        await asyncio.wait_for(_read(connection, result, check), seconds)
    except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
        result.error = result.error or f"{type(exc).__name__}: {exc}"
    finally:
        connection.close()
        result.t_end = time.monotonic()
    return result


async def _read(connection: Connection, result: StreamResult, check: _Check) -> None:
    assert connection.reader is not None
    head = await connection.reader.readuntil(b"\r\n\r\n")
    result.t_headers = time.monotonic()
    if b" 200 " not in head.split(b"\r\n", 1)[0]:
        result.error = head.split(b"\r\n", 1)[0].decode()
        return
    buffer = b""
    async for chunk in Connection._chunked(connection.reader):
        buffer += chunk
        if b"\n\n" in buffer:
            *frames, buffer = buffer.split(b"\n\n")
            if not check.frames(frames):
                return
    check.finish()


TURN = json.dumps(
    {"type": "response.create", "input": "Hi [tokens=20] [delay_ms=0] [ttft_ms=0]", "store": True}
)
"""A WebSocket's turn before it idles (``--websocket-turns``): a short answer, all at once."""


async def hold_websocket(
    url: str, seconds: float, stop: asyncio.Event, turns: int = 0
) -> tuple[bool, float | None]:
    """Open a WebSocket (it offers permessage-deflate, as the Agents SDK's does), take ``turns``
    responses on it, then hold it idle until ``stop``: whether every turn completed and it still
    answers a ping, and when its turns were done."""
    from websockets.asyncio.client import connect

    try:
        async with connect(url, proxy=None, open_timeout=seconds, ping_interval=None) as ws:
            for _ in range(turns):
                await ws.send(TURN)
                while (kind := json.loads(await ws.recv())["type"]) != "response.completed":
                    if kind in ("error", "response.failed", "response.incomplete"):
                        return False, None
            done = time.monotonic()
            await stop.wait()
            await asyncio.wait_for(await ws.ping(), 30)
            return True, done
    except Exception:  # a hold that failed in any way is the result
        return False, None


async def client(args: argparse.Namespace, ids: list[str]) -> dict[str, Any]:
    stop = asyncio.Event()
    ws_url = args.url.replace("http://", "ws://") + "/v1/responses"
    sockets = [
        asyncio.ensure_future(hold_websocket(ws_url, args.seconds, stop, args.websocket_turns))
        for _ in range(args.websockets)
    ]
    streams = await asyncio.gather(
        *(follow(args.url, ids[i % len(ids)], args.seconds) for i in range(args.count))
    )
    stop.set()
    held = await asyncio.gather(*sockets)
    return {
        "streams": [
            [r.ok, r.events, r.error, r.t_start, r.t_headers, r.t_first_event, r.t_end]
            for r in streams
        ],
        "websockets_held": sum(ok for ok, _ in held),
        "websocket_turns_done": [done for _, done in held if done is not None],
        "client_cpu_s": round(time.process_time(), 2),
    }


# the driver -----------------------------------------------------------------------------------


class HealthProbe(threading.Thread):
    """``/healthz`` every 50 ms on a keep-alive connection; latencies in ms."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        host, port = address(url)
        self.connection = http.client.HTTPConnection(host, port, timeout=30)
        self.latencies: list[float] = []
        self.times: list[float] = []  # time.monotonic() at each sample's start
        self.failures = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.05):
            start = time.perf_counter()
            self.times.append(time.monotonic())
            try:
                self.connection.request("GET", "/healthz")
                answer = self.connection.getresponse()
                answer.read()
                ok = answer.status == 200
            except (OSError, http.client.HTTPException):
                self.connection.close()
                ok = False
            self.latencies.append((time.perf_counter() - start) * 1000)
            self.failures += not ok


def create_responses(fleet: Fleet, n: int, args: argparse.Namespace) -> list[str]:
    directives = f"[tokens={args.tokens}] [delay_ms={args.token_ms}] [ttft_ms={args.ramp_ms}]"
    body = json.dumps({"input": f"Hold on {directives}", "background": True})
    host, port = address(fleet.gateway_url)
    connection = http.client.HTTPConnection(host, port, timeout=30)
    ids = []
    for _ in range(n):
        connection.request("POST", "/v1/responses", body, {"Content-Type": "application/json"})
        answer = connection.getresponse()
        ids.append(json.loads(answer.read())["id"])
    connection.close()
    return ids


def run_clients(
    fleet: Fleet, count: int, ids_file: Path, args: argparse.Namespace
) -> list[dict[str, Any]]:
    procs = []
    for index in range(args.procs):
        share = count // args.procs + (index < count % args.procs)
        sockets = args.websockets // args.procs + (index < args.websockets % args.procs)
        argv = [sys.executable, "-m", "bench.streams", "client", "--url", fleet.gateway_url,
                "--ids", str(ids_file), "--count", str(share), "--websockets", str(sockets),
                "--seconds", str(args.max_seconds),
                "--websocket-turns", str(args.websocket_turns)]  # fmt: skip
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True))
    outputs = []
    for proc in procs:
        out, _ = proc.communicate(timeout=args.max_seconds + 60)
        outputs.append(json.loads(out))
    return outputs


def summarise(
    count: int, outputs: list[dict[str, Any]], probe: HealthProbe, events_from: float
) -> dict[str, Any]:
    rows = [row for out in outputs for row in out["streams"]]
    ok = [r for r in rows if r[0]]
    edges = sorted([(r[4], 1) for r in rows if r[4]] + [(r[6], -1) for r in rows if r[4]])
    open_now = peak = 0
    for _, delta in edges:
        open_now += delta
        peak = max(peak, open_now)
    return {
        "streams": count,
        "completed_in_order": len(ok),
        "failed": len(rows) - len(ok),
        "errors": sorted({str(r[2]) for r in rows if not r[0]})[:10],
        "peak_open_streams": peak,
        "events_delivered": sum(r[1] for r in rows),
        "websockets_held": sum(out["websockets_held"] for out in outputs),
        # when the WebSockets' own turns were done, in s from the streams' first token
        "websocket_turns_done_s": _seconds_from(
            events_from, [at for out in outputs for at in out["websocket_turns_done"]]
        ),
        "healthz_ms": healthz_phase(probe),
        "healthz_samples": len(probe.latencies),
        # the streams opening (the model silent) and then the events flowing, apart
        "healthz_ms_opening": healthz_phase(probe, before=events_from),
        "healthz_ms_events": healthz_phase(probe, after=events_from),
        "healthz_slow": [  # samples over 50 ms: when (s from the first token), how long (ms)
            [round(at - events_from, 2), round(ms)]
            for ms, at in zip(probe.latencies, probe.times, strict=True)
            if ms > 50
        ],
        "healthz_failures": probe.failures,
        "client_cpu_s": sum(out["client_cpu_s"] for out in outputs),
    }


def _seconds_from(origin: float, times: list[float]) -> dict[str, float]:
    """``times`` as seconds from ``origin``: first, median, last."""
    if not times:
        return {}
    ordered = sorted(at - origin for at in times)
    middle = ordered[len(ordered) // 2]
    return {"first": round(ordered[0], 2), "p50": round(middle, 2), "last": round(ordered[-1], 2)}


def healthz_phase(
    probe: HealthProbe, *, before: float = float("inf"), after: float = 0.0
) -> dict[str, float]:
    """The probe's latencies of the samples started in ``[after, before)``."""
    latencies = [
        ms for ms, at in zip(probe.latencies, probe.times, strict=True) if after <= at < before
    ]
    return percentiles(latencies) | {"max": round(max(latencies), 2)} if latencies else {}


def run_count(fleet: Fleet, count: int, args: argparse.Namespace) -> dict[str, Any]:
    events_from = time.monotonic() + args.ramp_ms / 1000  # the first token, give or take
    ids = create_responses(fleet, max(1, count // args.per_response), args)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(ids, handle)
    probe = HealthProbe(fleet.gateway_url)
    start = time.monotonic()
    with RssSampler(fleet) as sampler:
        probe.start()
        try:
            outputs = run_clients(fleet, count, Path(handle.name), args)
        finally:
            probe.stopped.set()
            probe.join()
            os.unlink(handle.name)
    result = summarise(count, outputs, probe, events_from)
    gateway_cpu = sampler.cpu.get("gateway (gevent worker)", 0.0)
    events = max(1, result["events_delivered"])
    result |= {
        "websockets": args.websockets,
        "websocket_turns": args.websocket_turns,
        "elapsed_s": round(time.monotonic() - start, 1),
        "gateway_worker_rss_peak_mb": sampler.peaks_mb().get("gateway (gevent worker)"),
        "gateway_worker_cpu_s": gateway_cpu,
        "gateway_cpu_us_per_event": round(gateway_cpu * 1e6 / events, 1),
    }
    return result


def driver(args: argparse.Namespace) -> None:
    raise_nofile()
    counts = [int(c) for c in args.counts.split(",")]
    top = max(counts) + args.websockets
    fleet = ScaleFleet(
        settings=dict(args.settings),
        inference_workers=1,
        worker_threads=max(8, top // args.per_response + 8),
        connections=top + 1000,
    )
    fleet.start()
    try:
        runs = [run_count(fleet, count, args) for count in counts]
    finally:
        fleet.stop()
    record = {
        **provenance("bench.streams", fleet=fleet),
        "gateway_env": {k: v for k, v in fleet.env().items() if Fleet.env(fleet).get(k) != v},
        "runs": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / args.out).write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(runs, indent=2))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.streams")
    sub = parser.add_subparsers(dest="mode")
    run = sub.add_parser("run")
    run.add_argument("--counts", default="1000,10000")
    run.add_argument("--websockets", type=int, default=10_000)
    run.add_argument("--websocket-turns", type=int, default=0, help="responses on each first")
    run.add_argument("--per-response", type=int, default=100)
    run.add_argument("--procs", type=int, default=4)
    run.add_argument("--tokens", type=int, default=20)
    run.add_argument("--token-ms", type=int, default=1000)
    run.add_argument("--ramp-ms", type=int, default=20_000)
    run.add_argument("--max-seconds", type=float, default=240.0)
    run.add_argument("--out", default="streams-scale.json", help="file in bench/results/")
    add_settings_option(run)
    one = sub.add_parser("client")
    one.add_argument("--url", required=True)
    one.add_argument("--ids", required=True)
    one.add_argument("--count", type=int, required=True)
    one.add_argument("--websockets", type=int, default=0)
    one.add_argument("--seconds", type=float, default=240.0)
    one.add_argument("--websocket-turns", type=int, default=0)
    args = parser.parse_args(argv if argv is not None else (sys.argv[1:] or ["run"]))
    if args.mode == "client":
        raise_nofile()
        ids = json.loads(Path(args.ids).read_text())
        print(json.dumps(asyncio.run(client(args, ids))))
    else:
        driver(args)


if __name__ == "__main__":
    main()
