"""Running untrusted code in a bubblewrap sandbox, from the worker's side.

Each run gets, in this order of defence:

- **its own uid** (when the worker is root; :mod:`.slots`): one of ``uid_count`` unprivileged
  uids, held with a lock file for the run, so ``RLIMIT_NPROC`` binds (it does not bind root,
  nor a uid mapped to root) and a sweep by uid can kill anything left, sparing other runs;
- **bubblewrap** namespaces: new user, pid, network, ipc, uts and cgroup namespaces
  (``--unshare-all``), no network at all, ``--die-with-parent``, ``--new-session``;
- **a filesystem of its own**, read-only but for two size-limited tmpfs (the work directory
  and ``/tmp``): ``/usr``, the ``ld.so`` cache, a fresh ``/proc`` and ``/dev``; none of the
  worker's files, and an environment cleared to ``PATH``/``HOME``/``LANG``;
- **resource limits** set by the in-sandbox runner (:mod:`app.tools.sandbox.inside`) before any
  untrusted code runs: CPU seconds, address space, file size, open files, processes, no core;
- **a wall-clock deadline**: the runner kills every process of the sandbox at the timeout, and
  the worker kills the whole bwrap process group if the runner itself overruns.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import dataclasses
import logging
import marshal
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from app.telemetry import metrics, tracing
from app.tools.sandbox.cgroup import GATE, CgroupLimits, Cgroups, RunCgroups, RunGroup, run_name
from app.tools.sandbox.seccomp import deny_program, program_fd
from app.tools.sandbox.slots import UidSlots

logger = logging.getLogger(__name__)

SANDBOX_PYTHON = "/usr/bin/python3"
"""The interpreter inside the sandbox: the system's, never the worker's virtualenv."""
INSTALL_HINT = (
    "bubblewrap (bwrap) is required by the tools.sandbox worker and was not found. "
    "Install it: `apt-get install bubblewrap` (Debian/Ubuntu), `dnf install bubblewrap` "
    "(Fedora/RHEL), `apk add bubblewrap` (Alpine); or set ANTWORT_SANDBOX_BWRAP to its path."
)
_GRACE_SECONDS = 10.0
"""Time the runner may take beyond the code's timeout (start, restoring and saving files)."""


