"""Load generators, run in their own process: ``python -m bench.clients MODE --url … [options]``.

Prints one JSON object on stdout. Every stream is checked: the last event must be
``response.completed`` (then ``data: [DONE]``) and the ``sequence_number`` of its events must run
0, 1, 2, … without a gap or a repeat.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class StreamResult:
    ok: bool = False
    events: int = 0
    error: str | None = None
    t_start: float = 0.0
    t_headers: float = 0.0
    t_first_event: float = 0.0
    t_first_delta: float = 0.0
    t_end: float = 0.0
    types: set[str] = field(default_factory=set)


async def consume(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> StreamResult:
    """POST one streamed response and check all its events."""
    result = StreamResult(t_start=time.monotonic())
    expected = 0
    last_type = ""
    done = False
    try:
        async with client.stream("POST", url, json=body) as response:
            result.t_headers = time.monotonic()
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return result
            buffer = b""
            async for chunk in response.aiter_bytes():
                buffer += chunk
                while b"\n\n" in buffer:
                    frame, buffer = buffer.split(b"\n\n", 1)
                    if frame.startswith(b"data: [DONE]"):
                        done = True
                        continue
                    if not frame.startswith(b"event: "):
                        continue  # ": connected", ": keepalive"
                    head, _, data = frame.partition(b"\ndata: ")
                    event_type = head[7:].decode()
                    seq = json.loads(data)["sequence_number"]
                    if result.events == 0:
                        result.t_first_event = time.monotonic()
                    if not result.t_first_delta and event_type == "response.output_text.delta":
                        result.t_first_delta = time.monotonic()
                    if seq != expected:
                        result.error = f"sequence gap: got {seq}, expected {expected}"
                        return result
                    expected += 1
                    result.events += 1
                    last_type = event_type
    except httpx.HTTPError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        return result
    finally:
        result.t_end = time.monotonic()
    if last_type != "response.completed":
        result.error = f"last event {last_type!r}"
    elif not done:
        result.error = "no [DONE]"
    else:
        result.ok = True
    return result


SHARD = 50
"""Connections per ``httpx.AsyncClient`` (limits raised to this)."""


def _limits(n: int) -> httpx.Limits:
    return httpx.Limits(max_connections=n, max_keepalive_connections=n, keepalive_expiry=60)


async def throughput(args: argparse.Namespace) -> dict[str, Any]:
    """``clients`` loops for ``seconds``: POST stream=true, read to the end, repeat."""
    body = {"input": f"Count for me [tokens={args.tokens}]", "stream": True}
    url = f"{args.url}/v1/responses"
    timeout = httpx.Timeout(60.0, connect=30.0)
    results: list[StreamResult] = []
    async with httpx.AsyncClient(limits=_limits(args.clients + 10), timeout=timeout) as client:
        for _ in range(min(args.clients, 10)):  # warm the connections
            await consume(client, url, {**body, "input": "warm up [tokens=5]"})
        start = time.monotonic()
        stop_at = start + args.seconds

        async def loop() -> None:
            while time.monotonic() < stop_at:
                results.append(await consume(client, url, body))

        await asyncio.gather(*(loop() for _ in range(args.clients)))
        end = time.monotonic()
    in_window = [r for r in results if r.ok and r.t_end <= stop_at]
    failed = [r for r in results if not r.ok]
    latencies = sorted(r.t_end - r.t_start for r in results if r.ok)
    return {
        "clients": args.clients,
        "tokens": args.tokens,
        "window_s": args.seconds,
        "elapsed_s": round(end - start, 3),
        "completed_in_window": len(in_window),
        "completed_total": sum(r.ok for r in results),
        "failed": len(failed),
        "errors": sorted({r.error or "" for r in failed})[:10],
        "responses_per_s": round(len(in_window) / args.seconds, 1),
        "events_per_response": (
            round(sum(r.events for r in in_window) / len(in_window), 1) if in_window else 0
        ),  # fmt: skip
        "response_latency_ms": _percentiles(latencies),
        "client_cpu_s": round(time.process_time(), 2),
    }


async def streams(args: argparse.Namespace) -> dict[str, Any]:
    """Open ``count`` background+stream responses at once and hold them to the end."""
    body = {"input": f"Hold on {args.directives}", "stream": True, "background": True}
    url = f"{args.url}/v1/responses"
    timeout = httpx.Timeout(args.read_timeout, connect=60.0, pool=120.0)
    # httpcore's pool scans its connections on every request and release: one AsyncClient with
    # 1,000 connections spends the client's CPU there. Shards of SHARD connections each do not.
    shards = [
        httpx.AsyncClient(limits=_limits(SHARD), timeout=timeout)
        for _ in range((args.count + SHARD - 1) // SHARD)
    ]
    try:
        start = time.monotonic()
        tasks = [
            asyncio.create_task(consume(shards[i // SHARD], url, body)) for i in range(args.count)
        ]
        results = await asyncio.gather(*tasks)
        end = time.monotonic()
    finally:
        for shard in shards:
            await shard.aclose()
    ok = [r for r in results if r.ok]
    # Peak of streams open at once: a stream is open from its headers to its last byte.
    edges = sorted(
        [(r.t_headers, 1) for r in results if r.t_headers]
        + [(r.t_end, -1) for r in results if r.t_headers]
    )
    open_now = peak = 0
    for _, delta in edges:
        open_now += delta
        peak = max(peak, open_now)
    # Streams that had all received their first event while none had ended yet.
    all_open_at = max((r.t_first_event for r in ok), default=0.0)
    first_end = min((r.t_end for r in ok), default=0.0)
    return {
        "count": args.count,
        "directives": args.directives,
        "completed_all_events": len(ok),
        "failed": len(results) - len(ok),
        "errors": sorted({r.error or "" for r in results if not r.ok})[:10],
        "peak_open_streams": peak,
        "all_open_simultaneously": bool(ok) and all_open_at < first_end,
        "open_ramp_s": round(max((r.t_headers for r in results), default=start) - start, 3),
        "all_first_events_s": round(all_open_at - start, 3) if ok else None,
        "elapsed_s": round(end - start, 3),
        "events_per_stream": sorted({r.events for r in ok}),
        "stream_duration_ms": _percentiles(sorted(r.t_end - r.t_start for r in ok)),
        # From the start of the run: when the gateway answered (headers), when the first text
        # delta (through queue, worker and model) arrived.
        "headers_at_ms": _percentiles(sorted(r.t_headers - start for r in ok)),
        "first_text_delta_at_ms": _percentiles(sorted(r.t_first_delta - start for r in ok)),
        "client_cpu_s": round(time.process_time(), 2),
    }


def _percentiles(sorted_s: list[float]) -> dict[str, float]:
    if not sorted_s:
        return {}
    pick = lambda q: sorted_s[min(len(sorted_s) - 1, int(q * len(sorted_s)))]  # noqa: E731
    return {f"p{int(q * 100)}": round(pick(q) * 1000, 2) for q in (0.5, 0.9, 0.99)}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.clients")
    sub = parser.add_subparsers(dest="mode", required=True)
    tp = sub.add_parser("throughput")
    tp.add_argument("--url", required=True)
    tp.add_argument("--clients", type=int, default=50)
    tp.add_argument("--seconds", type=float, default=15.0)
    tp.add_argument("--tokens", type=int, default=100)
    st = sub.add_parser("streams")
    st.add_argument("--url", required=True)
    st.add_argument("--count", type=int, default=1000)
    st.add_argument("--directives", default="[tokens=20] [delay_ms=1500]")
    st.add_argument("--read-timeout", type=float, default=120.0)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    run = throughput if args.mode == "throughput" else streams
    json.dump(asyncio.run(run(args)), sys.stdout)


if __name__ == "__main__":
    main()
