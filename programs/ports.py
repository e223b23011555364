"""Free loopback ports for processes a program starts (the embedded Redis, test fleets).

A port is picked here and bound later by another process, so something else may take it in
between. The port the kernel gives a ``bind(("127.0.0.1", 0))`` comes from its ephemeral range,
the same range every outgoing connection's local end is drawn from: on a busy machine any
connection may take it first, and the child then fails to bind. So ports are picked below that
range, where only an explicit bind takes one, and never twice by one process.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

LOWEST = 20000
"""Below this lie the well-known services' ports (databases, brokers, web servers)."""

IANA_EPHEMERAL = (49152, 65535)
"""The ephemeral range where the kernel does not say its own (macOS, the BSDs)."""

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_random = random.SystemRandom()  # a test seeding ``random`` must not make processes agree
_lock = threading.Lock()
_handed_out: set[int] = set()


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (first, last)."""
    try:
        first, last = _RANGE_FILE.read_text().split()
    except (OSError, ValueError):
        return IANA_EPHEMERAL
    return int(first), int(last)


def free_port() -> int:
    """A free TCP port on loopback, outside the ephemeral range and new to this process.

    Falls back to a port the kernel picks when the ephemeral range leaves too little below it.

    Raises:
        RuntimeError: no free port found in the range (after many tries).
    """
    first_ephemeral = ephemeral_range()[0]
    if first_ephemeral - LOWEST < 1000:
        return _kernel_port()
    with _lock:
        for _ in range(1000):
            port = _random.randrange(LOWEST, first_ephemeral)
            if port not in _handed_out and _binds(port):
                _handed_out.add(port)
                return port
    raise RuntimeError(f"no free loopback port between {LOWEST} and {first_ephemeral}")


def _binds(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _kernel_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
