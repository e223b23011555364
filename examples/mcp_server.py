"""An example MCP server for the fleet: a few small, deterministic tools over streamable HTTP.

Run it from the repository root (the project's dependencies include the ``mcp`` SDK)::

    python examples/mcp_server.py                       # http://127.0.0.1:8765/mcp
    python examples/mcp_server.py --host 0.0.0.0 --port 8765 --allowed-host mcp-example

and declare it to the fleet as the configured server ``example``: ``ANTWORT_MCP_SERVERS_FILE=
examples/mcp_servers.local.json`` for a server on loopback (the ``Procfile`` does that), or
``examples/mcp_servers.json`` in ``compose.yaml``, where it runs as the ``mcp-example`` service.
A request then uses it with ``{"type": "mcp", "server_label": "example"}``.

Tools: ``echo``, ``add`` (a structured result), ``word_count`` (a structured result) and
``utc_now``. ``GET /health`` answers ``{"status": "ok"}`` for health checks.

``Host`` headers (DNS rebinding protection): on a loopback ``--host`` only loopback names are
accepted, the SDK's default. ``--allowed-host NAME`` (repeatable) accepts ``NAME`` as well and
keeps the protection on any address; on a non-loopback address without it, any ``Host`` is.
"""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Annotated, TypedDict

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
PATH = "/mcp"
GRACEFUL_SHUTDOWN_SECONDS = 3
"""On SIGTERM, how long calls in flight may finish before open streams are cut."""
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


class Sum(TypedDict):
    """The result of add."""

    sum: int


class WordCount(TypedDict):
    """The result of word_count."""

    words: int
    lines: int
    characters: int


def echo(text: Annotated[str, Field(description="The text to send back.")]) -> str:
    """Send the text back unchanged."""
    return text


def add(
    a: Annotated[int, Field(description="The first integer.")],
    b: Annotated[int, Field(description="The second integer.")],
) -> Sum:
    """Add two integers."""
    return {"sum": a + b}


def word_count(text: Annotated[str, Field(description="The text to count.")]) -> WordCount:
    """Count the words (whitespace-separated), lines and characters of a text."""
    return {"words": len(text.split()), "lines": len(text.splitlines()), "characters": len(text)}


def utc_now() -> str:
    """The current UTC time in ISO 8601, to the second."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


async def health(request: Request) -> Response:
    """``GET /health``: the server is up."""
    return JSONResponse({"status": "ok"})


def build_server() -> MCPServer:
    """The example server with its tools and health route."""
    server = MCPServer(
        "antwort-example",
        instructions="Small deterministic tools: echo, add, word_count, utc_now.",
        log_level="WARNING",
    )
    for tool in (echo, add, word_count, utc_now):
        server.add_tool(tool)
    server.custom_route("/health", methods=["GET"])(health)
    return server


def transport_security(host: str, allowed_hosts: list[str]) -> TransportSecuritySettings | None:
    """The ``Host``/``Origin`` checks for a server bound to ``host`` (see the module docstring)."""
    if not allowed_hosts:
        if host in ("127.0.0.1", "localhost", "::1"):
            return None  # the SDK's default for loopback: only loopback Host headers
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    names = [*LOOPBACK_HOSTS, *allowed_hosts]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{name}:*" for name in names],
        allowed_origins=[f"http://{name}:*" for name in names],
    )


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and serve until interrupted."""
    parser = argparse.ArgumentParser(description="The fleet's example MCP server.")
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to bind")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to bind")
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host header name to accept besides loopback (repeatable)",
    )
    args = parser.parse_args(argv)
    server = build_server()
    app = server.streamable_http_app(
        streamable_http_path=PATH,
        transport_security=transport_security(args.host, args.allowed_host),
        host=args.host,
    )
    # What MCPServer.run("streamable-http") does, with a bound on the graceful shutdown: uvicorn
    # otherwise waits on SIGTERM until every open stream ends, and each fleet worker keeps a
    # change-notification stream open per session, so the server would never stop by itself.
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=server.settings.log_level.lower(),
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )


if __name__ == "__main__":
    main()
