"""Real MCP servers for the tests, built on the ``mcp`` SDK's ``MCPServer``.

Run one with ``python -m tests.support.mcp_servers --transport streamable-http --port N``
(``sse`` and ``stdio`` too). :func:`start_server` starts one as a subprocess on a free loopback
port and waits until it answers; the fixtures stop it in their teardown.
:func:`start_example_server` does the same for ``examples/mcp_server.py``.

Tools: ``echo``, ``add`` (structured result), ``whoami`` (the headers the server received),
``fail`` (``is_error``), ``crash`` (a plain exception), ``slow`` (sleeps), ``picture`` (an image),
``grow`` (adds a tool and announces ``tools/list_changed``), ``vanish`` (the server exits
mid-call) and ``counted`` (sleeps, logging each start and end to ``$MCP_RUNS_FILE`` with the
caller's port: the chaos suite counts executions and finds the worker that runs a call).
"""

import argparse
import base64
import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp.server.transport_security import TransportSecuritySettings

from programs.ports import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE_SERVER = os.path.join(ROOT, "examples", "mcp_server.py")
"""The fleet's example MCP server (``compose.yaml``'s ``mcp-example``)."""

# A 1x1 transparent PNG.
PIXEL_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)


def digest(value: str) -> str:
    """What ``whoami`` reports of a header: a digest, so the secret never shows in outputs."""
    return hashlib.sha256(value.encode()).hexdigest()[:12]


class CountingServer(MCPServer):
    """Counts ``tools/list`` requests (the ``list_count`` tool tells)."""

    lists = 0

    async def list_tools(self):  # type: ignore[no-untyped-def]
        CountingServer.lists += 1
        return await super().list_tools()


def build_server(name: str) -> MCPServer:  # noqa: C901 - one nested function per tool
    """The test server ``name`` (its tools are the same whatever the name)."""
    server = CountingServer(name, log_level="CRITICAL")
    gathering = {"count": 0, "event": anyio.Event()}

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return f"{name}: {text}"

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="The headers this server received.")
    def whoami(ctx: Context) -> str:  # type: ignore[type-arg]
        headers = ctx.headers or {}
        token = headers.get("x-test-token", "-")
        auth = headers.get("authorization", "-")
        return f"token={digest(token)} authorization={digest(auth)}"

    @server.tool(description="How many tools/list requests this server answered.")
    def list_count() -> int:
        return CountingServer.lists

    async def nap() -> str:
        """Waits until eight naps run at once (or 10 s pass)."""
        gathering["count"] += 1
        if gathering["count"] >= 8:
            gathering["event"].set()
        with anyio.move_on_after(10):
            await gathering["event"].wait()
            return "together"
        return "alone"

    for index in range(1, 9):
        server.add_tool(nap, name=f"nap{index}", description="Naps with the others.")

    @server.tool(description="Always fails with the given message.")
    def fail(message: str) -> str:
        raise ToolError(message)

    @server.tool(description="Raises a plain exception.")
    def crash() -> str:
        raise RuntimeError("secret internal detail")

    @server.tool(description="The request's _meta this server received (JSON).")
    def received_meta(ctx: Context) -> str:  # type: ignore[type-arg]
        return json.dumps(dict(ctx.request_context.meta or {}), sort_keys=True)

    @server.tool(description="Sleeps, then answers.")
    async def slow(seconds: float) -> str:
        await anyio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool(description="A tiny picture.")
    def picture() -> Image:
        return Image(data=PIXEL_PNG, format="png")

    @server.tool(description="Adds the tool 'extra' and announces it.")
    async def grow(ctx: Context) -> str:  # type: ignore[type-arg]
        if "extra" not in {tool.name for tool in await server.list_tools()}:
            server.add_tool(_extra, name="extra", description="Appeared later.")
        await ctx.notify_tools_changed()
        with contextlib.suppress(Exception):  # a 2025-era session gets the old notification
            await ctx.session.send_tool_list_changed()
        return "grown"

    @server.tool(description="Sleeps, logging each start and end; answers the tag.")
    async def counted(tag: str, seconds: float, ctx: Context) -> str:  # type: ignore[type-arg]
        client = getattr(ctx.request_context.request, "client", None)
        _log_run("start", tag, client.port if client else 0)
        await anyio.sleep(seconds)
        _log_run("end", tag, client.port if client else 0)
        return f"counted {tag}"

    @server.tool(description="The server process exits mid-call.")
    def vanish() -> str:
        os._exit(3)

    return server


def _extra() -> str:
    return "extra!"


RUNS_FILE_VARIABLE = "MCP_RUNS_FILE"
"""Environment variable naming the file ``counted`` logs its runs to (unset: not logged)."""


def _log_run(what: str, tag: str, port: int) -> None:
    """One line ``<start|end> <tag> <caller port>``, written at once (the reader polls)."""
    path = os.environ.get(RUNS_FILE_VARIABLE)
    if path:
        with open(path, "a") as runs:
            runs.write(f"{what} {tag} {port}\n")


