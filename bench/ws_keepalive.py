"""What idle WebSockets cost the gateway: ``python -m bench.ws_keepalive [--sockets 3000]``.

Its own fleet (one gateway process, as ``bench.streams``), then one client process holds
``--sockets`` idle WebSockets on ``/v1/responses`` and the gateway's CPU time is read around
three phases:

- **open**: all the sockets connect at once (handshake, session, reader);
- **idle**: ``--idle-seconds`` of nothing after a settling pause, so only the keepalive runs:
  the gateway pings each socket every ``ANTWORT_KEEPALIVE_SECONDS`` (15) and reads its pong;
- **close**: the client pings every socket once and closes it.

Figures: CPU µs per socket for open and close, CPU seconds for the idle phase and per ping
(the pings the keepalive sent in it: sockets × idle seconds / keepalive). Written to
``bench/results/ws-keepalive.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import psutil

from app.config import Settings
from bench.fleet import raise_nofile
from bench.run import RESULTS, fleet_commands, provenance
from bench.streams import HealthProbe, ScaleFleet, healthz_phase


async def _open(url: str, count: int, stop: asyncio.Event) -> list[asyncio.Future[bool]]:
    """``count`` idle sockets, once all are open; each pings and closes when ``stop`` is set."""
    from websockets.asyncio.client import connect

    opened = asyncio.Semaphore(0)

    async def hold() -> bool:
        async with connect(url, proxy=None, open_timeout=120, ping_interval=None) as ws:
            opened.release()
            await stop.wait()
            await asyncio.wait_for(await ws.ping(), 30)
            return True

    sockets = [asyncio.ensure_future(hold()) for _ in range(count)]
    for _ in range(count):
        await opened.acquire()
    return sockets


def measure(sockets: int, idle_seconds: float) -> dict[str, Any]:
    keepalive = Settings.model_fields["keepalive_seconds"].default  # the fleet sets none
    fleet = ScaleFleet(inference_workers=1, worker_threads=8, connections=sockets + 1000)
    fleet.start()
    try:
        gateway = psutil.Process(fleet.pids()["gateway"][0])
        procs = [gateway, *gateway.children(recursive=True)]

        def cpu() -> float:
            return sum(p.cpu_times().user + p.cpu_times().system for p in procs)

        url = fleet.gateway_url.replace("http://", "ws://") + "/v1/responses"
        loop = asyncio.new_event_loop()
        stop = asyncio.Event()
        probe = HealthProbe(fleet.gateway_url)
        probe.start()
        marks = [time.monotonic()]  # phase boundaries, for the probe's samples
        before, started = cpu(), time.monotonic()
        held = loop.run_until_complete(_open(url, sockets, stop))
        opened_cpu, open_s = cpu() - before, time.monotonic() - started
        loop.run_until_complete(asyncio.sleep(5))  # the last sessions settle
        before = cpu()
        marks.append(time.monotonic())
        loop.run_until_complete(asyncio.sleep(idle_seconds))
        idle_cpu = cpu() - before
        marks.append(time.monotonic())
        before, started = cpu(), time.monotonic()
        stop.set()
        answered = loop.run_until_complete(asyncio.gather(*held, return_exceptions=True))
        time.sleep(2)  # the gateway's side of the closes
        close_cpu, close_s = cpu() - before, time.monotonic() - started - 2
        marks.append(time.monotonic())
        probe.stopped.set()
        probe.join()
        loop.close()
    finally:
        fleet.stop()
    pings = sockets * idle_seconds / keepalive
    return {
        "sockets": sockets,
        "keepalive_seconds": keepalive,
        "open_s": round(open_s, 2),
        "open_cpu_us_per_socket": round(opened_cpu * 1e6 / sockets),
        "idle_seconds": idle_seconds,
        "idle_cpu_s": round(idle_cpu, 2),
        "idle_cpu_us_per_ping": round(idle_cpu * 1e6 / pings),
        "close_s": round(close_s, 2),
        "close_cpu_us_per_socket": round(close_cpu * 1e6 / sockets),
        "answered_last_ping": sum(result is True for result in answered),
        "healthz_failures": probe.failures,
        **{
            f"healthz_ms_{phase}": healthz_phase(probe, after=marks[index], before=marks[index + 1])
            for index, phase in enumerate(("open", "idle", "close"))
        },
        "fleet": fleet_commands(fleet),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.ws_keepalive")
    parser.add_argument("--sockets", type=int, default=3000)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--out", default="ws-keepalive.json", help="file in bench/results/")
    args = parser.parse_args(argv)
    raise_nofile()
    record = {
        **provenance("bench.ws_keepalive", argv=argv),
        **measure(args.sockets, args.idle_seconds),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / args.out).write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k not in ("fleet", "machine")}))


if __name__ == "__main__":
    main()
