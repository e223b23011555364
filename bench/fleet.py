"""Start a private fleet (simulator, one gateway, inference and tool workers) for the benchmarks.

Uses the machine's Redis (``127.0.0.1:6379`` database 14) under a unique key prefix, which is
flushed when the fleet stops. Every process is started in its own session and is stopped by its
process-group id, so nothing but what the benchmark started is ever signalled.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import redis

from app.keys import Keys

REDIS_URL = "redis://127.0.0.1:6379/14"
ROOT = Path(__file__).resolve().parent.parent


def raise_nofile() -> int:
    """Raise the open-files limit to its hard limit (inherited by every child)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Proc:
    role: str
    argv: list[str]
    popen: subprocess.Popen[bytes]
    log: Path


RESERVED_SETTINGS = frozenset(
    {"ANTWORT_REDIS_URL", "ANTWORT_KEY_PREFIX", "ANTWORT_LLM_BASE_URL", "ANTWORT_HOST",
     "ANTWORT_PORT"}
)  # fmt: skip
"""What the benchmark's fleet sets itself: where its processes find each other."""


def checked_settings(settings: dict[str, str]) -> dict[str, str]:
    """``settings`` when each is an ``ANTWORT_*`` name the fleet leaves to the caller.

    Raises:
        ValueError: another name, or one of :data:`RESERVED_SETTINGS`.
    """
    for name in settings:
        if not name.startswith("ANTWORT_") or name in RESERVED_SETTINGS:
            raise ValueError(f"the benchmark's fleet cannot be given {name}")
    return settings


