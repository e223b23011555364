"""The ``sandbox`` kind's executor: code interpreter calls, hosted shell calls, operators' tools.

A code interpreter or shell call runs in its response chain's container: the work directory is
restored from Redis before the run and saved after it, under the container's key with the
responses' TTL, so the files live as long as the chain and go with it. One call at a time holds
a container (a Redis lock), so parallel calls of one response never overwrite each other's
files. A shell call's commands run one after another, each in a run of its own that starts from
the files the one before left, all within one wall clock (the sandbox's timeout, or the call's
``timeout_ms`` if shorter).
"""

from __future__ import annotations

import json
import logging
import signal
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import redis

from app.config import Settings
from app.keys import Keys
from app.tools.base import ToolCall, ToolDefinition, ToolKind, ToolResult
from app.tools.client_calls import shell_output_text
from app.tools.sandbox.cgroup import CgroupUnavailableError
from app.tools.sandbox.cgroup_host import find_cgroups, run_cgroups
from app.tools.sandbox.presenter import code_of
from app.tools.sandbox.runner import (
    Sandbox,
    SandboxLimits,
    SandboxOutcome,
    SandboxRequest,
    SandboxUnavailableError,
)
from app.tools.sandbox.tools import (
    CODE_INTERPRETER,
    MAX_CODE_CHARS,
    SHELL,
    SandboxToolSpec,
    load_sandbox_tools,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")

_MB = 1024 * 1024
_SIGNALS: dict[int, str] = {
    signal.SIGKILL: "SIGKILL (killed: a limit or the timeout)",
    signal.SIGXCPU: "SIGXCPU (CPU time limit)",
    signal.SIGXFSZ: "SIGXFSZ (file size limit)",
    signal.SIGSEGV: "SIGSEGV (memory limit or crash)",
}


class ContainerFiles:
    """Containers' work directories (``tar.gz``) in Redis, with the responses' TTL."""

    def __init__(self, client: redis.Redis, keys: Keys, *, ttl_seconds: int):
        self.redis = client
        self.keys = keys
        self.ttl_seconds = ttl_seconds

    def load(self, container_id: str) -> bytes:
        """The container's files (empty: none yet, or expired with its chain)."""
        data = self.redis.get(self.keys.container_files(container_id))
        return data if isinstance(data, bytes) else b""

    def save(self, container_id: str, data: bytes) -> None:
        """Replace the container's files and restart their TTL (and their owner's)."""
        self.redis.set(self.keys.container_files(container_id), data, ex=self.ttl_seconds)
        self.redis.expire(self.keys.container_owner(container_id), self.ttl_seconds)

    def hold(self, container_id: str, *, seconds: float) -> str | None:
        """Take the container's lock (waiting up to ``seconds``); its token, or None."""
        token = uuid.uuid4().hex
        deadline = time.monotonic() + seconds
        key = self.keys.container_lock(container_id)
        while not self.redis.set(key, token, nx=True, px=int(seconds * 1000) + 1000):
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)
        return token

    def release(self, container_id: str, token: str) -> None:
        """Give the lock back (if it is still ours)."""
        key = self.keys.container_lock(container_id)
        if self.redis.get(key) == token.encode():
            self.redis.delete(key)


def sandbox_limits(settings: Settings) -> SandboxLimits:
    """The limits of one run, from the settings."""
    return SandboxLimits(
        timeout_seconds=settings.sandbox_timeout_seconds,
        cpu_seconds=settings.sandbox_cpu_seconds,
        memory_bytes=settings.sandbox_memory_mb * _MB,
        file_size_bytes=settings.sandbox_file_size_mb * _MB,
        open_files=settings.sandbox_open_files,
        processes=settings.sandbox_max_processes,
        work_dir_bytes=settings.sandbox_work_dir_mb * _MB,
        max_output_bytes=settings.sandbox_max_output_bytes,
        max_files_bytes=settings.sandbox_max_files_mb * _MB,
    )


