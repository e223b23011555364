"""The benchmarks: ``.venv/bin/python -m bench.run [--quick] [--only core|agentic]``.

Starts its own fleets (the machine's Redis at 127.0.0.1:6379 db 14 under a unique key prefix,
the simulator at zero delay, one gateway process, inference workers with a thread pool: one
worker per core for (a) and (b), 5 × 200 threads for (c)), then:

(a) ``ttfe``: time to first SSE ``event:`` line of ``POST /v1/responses`` (stream=true) vs time
    to first chunk of the simulator's own ``/v1/chat/completions`` (stream=true), sequentially;
    also the time to the first text delta (the first event that went through queue + worker).
(b) ``throughput``: streamed 100-token responses per second with 50 concurrent clients.
(c) ``streams``: 1,000 concurrent background+stream responses held open by one gateway process
    (each lasts 30 s, longer than it takes to open them all on a 2-core box).
(d) ``rss``: peak RSS of every fleet process during (b) and (c).

Then the agentic section (``bench/agentic.py``, on a fleet of its own with tool workers):
orchestration cost per agentic turn, one turn of 8 parallel tools, tool throughput with 1, 2
and 4 tool worker processes. ``--only core`` or ``--only agentic`` runs one of the two.

Each figure goes to ``bench/results/<name>.json`` (``bench/results/quick/`` with ``--quick``)
with the command, machine facts and date; the table goes to ``summary.md`` beside them
(``summary-<section>.md`` with ``--only``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.agentic import run_section as run_agentic
from bench.fleet import REDIS_URL, ROOT, Fleet, RssSampler, add_settings_option, raise_nofile
from bench.stats import percentiles

RESULTS = Path(__file__).resolve().parent / "results"
RSS_TARGET_MB = 150.0


def machine() -> dict[str, Any]:
    return {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "redis": REDIS_URL,
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "note": "shared machine: other processes (not the benchmark's) may be running",
    }


def provenance(
    module: str, *, fleet: Fleet | None = None, argv: list[str] | None = None
) -> dict[str, Any]:
    """Where a benchmark's figures come from: its command, when, the machine, the fleet's commands.

    ``argv``: the benchmark's arguments (its command line's when none are given).
    """
    found: dict[str, Any] = {
        "command": shlex.join([".venv/bin/python", "-m", module, *(argv or sys.argv[1:])]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
    }
    if fleet is not None:
        found["fleet"] = fleet_commands(fleet)
    return found


def fleet_commands(fleet: Fleet) -> dict[str, str]:
    """Each of the fleet's roles with its exact command line."""
    return {role: shlex.join(command) for role, command in fleet.commands().items()}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


# (a) ------------------------------------------------------------------------------------------