def parse_setting(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` (a ``--set`` option) as a pair."""
    name, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"expected NAME=VALUE, got {text!r}")
    checked_settings({name: value})
    return name, value


SET_HELP = (
    "a setting of every fleet process (repeatable), e.g. ANTWORT_FAST_PUBLISH=0 to measure a "
    "speed-up switch off; the developer's own ANTWORT_* never reach the fleet"
)


def add_settings_option(parser: argparse.ArgumentParser) -> None:
    """``--set ANTWORT_NAME=VALUE`` (repeatable), as ``args.settings``: a list of pairs."""

    def setting(text: str) -> tuple[str, str]:
        try:
            return parse_setting(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="ANTWORT_NAME=VALUE",
        type=setting,
        help=SET_HELP,
    )


@dataclass
class Fleet:
    """The benchmark's own processes."""

    inference_workers: int = 2
    worker_threads: int = 64
    tool_workers: int = 0
    """``tools.internal`` workers (thread pool) with the benchmark's tools (``bench.tools``)."""
    tool_threads: int = 16
    mcp_workers: int = 0
    """``tools.mcp`` workers (``antwort worker``'s defaults); with any, the example MCP server
    (``examples/mcp_server.py``) runs too, at :attr:`mcp_url`, and loopback servers are allowed."""
    sandbox_workers: int = 0
    """``tools.sandbox`` workers (``antwort worker``'s defaults: bubblewrap, prefork)."""
    redis_pool_fix: bool = False
    settings: dict[str, str] = field(default_factory=dict)
    """``ANTWORT_*`` settings for every process of the fleet (``bench.run --set``); the
    developer's own environment never leaks in."""
    prefix: str = field(default_factory=lambda: f"antwort-bench-{uuid.uuid4().hex[:10]}:")
    sim_port: int = field(default_factory=free_port)
    gateway_port: int = field(default_factory=free_port)
    mcp_port: int = field(default_factory=free_port)
    procs: list[Proc] = field(default_factory=list)
    logdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="antwort-bench-")))

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    @property
    def sim_url(self) -> str:
        return f"http://127.0.0.1:{self.sim_port}"

    @property
    def mcp_url(self) -> str:
        """The example MCP server's endpoint (with :attr:`mcp_workers`)."""
        return f"http://127.0.0.1:{self.mcp_port}/mcp"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANTWORT_")}
        env.update(
            ANTWORT_REDIS_URL=REDIS_URL,
            ANTWORT_KEY_PREFIX=self.prefix,
            ANTWORT_LLM_BASE_URL=f"{self.sim_url}/v1",
            ANTWORT_DEFAULT_MODEL="antwort-sim",
            ANTWORT_HOST="127.0.0.1",
            ANTWORT_PORT=str(self.gateway_port),
            ANTWORT_GATEWAY_WORKERS="1",
            ANTWORT_INTERNAL_TOOL_MODULES="bench.tools",
            ANTWORT_LOG_LEVEL="warning",
            ANTWORT_SECRETS_FILE=str(self.logdir / "secrets.key"),  # as `antwort up` has it
            PYTHONUNBUFFERED="1",
        )
        if self.mcp_workers:  # the example server, on loopback
            env.update(ANTWORT_MCP_ALLOWED_HOSTS="127.0.0.1")
        env.update(checked_settings(self.settings))
        return env

    def commands(self) -> dict[str, list[str]]:
        """role → argv (the exact commands, recorded with every figure)."""
        py = sys.executable
        gateway = [py, "-m", "programs.cli", "gateway", "--workers", "1"]
        shim: list[str] = []
        if self.redis_pool_fix:  # what `antwort gateway` execs, under the shim
            shim = ["-m", "bench.redis_pool_fix"]
            gateway = [py, *shim, "gunicorn", "--config", "python:gateway.gunicorn_conf",
                       "gateway.wsgi:application"]  # fmt: skip
        cmds = {
            "sim": [py, "-m", "programs.cli", "sim", "--port", str(self.sim_port),
                    "--ttft-ms", "0", "--token-delay-ms", "0"],
            "gateway": gateway,
        }  # fmt: skip
        for i in range(self.inference_workers):
            # ``python -m workers.main`` is what ``antwort worker`` execs; called directly so the
            # shim can wrap it. ``--loglevel WARNING`` says what ANTWORT_LOG_LEVEL already does
            # (INFO logs two lines per task), in the command recorded with every figure.
            entry = [*shim, "workers.main"] if shim else ["-m", "workers.main"]
            cmds[f"worker{i}"] = [py, *entry, "--queues", "inference", "--pool", "threads",
                                  "--concurrency", str(self.worker_threads),
                                  "--loglevel", "WARNING"]  # fmt: skip
        for i in range(self.tool_workers):
            cmds[f"tools{i}"] = self.tool_worker_command(self.tool_threads)
        if self.mcp_workers:
            cmds["mcp-server"] = [py, "examples/mcp_server.py", "--port", str(self.mcp_port)]
        for queue, count in (
            ("tools.mcp", self.mcp_workers),
            ("tools.sandbox", self.sandbox_workers),
        ):
            for i in range(count):
                cmds[f"{queue.removeprefix('tools.')}{i}"] = [
                    py, "-m", "programs.cli", "worker", "--queues", queue
                ]  # fmt: skip
        return cmds

    def tool_worker_command(self, threads: int) -> list[str]:
        """A ``tools.internal`` worker with ``threads`` threads."""
        return [sys.executable, "-m", "workers.main", "--queues", "tools.internal",
                "--pool", "threads", "--concurrency", str(threads),
                "--loglevel", "WARNING"]  # fmt: skip

    def spawn(self, role: str, argv: list[str]) -> Proc:
        """Start one more process of the fleet."""
        log = self.logdir / f"{role}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                argv, cwd=ROOT, env=self.env(), stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        proc = Proc(role, argv, popen, log)
        self.procs.append(proc)
        return proc

    def stop_role(self, role: str) -> None:
        """Stop one process (SIGTERM to its group, then SIGKILL) and forget it."""
        for proc in [p for p in self.procs if p.role == role]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGTERM)
            try:
                proc.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait(timeout=5)
            self.procs.remove(proc)

    def wait_consuming(self, queue: str, procs: list[Proc], timeout: float = 60.0) -> None:
        """Wait until each of ``procs`` sent a heartbeat for ``queue`` (hostnames end in .pid)."""
        client = redis.Redis.from_url(REDIS_URL)
        deadline = time.monotonic() + timeout
        try:
            while True:
                self._check_alive()
                seen = {m.decode() for m in client.zrange(Keys(self.prefix).workers(queue), 0, -1)}
                if all(any(h.endswith(f".{p.popen.pid}") for h in seen) for p in procs):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{queue} workers not up after {timeout}s")
                time.sleep(0.2)
        finally:
            client.close()
        time.sleep(1.0)  # the consumers are up shortly after the heartbeat

    def start(self, timeout: float = 60.0) -> None:
        raise_nofile()
        for role, argv in self.commands().items():
            self.spawn(role, argv)
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as client:
            while True:
                self._check_alive()
                try:
                    sim_ok = client.get(f"{self.sim_url}/health").status_code == 200
                    ready = client.get(f"{self.gateway_url}/readyz")
                    live = int(ready.json().get("checks", {}).get("inference_workers", "0"))
                    mcp_ok = not self.mcp_workers or (
                        client.get(f"http://127.0.0.1:{self.mcp_port}/health").status_code == 200
                    )
                    if (
                        sim_ok
                        and mcp_ok
                        and ready.status_code == 200
                        and live >= self.inference_workers
                    ):
                        break
                except (httpx.HTTPError, ValueError):
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"fleet not ready after {timeout}s; logs in {self.logdir}")
                time.sleep(0.2)
        for queue in ("tools.internal", "tools.mcp", "tools.sandbox"):
            consumers = [p for p in self.procs if queue in p.argv and p.role != "gateway"]
            if consumers:
                self.wait_consuming(queue, consumers, timeout)
        time.sleep(1.0)  # the workers' consumers are up shortly after their heartbeat

    def _check_alive(self) -> None:
        for proc in self.procs:
            if proc.popen.poll() is not None:
                tail = proc.log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{proc.role} exited ({proc.popen.returncode}):\n{tail}")

    def pids(self) -> dict[str, list[int]]:
        """role → [pid, child pids…] (the gateway's gunicorn master and its gevent worker)."""
        out: dict[str, list[int]] = {}
        for proc in self.procs:
            try:
                parent = psutil.Process(proc.popen.pid)
                out[proc.role] = [parent.pid, *(c.pid for c in parent.children(recursive=True))]
            except psutil.NoSuchProcess:
                out[proc.role] = []
        return out

    def stop(self) -> None:
        for proc in self.procs:
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):  # the group: a gunicorn worker too
                os.killpg(proc.popen.pid, signal.SIGKILL)
            if proc.popen.poll() is None:
                proc.popen.wait(timeout=5)
        self.flush()

    def flush(self) -> int:
        """Delete every key under this fleet's prefix in database 14."""
        client = redis.Redis.from_url(REDIS_URL)
        deleted = 0
        batch: list[bytes] = []
        for key in client.scan_iter(match=f"{self.prefix}*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                deleted += int(client.unlink(*batch))
                batch.clear()
        if batch:
            deleted += int(client.unlink(*batch))
        client.close()
        return deleted


class SlowLog:
    """Redis's slow log from :meth:`start` to :meth:`stop`, its settings put back after.

    The machine's Redis, shared: ``slower_than_us`` is what it logs meanwhile (0: every command),
    ``length`` how many entries it keeps.
    """

    SETTINGS = ("slowlog-log-slower-than", "slowlog-max-len")

    def __init__(self, client: redis.Redis, *, slower_than_us: int, length: int = 128):
        self.client = client
        self.slower_than_us = slower_than_us
        self.length = length
        self._saved: dict[str, str] = {}

    def start(self) -> None:
        self._saved = {name: str(self.client.config_get(name)[name]) for name in self.SETTINGS}
        self.client.config_set("slowlog-max-len", self.length)
        self.client.slowlog_reset()
        self.client.config_set("slowlog-log-slower-than", self.slower_than_us)

    def stop(self) -> list[dict[str, Any]]:
        """The entries logged since :meth:`start`, newest first."""
        self.client.config_set("slowlog-log-slower-than", self._saved["slowlog-log-slower-than"])
        entries: list[dict[str, Any]] = self.client.slowlog_get(self.length)
        self.client.slowlog_reset()
        self.client.config_set("slowlog-max-len", self._saved["slowlog-max-len"])
        return entries


class RssSampler:
    """Peak RSS per process of the fleet, sampled every ``interval`` seconds."""

    def __init__(self, fleet: Fleet, interval: float = 0.2):
        self.fleet = fleet
        self.interval = interval
        self.peaks: dict[str, int] = {}
        self.cpu: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._procs: dict[int, tuple[str, psutil.Process, float]] = {}

    def _label(self, role: str, index: int, proc: psutil.Process) -> str:
        if role == "gateway":
            return "gateway (gunicorn master)" if index == 0 else "gateway (gevent worker)"
        return role if index == 0 else f"{role} child"

    def __enter__(self) -> RssSampler:
        self._redis = _redis_server()
        self._redis_cpu0 = _cpu(self._redis)
        for role, pids in self.fleet.pids().items():
            for index, pid in enumerate(pids):
                proc = psutil.Process(pid)
                times = proc.cpu_times()
                self._procs[pid] = (self._label(role, index, proc), proc, times.user + times.system)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        for label, proc, _ in self._procs.values():
            try:
                rss = proc.memory_info().rss
            except psutil.NoSuchProcess:
                continue
            self.peaks[label] = max(self.peaks.get(label, 0), rss)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        self._sample()
        for label, proc, cpu0 in self._procs.values():
            try:
                times = proc.cpu_times()
            except psutil.NoSuchProcess:
                continue
            self.cpu[label] = round(times.user + times.system - cpu0, 2)
        if self._redis is not None:  # the shared machine Redis: CPU only, read-only
            self.cpu["redis-server (machine's, shared)"] = round(
                _cpu(self._redis) - self._redis_cpu0, 2
            )

    def peaks_mb(self) -> dict[str, float]:
        return {k: round(v / 2**20, 1) for k, v in sorted(self.peaks.items())}


def _redis_server() -> psutil.Process | None:
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == 6379 and conn.pid:
            return psutil.Process(conn.pid)
    return None


def _cpu(proc: psutil.Process | None) -> float:
    if proc is None:
        return 0.0
    try:
        times = proc.cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)