def make_sandbox(settings: Settings) -> Sandbox:
    """The sandbox of a worker (raises ``SandboxUnavailableError`` without bubblewrap)."""
    return Sandbox(
        limits=sandbox_limits(settings),
        bwrap=settings.sandbox_bwrap,
        uid_base=settings.sandbox_uid_base,
        uid_count=settings.sandbox_uid_count,
        cgroup=run_cgroups(settings),
    )


class SandboxExecutor:
    """Runs ``code_interpreter`` calls and the operator's sandboxed tools."""

    kind = ToolKind.SANDBOX

    def __init__(
        self,
        sandbox: Sandbox,
        files: ContainerFiles,
        *,
        tools: Mapping[str, SandboxToolSpec] | None = None,
    ):
        self.sandbox = sandbox
        self.files = files
        self.tools = dict(tools or {})

    @classmethod
    def from_settings(cls, settings: Settings, client: redis.Redis, keys: Keys) -> SandboxExecutor:
        """The executor of a ``tools.sandbox`` worker."""
        files = ContainerFiles(client, keys, ttl_seconds=settings.response_ttl_seconds)
        return cls(
            make_sandbox(settings), files, tools=load_sandbox_tools(settings.sandbox_tools_file)
        )

    def can_execute(self, tool: ToolDefinition) -> bool:
        """The code interpreter, the hosted shell, or one of the operator's tools."""
        return tool.kind == ToolKind.SANDBOX and (
            tool.name == CODE_INTERPRETER or _is_shell(tool) or tool.name in self.tools
        )

    def execute(self, call: ToolCall, tool: ToolDefinition) -> ToolResult:
        """Run the call in the sandbox; every failure is an ``is_error`` result."""
        container_id = str(tool.options.get("container_id") or "")
        if tool.name == CODE_INTERPRETER:
            return self._interpret(call, container_id)
        if _is_shell(tool):
            return self._shell(call, container_id)
        spec = self.tools.get(tool.name)
        if spec is None:
            return _error(call, f"Unknown sandbox tool '{tool.name}'.")
        try:
            arguments = json.dumps(call.parsed_arguments())
        except ValueError as exc:
            return _error(call, f"Error: invalid arguments: {exc}")
        request = SandboxRequest(
            code=spec.script if spec.language == "python" else None,
            argv=() if spec.language == "python" else ("/bin/bash", "-c", spec.script),
            stdin=arguments,
            env={"TOOL_ARGUMENTS": arguments},
        )
        outcome = self.sandbox.run(request)
        return ToolResult(call_id=call.id, output=report(outcome), is_error=not outcome.is_ok)

    def _interpret(self, call: ToolCall, container_id: str) -> ToolResult:
        code = code_of(call)
        if not code.strip():
            return _error(call, "Error: no code to run (the 'code' argument is empty).")
        if len(code) > MAX_CODE_CHARS:
            return _error(call, f"Error: the code is longer than {MAX_CODE_CHARS} characters.")

        def run(files: bytes) -> tuple[SandboxOutcome, bytes | None]:
            outcome = self.sandbox.run(SandboxRequest(code=code, files=files))
            return outcome, outcome.files

        outcome = self._in_container(container_id, run)
        if outcome is None:
            return _busy(call, container_id, self._lock_seconds)
        return ToolResult(
            call_id=call.id,
            output=report(outcome),
            is_error=not outcome.is_ok,
            data={"container_id": container_id, "files": list(outcome.files_listing)},
        )

    def _shell(self, call: ToolCall, container_id: str) -> ToolResult:
        try:
            arguments = call.parsed_arguments()
        except ValueError as exc:
            return _error(call, f"Error: invalid arguments: {exc}")
        commands = arguments.get("commands")
        if not isinstance(commands, list) or not all(isinstance(c, str) for c in commands):
            return _error(call, "Error: 'commands' must be a list of strings.")
        if not any(command.strip() for command in commands):
            return _error(call, "Error: no command to run (the 'commands' list is empty).")
        if sum(len(command) for command in commands) > MAX_CODE_CHARS:
            return _error(call, f"Error: the commands are longer than {MAX_CODE_CHARS} characters.")
        seconds = self.sandbox.limits.timeout_seconds
        timeout_ms = arguments.get("timeout_ms")
        if isinstance(timeout_ms, int) and not isinstance(timeout_ms, bool) and timeout_ms > 0:
            seconds = min(seconds, timeout_ms / 1000)
        limit = arguments.get("max_output_length")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            limit = None

        def run(files: bytes) -> tuple[list[dict[str, Any]], bytes | None]:
            return self._commands(commands, files, seconds=seconds, limit=limit)

        entries = self._in_container(container_id, run)
        if entries is None:
            return _busy(call, container_id, self._lock_seconds)
        output = shell_output_text({"output": entries})
        failed = any(entry["outcome"] != {"type": "exit", "exit_code": 0} for entry in entries)
        data = {"output": entries, "max_output_length": limit, "container_id": container_id}
        return ToolResult(call_id=call.id, output=output, is_error=failed, data=data)

    def _commands(
        self, commands: list[str], files: bytes, *, seconds: float, limit: int | None
    ) -> tuple[list[dict[str, Any]], bytes | None]:
        """Run each command from the files the one before left; the entries and the last files."""
        deadline = time.monotonic() + seconds
        entries: list[dict[str, Any]] = []
        saved: bytes | None = None
        for command in commands:
            remaining = deadline - time.monotonic()
            if remaining <= 0:  # the call's time is spent: the rest do not run
                skipped = SandboxOutcome(timed_out=True, error="Not run: the call's time ran out.")
                entries.append(_shell_entry(skipped, limit))
                continue
            request = SandboxRequest(
                argv=("/bin/bash", "-c", command), files=files, timeout_seconds=remaining
            )
            outcome = self.sandbox.run(request)
            entries.append(_shell_entry(outcome, limit))
            if outcome.files is not None:
                files = saved = outcome.files
        return entries, saved

    @property
    def _lock_seconds(self) -> float:
        return self.sandbox.limits.timeout_seconds + 15

    def _in_container(
        self, container_id: str, run: Callable[[bytes], tuple[T, bytes | None]]
    ) -> T | None:
        """``run``'s result from the container's files, its files kept; None: the container is busy.

        ``run`` takes the container's files and returns its result and the files to keep (None:
        keep the ones it had). Without a container, it starts from no files and keeps none.
        """
        if not container_id:  # a definition without a container: a fresh directory
            return run(b"")[0]
        token = self.files.hold(container_id, seconds=self._lock_seconds)
        if token is None:
            return None
        try:
            result, files = run(self.files.load(container_id))
            if files is not None:
                self.files.save(container_id, files)
        finally:
            self.files.release(container_id, token)
        return result


