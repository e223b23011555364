"""Calls sent as a server closes its idle connection: ``python -m bench.keepalive``.

uvicorn closes a keep-alive connection after 5 s idle (vLLM's server, the MCP SDK's servers;
Node and Hypercorn do too). A call sent on such a connection just then is reset unread. Each of
``--clients`` threads makes ``--rounds`` calls with a pause drawn from ``--gap LOW HIGH`` seconds
(around 5 s by default: the rare gap made common) between them, each on its own client, against:

- ``mcp``: the fleet's ``McpClient`` (one session per client: its own ``authorization``) calling
  ``add`` on the example MCP server (``examples/mcp_server.py``, uvicorn);
- ``model-lean``, ``model-httpx``: the fleet's model provider (``ChatCompletionsProvider``) over
  the lean transport and over httpx's own, streaming a short answer from a Chat Completions
  stand-in served by uvicorn (its defaults, as vLLM runs it).

It counts calls that failed and, for the model, calls the provider had to retry (its log's
"retry" warnings: each cost half a second). Run it in turns on two checkouts to compare; JSON on
stdout, or ``--out``.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import logging
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.fleet import ROOT
from programs.supervisor import wait_for_port

_STAND_IN = """
import json, sys, uvicorn
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

def chunk(delta, finish=None):
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return "data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 0,
                                  "model": "m", "choices": [choice]}) + "\\n\\n"

async def chat(request):
    await request.body()
    async def answer():
        yield chunk({"content": "Hello"})
        yield chunk({}, "stop")
        yield "data: [DONE]\\n\\n"
    return StreamingResponse(answer(), media_type="text/event-stream")

app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def _serve(argv: list[str], port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout=30.0, what=argv[0])
    except SystemExit:
        process.kill()
        raise
    return process


class _Retries(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "retry" in record.getMessage():
            self.count += 1


def _run(clients: int, rounds: int, gap: tuple[float, float], call: Any) -> dict[str, int]:
    outcomes: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def client(index: int) -> None:
        make = call(index)
        for _ in range(rounds):
            try:
                make()
                outcome = "ok"
            except Exception:
                outcome = "failed"
            with lock:
                outcomes[outcome] += 1
            time.sleep(random.uniform(*gap))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"ok": outcomes["ok"], "failed": outcomes["failed"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--gap", type=float, nargs=2, default=(4.95, 5.05), metavar=("LOW", "HIGH"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    from app.providers.openai_chat import ChatCompletionsProvider, model_http_client
    from app.providers.translate import ModelRequest
    from app.tools.mcp.client import McpClient
    from app.tools.mcp.target import ServerTarget
    from programs.ports import free_port

    mcp_port, model_port = free_port(), free_port()
    servers = [
        _serve(["examples/mcp_server.py", "--port", str(mcp_port)], mcp_port),
        _serve(["-c", _STAND_IN, str(model_port)], model_port),
    ]
    gap = (args.gap[0], args.gap[1])
    results: dict[str, Any] = {}
    try:
        mcp = McpClient(max_sessions=args.clients + 10)

        def mcp_call(index: int) -> Any:
            target = ServerTarget(
                label="example",
                url=f"http://127.0.0.1:{mcp_port}/mcp",
                headers=(("authorization", f"Bearer client-{index}"),),
                is_configured=True,
            )
            return lambda: mcp.call_tool(target, "add", {"a": 1, "b": 2})

        results["mcp"] = _run(args.clients, args.rounds, gap, mcp_call)
        mcp.close()
        request = ModelRequest(
            model="m",
            instructions=None,
            items=[{"type": "message", "role": "user", "content": "hi"}],
        )
        for name, lean in (("model-lean", True), ("model-httpx", False)):
            retries = _Retries()
            logging.getLogger("app.providers.openai_chat").addHandler(retries)

            def model_call(index: int, lean: bool = lean) -> Any:
                provider = ChatCompletionsProvider(
                    base_url=f"http://127.0.0.1:{model_port}/v1",
                    client=model_http_client(lean_http=lean),
                )
                return lambda: list(provider.stream(request))

            results[name] = {**_run(args.clients, args.rounds, gap, model_call)}
            results[name]["retried"] = retries.count
            logging.getLogger("app.providers.openai_chat").removeHandler(retries)
    finally:
        for server in servers:
            server.terminate()
            server.wait(10)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    report = {
        "command": "python -m bench.keepalive " + " ".join(argv or sys.argv[1:]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "clients": args.clients,
        "rounds": args.rounds,
        "gap_seconds": list(gap),
        "results": results,
    }
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
