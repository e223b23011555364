"""``antwort chat``: talk to any Antwort gateway from a terminal.

Each prompt is sent as a background, streamed response (so Ctrl-C can cancel it on the server),
chained to the previous answer with ``previous_response_id``. ``--json`` prints the raw events.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import httpx

from app.config import Settings


def _events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[6:])


class ChatSession:
    """One conversation with a gateway."""

    def __init__(self, client: httpx.Client, *, model: str | None, raw: bool):
        self.client = client
        self.model = model
        self.raw = raw
        self.previous_response_id: str | None = None
        self.current_id: str | None = None

    def ask(self, prompt: str) -> str:
        """Stream one answer to stdout; returns the final status."""
        body: dict[str, Any] = {"input": prompt, "stream": True, "background": True}
        if self.model:
            body["model"] = self.model
        if self.previous_response_id:
            body["previous_response_id"] = self.previous_response_id
        status = "failed"
        with self.client.stream("POST", "/responses", json=body) as response:
            if response.status_code != 200:
                response.read()
                print(f"error: {response.json()['error']['message']}", file=sys.stderr)
                return status
            for event in _events(response):
                status = self._show(event) or status
        print()
        return status

    def _show(self, event: dict[str, Any]) -> str | None:
        if self.raw:
            print(json.dumps(event), flush=True)
        elif event["type"] == "response.output_text.delta":
            print(event["delta"], end="", flush=True)
        elif (
            event["type"] == "response.output_item.done"
            and event["item"]["type"] == "function_call"
        ):
            item = event["item"]
            print(f"\n[function call] {item['name']}({item['arguments']})", flush=True)
        if "response" in event:
            self.current_id = event["response"]["id"]
            if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
                self.previous_response_id = self.current_id
                return str(event["response"]["status"])
        return None

    def cancel(self) -> None:
        """Cancel the answer in flight, on the server."""
        if self.current_id:
            self.client.post(f"/responses/{self.current_id}/cancel")
            print(f"\n[cancelled {self.current_id}]", file=sys.stderr)


def _first_model(client: httpx.Client) -> str | None:
    response = client.get("/models")
    data = response.json().get("data", []) if response.status_code == 200 else []
    return str(data[0]["id"]) if data else None


def run_chat(args: argparse.Namespace, settings: Settings) -> int:
    """Run one prompt (``antwort chat "…"``) or an interactive session."""
    base_url = args.base_url or f"http://{settings.host}:{settings.port}/v1"
    key = os.environ.get("OPENAI_API_KEY") or next(iter(sorted(settings.api_key_set)), "none")
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(
        base_url=base_url, headers=headers, timeout=httpx.Timeout(None, connect=10)
    ) as client:
        model = args.model or settings.default_model or _first_model(client)
        session = ChatSession(client, model=model, raw=args.json)
        try:
            if args.prompt:
                return 0 if session.ask(args.prompt) == "completed" else 1
            while True:
                try:
                    prompt = input("you> ")
                except EOFError:
                    return 0
                if prompt.strip():
                    session.ask(prompt)
        except KeyboardInterrupt:
            session.cancel()
            return 130
