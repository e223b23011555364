"""The internal tool registry: initialize on worker start, shut down on worker stop."""

import http.server
import json
import threading
import time
from pathlib import Path

import pytest

from app.keepalive import KEEPALIVE_EXPIRY_SECONDS
from app.tools.base import ToolCall, ToolDefinition, ToolKind, ToolResult
from app.tools.internal import Registry, load_registry
from app.tools.internal.builtins import HttpFetch, evaluate
from app.tools.internal.host import HostedExecutor
from tests.support.idle_close import closing_idle_connections
from tests.support.serving import serving


def test_registry_leaves_out_a_tool_whose_initialize_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("LIFECYCLE_MARKER_DIR", str(tmp_path))
    registry = load_registry(["tests.support.lifecycle_tools"])

    assert registry.initialize_all() == ["lifecycle_broken"]

    assert registry.get("lifecycle_ok") is not None
    assert registry.get("lifecycle_broken") is None
    assert registry.get("calculator") is not None  # the built-ins are untouched
    assert "lifecycle_broken failed to initialize" in caplog.text
    registry.shutdown_all()
    marks = sorted(p.name.rsplit(".", 1)[0] for p in tmp_path.iterdir())
    assert marks == [
        "lifecycle_broken.init",
        "lifecycle_ok.init",
        "lifecycle_ok.shutdown",  # the left-out tool is not shut down
    ]


def test_registry_shutdown_goes_on_after_a_failing_tool() -> None:
    calls: list[str] = []

    class Tool:
        def __init__(self, name: str, fails: bool) -> None:
            self.name, self.fails = name, fails

        def definition(self) -> ToolDefinition:
            return ToolDefinition(name=self.name, kind=ToolKind.INTERNAL)

        def initialize(self) -> None:
            pass

        def shutdown(self) -> None:
            calls.append(self.name)
            if self.fails:
                raise RuntimeError("boom")

        def execute(self, call: ToolCall) -> ToolResult:
            raise AssertionError

    registry = Registry()
    registry.register(Tool("a", fails=True))
    registry.register(Tool("b", fails=False))

    registry.shutdown_all()

    assert calls == ["a", "b"]


@pytest.mark.parametrize(
    "expression", ["(9**9999)**2999", "9**9999*9**9999*9**9999*9**9999*9**9999", "(2**10000)**100"]
)
def test_calculator_refuses_a_huge_integer_result_before_computing_it(expression: str) -> None:
    started = time.monotonic()

    with pytest.raises(ValueError, match="too large"):
        evaluate(expression)

    assert time.monotonic() - started < 2  # computing the first one takes far longer


@pytest.mark.parametrize(
    ("expression", "value"), [("2**100", 2**100), ("9**9999 % 7", 9**9999 % 7), ("-3**3", -27)]
)
def test_calculator_still_computes_big_integers_in_bounds(expression: str, value: int) -> None:
    assert evaluate(expression) == value


def hosted_executor(**overrides: object) -> HostedExecutor:
    registry = load_registry(["tests.support.tools"])
    return HostedExecutor(registry, modules=["tests.support.tools"], default_timeout=5.0)


def test_hosted_call_that_holds_the_gil_is_killed_at_its_deadline_and_the_worker_runs_on() -> None:
    executor = hosted_executor()
    tool, warm = executor.registry.get("gil_holder"), executor.registry.get("fast_echo")
    assert tool is not None and warm is not None
    warmed = executor.submit(ToolCall(id="c0", name="fast_echo", arguments="{}"), warm.definition())
    assert warmed.result(timeout=30).output == "fast_echo done"  # its host started from cold
    ticks: list[float] = []
    done = threading.Event()

    def tick() -> None:  # another thread of the worker: it must not starve meanwhile
        while not done.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.05)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    started = time.monotonic()
    try:
        result = executor.submit(
            ToolCall(id="c1", name="gil_holder", arguments="{}"), tool.definition()
        ).result(timeout=30)
    finally:
        done.set()
        ticker.join()
    elapsed = time.monotonic() - started

    assert (result.is_error, result.output) == (
        True,
        "Error: tool 'gil_holder' timed out after 1 s.",
    )
    assert elapsed < 30  # the 1 s deadline, its kill and a host's start: not the sum's hours
    # Held in this process, the sum would stop every other thread for hours; 2 s is room for a
    # busy machine's scheduling, not for a starved thread.
    assert max(b - a for a, b in zip(ticks, ticks[1:], strict=False)) < 2
    executor.close()


def test_hosted_calls_reuse_a_host_across_threads_and_a_new_one_follows_a_kill() -> None:
    executor = hosted_executor()
    fast = executor.registry.get("fast_echo")
    failing = executor.registry.get("failing_tool")
    holder = executor.registry.get("gil_holder")
    assert fast is not None and failing is not None and holder is not None

    # started from a call thread that ends at once: the host outlives it, for the next call
    first = executor.submit(
        ToolCall(id="a", name="fast_echo", arguments="{}"), fast.definition()
    ).result(timeout=30)
    time.sleep(0.5)
    failed = executor.execute(
        ToolCall(id="b", name="failing_tool", arguments="{}"), failing.definition()
    )
    executor.execute(ToolCall(id="c", name="gil_holder", arguments="{}"), holder.definition())
    after = executor.execute(ToolCall(id="d", name="fast_echo", arguments="{}"), fast.definition())

    assert (first.output, first.is_error) == ("fast_echo done", False)
    assert (failed.output, failed.is_error) == ("Error: failing_tool exploded", True)
    assert (after.call_id, after.output) == ("d", "fast_echo done")
    executor.close()


class _Pages(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keeps connections alive

    def do_GET(self) -> None:
        body = b"a page"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_http_fetch_does_not_reuse_a_connection_idle_for_the_keepalive_expiry() -> None:
    """A site closing idle connections soon after 4 s never sees a fetch on one (app.keepalive)."""
    pages = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    pages.daemon_threads = True
    idle_seconds = KEEPALIVE_EXPIRY_SECONDS + 0.5
    fetch = HttpFetch(allowed_hosts=["127.0.0.1"], max_bytes=1000)
    with (
        serving(pages),
        closing_idle_connections(pages.server_address[1], idle_seconds=idle_seconds) as proxy,
    ):
        url = f"http://127.0.0.1:{proxy.port}/"
        call = ToolCall(id="f", name="http_fetch", arguments=json.dumps({"url": url}))
        assert "a page" in str(fetch.execute(call).output)
        time.sleep(idle_seconds + 0.2)
        result = fetch.execute(call)
        fetch.shutdown()
    assert not result.is_error, result.output
    assert proxy.resets == 0
