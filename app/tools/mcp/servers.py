"""The MCP servers a process knows, resolved to :class:`ServerTarget` values.

Configured servers come from ``ANTWORT_MCP_SERVERS_FILE``; per-request ones from a response.

The configuration file is JSON::

    {"servers": {
        "docs": {"url": "https://docs.example/mcp", "headers": {"X-Key": "…"},
                 "timeout_seconds": 20, "require_approval": "never"},
        "legacy": {"url": "http://10.0.0.5:9000/sse", "transport": "sse"},
        "local": {"command": "python", "args": ["-m", "my_server"], "env": {"TOKEN": "…"}}
    }}

stdio servers exist only here: a request can never start a process.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.aead import fleet_secret
from app.config import Settings
from app.errors import ServerError, UpstreamError
from app.tools.base import McpToolRef
from app.tools.mcp.security import Sealer
from app.tools.mcp.target import ServerTarget


class ConfiguredServer(BaseModel):
    """One server of the configuration file."""

    model_config = ConfigDict(extra="forbid")
    url: str | None = None
    transport: Literal["streamable_http", "sse"] | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_seconds: float | None = Field(default=None, gt=0)
    require_approval: Any = None
    allowed_tools: list[str] | None = None
    description: str | None = None


class ServersFile(BaseModel):
    """The configuration file."""

    model_config = ConfigDict(extra="forbid")
    servers: dict[str, ConfiguredServer] = Field(default_factory=dict)


@functools.cache
def load_configured(path: str | None) -> dict[str, ConfiguredServer]:
    """The configured servers by label (read once per process).

    Raises:
        ServerError: the file is unreadable or invalid (workers fail at start; the gateway
            answers 500 to requests with MCP tools until it is fixed).
    """
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            parsed = ServersFile.model_validate(json.load(handle))
    except (OSError, ValueError, ValidationError) as exc:
        raise ServerError(f"ANTWORT_MCP_SERVERS_FILE {path!r} is invalid: {exc}") from None
    for label, server in parsed.servers.items():
        if (server.url is None) == (server.command is None):
            raise ServerError(f"MCP server '{label}' needs exactly one of 'url' and 'command'.")
    return parsed.servers


def seal_key(settings: Settings) -> bytes:
    """The sealing key: configured, or derived from the fleet's key in ``secrets_file``.

    Raises:
        MissingSecretError: neither is configured.
    """
    if settings.mcp_secret_key:
        return settings.mcp_secret_key.encode()
    return fleet_secret(settings.secrets_file, "mcp", setting="ANTWORT_MCP_SECRET_KEY")


def transport_of(url: str) -> Literal["streamable_http", "sse"]:
    """Per-request servers: an URL whose path ends in ``/sse`` is an SSE server."""
    return "sse" if url.split("?")[0].rstrip("/").endswith("/sse") else "streamable_http"


class McpServers:
    """Resolves tool references to connection targets for this process."""

    def __init__(self, settings: Settings, *, sealer: Sealer | Callable[[], Sealer]):
        self.settings = settings
        self._sealer = sealer
        self.configured = load_configured(settings.mcp_servers_file)

    @functools.cached_property
    def sealer(self) -> Sealer:
        """Opens per-request headers; made on first use, so a worker without a key still starts."""
        return self._sealer if isinstance(self._sealer, Sealer) else self._sealer()

    def target(self, ref: McpToolRef) -> ServerTarget:
        """Where ``ref``'s server is, with its headers opened.

        Raises:
            UpstreamError: the server is not configured here, or its headers cannot be opened.
        """
        return self.target_of(ref.server_label, ref.server_url, ref.sealed_headers)

    def target_of(self, label: str, url: str | None, sealed: str | None) -> ServerTarget:
        """See :meth:`target`."""
        timeout = self.settings.mcp_timeout_seconds
        if url is None:
            return self._configured_target(label)
        headers: Mapping[str, str] = {}
        if sealed:
            try:
                headers = self.sealer.open(label, sealed)
            except ValueError as exc:
                raise UpstreamError(f"MCP server '{label}': {exc}.") from None
        return ServerTarget(
            label=label,
            transport=transport_of(url),
            url=url,
            headers=tuple(sorted(headers.items())),
            timeout_seconds=timeout,
        )

    def _configured_target(self, label: str) -> ServerTarget:
        server = self.configured.get(label)
        if server is None:
            raise UpstreamError(f"MCP server '{label}' is not configured on this worker.")
        timeout = server.timeout_seconds or self.settings.mcp_timeout_seconds
        if server.command is not None:
            return ServerTarget(
                label=label,
                transport="stdio",
                command=server.command,
                args=tuple(server.args),
                env=tuple(sorted(server.env.items())),
                timeout_seconds=timeout,
                is_configured=True,
            )
        assert server.url is not None
        return ServerTarget(
            label=label,
            transport=server.transport or transport_of(server.url),
            url=server.url,
            headers=tuple(sorted(server.headers.items())),
            timeout_seconds=timeout,
            is_configured=True,
        )


def secret_headers(tool: Mapping[str, Any]) -> dict[str, str]:
    """A request's ``headers`` plus ``authorization`` as a bearer header."""
    headers = dict(tool.get("headers") or {})
    if tool.get("authorization"):
        headers["Authorization"] = f"Bearer {tool['authorization']}"
    return headers
