"""Internal tool calls in child processes the worker can kill (``ANTWORT_INTERNAL_TOOL_ISOLATION``).

A tool that never yields (big-integer arithmetic, a regular expression backtracking, any C call
that holds the GIL) stops every thread of its process: in the worker itself the per-call
deadline could not fire, and every other call waited. Under ``process`` isolation (the default)
each call runs in a tool host, a child process (``python -m app.tools.internal.host``) with its
own copy of the internal tools; at the deadline the worker kills the host and starts another
for the next call. Idle hosts are reused, so a call costs a pipe round trip, not a start.

A host loads and initializes the tools itself, as a prefork pool child does: a plugin's
``initialize`` runs in each host as well as in the worker (whose copy lists the definitions),
and its ``shutdown`` when the host ends with the worker.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import asdict

from app.tools.base import ToolCall, ToolDefinition, ToolResult
from app.tools.internal import InternalExecutor, Registry, load_registry

_READY = b"ready\n"
_START_SECONDS = 60.0
"""How long a host may take to start before it is given up (a call then gets an error)."""


class ToolHost:
    """One child process that runs internal tool calls, one at a time, over its pipes."""

    def __init__(self, modules: list[str]):
        self._process = subprocess.Popen(
            [sys.executable, "-m", "app.tools.internal.host", str(os.getpid()), *modules],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        self._is_ready = False

    def call(self, call: ToolCall, name: str, *, timeout: float) -> ToolResult | None:
        """Run the call; None when it did not answer within ``timeout`` (the host is killed).

        Raises:
            OSError: the host died (it is gone; start another).
        """
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        self._wait_until_ready(stdout.fileno())
        stdin.write(json.dumps({"name": name, "call": asdict(call)}).encode() + b"\n")
        line = _read_line(stdout.fileno(), deadline=time.monotonic() + timeout)
        if line is None:
            self.kill()
            return None
        return ToolResult.from_json(line)

    def _wait_until_ready(self, fd: int) -> None:
        """Wait out the host's start (imports, the tools' ``initialize``): not the call's time."""
        if self._is_ready:
            return
        if _read_line(fd, deadline=time.monotonic() + _START_SECONDS) != _READY:
            self.kill()
            raise OSError("the tool host did not start")
        self._is_ready = True

    def kill(self) -> None:
        """Stop the host at once, whatever it runs."""
        self._process.kill()
        self._end()

    def close(self, *, grace_seconds: float = 5.0) -> None:
        """Let the host shut its tools down and leave (its stdin ends); kill it past the grace."""
        try:
            if self._process.stdin is not None:
                self._process.stdin.close()
            self._process.wait(timeout=grace_seconds)
        except (OSError, subprocess.TimeoutExpired):
            self._process.kill()
        self._end()

    def _end(self) -> None:
        self._process.wait()
        for pipe in (self._process.stdin, self._process.stdout):
            if pipe is not None:
                pipe.close()


def _read_line(fd: int, *, deadline: float) -> bytes | None:
    line = bytearray()
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise OSError("the tool host exited")
        line += chunk
    return bytes(line)


class HostedExecutor(InternalExecutor):
    """The ``internal`` executor under ``process`` isolation: each call in a killable host."""

    def __init__(self, registry: Registry, *, modules: list[str], default_timeout: float):
        super().__init__(registry)
        self._modules = modules
        self._default_timeout = default_timeout
        self._idle: list[ToolHost] = []
        self._lock = threading.Lock()

    def execute(self, call: ToolCall, tool: ToolDefinition) -> ToolResult:
        """Run the call in an idle host (or a new one); kill the host at the deadline."""
        if self.registry.get(tool.name) is None:
            return super().execute(call, tool)  # the unknown-tool answer
        timeout = tool.timeout_seconds or self._default_timeout
        host = self._take()
        try:
            result = host.call(call, tool.name, timeout=timeout)
        except OSError as exc:
            host.kill()
            return ToolResult(call_id=call.id, output=f"Error: {exc}.", is_error=True)
        if result is None:
            return ToolResult(
                call_id=call.id,
                output=f"Error: tool '{tool.name}' timed out after {timeout:g} s.",
                is_error=True,
            )
        with self._lock:
            self._idle.append(host)
        return result

    def submit(self, call: ToolCall, tool: ToolDefinition) -> Future[ToolResult]:
        """Start the call on a thread that waits for its host (the GIL stays free meanwhile)."""
        future: Future[ToolResult] = Future()

        def run() -> None:
            if future.set_running_or_notify_cancel():
                future.set_result(self.execute(call, tool))

        threading.Thread(target=run, name="tool-host-call", daemon=True).start()
        return future

    def close(self) -> None:
        """Let every idle host shut down (worker stop)."""
        with self._lock:
            hosts, self._idle = self._idle, []
        for host in hosts:
            host.close()

    def _take(self) -> ToolHost:
        """An idle host, leaving a spare starting for the next call if it was the last one."""
        with self._lock:
            host = self._idle.pop() if self._idle else ToolHost(self._modules)
            if not self._idle:  # the spare starts meanwhile: a later call need not wait for it
                self._idle.append(ToolHost(self._modules))
        return host


def _die_with_parent(parent: int) -> None:
    """Leave at once when the worker is gone (its death, even a SIGKILL, re-parents the host).

    A watcher thread, not ``PR_SET_PDEATHSIG``: that fires when the *thread* that started the
    host ends, and hosts are started from short-lived call threads.
    """
    while os.getppid() == parent:
        time.sleep(_WATCH_SECONDS)
    os._exit(1)


_WATCH_SECONDS = 0.2


def serve(modules: list[str], *, parent: int) -> None:
    """The host's side: answer one JSON line per call on stdin, until stdin ends."""
    threading.Thread(
        target=_die_with_parent, args=(parent,), name="watch-worker", daemon=True
    ).start()
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # a tool's print must not break the protocol
    registry = load_registry(modules)
    registry.initialize_all()
    executor = InternalExecutor(registry)
    out.write(_READY)
    out.flush()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        call = ToolCall(**request["call"])
        try:
            result = executor.execute(call, ToolDefinition(name=request["name"], kind="internal"))
        except Exception as exc:  # a failing tool is data for the model
            result = ToolResult(call_id=call.id, output=f"Error: {exc}", is_error=True)
        out.write(result.to_json().encode() + b"\n")
        out.flush()
    registry.shutdown_all()


if __name__ == "__main__":
    serve(sys.argv[2:], parent=int(sys.argv[1]))