def _gateway_once(client: httpx.Client, url: str) -> tuple[float, float]:
    """(ms to the first ``event:`` line, ms to the first ``response.output_text.delta``)."""
    body = {"input": "hello [tokens=20]", "stream": True}
    t0 = time.perf_counter()
    first = delta = None
    with client.stream("POST", f"{url}/v1/responses", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("event:"):
                now = time.perf_counter()
                if first is None:
                    first = now
                if delta is None and line == "event: response.output_text.delta":
                    delta = now
    assert first is not None and delta is not None, "stream without events"
    return (first - t0) * 1000, (delta - t0) * 1000


def _sim_once(client: httpx.Client, url: str) -> tuple[float, float]:
    """(ms to the first chunk, ms to the first chunk with content)."""
    body = {
        "model": "antwort-sim",
        "messages": [{"role": "user", "content": "hello [tokens=20]"}],
        "stream": True,
    }
    t0 = time.perf_counter()
    first = content = None
    with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data:"):
                now = time.perf_counter()
                if first is None:
                    first = now
                if content is None and '"content":"' in line.replace(" ", ""):
                    content = now
    assert first is not None and content is not None, "stream without chunks"
    return (first - t0) * 1000, (content - t0) * 1000


def bench_ttfe(fleet: Fleet, n: int) -> dict[str, Any]:
    gw: list[tuple[float, float]] = []
    sim: list[tuple[float, float]] = []
    with httpx.Client(timeout=30.0) as g, httpx.Client(timeout=30.0) as s:
        for _ in range(10):  # warm-up: connections, imports, caches
            _gateway_once(g, fleet.gateway_url)
            _sim_once(s, fleet.sim_url)
        for _ in range(n):  # interleaved, so both see the same machine state
            gw.append(_gateway_once(g, fleet.gateway_url))
            sim.append(_sim_once(s, fleet.sim_url))
    gw_first = percentiles([a for a, _ in gw])
    gw_delta = percentiles([b for _, b in gw])
    sim_first = percentiles([a for a, _ in sim])
    sim_content = percentiles([b for _, b in sim])
    return {
        "requests_each": n,
        "input": "hello [tokens=20]",
        "gateway_first_event_ms": gw_first,
        "gateway_first_text_delta_ms": gw_delta,
        "sim_first_chunk_ms": sim_first,
        "sim_first_content_chunk_ms": sim_content,
        "added_ms_p50_first_event": round(gw_first["p50"] - sim_first["p50"], 2),
        "added_ms_p50_first_text_delta": round(gw_delta["p50"] - sim_content["p50"], 2),
        "note": "The first event (response.created) is written by the gateway before it enqueues "
        "the turn; the first output_text.delta is the first event that went through "
        "queue + worker + model.",
    }


# (b), (c) -------------------------------------------------------------------------------------


def run_clients(args: list[str], timeout: float) -> tuple[dict[str, Any], list[str]]:
    argv = [sys.executable, "-m", "bench.clients", *args]
    done = subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout), argv


def bench_throughput(
    fleet: Fleet, clients: int, seconds: float, tokens: int
) -> tuple[dict[str, Any], RssSampler]:
    with RssSampler(fleet) as rss:
        result, argv = run_clients(
            ["throughput", "--url", fleet.gateway_url, "--clients", str(clients),
             "--seconds", str(seconds), "--tokens", str(tokens)],
            timeout=seconds + 120,
        )  # fmt: skip
    result["client_command"] = shlex.join(argv)
    result["fleet_cpu_s"] = rss.cpu
    return result, rss


def bench_streams(fleet: Fleet, count: int, directives: str) -> tuple[dict[str, Any], RssSampler]:
    peak_conns = [0]
    stop = threading.Event()

    def watch() -> None:  # established client connections of the gateway, seen from its side
        while not stop.wait(0.5):
            peak_conns[0] = max(peak_conns[0], _gateway_connections(fleet))

    watcher = threading.Thread(target=watch, daemon=True)
    with RssSampler(fleet) as rss:
        watcher.start()
        try:
            result, argv = run_clients(
                ["streams", "--url", fleet.gateway_url, "--count", str(count),
                 "--directives", directives],
                timeout=300,
            )  # fmt: skip
        finally:
            stop.set()
            watcher.join()
    result["client_command"] = shlex.join(argv)
    result["fleet_cpu_s"] = rss.cpu
    result["gateway_worker_processes"] = len(fleet.pids()["gateway"]) - 1
    result["gateway_peak_established_connections"] = peak_conns[0]
    return result, rss


def _gateway_connections(fleet: Fleet) -> int:
    count = 0
    for pid in fleet.pids()["gateway"]:
        try:
            conns = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.Error:
            continue
        count += sum(
            1
            for c in conns
            if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == fleet.gateway_port
        )
    return count


# output ---------------------------------------------------------------------------------------


def write(outdir: Path, name: str, figure: dict[str, Any], meta: dict[str, Any]) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / f"{name}.json").write_text(json.dumps({**meta, name: figure}, indent=2) + "\n")


