"""The console in a real browser: Debian's headless chromium against a real fleet.

A background response calls two internal tools (one held until the page saw its bar running);
the page shows the queues and their workers, then the response's turns, model calls and tool calls
in the waterfall while it runs and after. The screenshot goes to ``CONSOLE_SCREENSHOT``
when set (bench/results/console.png was taken so), else to the test's tmp dir: a test run
leaves the checkout as it was.
On a fleet with keys the page asks for one, and a tenant sees only its own responses.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import redis

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import TERMINAL, internal, wait_for_status, wait_until_tool_runs
from tests.e2e.own_fleet import own_fleet
from tests.support.browser import CHROMIUM, Browser

SCREENSHOT_SETTING = "CONSOLE_SCREENSHOT"

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Debian's chromium is not installed (apt-get install -y chromium chromium-driver)",
)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    running = Browser(tmp_path / "chromium-profile")
    yield running
    running.close()


def _rows(browser: Browser, selector: str) -> list[str]:
    rows = browser.evaluate(
        f"[...document.querySelectorAll({selector!r})].map(r => r.innerText.replace(/\\n/g, ' '))"
    )
    assert isinstance(rows, list)
    return [str(row) for row in rows]


def test_console_shows_the_queues_and_a_responses_turns_and_tool_calls_live(
    fleet: Fleet, client: openai.OpenAI, browser: Browser, counters: redis.Redis, tmp_path: Path
) -> None:
    prefix = fleet.env["ANTWORT_KEY_PREFIX"]
    response = client.responses.create(
        model="antwort-sim",
        input=f"use counted_gated and fast_echo ({uuid.uuid4().hex})",  # call ids hash the input
        tools=internal("counted_gated", "fast_echo"),  # type: ignore[arg-type]
        background=True,
    )
    held = wait_until_tool_runs(client, counters, prefix, response.id)  # runs till let go
    browser.navigate(f"{fleet.base_url}/console#{response.id}")
    # the fleet now: every queue, with the workers the fleet started
    browser.wait_for(
        "document.querySelector('#queues tr[data-queue=\"inference\"] .worker') !== null"
    )
    queues = _rows(browser, "#queues tbody tr")
    assert [row.split()[0] for row in queues][:2] == ["inference", "tools.mcp"]
    assert "tools.internal" in " ".join(queues)
    # live: the held tool's bar runs while the response does
    browser.wait_for(
        "document.querySelector('.row[data-type=\"tool\"] .bar.running') !== null", timeout=60
    )
    assert "in_progress" in browser.evaluate("document.querySelector('#summary').innerText")
    counters.set(f"{prefix}test:gate:{held}", 1)
    assert wait_for_status(client, response.id, TERMINAL, timeout=60).status == "completed"
    # and then the whole response: two turns, their model calls, both tool calls
    browser.wait_for("document.querySelector('#summary .status.completed') !== null", timeout=60)
    rows = _rows(browser, "#waterfall .row")
    labels = [row.split("  ")[0] for row in rows]
    assert sum(row.startswith("turn 0") for row in rows) == 1, rows
    assert sum(row.startswith("turn 1") for row in rows) == 1, rows
    assert sum(row.startswith("model call") for row in rows) == 2, rows
    tools = _rows(browser, '#waterfall .row[data-type="tool"]')
    assert len(tools) == 2, labels
    assert any("internal · counted_gated" in row and "tools.internal@" in row for row in tools), (
        tools
    )
    assert any("internal · fast_echo" in row for row in tools), tools
    assert browser.evaluate("document.querySelectorAll('.bar.running').length") == 0
    assert browser.evaluate("document.querySelectorAll('.bar.wait').length") >= 1
    screenshot = Path(os.environ.get(SCREENSHOT_SETTING) or tmp_path / "console.png")
    browser.screenshot(screenshot)
    assert screenshot.stat().st_size > 10_000


def test_console_asks_for_a_key_and_shows_a_tenant_only_its_own_responses(
    fleet: Fleet, browser: Browser, tmp_path: Path
) -> None:
    keys = "team-a:ka,team-b:kb"
    with own_fleet(fleet.env, tmp_path, queues=("inference",), ANTWORT_API_KEYS=keys) as own:
        with openai.OpenAI(base_url=f"{own.base_url}/v1", api_key="ka", max_retries=0) as a:
            rid = a.responses.create(model="antwort-sim", input="hello").id
        browser.navigate(f"{own.base_url}/console#{rid}")
        browser.wait_for("!document.querySelector('#key-form').hidden")
        assert "wants an API key" in browser.evaluate("document.querySelector('#error').innerText")
        # B's key: the fleet shows, A's response is an unknown id
        browser.evaluate(
            "document.querySelector('#key').value = 'kb';"
            "document.querySelector('#key-form').requestSubmit()"
        )
        browser.wait_for("document.querySelector('#error').innerText.includes('No response')")
        browser.wait_for("document.querySelector('#queues .worker') !== null")
        assert browser.evaluate("document.querySelectorAll('#waterfall .row').length") == 0
        assert "kb" not in browser.evaluate("location.href")  # the key never enters a URL
        # A's key (kept in the tab's session storage across a reload): its response's turn
        browser.evaluate("sessionStorage.setItem('antwort-key', 'ka'); location.reload()")
        browser.wait_for("document.querySelector('#summary .status.completed') !== null")
        assert _rows(browser, '#waterfall .row[data-type="turn"]')[0].startswith("turn 0")
        assert browser.evaluate("document.querySelector('#key-form').hidden")