class SandboxUnavailableError(RuntimeError):
    """bubblewrap (or the system Python the sandbox runs) is missing or does not work."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxLimits:
    """What one run may use."""

    timeout_seconds: float = 30.0
    """Wall clock; the whole process tree is killed when it passes."""
    cpu_seconds: int = 30
    """``RLIMIT_CPU`` of each process."""
    memory_bytes: int = 512 * 1024 * 1024
    """``RLIMIT_AS`` of each process."""
    file_size_bytes: int = 32 * 1024 * 1024
    """``RLIMIT_FSIZE``: the largest file the code may write."""
    open_files: int = 64
    """``RLIMIT_NOFILE``."""
    processes: int = 32
    """``RLIMIT_NPROC`` (processes and threads of the run's uid)."""
    work_dir_bytes: int = 64 * 1024 * 1024
    """Size of the work directory's tmpfs (and of ``/tmp``'s)."""
    max_output_bytes: int = 64 * 1024
    """stdout and stderr are each cut here."""
    max_files_bytes: int = 8 * 1024 * 1024
    """The largest compressed snapshot of the work directory that is kept between calls."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxRequest:
    """One program to run."""

    code: str | None = None
    """Python source, run by the sandbox's Python."""
    argv: tuple[str, ...] = ()
    """Or a program to execute (e.g. ``("/bin/bash", "-c", script)``)."""
    stdin: str = ""
    """Given to the program on stdin (up to 64 KiB)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment variables."""
    files: bytes = b""
    """The work directory to start from (``tar.gz``; empty: an empty directory)."""
    timeout_seconds: float | None = None
    """A shorter wall clock than the limits' (a shell call's ``timeout_ms``); None: theirs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxOutcome:
    """What a run produced."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    """The program's exit status (negative: killed by that signal); None when it never ran."""
    timed_out: bool = False
    error: str | None = None
    """Why the run failed as a whole (the sandbox could not start, its runner was killed …)."""
    files: bytes | None = None
    """The work directory afterwards (``tar.gz``); None: keep the previous one."""
    files_error: str | None = None
    files_listing: tuple[str, ...] = ()
    truncated: bool = False
    """stdout or stderr was cut at the cap."""
    duration_ms: float = 0.0

    @property
    def is_ok(self) -> bool:
        """The program ran to the end and exited 0."""
        return self.error is None and not self.timed_out and self.exit_code == 0


def find_bubblewrap(configured: str | None = None) -> str:
    """The path of a working ``bwrap``.

    Raises:
        SandboxUnavailableError: it is missing (the message says how to install it), or the
            sandbox's Python is missing.
    """
    found = shutil.which(configured or "bwrap")
    if found is None:
        raise SandboxUnavailableError(INSTALL_HINT)
    if not os.access(SANDBOX_PYTHON, os.X_OK):
        raise SandboxUnavailableError(
            f"The sandbox runs code with the system Python {SANDBOX_PYTHON}, which is missing: "
            "install python3 from the system's packages."
        )
    return found


def bubblewrap_problem(configured: str | None = None) -> str | None:
    """Why no sandbox can run here (how to install bubblewrap), or None."""
    try:
        find_bubblewrap(configured)
    except SandboxUnavailableError as exc:
        return str(exc)
    return None


class Sandbox:
    """Runs programs in bubblewrap, one uid slot per concurrent run."""

    def __init__(
        self,
        *,
        limits: SandboxLimits,
        bwrap: str | None = None,
        uid_base: int = 61000,
        uid_count: int = 64,
        lock_dir: str | None = None,
        cgroup: str | Cgroups | None = None,
    ):
        self.limits = limits
        self.bwrap = find_bubblewrap(bwrap)
        self.seccomp = deny_program()
        """The seccomp filter every run gets (None on an architecture without a table)."""
        self.cgroups = RunCgroups(cgroup) if isinstance(cgroup, str) else cgroup
        """Where each run gets its cgroup (``app.tools.sandbox.cgroup``: a cgroup v2 directory,
        or what ``cgroup_host`` found); None: no cgroup."""
        self._cgroup_limits = CgroupLimits(
            memory_bytes=limits.memory_bytes, processes=limits.processes
        )
        self.slots = UidSlots(
            uid_base=uid_base,
            uid_count=uid_count,
            lock_dir=Path(lock_dir or tempfile.gettempdir()) / "antwort-sandbox-slots",
            is_root=os.geteuid() == 0,
        )

    def run(self, request: SandboxRequest) -> SandboxOutcome:
        """Run one program; failures are in the outcome, never raised."""
        try:
            with self.slots.take() as slot, tracing.span("sandbox run"):
                outcome = self._run_as(slot.uid, request)
                tracing.annotate({"antwort.sandbox.exit_code": outcome.exit_code or 0})
                # A run that ended by itself took its pid namespace, and all in it, along; only
                # an abnormal end needs the sweep by uid.
                slot.is_clean = outcome.error is None
        except TimeoutError:
            outcome = SandboxOutcome(error="Every sandbox slot of this worker is busy; try again.")
        _count(outcome)
        return outcome

    def _run_as(self, uid: int | None, request: SandboxRequest) -> SandboxOutcome:
        timeout = self._timeout(request)
        payload = marshal.dumps(self._payload(request, timeout), 4)  # any Python 3 reads v4
        if self.cgroups is None:
            return self._launch(uid, payload, None, timeout=timeout)
        with self.cgroups.run(run_name(secrets.token_hex(6)), self._cgroup_limits) as group:
            return self._launch(uid, payload, group, timeout=timeout)

    def _timeout(self, request: SandboxRequest) -> float:
        """The run's wall clock: the limits', or the request's if shorter."""
        if request.timeout_seconds is None:
            return self.limits.timeout_seconds
        return max(0.0, min(request.timeout_seconds, self.limits.timeout_seconds))

    def _launch(
        self, uid: int | None, payload: bytes, group: RunGroup | None, *, timeout: float
    ) -> SandboxOutcome:
        credentials: dict[str, Any] = (
            {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}
        )
        started = time.monotonic()
        seccomp_fd = program_fd(self.seccomp)
        command = self.command(seccomp_fd=seccomp_fd)
        try:
            proc = subprocess.Popen(
                command if group is None else [*GATE, *command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                pass_fds=() if seccomp_fd is None else (seccomp_fd,),
                **credentials,
            )
        except OSError as exc:
            return SandboxOutcome(error=f"The sandbox could not start: {exc}")
        finally:
            if seccomp_fd is not None:
                os.close(seccomp_fd)
        with _reaped(proc):
            if group is not None:
                try:
                    group.add(proc.pid)  # behind the gate: nothing of the run has started yet
                except OSError as exc:
                    return SandboxOutcome(error=f"The sandbox could not enter its cgroup: {exc}")
                payload = b"\n" + payload  # opens the gate
            stdout, stderr, overran = _exchange(
                proc,
                payload,
                cap=4 * self.limits.max_output_bytes + 2 * self.limits.max_files_bytes + 65536,
                seconds=timeout + _GRACE_SECONDS,
            )
        elapsed = (time.monotonic() - started) * 1000
        if overran:
            return SandboxOutcome(
                timed_out=True, error="The sandbox overran its deadline and was killed."
            )
        outcome = _outcome(proc.returncode, stdout, stderr, elapsed)
        if group is not None and group.oom_kills():
            memory_mb = self.limits.memory_bytes // 2**20
            error = f"Killed by the memory limit ({memory_mb} MB for all the run's processes)."
            return dataclasses.replace(outcome, error=error)
        return outcome

    def _payload(self, request: SandboxRequest, timeout: float) -> dict[str, Any]:
        limits = self.limits
        return {
            "code": request.code,
            "argv": list(request.argv),
            "stdin": request.stdin,
            "env": {"PATH": "/usr/bin:/bin", "HOME": "/work", "LANG": "C.UTF-8", **request.env},
            "files": request.files,
            "timeout_seconds": timeout,
            "max_output_bytes": limits.max_output_bytes,
            "max_files_bytes": limits.max_files_bytes,
            "limits": {
                "cpu": limits.cpu_seconds,
                "as": limits.memory_bytes,
                "fsize": limits.file_size_bytes,
                "nofile": limits.open_files,
                "nproc": limits.processes,
                "core": 0,
            },
        }

    def command(self, *, seccomp_fd: int | None = None) -> list[str]:
        """The bwrap command line (the runner's source is passed with ``-c``).

        ``seccomp_fd``: a descriptor bwrap reads the seccomp filter from (``app.tools.sandbox
        .seccomp``); None: no filter.
        """
        size = str(self.limits.work_dir_bytes)
        seccomp = [] if seccomp_fd is None else ["--seccomp", str(seccomp_fd)]
        return [
            self.bwrap,
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--hostname",
            "sandbox",
            "--ro-bind",
            "/usr",
            "/usr",
            *_usr_merge_links(),
            "--ro-bind-try",
            "/etc/ld.so.cache",
            "/etc/ld.so.cache",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            # bwrap's /dev is a tmpfs of half the host's RAM, unbounded by --size: its shared
            # memory gets a capped tmpfs of its own, and the rest of /dev is made read-only.
            "--perms",
            "1777",
            "--size",
            size,
            "--tmpfs",
            "/dev/shm",
            "--remount-ro",
            "/dev",
            "--size",
            size,
            "--tmpfs",
            "/work",
            "--size",
            size,
            "--tmpfs",
            "/tmp",
            "--remount-ro",
            "/",
            "--chdir",
            "/work",
            "--clearenv",
            "--setenv",
            "PATH",
            "/usr/bin:/bin",
            "--setenv",
            "HOME",
            "/work",
            *seccomp,
            "--",
            SANDBOX_PYTHON,
            "-I",
            "-S",
            "-c",
            _runner_source(),
        ]


@contextlib.contextmanager
def _reaped(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """Kill (if still running) and reap the run's bwrap however the block ends.

    An exception in the block (a Celery time limit, any error while the run is exchanged with)
    would otherwise leave it running and, once the slot's sweep killed it, a zombie of the worker
    that still counts against its uid's process limit (``RLIMIT_NPROC``) in later runs.
    """
    try:
        yield
    finally:
        if proc.poll() is None:  # not reaped yet: its pid (and group) is still this run's
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def _exchange(
    proc: subprocess.Popen[bytes], payload: bytes, *, cap: int, seconds: float
) -> tuple[bytes, bytes, bool]:
    """Send ``payload``, read stdout/stderr up to ``cap`` until exit or the deadline.

    Returns stdout, stderr and whether the run was killed for overrunning (time or output).
    """
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    writer = threading.Thread(target=_feed, args=(proc.stdin, payload), daemon=True)
    writer.start()
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    chunks: dict[int, bytearray] = {out_fd: bytearray(), err_fd: bytearray()}
    deadline = time.monotonic() + seconds
    overran = False
    with selectors.DefaultSelector() as selector:
        for stream in (proc.stdout, proc.stderr):
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or sum(len(c) for c in chunks.values()) > cap:
                overran = True
                break
            for key, _ in selector.select(timeout=min(remaining, 0.5)):
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd] += data
                else:
                    selector.unregister(key.fileobj)
    if overran:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    writer.join(timeout=1)
    proc.stdout.close()
    proc.stderr.close()
    return bytes(chunks[out_fd]), bytes(chunks[err_fd]), overran


def _feed(stream: Any, payload: bytes) -> None:
    with contextlib.suppress(OSError):  # the sandbox died before reading everything
        stream.write(payload)
    with contextlib.suppress(OSError):
        stream.close()


def _outcome(returncode: int, stdout: bytes, stderr: bytes, elapsed_ms: float) -> SandboxOutcome:
    try:
        report = ast.literal_eval(stdout.decode("utf-8"))  # safe on any input: literals only
        if not isinstance(report, dict):
            raise ValueError("not a dict")
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError):
        detail = stderr.decode("utf-8", "replace").strip()[-500:]
        message = f"The sandbox ended abnormally (exit status {returncode})"
        if returncode in (-signal.SIGKILL, 128 + signal.SIGKILL):
            message += ": its supervising process was killed, so the output is lost"
        return SandboxOutcome(
            error=f"{message}." + (f" {detail}" if detail else ""), duration_ms=elapsed_ms
        )
    files = report.get("files")
    return SandboxOutcome(
        stdout=str(report.get("stdout", "")),
        stderr=str(report.get("stderr", "")),
        exit_code=report.get("exit_code"),
        timed_out=bool(report.get("timed_out")),
        files=None if files is None else base64.b64decode(files),
        files_error=report.get("files_error"),
        files_listing=tuple(report.get("files_listing") or ()),
        truncated=bool(report.get("stdout_dropped") or report.get("stderr_dropped")),
        duration_ms=float(report.get("duration_ms", elapsed_ms)),
    )


def _count(outcome: SandboxOutcome) -> None:
    """A run's outcome in the metrics: ok, failed (the program), timed out, error (the sandbox)."""
    if outcome.timed_out:
        metrics.SANDBOX_KILLS.labels("timeout").inc()
        label = "timed_out"
    elif outcome.error is not None:
        label = "error"
    else:
        label = "ok" if outcome.exit_code == 0 else "failed"
    metrics.SANDBOX_RUNS.labels(label).inc()


@cache
def _runner_source() -> str:
    return (Path(__file__).with_name("inside.py")).read_text()


@cache
def _usr_merge_links() -> tuple[str, ...]:
    """``/bin``, ``/lib``… as the host has them: symlinks into ``/usr``, or read-only binds."""
    args: list[str] = []
    for name in ("/bin", "/sbin", "/lib", "/lib64", "/lib32"):
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    return tuple(args)
