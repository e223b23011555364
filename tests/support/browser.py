"""Debian's headless ``chromium`` driven through its DevTools protocol (the console's tests).

One browser process per :class:`Browser`, on its own profile directory; the DevTools port is
chosen by chromium (``--remote-debugging-port=0``) and read back from ``DevToolsActivePort``.
Commands go over the ``websockets`` client, pages are attached in flat mode (one socket).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

CHROMIUM = shutil.which("chromium")
"""The browser, or None where Debian's ``chromium`` is not installed."""

WIDTH = 1280


class Browser:
    """A headless chromium and one page in it."""

    def __init__(self, profile: Path, *, timeout: float = 60.0):
        assert CHROMIUM is not None
        self._proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--remote-debugging-port=0",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._ids = itertools.count(1)
        self._socket = self._connect(profile / "DevToolsActivePort", timeout)
        target = self.command("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.command("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.command("Page.enable", session=True)
        self.resize(900)

    def _connect(self, port_file: Path, timeout: float) -> ClientConnection:
        deadline = time.monotonic() + timeout
        while not port_file.exists() or len(port_file.read_text().splitlines()) < 2:
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        return connect(f"ws://127.0.0.1:{port}{path}", max_size=None, open_timeout=timeout)

    def command(self, method: str, *, session: bool = False, **params: Any) -> dict[str, Any]:
        """Send one command (to the page with ``session``) and return its result."""
        message: dict[str, Any] = {"id": next(self._ids), "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        self._socket.send(json.dumps(message))
        while True:  # events of the page come in between; the answer carries our id
            answer = json.loads(self._socket.recv(timeout=60))
            if answer.get("id") == message["id"]:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer["result"]
                return result

    def resize(self, height: int) -> None:
        """Set the page's viewport (``WIDTH`` wide)."""
        self.command(
            "Emulation.setDeviceMetricsOverride",
            session=True,
            width=WIDTH,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def navigate(self, url: str) -> None:
        """Open ``url`` in the page and wait until its document has loaded.

        ``Page.navigate`` answers once the navigation has started: an expression evaluated
        right after it may still run in the page before, or in the new one half parsed.
        """
        self.command("Page.navigate", session=True, url=url)
        self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = self.command(
            "Runtime.evaluate", session=True, expression=expression, returnByValue=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float = 30.0) -> Any:
        """Wait until ``expression`` is truthy in the page; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                body = self.evaluate("document.body ? document.body.innerText : ''")
                raise AssertionError(f"never true: {expression}\npage:\n{body}")
            time.sleep(0.1)

    def screenshot(self, path: Path) -> None:
        """Save the whole page as a PNG."""
        self.resize(200)  # the page's own height, not the viewport's
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        self.resize(height)
        shot = self.command("Page.captureScreenshot", session=True, format="png")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        """Close the browser and wait for it."""
        with contextlib.suppress(RuntimeError, OSError):  # closing anyway: ended below
            self.command("Browser.close")
        self._socket.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
