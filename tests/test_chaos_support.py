"""The chaos harness signals the process it means to (tests/support/chaos.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from tests.support.chaos import pid_on_port

_HOLD = """
import socket, sys
peer = int(sys.argv[1])
conn = socket.socket()
conn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
conn.bind(("127.0.0.1", 0))
conn.connect(("127.0.0.1", peer))
print(conn.getsockname()[1], flush=True)
sys.stdin.read()
"""


def test_the_caller_is_found_by_both_ends_of_its_connection() -> None:
    # Linux gives one local port to several connections whose peers differ: another worker's
    # Redis connection can have the local port of the model call the harness means to kill
    # (a poison-turn run once killed a bystander, and the caller's retry made a 4th delivery).
    redis_like = socket.create_server(("127.0.0.1", 0))
    model_like = socket.create_server(("127.0.0.1", 0))
    with (
        redis_like,
        model_like,
        subprocess.Popen(
            [sys.executable, "-c", _HOLD, str(redis_like.getsockname()[1])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as other,
        socket.socket() as caller,
    ):
        assert other.stdout is not None
        port = int(other.stdout.readline())
        caller.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        caller.bind(("127.0.0.1", port))  # the same local port, another peer
        caller.connect(model_like.getsockname())
        both = {other.pid, os.getpid()}

        assert pid_on_port(port, both, peer_port=model_like.getsockname()[1]) == os.getpid()
        assert pid_on_port(port, both, peer_port=redis_like.getsockname()[1]) == other.pid
        other.kill()