def _is_shell(tool: ToolDefinition) -> bool:
    return tool.options.get("presented_as") == SHELL


def _busy(call: ToolCall, container_id: str, seconds: float) -> ToolResult:
    return _error(call, f"Error: container {container_id} stayed busy for {seconds:g} s.")


def _shell_entry(outcome: SandboxOutcome, limit: int | None) -> dict[str, Any]:
    """One command's entry of a ``shell_call_output`` (OpenAI's shape).

    ``limit``: the call's ``max_output_length``, each of stdout and stderr cut there; the
    sandbox's notes (its own cap, a failure) follow on stderr.
    """
    stdout, stderr = outcome.stdout, outcome.stderr
    if limit is not None:
        stdout, stderr = stdout[:limit], stderr[:limit]
    truncated = "[output truncated]" if outcome.truncated else None
    for note in (truncated, outcome.error, outcome.files_error):
        if note:
            stderr += ("" if not stderr or stderr.endswith("\n") else "\n") + note + "\n"
    if outcome.timed_out:
        return {"stdout": stdout, "stderr": stderr, "outcome": {"type": "timeout"}}
    code = 1 if outcome.exit_code is None else outcome.exit_code  # None: it never ran
    ended = {"type": "exit", "exit_code": 128 - code if code < 0 else code}  # -9: 137, as bash
    return {"stdout": stdout, "stderr": stderr, "outcome": ended}


