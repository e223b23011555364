"""A fleet on a Redis that speaks TLS only: ``rediss://`` with the CA of its certificate.

Store, events, pub/sub, Celery's queues and its result backend (a turn that calls two tools at
once is a chord) all go through one ``redis-server`` listening with ``--tls-port`` alone.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from programs.supervisor import free_port
from tests.e2e.own_fleet import assert_a_chord_and_a_stream_complete, small_fleet
from tests.support.chaos import redis_started


def _certificates(directory: Path) -> Path:
    """A CA and a server certificate for 127.0.0.1 signed by it (openssl); the CA's file."""

    def openssl(command: str) -> None:
        argv = ["openssl", *command.split()]
        subprocess.run(argv, cwd=directory, check=True, capture_output=True)

    openssl("req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 1 -subj /CN=ca")
    openssl("req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1")
    (directory / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl(
        "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt "
        "-days 1 -extfile san.cnf"
    )
    return directory / "ca.crt"


@contextlib.contextmanager
def _tls_redis(directory: Path) -> Iterator[str]:
    """A ``redis-server`` on a TLS port only; its ``rediss://`` URL (the CA named, no cert
    check setting: the fleet's default is to check)."""
    binary, openssl = shutil.which("redis-server"), shutil.which("openssl")
    if binary is None or openssl is None:
        pytest.skip("needs redis-server and openssl (the embedded Redis has no TLS)")
    ca = _certificates(directory)
    port = free_port()
    argv = [binary, *f"--port 0 --tls-port {port} --bind 127.0.0.1".split()]
    argv += ["--tls-cert-file", "server.crt", "--tls-key-file", "server.key"]
    argv += ["--tls-ca-cert-file", "ca.crt", "--tls-auth-clients", "no", "--save", ""]
    with open(directory / "redis.log", "wb") as log:
        server = subprocess.Popen(argv, cwd=directory, stdout=log, stderr=subprocess.STDOUT)
    url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca}"
    try:
        if not redis_started(url, server):
            pytest.skip("this redis-server was built without TLS")
        yield url
    finally:
        server.terminate()
        server.wait(15)


@pytest.mark.e2e
def test_the_fleet_runs_on_a_redis_that_speaks_only_tls(
    sim_url: str, tmp_path: Path, process_environ: dict[str, str]
) -> None:
    with (
        _tls_redis(tmp_path) as url,
        small_fleet(process_environ, tmp_path, sim_url, ANTWORT_REDIS_URL=url) as fleet,
    ):
        assert_a_chord_and_a_stream_complete(fleet)
