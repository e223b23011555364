"""The bubblewrap sandbox itself: isolation, limits, and what each escape attempt gets."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.tools.sandbox import runner
from app.tools.sandbox.executor import report
from app.tools.sandbox.runner import (
    INSTALL_HINT,
    Sandbox,
    SandboxLimits,
    SandboxOutcome,
    SandboxRequest,
    SandboxUnavailableError,
    find_bubblewrap,
)
from app.tools.sandbox.slots import processes_of

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")

UID_BASE = 62000
UID_COUNT = 4
LIMITS = SandboxLimits(
    timeout_seconds=3,
    cpu_seconds=5,
    memory_bytes=256 * 1024 * 1024,
    file_size_bytes=8 * 1024 * 1024,
    processes=24,
    work_dir_bytes=32 * 1024 * 1024,
    max_output_bytes=4096,
)


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(limits=LIMITS, uid_base=UID_BASE, uid_count=UID_COUNT)


@pytest.fixture(autouse=True)
def _nothing_left_running(sandbox: Sandbox) -> Iterator[None]:
    """After each test, no process of a sandbox uid is alive, or a new child of this process.

    Children this process had before the test (the e2e fleet a session fixture started, when
    the whole suite runs in one process) are not the test's.

    Other runs on the host use the same uids under the same lock files (another checkout's
    tests, the cgroup tests, a fleet's sandbox workers): a uid one of them holds now is busy,
    not leaked. So each uid is looked at under its lock, taken as a run takes it; a uid locked
    elsewhere is passed over. A worker that dies mid-run gives its lock back at once, while its
    bubblewrap goes with it a moment later (``--die-with-parent``; the lock says the next holder
    sweeps): what is left must stay left for a few seconds to be a leak (CI: a sandbox worker of
    another checkout's fleet, stopped while this test ran).
    """
    before = {child.split()[0] for child in _children()}  # a session fleet's processes, say
    yield
    left_children = [child for child in _children() if child.split()[0] not in before]
    assert not left_children, "a child process of the test was left running or unreaped"
    if os.geteuid() != 0:
        return
    deadline = time.monotonic() + 5
    while (left := _left_running(sandbox)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, left


def _left_running(sandbox: Sandbox) -> dict[int, list[int]]:
    """The processes of each sandbox uid that no run holds now (uids with none left out)."""
    left = {}
    for uid in range(UID_BASE, UID_BASE + UID_COUNT):
        fd = os.open(sandbox.slots.lock_dir / f"{uid}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # in a run elsewhere
        else:
            if pids := processes_of(uid):
                left[uid] = pids
        finally:
            os.close(fd)
    return left


def _children() -> list[str]:
    """This process's child processes (zombies too): their pids and states."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            pid, rest = stat.read_text().split(" (", 1)
            state, ppid = rest.rsplit(") ", 1)[1].split()[:2]
            if int(ppid) == os.getpid():
                found.append(f"{pid} {state}")
    return found


def run(sandbox: Sandbox, code: str, files: bytes = b"") -> SandboxOutcome:
    return sandbox.run(SandboxRequest(code=code, files=files))


def test_runner_runs_code_and_reports_its_output(sandbox: Sandbox) -> None:
    outcome = run(sandbox, "import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert outcome.is_ok
    assert (outcome.stdout, outcome.stderr) == ("out\n", "err\n")


def test_runner_reports_exceptions_without_its_own_frames(sandbox: Sandbox) -> None:
    outcome = run(sandbox, "1/0")
    assert not outcome.is_ok and outcome.exit_code == 1
    assert "ZeroDivisionError" in outcome.stderr
    assert "_become_program" not in outcome.stderr


def test_runner_keeps_files_between_runs(sandbox: Sandbox) -> None:
    first = run(sandbox, "open('data.txt', 'w').write('kept')")
    assert first.files and first.files_listing == ("data.txt",)
    second = run(sandbox, "print(open('data.txt').read())", files=first.files)
    assert second.stdout == "kept\n"


def test_runner_caps_output(sandbox: Sandbox) -> None:
    outcome = run(sandbox, "print('x' * 100_000)")
    assert outcome.truncated and len(outcome.stdout) == 4096


def test_runner_runs_bash_programs(sandbox: Sandbox) -> None:
    outcome = sandbox.run(
        SandboxRequest(argv=("/bin/bash", "-c", "read line; echo got $line"), stdin="hi\n")
    )
    assert outcome.is_ok and outcome.stdout == "got hi\n"


# -- escape and abuse attempts: each contained, reported as an error, nothing left behind ------


def test_abuse_reading_worker_files_and_secrets_fails(sandbox: Sandbox) -> None:
    here = os.path.abspath(__file__)
    outcome = run(sandbox, f"print(open({here!r}).read())")
    assert not outcome.is_ok and "FileNotFoundError" in outcome.stderr
    os.environ["ANTWORT_SECRET_FOR_TEST"] = "s3cret"
    try:
        outcome = run(sandbox, "import os; print(os.environ['ANTWORT_SECRET_FOR_TEST'])")
    finally:
        del os.environ["ANTWORT_SECRET_FOR_TEST"]
    assert not outcome.is_ok and "KeyError" in outcome.stderr
    assert "s3cret" not in outcome.stdout + outcome.stderr


def test_abuse_network_to_loopback_fails(sandbox: Sandbox) -> None:
    with socket.socket() as server:  # a listener the sandbox must not reach
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)"
        outcome = run(sandbox, code)
    assert not outcome.is_ok
    assert "ConnectionRefusedError" in outcome.stderr or "OSError" in outcome.stderr


def test_abuse_fork_bomb_is_stopped(sandbox: Sandbox) -> None:
    outcome = run(sandbox, "import os\nwhile True:\n    os.fork()")
    assert not outcome.is_ok
    assert "BlockingIOError" in outcome.stderr or outcome.timed_out


def test_abuse_memory_bomb_is_stopped(sandbox: Sandbox) -> None:
    outcome = run(sandbox, "blocks = []\nwhile True:\n    blocks.append(bytearray(10**7))")
    assert not outcome.is_ok and "MemoryError" in outcome.stderr


def test_abuse_infinite_loop_times_out(sandbox: Sandbox) -> None:
    outcome = run(sandbox, "while True:\n    pass")
    assert outcome.timed_out and not outcome.is_ok
    assert "timed out" in report(outcome)


def test_abuse_huge_file_is_stopped(sandbox: Sandbox) -> None:
    code = "f = open('big', 'wb')\nfor _ in range(10 * 1024):\n    f.write(b'0' * 2**20)"
    outcome = run(sandbox, code)
    assert not outcome.is_ok
    assert "SIGXFSZ" in report(outcome) or "No space left" in outcome.stderr


def test_abuse_writing_outside_the_work_directory_fails(sandbox: Sandbox) -> None:
    outcome = run(sandbox, "open('/usr/evil', 'w')")
    assert not outcome.is_ok and "Read-only file system" in outcome.stderr
    outcome = run(sandbox, "open('/etc/evil', 'w')")
    assert not outcome.is_ok and "Error" in outcome.stderr


def test_abuse_filling_dev_shm_stops_at_the_work_dir_cap(sandbox: Sandbox) -> None:
    code = (  # files under RLIMIT_FSIZE (8 MB), together past the 32 MB tmpfs
        "for n in range(8):\n"
        "    with open(f'/dev/shm/part{n}', 'wb') as f:\n"
        "        f.write(b'0' * 7 * 2**20)"
    )
    outcome = run(sandbox, code)
    assert not outcome.is_ok
    assert "No space left on device" in outcome.stderr


def test_abuse_writing_into_dev_is_read_only(sandbox: Sandbox) -> None:
    outcome = run(sandbox, "open('/dev/evil', 'wb').write(b'0' * 2**20)")
    assert not outcome.is_ok and "Read-only file system" in outcome.stderr
    outcome = run(sandbox, "open('/dev/null', 'w').write('fine')\nprint('ok')")
    assert outcome.stdout == "ok\n"


def test_abuse_killing_the_parent_is_reported(sandbox: Sandbox) -> None:
    outcome = run(sandbox, "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
    assert not outcome.is_ok and outcome.error is not None
    outcome = run(sandbox, "import os, signal\nos.kill(1, signal.SIGKILL)\nprint('alive')")
    assert outcome.stdout == "alive\n"  # the namespace's init ignores it


def test_abuse_process_left_running_is_killed(sandbox: Sandbox) -> None:
    code = (
        "import subprocess\n"
        "subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        "print('started')"
    )
    outcome = run(sandbox, code)
    assert outcome.stdout == "started\n"
    # the autouse fixture checks that no process of the sandbox uids is alive


def test_a_run_that_raises_midway_leaves_its_bubblewrap_killed_and_reaped(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a time limit, say")

    monkeypatch.setattr(runner, "_exchange", interrupted)
    with pytest.raises(RuntimeError, match="a time limit"):
        run(sandbox, "print('never')")
    # the autouse fixture checks that no child of this process is left, zombie or alive


def test_abuse_writing_into_the_runner_output_is_denied(sandbox: Sandbox) -> None:
    outcome = run(sandbox, "import os\nopen(f'/proc/{os.getppid()}/fd/1', 'w').write('{}')")
    assert not outcome.is_ok and "PermissionError" in outcome.stderr


def test_find_bubblewrap_says_how_to_install_it() -> None:
    with pytest.raises(SandboxUnavailableError) as caught:
        find_bubblewrap("/nonexistent/bwrap")
    assert str(caught.value) == INSTALL_HINT and "apt-get install bubblewrap" in INSTALL_HINT


SYSCALL = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def call(name, *args):\n"
    "    result = getattr(libc, name)(*args)\n"
    "    print(name, result, os.strerror(ctypes.get_errno()) if result == -1 else 'ok')\n"
)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        ("call('unshare', 0x10000000)", "unshare"),  # CLONE_NEWUSER
        ("call('unshare', 0x00020000)", "unshare"),  # CLONE_NEWNS
        ("call('mount', b'none', b'/work', b'tmpfs', 0, None)", "mount"),
        ("call('ptrace', 0, 0, None, None)", "ptrace"),  # PTRACE_TRACEME
        ("call('syscall', 250, 0, 0, 0, 0)", "syscall"),  # keyctl
        ("call('syscall', 321, 0, 0, 0)", "syscall"),  # bpf
        ("call('syscall', 56, 0x10000000 | 17, 0, 0, 0, 0)", "syscall"),  # clone(NEWUSER|SIGCHLD)
    ],
)
def test_abuse_seccomp_refuses_namespaces_mount_ptrace_keyring_bpf(
    sandbox: Sandbox, call: str, name: str
) -> None:
    outcome = run(sandbox, SYSCALL + call)
    assert outcome.stdout == f"{name} -1 Operation not permitted\n", report(outcome)


def test_abuse_seccomp_refuses_unshare_from_bash(sandbox: Sandbox) -> None:
    script = "unshare -U true; echo rc=$?"
    outcome = sandbox.run(SandboxRequest(argv=("/bin/bash", "-c", script)))
    assert "Operation not permitted" in outcome.stderr, report(outcome)
    assert outcome.stdout == "rc=1\n"


def test_seccomp_leaves_threads_and_child_processes_working(sandbox: Sandbox) -> None:
    code = (
        "import subprocess, threading\n"
        "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
        "print(subprocess.run(['echo', 'child'], capture_output=True, text=True).stdout, end='')"
    )
    outcome = run(sandbox, code)
    assert outcome.stdout == "thread\nchild\n", report(outcome)
