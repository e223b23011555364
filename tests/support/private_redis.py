"""A ``redis-server`` of a test's own: started, stopped, started again, made to refuse writes.

The machine's shared Redis is never stopped or reconfigured by a test; these are.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from programs.supervisor import embedded_redis_argv, free_port


def redis_started(url: str, server: subprocess.Popen[bytes], *, seconds: float = 20) -> bool:
    """Wait until the ``redis-server`` ``server`` answers at ``url``: True; False if it exited.

    Raises:
        RuntimeError: it neither answered nor exited within ``seconds``.
    """
    deadline = time.monotonic() + seconds
    with redis.Redis.from_url(url, socket_connect_timeout=0.5) as client:
        while True:
            with contextlib.suppress(redis.RedisError):
                if client.ping():
                    return True
            if server.poll() is not None:
                return False
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server at {url} did not answer in {seconds} s")
            time.sleep(0.05)


@contextlib.contextmanager
def running_redis(argv: list[str], url: str, log: Path) -> Iterator[bool]:
    """Run the ``redis-server`` of ``argv`` (its output to ``log``) for the block; whether it
    answered at ``url`` (False: it exited, see the log). Stopped after (SIGTERM)."""
    with open(log, "wb") as out:
        server = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield redis_started(url, server)
    finally:
        server.terminate()
        server.wait(15)


class PrivateRedis:
    """A ``redis-server`` of our own with AOF (``appendfsync always``) in ``directory``."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def _argv(self) -> list[str]:
        binary = shutil.which("redis-server")
        argv = (
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory)]
            if binary
            else embedded_redis_argv(self.port, str(self.directory))
        )
        return [*argv, "--appendonly", "yes", "--appendfsync", "always", "--save", ""]

    def start(self) -> None:
        """Start (again, on the same AOF) and wait until it answers (bounded)."""
        log = open(self.directory / "redis.log", "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(self._argv(), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        if not redis_started(self.url, self.proc):
            raise RuntimeError(f"private redis-server did not start on {self.port}")

    def refuse_writes(self, why: str = "memory") -> None:
        """Make Redis refuse writes as it does in production; ``why``:

        - ``memory``: it holds more than its ``maxmemory`` (``noeviction``) and refuses every
          write that would grow it, ``OOM``. (The limit is put below what it holds, rather than
          values written up to it: a Redis filled to its limit takes small writes again whenever
          a client's buffers shrink.)
        - ``disk``: a snapshot failed (its directory removed; a save point set), so it refuses
          every write, ``MISCONF``. Its files are gone: it cannot :meth:`start` again.
        - ``replicas``: ``min-replicas-to-write 1`` with no replica: every write, ``NOREPLICAS``.
        """
        with redis.Redis.from_url(self.url) as client:
            if why == "memory":
                used = int(client.info("memory")["used_memory"])
                client.config_set("maxmemory-policy", "noeviction")
                client.config_set("maxmemory", str(used // 2))
            elif why == "disk":
                shutil.rmtree(self.directory)
                client.config_set("save", "3600 1")
                client.bgsave()
                while client.info("persistence")["rdb_bgsave_in_progress"]:
                    time.sleep(0.01)
            elif why == "replicas":
                client.config_set("min-replicas-to-write", "1")
            else:
                raise ValueError(f"no way to refuse writes for {why!r}")
            try:
                client.set("antwort-test:probe", "x")
            except redis.ResponseError:
                return
            raise AssertionError(f"Redis still takes writes ({why})")

    def take_writes(self) -> None:
        """Redis takes writes again, whatever :meth:`refuse_writes` did (as an operator would)."""
        with redis.Redis.from_url(self.url) as client:
            client.config_set("maxmemory", "0")
            client.config_set("save", "")  # no save point: a failed snapshot no longer stops writes
            client.config_set("min-replicas-to-write", "0")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the server (SIGTERM: it writes the AOF out and exits)."""
        if self.proc is not None and self.proc.poll() is None:
            client = redis.Redis.from_url(self.url, socket_timeout=2)
            with contextlib.suppress(redis.RedisError), client:  # a save point: it saves first
                client.config_set("save", "")
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
