"""The program that runs *inside* the sandbox (``/usr/bin/python3``, standard library only).

It is never imported by the fleet: :mod:`app.tools.sandbox.runner` passes this file's source
to the sandbox's Python (``-c``) as the sandbox's first process. It reads one JSON request on
stdin, then:

1. makes itself non-dumpable (the code it runs has the same uid and must not be able to read
   or ptrace it, nor write to its output through ``/proc/<pid>/fd``), and sets the resource
   limits, which every process it starts inherits;
2. restores the container's files (a ``tar.gz``) into the work directory;
3. runs the code (Python in a forked child, so no second interpreter start; or a program such
   as bash), capturing stdout and stderr up to a cap, under a wall-clock deadline;
4. kills every process left in the sandbox (``kill(-1)`` spares only the caller);
5. writes one JSON outcome on stdout: output, exit status, and the work directory as a new
   ``tar.gz``.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # not ``signal``: it imports enum (slow)
import ctypes
import marshal
import os
import resource
import select
import sys
import time

# Only cheap modules are imported up front (no json, typing, selectors, contextlib): a trivial
# run's latency is mostly interpreter start-up. tarfile, base64, traceback come when needed.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

WORK = "/work"
_PR_SET_DUMPABLE = 4
_READ = 65536


def main() -> None:
    """Serve one request from stdin."""
    request = marshal.loads(sys.stdin.buffer.read())  # written by the worker (trusted)
    _harden(request["limits"])
    restore_error = _restore(request.get("files") or b"")
    started = time.monotonic()
    outcome = _run(request)
    outcome["duration_ms"] = round((time.monotonic() - started) * 1000, 1)
    _kill_everything_else()
    if restore_error:
        outcome["files_error"] = restore_error
    else:
        outcome.update(_snapshot(int(request["max_files_bytes"])))
    sys.stdout.write(repr(outcome))  # the worker reads it with ast.literal_eval
    sys.stdout.flush()


def _harden(limits: dict[str, int]) -> None:
    ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    for name, value in limits.items():
        which = getattr(resource, f"RLIMIT_{name.upper()}")
        resource.setrlimit(which, (value, value))


def _restore(data: bytes) -> str:
    if not data:
        return ""
    import io
    import tarfile

    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            members = [m for m in archive.getmembers() if _is_plain(m)]
            archive.extractall(WORK, members=members)
    except (OSError, tarfile.TarError, ValueError) as exc:
        return f"the container's files could not be restored: {exc}"
    return ""


def _is_plain(member: Any) -> bool:
    name = os.path.normpath(member.name)
    return (member.isfile() or member.isdir()) and not name.startswith(("/", ".."))


def _run(request: dict[str, Any]) -> dict[str, Any]:
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: becomes the user's program
        os.dup2(stdin_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        _become_program(request)
    for fd in (stdin_r, out_w, err_w):
        os.close(fd)
    os.write(stdin_w, request.get("stdin", "").encode()[:_READ])  # a pipe holds 64 KiB
    os.close(stdin_w)
    return _collect(pid, out_r, err_r, request)


def _become_program(request: dict[str, Any]) -> None:
    os.chdir(WORK)
    os.setsid()
    for sig in (_signal.SIGPIPE, _signal.SIGXFSZ):
        _signal.signal(sig, _signal.SIG_DFL)
    argv = request.get("argv")
    if argv:
        try:
            os.execve(argv[0], argv, {**request["env"]})
        finally:
            os._exit(127)
    code = 0
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - lives with the process
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.argv = ["<code>"]
    # The runner starts without ``site`` (-S) to start fast; the code gets the system's packages.
    version = f"python3.{sys.version_info.minor}"
    for path in (
        "/usr/local/lib/python3/dist-packages",
        f"/usr/local/lib/{version}/dist-packages",
        "/usr/lib/python3/dist-packages",
        f"/usr/lib/{version}/dist-packages",
    ):
        if os.path.isdir(path):
            sys.path.append(path)
    os.environ.clear()
    os.environ.update(request["env"])
    namespace: dict[str, Any] = {"__name__": "__main__"}
    try:
        exec(compile(request["code"], "<code>", "exec"), namespace)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException as exc:  # the user's code failed: show its traceback, as python would
        code = 1
        if isinstance(exc, MemoryError):
            namespace.clear()  # give the code's memory back, or the report itself fails
        _print_traceback(exc)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except OSError:
                code = code or 1  # the output could not be written: not a clean exit
        os._exit(code)


def _print_traceback(exc: BaseException) -> None:
    try:
        import traceback

        tb = exc.__traceback__.tb_next if exc.__traceback__ else None  # not the runner's frame
        traceback.print_exception(type(exc), exc, tb)
    except BaseException:  # still out of memory, say: the exception's name at least
        os.write(2, f"{type(exc).__name__}: {exc}\n".encode(errors="replace"))


def _collect(pid: int, out_r: int, err_r: int, request: dict[str, Any]) -> dict[str, Any]:
    cap = int(request["max_output_bytes"])
    deadline = time.monotonic() + float(request["timeout_seconds"])
    buffers = {out_r: bytearray(), err_r: bytearray()}
    dropped = {out_r: 0, err_r: 0}
    poller = select.poll()
    for fd in buffers:
        poller.register(fd, select.POLLIN)
    # A pidfd wakes the loop the moment the program exits (no polling interval to wait out).
    exited = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else -1
    if exited >= 0:
        poller.register(exited, select.POLLIN)
    open_fds = set(buffers)
    status: int | None = None
    timed_out = False
    while status is None:
        remaining = max(deadline - time.monotonic(), 0)
        wait_ms = min(remaining, 0.02 if exited < 0 else 1.0) * 1000
        for fd, _ in poller.poll(wait_ms):
            if fd != exited:
                _read_into(fd, buffers, dropped, cap, poller, open_fds)
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            status = raw
        elif time.monotonic() > deadline:
            timed_out = True
            os.kill(-1, _signal.SIGKILL)
            status = os.waitpid(pid, 0)[1]
    if exited >= 0:
        poller.unregister(exited)
        os.close(exited)
    _kill_everything_else()  # a leftover holding the pipes open must not stall the drain
    drain_until = time.monotonic() + 2.0
    while open_fds and time.monotonic() < drain_until:
        for fd, _ in poller.poll(100):
            _read_into(fd, buffers, dropped, cap, poller, open_fds)
    return {
        "stdout": buffers[out_r].decode("utf-8", "replace"),
        "stderr": buffers[err_r].decode("utf-8", "replace"),
        "stdout_dropped": dropped[out_r],
        "stderr_dropped": dropped[err_r],
        "exit_code": os.waitstatus_to_exitcode(status),
        "timed_out": timed_out,
    }


def _read_into(
    fd: int,
    buffers: dict[int, bytearray],
    dropped: dict[int, int],
    cap: int,
    poller: select.poll,
    open_fds: set[int],
) -> None:
    chunk = os.read(fd, _READ)
    if not chunk:
        poller.unregister(fd)
        os.close(fd)
        open_fds.discard(fd)
        return
    room = cap - len(buffers[fd])
    buffers[fd] += chunk[: max(room, 0)]
    dropped[fd] += max(len(chunk) - max(room, 0), 0)


def _kill_everything_else() -> None:
    try:
        os.kill(-1, _signal.SIGKILL)  # every process we may signal but ourselves and pid 1
    except ProcessLookupError:  # none left
        _reap()
        return
    _reap()


def _reap() -> None:
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _snapshot(max_bytes: int) -> dict[str, Any]:
    if not os.listdir(WORK):
        return {"files": "", "files_listing": []}
    import base64
    import io
    import tarfile

    buffer = io.BytesIO()
    try:
        with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as archive:
            for name in sorted(os.listdir(WORK)):
                archive.add(os.path.join(WORK, name), arcname=name, filter=_plain_or_none)
    except OSError as exc:
        return {"files": None, "files_error": f"the files could not be saved: {exc}"}
    data = buffer.getvalue()
    if len(data) > max_bytes:
        message = f"the files ({len(data)} bytes compressed) exceed {max_bytes} bytes: not kept"
        return {"files": None, "files_error": message, "files_listing": _listing()}
    return {"files": base64.b64encode(data).decode(), "files_listing": _listing()}


def _plain_or_none(member: Any) -> Any:
    return member if member.isfile() or member.isdir() else None


def _listing() -> list[str]:
    found = []
    for root, _, files in os.walk(WORK):
        for name in files:
            found.append(os.path.relpath(os.path.join(root, name), WORK))
    return sorted(found)[:200]


if __name__ == "__main__":
    main()