def _error(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(call_id=call.id, output=message, is_error=True)


def report(outcome: SandboxOutcome) -> str:
    """What the model (and the call's ``logs``) shows of a run."""
    parts = [text for text in (outcome.stdout, outcome.stderr) if text]
    if outcome.truncated:
        parts.append("[output truncated]")
    if outcome.error:
        parts.append(f"Error: {outcome.error}")
    elif outcome.timed_out:
        parts.append(
            f"Error: the code timed out after {outcome.duration_ms / 1000:.1f} s; every process "
            "it started was killed."
        )
    elif outcome.exit_code is not None and outcome.exit_code < 0:
        name = _SIGNALS.get(-outcome.exit_code, f"signal {-outcome.exit_code}")
        parts.append(f"Error: the process was killed by {name}.")
    elif outcome.exit_code:
        parts.append(f"Error: exit status {outcome.exit_code}.")
    if outcome.files_error:
        parts.append(f"Note: {outcome.files_error}.")
    return "\n".join(part.rstrip("\n") for part in parts) or "(no output)"


def optional_sandbox_executor(
    settings: Settings, client: redis.Redis, keys: Keys
) -> SandboxExecutor | None:
    """The executor, or None where bubblewrap is missing (a worker without ``tools.sandbox``)."""
    try:
        return SandboxExecutor.from_settings(settings, client, keys)
    except SandboxUnavailableError as exc:
        logger.info("no sandbox executor in this worker: %s", exc)
        return None


def _check_cgroups(settings: Settings, sandbox: Sandbox) -> None:
    """Check the runs' cgroups and reap dead workers'; or say why there are none."""
    if sandbox.cgroups is None:
        why = "ANTWORT_SANDBOX_CGROUP_AUTO is off"
        if settings.sandbox_cgroup_auto:
            try:
                find_cgroups()
            except CgroupUnavailableError as exc:
                why = str(exc)
        logger.warning(
            "sandbox runs have NO total cap (%s): each process is limited (memory, CPU time), "
            "but all of a run's processes together are not; see README, Security model",
            why,
        )
        return
    sandbox.cgroups.check()
    sandbox.cgroups.reap()  # an explicit directory's (found ones were reaped when found)


def check_sandbox(settings: Settings) -> None:
    """Refuse to run a ``tools.sandbox`` worker that cannot sandbox anything.

    Runs one trivial program, so a bubblewrap that cannot create namespaces here (a container
    without user namespaces, say) is caught at start rather than on every call.

    Raises:
        SystemExit: bubblewrap (or the system Python) is missing or does not work, or the
            operator's tool file is broken; the message says how to fix it.
    """
    try:
        sandbox = make_sandbox(settings)
        load_sandbox_tools(settings.sandbox_tools_file)
        _check_cgroups(settings, sandbox)
    except (SandboxUnavailableError, CgroupUnavailableError) as exc:
        raise SystemExit(f"antwort worker: {exc}") from None
    except (OSError, ValueError, TypeError) as exc:
        raise SystemExit(f"antwort worker: ANTWORT_SANDBOX_TOOLS_FILE: {exc}") from None
    outcome = sandbox.run(SandboxRequest(code="print('ok')"))
    if not outcome.is_ok or outcome.stdout != "ok\n":
        raise SystemExit(
            f"antwort worker: bubblewrap is installed but cannot run a sandbox here: "
            f"{report(outcome)} (bwrap needs user namespaces: a root worker, or "
            "kernel.unprivileged_userns_clone=1 and a seccomp profile that allows them)"
        )
    if settings.tool_timeout_seconds < settings.sandbox_timeout_seconds + 10:
        logger.warning(
            "ANTWORT_TOOL_TIMEOUT_SECONDS (%g) should exceed ANTWORT_SANDBOX_TIMEOUT_SECONDS "
            "(%g) by 10 s: calls will be reported as timed out while the sandbox still runs",
            settings.tool_timeout_seconds,
            settings.sandbox_timeout_seconds,
        )
