"""``antwort chat``: watch an agent work from a terminal, against any Antwort gateway.

Each prompt is sent as a background, streamed response that asks for the ``antwort:progress``
events, chained to the previous answer with ``previous_response_id`` (an interactive session
when no prompt is given). The screen (:mod:`programs.chat.view`) shows the plan as a checklist, each
step with a spinner and its result, and the answer as Markdown. Ctrl+C cancels the response on
the server (``POST /v1/responses/{id}/cancel``) and exits with status 130. ``--resume ID``
reattaches to a running background response (``GET …?stream=true&starting_after=N``);
``--json`` prints the raw events instead; ``--tools MODULE`` offers the module's Python
functions as client-side function tools and answers the model's calls of them itself.
A stream that breaks off is reattached from the last event seen.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from rich.console import Console
from rich.live import Live

from app.config import Settings
from app.progress import PROGRESS_INCLUDE
from app.protocol.request import TOOL_PROTOCOL_METADATA_KEY
from programs.chat.tools import ClientTool, load_client_tools
from programs.chat.view import ChatView

_FINAL_STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled", "requires_action"})
_REATTACH_TRIES = 3
EXIT_INTERRUPTED = 130


class GatewayError(Exception):
    """The gateway refused a request; ``message`` is its error message."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class Gateway:
    """The few calls ``antwort chat`` makes, over one httpx client."""

    def __init__(self, client: httpx.Client):
        self._client = client

    def create(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """``POST /responses`` with ``stream``: the events."""
        return self._events("POST", "/responses", json=body)

    def follow(self, response_id: str, after: int) -> Iterator[dict[str, Any]]:
        """``GET /responses/{id}?stream=true&starting_after=N``: the events after N."""
        params = {"stream": "true", "starting_after": str(after)}
        return self._events("GET", f"/responses/{response_id}", params=params)

    def retrieve(self, response_id: str) -> dict[str, Any]:
        """``GET /responses/{id}``."""
        return self._json(self._client.get(f"/responses/{response_id}"))

    def cancel(self, response_id: str) -> dict[str, Any]:
        """``POST /responses/{id}/cancel``."""
        return self._json(self._client.post(f"/responses/{response_id}/cancel"))

    def _events(self, method: str, url: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        with self._client.stream(method, url, **kwargs) as response:
            if response.status_code != 200:
                response.read()
                self._json(response)
            for line in response.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    yield json.loads(line[6:])

    @staticmethod
    def _json(response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            body = {"error": {"message": response.text[:300]}}
        if response.status_code != 200:
            error = body.get("error") if isinstance(body, dict) else None
            message = error.get("message") if isinstance(error, dict) else None
            raise GatewayError(message or f"HTTP {response.status_code}")
        return dict(body)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatOptions:
    """What every request of the session carries, and how the screen looks."""

    model: str | None = None
    protocol: str | None = None
    """``native`` or ``json`` (``metadata.antwort_tool_protocol``); None: the server's choice."""
    instructions: str | None = None
    internal_tools: tuple[str, ...] = ()
    client_tools: dict[str, ClientTool] = field(default_factory=dict)
    raw: bool = False
    """Print the raw events as JSON lines instead of the view."""
    full_results: bool = False


class ChatSession:
    """One conversation with a gateway; :attr:`current_id` is the response in flight."""

    def __init__(self, gateway: Gateway, options: ChatOptions, console: Console):
        self.gateway = gateway
        self.options = options
        self.console = console
        self.notes = Console(stderr=True, soft_wrap=True) if options.raw else console
        """Where remarks go: never into a ``--json`` stream."""
        self.previous_response_id: str | None = None
        self.current_id: str | None = None
        self.is_running = False
        """A response is being shown and has not ended yet (what Ctrl+C cancels)."""

    def ask(self, prompt: str) -> str:
        """Send a prompt and show the answer; returns the final status."""
        view = ChatView(full_results=self.options.full_results)
        with self._screen(view) as show:
            status = self._follow(self.gateway.create(self._body(prompt)), view, show)
            while (outputs := self._answer_client_calls(view)) is not None:
                status = self._follow(self.gateway.create(self._body(outputs)), view, show)
        self.previous_response_id = self.current_id
        return status

    def resume(self, response_id: str, after: int) -> str:
        """Reattach to a response and show it from the event after ``after``."""
        self.current_id = response_id
        view = ChatView(full_results=self.options.full_results, last_sequence_number=after)
        with self._screen(view) as show:
            status = self._follow(self.gateway.follow(response_id, after), view, show)
            while (outputs := self._answer_client_calls(view)) is not None:
                status = self._follow(self.gateway.create(self._body(outputs)), view, show)
        self.previous_response_id = self.current_id
        return status

    def cancel(self) -> None:
        """Cancel the response in flight, on the server."""
        if self.current_id is None or not self.is_running:
            return
        try:
            status = self.gateway.cancel(self.current_id)["status"]
        except (GatewayError, httpx.HTTPError) as exc:
            self.notes.print(f"[red]could not cancel {self.current_id}: {exc}[/]", soft_wrap=True)
            return
        self.notes.print(f"[yellow]{self.current_id} is {status} on the server.[/]", soft_wrap=True)

    def _body(self, given: str | list[dict[str, Any]]) -> dict[str, Any]:
        options = self.options
        body: dict[str, Any] = {
            "input": given,
            "stream": True,
            "background": True,
            "include": [PROGRESS_INCLUDE],
        }
        tools = [{"type": "internal", "name": name} for name in options.internal_tools]
        tools += [tool.definition() for tool in options.client_tools.values()]
        optional = {
            "model": options.model,
            "instructions": options.instructions,
            # tool outputs continue the response in flight; a prompt, the last answer
            "previous_response_id": (
                self.current_id if isinstance(given, list) else self.previous_response_id
            ),
            "tools": tools or None,
            "metadata": {TOOL_PROTOCOL_METADATA_KEY: options.protocol}
            if options.protocol
            else None,
        }
        body.update({key: value for key, value in optional.items() if value is not None})
        return body

    @contextlib.contextmanager
    def _screen(self, view: ChatView) -> Iterator[Callable[[dict[str, Any]], None]]:
        if self.options.raw:
            yield lambda event: print(json.dumps(event), flush=True)
            return
        with Live(view, console=self.console, refresh_per_second=12) as live:
            yield lambda event: live.refresh()

    def _follow(
        self,
        events: Iterator[dict[str, Any]],
        view: ChatView,
        show: Callable[[dict[str, Any]], None],
    ) -> str:
        """Feed the events to the view; reattach if the stream breaks off; the final status."""
        self.is_running = True
        for attempt in range(_REATTACH_TRIES + 1):
            try:
                for event in events:
                    view.feed(event)
                    self.current_id = view.response_id or self.current_id
                    show(event)
                break
            except (httpx.TransportError, httpx.RemoteProtocolError):
                if self.current_id is None or attempt == _REATTACH_TRIES:
                    raise
                events = self.gateway.follow(self.current_id, view.last_sequence_number)
        if view.status not in _FINAL_STATUSES and self.current_id is not None:
            # A cancelled response's stream ends without a terminal event: ask for the status.
            view.status = str(self.gateway.retrieve(self.current_id)["status"])
            show({})
        self.is_running = False
        return str(view.status)

    def _answer_client_calls(self, view: ChatView) -> list[dict[str, Any]] | None:
        """Run the client tools the paused response waits for; None when it waits for none."""
        if view.status not in ("completed", "requires_action") or self.current_id is None:
            return None
        tools = self.options.client_tools
        output = self.gateway.retrieve(self.current_id)["output"]
        answered = {i["call_id"] for i in output if i["type"] == "function_call_output"}
        pending = [
            i
            for i in output
            if i["type"] == "function_call" and i["call_id"] not in answered and i["name"] in tools
        ]
        if not pending:
            return None
        outputs = []
        for call in pending:
            result = tools[call["name"]].call(call["arguments"])
            view.finish_step(call["call_id"], result, is_error=result.startswith("Error:"))
            outputs.append(
                {"type": "function_call_output", "call_id": call["call_id"], "output": result}
            )
        view.status = None
        return outputs


def options_from(args: argparse.Namespace) -> ChatOptions:
    """The session's options from the command line."""
    return ChatOptions(
        model=args.model,
        protocol=args.protocol,
        instructions=args.instructions,
        internal_tools=tuple(args.internal or ()),
        client_tools=load_client_tools(args.tools) if args.tools else {},
        raw=args.json,
        full_results=args.full_results,
    )


def run_chat(args: argparse.Namespace, settings: Settings, console: Console | None = None) -> int:
    """Run ``antwort chat``: one prompt, ``--resume``, or an interactive session."""
    console = console or Console()
    base_url = args.base_url or f"http://{settings.host}:{settings.port}/v1"
    key = os.environ.get("OPENAI_API_KEY") or next(iter(sorted(settings.api_key_set)), "none")
    timeout = httpx.Timeout(None, connect=10)
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=timeout) as client:
        options = options_from(args)
        if options.model is None and args.resume is None:
            model = settings.default_model or _first_model(client)
            options = dataclasses.replace(options, model=model)
        session = ChatSession(Gateway(client), options, console)
        try:
            return _converse(session, args, console)
        except KeyboardInterrupt:
            session.cancel()
            return EXIT_INTERRUPTED
        except (GatewayError, httpx.HTTPError) as exc:
            console.print(f"[red]error: {exc}[/]")
            return 1


def _converse(session: ChatSession, args: argparse.Namespace, console: Console) -> int:
    if args.resume:
        return 0 if session.resume(args.resume, args.after) == "completed" else 1
    if args.prompt:
        return 0 if session.ask(args.prompt) == "completed" else 1
    if args.json:
        console = Console(stderr=True)  # stdout carries nothing but the events
    while True:
        try:
            prompt = console.input("[bold]you>[/] ")
        except EOFError:
            return 0
        if prompt.strip() in ("/exit", "/quit"):
            return 0
        if prompt.strip():
            session.ask(prompt)


def _first_model(client: httpx.Client) -> str | None:
    response = client.get("/models")
    data = response.json().get("data", []) if response.status_code == 200 else []
    return str(data[0]["id"]) if data else None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``antwort chat``."""
    parser.add_argument("prompt", nargs="?", default=None, help="ask once (else: interactive)")
    parser.add_argument("--base-url", default=None, help="gateway URL, e.g. http://host:8080/v1")
    parser.add_argument("--model", default=None)
    parser.add_argument(
        "--protocol",
        choices=("native", "json"),
        default=None,
        help="tool protocol of the model (default: the server's setting)",
    )
    parser.add_argument("--instructions", default=None)
    parser.add_argument(
        "--internal",
        action="append",
        metavar="NAME",
        help="offer an internal tool of the fleet (repeatable)",
    )
    parser.add_argument(
        "--tools",
        metavar="MODULE",
        default=None,
        help="offer the module's Python functions as client-side tools",
    )
    parser.add_argument(
        "--resume", metavar="ID", default=None, help="reattach to a running background response"
    )
    parser.add_argument(
        "--after",
        type=int,
        default=-1,
        metavar="N",
        help="with --resume: show the events after sequence number N",
    )
    parser.add_argument("--full-results", action="store_true", help="show tool results whole")
    parser.add_argument("--json", action="store_true", help="print the raw events")