@dataclass
class RunningServer:
    """A server subprocess and where it listens."""

    process: subprocess.Popen[bytes]
    url: str

    def stop(self) -> None:
        """Terminate the server and wait for it."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def stdio_command(name: str = "local") -> tuple[str, list[str]]:
    """The command and arguments that run the test server over stdio."""
    return sys.executable, [
        "-m",
        "tests.support.mcp_servers",
        "--transport",
        "stdio",
        "--name",
        name,
    ]


def start_server(
    transport: str,
    *,
    name: str = "srv",
    port: int | None = None,
    any_host: bool = False,
    runs_file: str | None = None,
    handshake_era: bool = False,
) -> RunningServer:
    """Start a server over ``streamable-http`` or ``sse`` and wait until it accepts connections.

    ``any_host``: accept requests whatever their ``Host`` header (for names pinned to loopback).
    ``runs_file``: where ``counted`` logs its runs.
    ``handshake_era``: answer as a 2025-era server (``initialize``, no ``server/discover``).
    """
    port = port or free_port()
    argv = ["-m", "tests.support.mcp_servers", "--transport", transport, "--port", str(port)]
    argv += ["--name", name, *(["--any-host"] if any_host else [])]
    argv += ["--handshake-era"] if handshake_era else []
    path = "/mcp" if transport == "streamable-http" else "/sse"
    env = {RUNS_FILE_VARIABLE: runs_file} if runs_file else {}
    return _started(argv, port, path, env=env)


def start_example_server(port: int | None = None, *extra: str) -> RunningServer:
    """Start ``examples/mcp_server.py`` (the fleet's example server) on loopback and wait for it.

    ``extra``: more command-line arguments (``--allowed-host NAME``).
    """
    port = port or free_port()
    return _started([EXAMPLE_SERVER, "--port", str(port), *extra], port, "/mcp")


def _started(
    argv: list[str], port: int, path: str, *, env: dict[str, str] | None = None
) -> RunningServer:
    """Run ``python argv`` from the repository root; the server once it accepts connections."""
    process = subprocess.Popen(
        [sys.executable, *argv],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"MCP test server exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return RunningServer(process=process, url=f"http://127.0.0.1:{port}{path}")
        time.sleep(0.05)
    process.kill()
    process.wait(10)
    raise RuntimeError("MCP test server did not start")


LIST_AND_CALL_EVENTS = (
    "response.mcp_list_tools.in_progress",
    "response.mcp_list_tools.completed",
    "response.mcp_call.in_progress",
    "response.mcp_call_arguments.delta",
    "response.mcp_call_arguments.done",
    "response.mcp_call.completed",
)
"""The MCP events of a response that lists one server and makes one call, in order."""


@contextlib.contextmanager
def running(
    transport: str, *, name: str = "srv", any_host: bool = False
) -> Iterator[RunningServer]:
    """A server for the duration of a ``with`` block."""
    server = start_server(transport, name=name, any_host=any_host)
    try:
        yield server
    finally:
        server.stop()


class _HandshakeEra:
    """ASGI middleware: the server as a 2025-era one, which knows no ``server/discover``.

    It answers the probe as those servers answer any request but ``initialize`` without a
    session (400, "Missing session ID"), so the client falls back to the ``initialize``
    handshake, and the session is the 2025 kind: no ``subscriptions/listen`` stream.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or b"mcp-session-id" in dict(scope["headers"])
        ):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        with contextlib.suppress(ValueError, AttributeError):
            request = json.loads(body)
            if request.get("method") == "server/discover":
                error = {"code": -32600, "message": "Bad Request: Missing session ID"}
                reply = json.dumps({"jsonrpc": "2.0", "id": request.get("id"), "error": error})
                await send(
                    {
                        "type": "http.response.start",
                        "status": 400,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": reply.encode()})
                return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def main() -> None:
    """Run one test server in the foreground."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", default="streamable-http")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--name", default="srv")
    parser.add_argument("--any-host", action="store_true", help="accept any Host header")
    parser.add_argument(
        "--handshake-era", action="store_true", help="answer as a 2025-era server (no discover)"
    )
    args = parser.parse_args()
    server = build_server(args.name)
    security = (
        TransportSecuritySettings(enable_dns_rebinding_protection=False) if args.any_host else None
    )
    if args.transport == "stdio":
        server.run("stdio")
    elif args.transport == "sse":
        server.run("sse", host="127.0.0.1", port=args.port, transport_security=security)
    elif args.handshake_era:
        app = server.streamable_http_app(transport_security=security, host="127.0.0.1")
        uvicorn.run(_HandshakeEra(app), host="127.0.0.1", port=args.port, log_level="warning")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port, transport_security=security)


if __name__ == "__main__":
    main()
