"""Where an MCP server is and how to reach it: one value the client pools its sessions by."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

Transport = Literal["streamable_http", "sse", "stdio"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerTarget:
    """One MCP server as the client connects to it.

    ``headers`` hold secrets (per-request ``headers``/``authorization``): the target's ``repr``
    hides them, and :attr:`key` only carries their digest.
    """

    label: str
    transport: Transport = "streamable_http"
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    timeout_seconds: float = 30.0
    """Deadline of one call (and of a listing) on this server."""
    is_configured: bool = False
    """Comes from the server configuration (trusted: no allowlist check)."""

    @property
    def key(self) -> str:
        """The pool key: server identity plus a digest of its headers and environment."""
        digest = hashlib.sha256()
        for part in (self.transport, self.url or "", self.command or "", *self.args):
            digest.update(part.encode() + b"\0")
        for name, value in (*self.headers, *self.env):
            digest.update(name.lower().encode() + b"\0" + value.encode() + b"\0")
        return f"{self.label}:{digest.hexdigest()[:32]}"
