"""What this process holds open, as the kernel sees it (closed means closed, not collectable)."""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import urlsplit

import psutil


def connections_to(ports: Collection[int]) -> set[int]:
    """This process's open TCP connections to any of ``ports``, by their local port."""
    return {
        held.laddr.port
        for held in psutil.Process().net_connections("tcp")
        if held.raddr and held.raddr.port in ports
    }


def redis_port(redis_url: str) -> int:
    """The port a ``redis://`` URL names (Redis's own by default)."""
    return urlsplit(redis_url).port or 6379