def table(rows: list[tuple[str, str, str, str]]) -> str:
    lines = ["| metric | target | measured | command |", "|---|---|---|---|"]
    lines += [f"| {m} | {t} | {v} | `{c}` |" for m, t, v, c in rows]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.run")
    parser.add_argument("--quick", action="store_true", help="tiny counts (CI smoke, ~20 s)")
    parser.add_argument(
        "--redis-pool-fix",
        action="store_true",
        help="run gateway and workers under bench/redis_pool_fix.py (results/redis-pool-fix/)",
    )
    add_settings_option(parser)
    parser.add_argument(
        "--no-streams",
        action="store_true",
        help="core: skip (c), the 1,000 open streams (an A/B of (a), (b) in a minute a run)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="the directory the results go to (default: bench/results, or its quick/)",
    )
    parser.add_argument(
        "--only",
        choices=["core", "agentic", "sandbox", "mcp"],
        help="one section: core = (a)-(d) above; agentic = bench/agentic.py (issue 4, §6); "
        "sandbox = bench/sandbox.py (issue 6); mcp = bench/mcp.py (issue 5, §7)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.settings = dict(args.settings)
    if args.only == "sandbox":
        return run_sandbox(args.quick)
    if args.only == "mcp":
        return run_mcp(args.quick)
    command = ".venv/bin/python -m bench.run" + (" --quick" if args.quick else "")
    command += " --redis-pool-fix" if args.redis_pool_fix else ""
    command += "".join(f" --set {name}={value}" for name, value in args.settings.items())
    command += " --no-streams" if args.no_streams else ""
    command += f" --only {args.only}" if args.only else ""
    outdir = RESULTS / "quick" if args.quick else RESULTS
    if args.redis_pool_fix:
        outdir = outdir / "redis-pool-fix"
    if args.out is not None:
        command += f" --out {args.out}"
        outdir = args.out
    outdir.mkdir(parents=True, exist_ok=True)
    raise_nofile()
    started = dt.datetime.now(dt.UTC)
    rows: list[tuple[str, str, str, str]] = []
    fleet_cmds: list[str] = []
    if args.only != "agentic":
        rows, fleet_cmds = run_core(args, command, outdir)
    if args.only != "core":
        figures, agentic_cmds, agentic_rows = run_agentic(args.quick, args.settings)
        meta = {
            "command": command,
            "date": started.isoformat(timespec="seconds"),
            "machine": {**machine(), "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]},
            "fleet": {"commands": agentic_cmds},
        }
        write(outdir, "agentic", figures, meta)
        rows += [(metric, target, value, command) for metric, target, value in agentic_rows]
        fleet_cmds += [f"agentic section, {line}" for line in agentic_cmds]
    text = table(rows)
    print(text)
    m = machine()
    name = "summary.md" if args.only is None else f"summary-{args.only}.md"
    processes = "\n".join(f"- `{line}`" for line in fleet_cmds)
    (outdir / name).write_text(
        f"# Benchmarks ({'quick' if args.quick else 'full'})\n\n"
        f"`{command}` on {m['nproc']} cores ({m['cpu']}), Python {m['python']}, "
        f"{started.isoformat(timespec='seconds')}, on a shared machine.\n\n{text}\n\n"
        f"Fleet processes:\n\n{processes}\n"
    )
    return 0


def run_core(
    args: argparse.Namespace, command: str, outdir: Path
) -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """Sections (a)-(d), each on a fleet sized for it; (table rows, fleet commands).

    (a) and (b) run on one inference worker per core (the deployment this machine calls for;
    more processes only add idle consumers and GIL contention); (c) needs 1,000 turns running
    at once, so it runs on 5 workers × 200 threads. (d) is read during (b) and (c).
    """
    quick = args.quick

    n_ttfe = 20 if quick else 200
    tp_clients, tp_seconds, tp_tokens = (10, 3.0, 100) if quick else (50, 15.0, 100)
    st_count, st_directives = (50, "[tokens=10] [delay_ms=200]") if quick else (
        1000, "[tokens=20] [delay_ms=1500]")  # fmt: skip
    tp_workers, tp_threads = (1, 64) if quick else (os.cpu_count() or 2, 64)
    st_workers, st_threads = (1, 64) if quick else (5, 200)

    def make_fleet(workers: int, threads: int, **settings: str) -> Fleet:
        return Fleet(
            inference_workers=workers,
            worker_threads=threads,
            redis_pool_fix=args.redis_pool_fix,
            settings={**settings, **args.settings},
        )

    def described(fleet: Fleet, workers: int, threads: int) -> dict[str, Any]:
        return {
            "commands": fleet_commands(fleet),
            "key_prefix": fleet.prefix,
            "inference_workers": workers,
            "threads_per_worker": threads,
        }

    started = dt.datetime.now(dt.UTC)
    fleet = make_fleet(tp_workers, tp_threads)
    # (c)'s streams all come from one address: the edge's per-address cap (256) is lifted
    streams_fleet = make_fleet(st_workers, st_threads, ANTWORT_MAX_CONNECTIONS_PER_CLIENT="0")
    meta: dict[str, Any] = {
        "command": command,
        "date": started.isoformat(timespec="seconds"),
        "machine": machine(),
        "fleet": {
            **described(fleet, tp_workers, tp_threads),
            "streams_fleet": described(streams_fleet, st_workers, st_threads),
            "open_files_limit": raise_nofile(),
        },
    }
    try:
        fleet.start()
        print(f"fleet for (a), (b) up (logs: {fleet.logdir})", flush=True)
        ttfe = bench_ttfe(fleet, n_ttfe)
        print("ttfe:", json.dumps(ttfe), flush=True)
        write(outdir, "ttfe", ttfe, meta)
        tp, tp_rss = bench_throughput(fleet, tp_clients, tp_seconds, tp_tokens)
        print("throughput:", json.dumps(tp), flush=True)
        write(outdir, "throughput", tp, meta)
    finally:
        fleet.stop()
        print(f"fleet stopped; keys under {fleet.prefix!r} flushed", flush=True)
    rss = {"throughput": tp_rss.peaks_mb()}
    st: dict[str, Any] | None = None
    if not args.no_streams:
        st, st_rss = _run_streams(streams_fleet, st_count, st_directives, outdir, meta)
        rss["streams"] = st_rss.peaks_mb()

    meta["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    peak: dict[str, float] = {}
    for phase in rss.values():
        for label, mb in phase.items():
            peak[label] = max(peak.get(label, 0.0), mb)
    write(outdir, "rss", {"peak_mb_by_phase": rss, "peak_mb": peak}, meta)

    # Workers: report the largest of them.
    roles: dict[str, float] = {}
    for label, mb in peak.items():
        role = "inference worker (largest)" if label.startswith("worker") else label
        roles[role] = max(roles.get(role, 0.0), mb)
    rows = [
        ("(a) time to first event, gateway p50/p90/p99 ms", "-",
         "/".join(f"{v:g}" for v in ttfe["gateway_first_event_ms"].values()), command),
        ("(a) time to first chunk, simulator direct p50/p90/p99 ms", "-",
         "/".join(f"{v:g}" for v in ttfe["sim_first_chunk_ms"].values()), command),
        ("(a) added ms at p50 (first event)", "< 15 ms",
         f"{ttfe['added_ms_p50_first_event']:g} ms", command),
        ("(a) added ms at p50 (first text delta vs first content chunk)", "(info)",
         f"{ttfe['added_ms_p50_first_text_delta']:g} ms "
         f"(gateway {'/'.join(f'{v:g}' for v in ttfe['gateway_first_text_delta_ms'].values())})",
         command),
        (f"(b) streamed {tp_tokens}-token responses/s, {tp_clients} clients, {tp_seconds:g} s",
         "≥ 100/s",
         f"{tp['responses_per_s']:g}/s ({tp['completed_in_window']} ok, {tp['failed']} failed)",
         tp["client_command"]),
    ]  # fmt: skip
    if st is not None:
        rows.append((f"(c) concurrent SSE streams on one gateway process, all events "
                     f"({st_directives})", "1,000",
                     f"{st['completed_all_events']}/{st['count']} complete, peak open "
                     f"{st['peak_open_streams']}", st["client_command"]))  # fmt: skip
    during = "(b)" if st is None else "(b)+(c)"
    for role, mb in sorted(roles.items()):
        rows.append((f"(d) peak RSS {role}, during {during}", f"< {RSS_TARGET_MB:g} MB",
                     f"{mb:g} MB", command))  # fmt: skip
    fleet_cmds = [f"(a), (b) {role}: {cmd}" for role, cmd in meta["fleet"]["commands"].items()]
    if st is not None:
        streams_cmds = meta["fleet"]["streams_fleet"]["commands"]
        fleet_cmds += [f"(c) {role}: {cmd}" for role, cmd in streams_cmds.items()]
    return rows, fleet_cmds


def _run_streams(
    fleet: Fleet, count: int, directives: str, outdir: Path, meta: dict[str, Any]
) -> tuple[dict[str, Any], RssSampler]:
    """Section (c) on its own fleet: the figure and the RSS seen meanwhile."""
    try:
        fleet.start()
        print(f"fleet for (c) up (logs: {fleet.logdir})", flush=True)
        st, st_rss = bench_streams(fleet, count, directives)
        print("streams:", json.dumps(st), flush=True)
        write(outdir, "streams", st, meta)
    finally:
        fleet.stop()
        print(f"fleet stopped; keys under {fleet.prefix!r} flushed", flush=True)
    return st, st_rss


def run_mcp(quick: bool) -> int:
    """``--only mcp``: an MCP call through the fleet vs the SDK alone; one worker's calls/s."""
    from bench import mcp

    return mcp.main(["--quick"] if quick else [])


def run_sandbox(quick: bool) -> int:
    """``--only sandbox``: the sandbox's latency and one worker's calls/s (bench/sandbox.py)."""
    from bench import sandbox

    command = ".venv/bin/python -m bench.run --only sandbox" + (" --quick" if quick else "")
    outdir = (RESULTS / "quick" if quick else RESULTS) / "sandbox"
    meta = {
        "command": command,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
    }
    figures = sandbox.run(quick)
    meta["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    for name, figure in figures.items():
        print(f"{name}:", json.dumps(figure), flush=True)
        write(outdir, name, figure, meta)
    lat, tp = figures["sandbox_latency"], figures["sandbox_throughput"]
    rows = [
        ("(e) sandbox start-to-result, print(1), runner p50/p90/p99 ms",
         f"< {sandbox.LATENCY_TARGET_MS:g} ms p50",
         "/".join(f"{v:g}" for v in lat["runner_ms"].values()), command),
        ("(e) same through the executor with a container (Redis files) p50/p90/p99 ms", "(info)",
         "/".join(f"{v:g}" for v in lat["executor_with_container_ms"].values()), command),
        ("(e) floor: the same bwrap running `python3 -I -S -c pass` p50/p90/p99 ms", "(info)",
         "/".join(f"{v:g}" for v in lat["floor_bwrap_python_pass_ms"].values()), command),
        ("(e) hosted shell call of 1 / 3 commands through the executor, p50 ms", "(info)",
         f"{lat['hosted_shell_1_command_ms']['p50']:g} / "
         f"{lat['hosted_shell_3_commands_ms']['p50']:g}", command),
        ("(f) code interpreter calls/s from one tools.sandbox worker", "(info)",
         f"{tp['calls_per_s']:g}/s ({tp['completed']}/{tp['calls']} done, {tp['errors']} errors)",
         command),
    ]  # fmt: skip
    text = table(rows)
    print(text)
    m = meta["machine"]
    (outdir / "summary.md").write_text(
        f"# Sandbox benchmarks ({'quick' if quick else 'full'})\n\n"
        f"`{command}` on {m['nproc']} cores ({m['cpu']}), Python {m['python']}, "
        f"{meta['date']}, load average {m['loadavg_at_start']} at start: a shared machine.\n\n"
        f"{text}\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
