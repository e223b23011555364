"""Load generators, run in their own process: ``python -m bench.clients MODE --url … [options]``.

Prints one JSON object on stdout. Every stream is checked: the last event must be
``response.completed`` (then ``data: [DONE]``) and the ``sequence_number`` of its events must run
0, 1, 2, … without a gap or a repeat.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import resource
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

SIM_MODEL = "antwort-sim"


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


class Connection:
    """One keep-alive HTTP/1.1 connection to the gateway, spoken by hand.

    The load generator shares the 2-core box with the fleet it measures: an HTTP client stack
    (httpx, httpcore, h11) and a JSON parse per event cost it several milliseconds of CPU per
    100-token response, CPU the fleet then lacks. This reads the chunked SSE body with a few
    bytes operations and finds each event's ``sequence_number`` where the gateway puts it.
    """

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, path: str, body: bytes) -> tuple[int, AsyncIterator[bytes]]:
        """Send a POST; (status, the body's chunks)."""
        if self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(
                self.host, self.port, limit=1 << 20
            )
        assert self.reader is not None
        self.writer.write(
            b"POST %b HTTP/1.1\r\nHost: %b:%d\r\nContent-Type: application/json\r\n"
            b"Accept: text/event-stream\r\nContent-Length: %d\r\n\r\n%b"
            % (path.encode(), self.host.encode(), self.port, len(body), body)
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        headers = head.lower()
        if b"transfer-encoding: chunked" in headers:
            return status, self._chunked(self.reader)
        length = 0
        for line in headers.split(b"\r\n"):
            if line.startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        return status, self._sized(self.reader, length)

    @staticmethod
    async def _chunked(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2].split(b";", 1)[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return
            data = await reader.readexactly(size + 2)
            yield data[:-2]

    @staticmethod
    async def _sized(reader: asyncio.StreamReader, length: int) -> AsyncIterator[bytes]:
        if length:
            yield await reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


_SEQ = b'"sequence_number":'


def _sequence_number(data: bytes) -> int:
    """The event's ``sequence_number`` (the gateway writes it last); -1 when there is none."""
    at = data.rfind(_SEQ)
    if at < 0:
        return -1
    at += len(_SEQ)
    end = at
    while data[end : end + 1].isdigit():
        end += 1
    return int(data[at:end]) if end > at else -1


@dataclass
class _Check:
    """Checks the frames of one stream as they arrive."""

    result: StreamResult
    expected: int = 0
    last_type: bytes = b""
    done: bool = False

    def frames(self, frames: list[bytes]) -> bool:
        """Account for complete frames; False (and ``result.error``) at a sequence gap."""
        for frame in frames:
            if frame.startswith(b"data: [DONE]"):
                self.done = True
                continue
            if not frame.startswith(b"event: "):
                continue  # ": connected", ": keepalive"
            event_type, _, data = frame[7:].partition(b"\ndata: ")
            seq = _sequence_number(data)
            now = time.monotonic()
            if self.result.events == 0:
                self.result.t_first_event = now
            if not self.result.t_first_delta and event_type == b"response.output_text.delta":
                self.result.t_first_delta = now
            if seq != self.expected:
                self.result.error = f"sequence gap: got {seq}, expected {self.expected}"
                return False
            self.expected += 1
            self.result.events += 1
            self.last_type = event_type
        return True

    def finish(self) -> None:
        if self.result.error is not None:
            return
        if self.last_type != b"response.completed":
            self.result.error = f"last event {self.last_type!r}"
        elif not self.done:
            self.result.error = "no [DONE]"
        else:
            self.result.ok = True


async def consume(connection: Connection, body: dict[str, Any]) -> StreamResult:
    """POST one streamed response and check all its events."""
    return await _post_stream(connection, "/v1/responses", body, _read_checked)


async def consume_direct(connection: Connection, body: dict[str, Any]) -> StreamResult:
    """POST one streamed Chat Completion to the model server itself; read it to ``[DONE]``."""
    return await _post_stream(connection, "/v1/chat/completions", body, _read_to_done)


_BodyReader = Callable[[Connection, AsyncIterator[bytes], StreamResult], Awaitable[None]]


async def _post_stream(
    connection: Connection, path: str, body: dict[str, Any], read: _BodyReader
) -> StreamResult:
    result = StreamResult(t_start=time.monotonic())
    try:
        status, chunks = await connection.request(path, json.dumps(body).encode())
        result.t_headers = time.monotonic()
        if status != 200:
            result.error = f"HTTP {status}: {b''.join([c async for c in chunks])[:200]!r}"
            return result
        await read(connection, chunks, result)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
        connection.close()
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        result.t_end = time.monotonic()
    return result


async def _read_checked(
    connection: Connection, chunks: AsyncIterator[bytes], result: StreamResult
) -> None:
    """Every event checked as it arrives (:class:`_Check`)."""
    check = _Check(result)
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        if b"\n\n" in buffer:
            *frames, buffer = buffer.split(b"\n\n")
            if not check.frames(frames):
                connection.close()
                return
    check.finish()


async def _read_to_done(
    connection: Connection, chunks: AsyncIterator[bytes], result: StreamResult
) -> None:
    """A Chat Completions stream read to its end, which must be ``data: [DONE]``."""
    tail = b""
    async for chunk in chunks:
        result.events += chunk.count(b"data: ")
        tail = (tail + chunk)[-64:]
    result.ok = b"data: [DONE]" in tail
    result.error = None if result.ok else "no [DONE]"


async def _bounded(connection: Connection, body: dict[str, Any], seconds: float) -> StreamResult:
    try:
        return await asyncio.wait_for(consume(connection, body), seconds)
    except TimeoutError:
        connection.close()
        return StreamResult(error=f"no end within {seconds:g} s")


def _sdk_client(url: str, clients: int) -> Any:
    """The official ``openai`` SDK's async client, one pooled connection per client loop.

    Imported here, not with the module: every load process (``bench.streams`` starts four)
    would otherwise import httpx for nothing before it opens its first stream.
    """
    import httpx
    import openai

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    return openai.AsyncOpenAI(
        base_url=url + "/v1", api_key="bench", max_retries=0, timeout=60.0,
        http_client=openai.DefaultAsyncHttpxClient(limits=limits),
    )  # fmt: skip


async def _sdk_response(sdk: Any, prompt: str) -> StreamResult:
    """``client.responses.create(stream=True)``, every event's ``sequence_number`` checked."""
    result = StreamResult(t_start=time.monotonic())
    try:
        stream = await sdk.responses.create(model=SIM_MODEL, input=prompt, stream=True)
        last = ""
        async for event in stream:
            if (seq := event.sequence_number) != result.events:
                result.error = f"sequence gap: got {seq}, expected {result.events}"
                await stream.close()
                return result
            result.events += 1
            last = event.type
        result.ok = last == "response.completed"
        result.error = None if result.ok else f"last event {last!r}"
    except Exception as exc:  # the SDK's errors and the transport's: a failed response
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        result.t_end = time.monotonic()
    return result


async def _sdk_chat(sdk: Any, prompt: str) -> StreamResult:
    """``client.chat.completions.create(stream=True)`` read to its end, on the model server."""
    result = StreamResult(t_start=time.monotonic())
    try:
        messages = [{"role": "user", "content": prompt}]
        stream = await sdk.chat.completions.create(model=SIM_MODEL, messages=messages, stream=True)
        finished = None
        async for chunk in stream:
            result.events += 1
            finished = chunk.choices[0].finish_reason if chunk.choices else finished
        result.ok = finished is not None
        result.error = None if result.ok else "no finish_reason"
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        result.t_end = time.monotonic()
    return result


async def throughput(args: argparse.Namespace) -> dict[str, Any]:
    """``clients`` loops for ``seconds``: POST stream=true, read to the end, repeat.

    ``--direct``: the same load on the model server's own ``/v1/chat/completions`` (the
    request the fleet's worker makes for it), the rate the fleet is measured against.
    ``--sdk``: through the official ``openai`` SDK (as the outside checks measure, the SDK
    parsing every event into its models), instead of the hand-spoken client.
    """
    prompt = f"Count for me [tokens={args.tokens}]"
    closers: list[Callable[[], Any]] = []
    if args.sdk:
        sdk = _sdk_client(args.url, args.clients)
        sdk_one = _sdk_chat if args.direct else _sdk_response
        loops: list[Callable[[], Awaitable[StreamResult]]] = [
            functools.partial(sdk_one, sdk, prompt)
        ] * args.clients
        closers.append(sdk.close)
    else:
        body: dict[str, Any] = {"input": prompt, "stream": True}
        one = consume
        if args.direct:
            body = {"model": SIM_MODEL, "stream": True,
                    "messages": [{"role": "user", "content": prompt}]}  # fmt: skip
            one = consume_direct
        host, port = address(args.url)
        connections = [Connection(host, port) for _ in range(args.clients)]
        loops = [functools.partial(one, connection, body) for connection in connections]
        closers.extend(connection.close for connection in connections)
    results: list[StreamResult] = []
    for one_response in loops[:10]:  # warm the connections
        await one_response()
    start = time.monotonic()
    stop_at = start + args.seconds

    async def loop(one_response: Callable[[], Awaitable[StreamResult]]) -> None:
        while time.monotonic() < stop_at:
            results.append(await one_response())

    await asyncio.gather(*(loop(one_response) for one_response in loops))
    end = time.monotonic()
    for close in closers:
        if asyncio.iscoroutine(closed := close()):
            await closed
    in_window = [r for r in results if r.ok and r.t_end <= stop_at]
    failed = [r for r in results if not r.ok]
    latencies = sorted(r.t_end - r.t_start for r in results if r.ok)
    return {
        "clients": args.clients,
        "client": "openai SDK" if args.sdk else "hand-spoken",
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
    host, port = address(args.url)
    connections = [Connection(host, port) for _ in range(args.count)]
    start = time.monotonic()
    try:
        results = await asyncio.gather(*(_bounded(c, body, args.read_timeout) for c in connections))
    finally:
        for connection in connections:
            connection.close()
    end = time.monotonic()
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


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80


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
    tp.add_argument("--direct", action="store_true", help="the model server itself (--url)")
    tp.add_argument("--sdk", action="store_true", help="the official openai SDK as the client")
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
