"""A fleet on a Redis reached by a Unix socket: ``unix://`` with a password and a database.

Store, events, pub/sub, Celery's queues and its result backend (a turn that calls two tools at
once is a chord) all go through one ``redis-server`` that listens on a socket file and no port.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from programs.supervisor import embedded_redis_argv
from tests.e2e.own_fleet import assert_a_chord_and_a_stream_complete, small_fleet
from tests.support.private_redis import running_redis

PASSWORD = "p@ss word"


@contextlib.contextmanager
def _socket_redis() -> Iterator[tuple[str, Path]]:
    """A ``redis-server`` on a Unix socket only, with a password; its ``unix://`` URL (db 3)
    and the socket's path."""
    # a short directory: a socket's path may not be longer than 107 bytes
    with tempfile.TemporaryDirectory(prefix="antwort-sock-") as directory:
        sock = Path(directory) / "redis.sock"
        binary = shutil.which("redis-server")
        argv = [binary, "--dir", directory] if binary else embedded_redis_argv(0, directory)
        argv += ["--port", "0", "--unixsocket", str(sock), "--requirepass", PASSWORD]
        argv += ["--save", ""]
        url = f"unix://:p%40ss%20word@{sock}?db=3"
        log = Path(directory) / "redis.log"
        with running_redis(argv, url, log) as started:
            assert started, log.read_text()
            yield url, sock


@pytest.mark.e2e
def test_the_fleet_runs_on_a_redis_reached_by_a_unix_socket(
    sim_url: str, tmp_path: Path, process_environ: dict[str, str]
) -> None:
    with (
        _socket_redis() as (url, sock),
        small_fleet(process_environ, tmp_path, sim_url, ANTWORT_REDIS_URL=url) as fleet,
    ):
        assert_a_chord_and_a_stream_complete(fleet)  # through the socket
        with redis.Redis(unix_socket_path=str(sock), password=PASSWORD, db=3) as client:
            assert client.dbsize() > 0  # the store is in the database the URL names
