"""Built-in internal tools and an entry-point plugin, called by the model through the gateway."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai
import pytest

from tests.support.serving import serving


class _Pages(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/hop":
            self.send_response(302)
            self.send_header("Location", "http://localhost:1/elsewhere")  # not allowed
            self.end_headers()
            return
        kind, body = ("image/png", b"\x89PNG") if self.path == "/img" else ("text/plain", b"")
        body = body or ("page " + "x" * 5000).encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def pages() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    with serving(server):
        yield f"http://127.0.0.1:{server.server_address[1]}"


def call_tool(client: openai.OpenAI, name: str, text: str) -> Any:
    response = client.responses.create(
        model="antwort-sim",
        input=f"use {name} {text}",
        tools=[{"type": "internal", "name": name}],  # type: ignore[list-item]
    )
    assert [item.type for item in response.output][:2] == ["function_call", "function_call_output"]
    return response.output[1]


def test_unit_convert_converts(client: openai.OpenAI) -> None:
    result = call_tool(client, "unit_convert", "value=5 from_unit=km to_unit=mi")
    assert result.output == "3.106855961 mi"
    result = call_tool(client, "unit_convert", "value=100 from_unit=C to_unit=F")
    assert result.output == "212 F"
    result = call_tool(client, "unit_convert", "value=1 from_unit=kg to_unit=m")
    assert result.output.startswith("Error: cannot convert")


def test_http_fetch_reads_allowed_hosts_within_bounds(client: openai.OpenAI, pages: str) -> None:
    result = call_tool(client, "http_fetch", f"url={pages}/page")
    assert result.output.startswith(f"HTTP 200 {pages}/page\n\npage xxx")
    image = call_tool(client, "http_fetch", f"url={pages}/img")
    assert image.output.startswith("Error:") and "image/png" in image.output


def test_http_fetch_refuses_other_hosts_and_redirects_to_them(
    client: openai.OpenAI, pages: str
) -> None:
    refused = call_tool(client, "http_fetch", "url=http://localhost:6379/")
    assert refused.output.startswith("Error: host 'localhost' is not allowed")
    hop = call_tool(client, "http_fetch", f"url={pages}/hop")
    assert "not allowed" in hop.output
    scheme = call_tool(client, "http_fetch", "url=file:///etc/passwd")
    assert "only http(s)" in scheme.output


def test_plugin_tool_from_an_entry_point(client: openai.OpenAI) -> None:
    result = call_tool(client, "text_stats", 'text="to be or not to be"')
    assert json.loads(result.output)["words"] == 6
