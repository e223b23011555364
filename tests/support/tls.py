"""Certificates for a Redis that speaks TLS: a CA and a server certificate for 127.0.0.1."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True, slots=True)
class Certificates:
    """The files ``redis-server``'s ``--tls-*`` options and its clients name."""

    ca: Path
    cert: Path
    key: Path

    def listen_options(self, port: int) -> list[tuple[str, str]]:
        """A ``redis-server``'s options (names and values) to listen on ``port`` over TLS only,
        with these files; clients are not asked for certificates."""
        return [
            ("port", "0"), ("tls-port", str(port)),
            ("tls-cert-file", str(self.cert)), ("tls-key-file", str(self.key)),
            ("tls-ca-cert-file", str(self.ca)), ("tls-auth-clients", "no"),
        ]  # fmt: skip

    def listen_args(self, port: int) -> list[str]:
        """:meth:`listen_options` as a ``redis-server`` command line's arguments."""
        return [arg for name, value in self.listen_options(port) for arg in (f"--{name}", value)]


def client_options(tls: Certificates | None) -> dict[str, Any]:
    """A redis-py client's options for a server that speaks TLS with ``tls`` ({}: plain).

    The client must name the server by the address its certificate names, 127.0.0.1.
    """
    return {"ssl": True, "ssl_ca_certs": str(tls.ca)} if tls else {}


def make_certificates(directory: Path) -> Certificates:
    """A CA and a server certificate for 127.0.0.1 signed by it, made by ``openssl``.

    Skips the test on a machine without ``openssl``.
    """
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl")

    def openssl(command: str) -> None:
        argv = ["openssl", *command.split()]
        subprocess.run(argv, cwd=directory, check=True, capture_output=True)

    directory.mkdir(parents=True, exist_ok=True)
    openssl("req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 1 -subj /CN=ca")
    openssl("req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1")
    (directory / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl(
        "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt "
        "-days 1 -extfile san.cnf"
    )
    return Certificates(directory / "ca.crt", directory / "server.crt", directory / "server.key")
