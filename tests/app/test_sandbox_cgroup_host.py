"""Per-run cgroups found by the worker itself, with the kernel enforcing them (cgroup v1 here).

Skipped, saying why, where this process can write no cgroup hierarchy (not root, a read-only
cgroupfs): there the worker's runs have per-process limits only.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.config import Settings
from app.tools.sandbox.cgroup import GATE, CgroupLimits, Cgroups, CgroupUnavailableError
from app.tools.sandbox.cgroup_host import find_cgroups, run_cgroups
from app.tools.sandbox.cgroup_v1 import V1RunCgroups
from app.tools.sandbox.executor import check_sandbox, make_sandbox
from app.tools.sandbox.runner import SandboxRequest
from tests.app.test_sandbox_runner import UID_BASE, UID_COUNT

MB = 2**20


def _host_cgroups() -> Cgroups | str:
    try:
        return find_cgroups()
    except CgroupUnavailableError as exc:
        return str(exc)


@pytest.fixture
def cgroups() -> Cgroups:
    found = _host_cgroups()
    if isinstance(found, str):
        pytest.skip(f"no writable cgroup hierarchy here: {found}")
    return found


def _parents(cgroups: Cgroups) -> tuple[Path, ...]:
    if isinstance(cgroups, V1RunCgroups):
        return cgroups.parents
    return (Path(cgroups.base),)  # type: ignore[attr-defined]


def _run_dirs(cgroups: Cgroups, pattern: str = "") -> list[Path]:
    """This process's run cgroups (the parent is shared with the host's other workers)."""
    pattern = pattern or f"run-{os.getpid()}-*"
    return [path for parent in _parents(cgroups) for path in parent.glob(pattern)]


def _settings(**overrides: object) -> Settings:
    values: dict[str, object] = {
        "redis_url": "redis://x",
        "sandbox_uid_base": UID_BASE,
        "sandbox_uid_count": UID_COUNT,
        "sandbox_timeout_seconds": 20,
    }
    return Settings.model_validate(values | overrides)


CHILDREN_ALLOCATE = """
import os, time
children = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        block = bytearray(100 * 2**20)
        for i in range(0, len(block), 4096):
            block[i] = 1  # touch every page: resident, charged to the cgroup
        time.sleep(2)
        os._exit(0)
    children.append(pid)
print([os.waitpid(pid, 0)[1] for pid in children])
"""


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")
def test_default_settings_kill_a_run_whose_children_together_pass_the_memory_cap(
    cgroups: Cgroups,
) -> None:
    sandbox = make_sandbox(_settings(sandbox_memory_mb=256))
    assert sandbox.cgroups is not None  # found with the defaults

    # Each child stays under the per-process cap (256 MB of address space); together 600 MB.
    outcome = sandbox.run(SandboxRequest(code=CHILDREN_ALLOCATE))

    assert outcome.error == "Killed by the memory limit (256 MB for all the run's processes)."
    assert _run_dirs(cgroups) == []  # the run's cgroup is gone


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")
def test_default_settings_run_a_fork_bomb_to_its_end_and_remove_its_cgroup(
    cgroups: Cgroups,
) -> None:
    # The program forks twice, before the bomb goes off: its own sleep, then one subshell that
    # sets the bomb off. Once the bomb has taken every pid, bash could fork nothing (it retries
    # with growing pauses, 1 + 2 + 4 + 8 s, then gives up); calling the bomb from the program
    # itself made it fork a pipeline's second member while the first one's children raced it
    # for the pids, which they won on a loaded machine. The generous time only bounds a loaded
    # machine; the run ends with its program, after 2 s.
    sandbox = make_sandbox(_settings(sandbox_timeout_seconds=40))
    bomb = "sleep 2 & pause=$!; (bomb() { bomb | bomb & }; bomb) & wait $pause; echo survived"

    outcome = sandbox.run(SandboxRequest(argv=("/bin/bash", "-c", bomb)))

    assert outcome.error is None and "survived" in outcome.stdout
    assert _run_dirs(cgroups) == []


def test_pids_max_stops_a_fork_bomb_of_root_and_the_end_kills_the_stragglers(
    cgroups: Cgroups,
) -> None:
    # Root is bound by no RLIMIT_NPROC: only the cgroup's pids.max stops this one.
    limits = CgroupLimits(memory_bytes=256 * MB, processes=10)
    script = (
        "import os, time\n"
        "for _ in range(40):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60); os._exit(0)\n"
        "    except BlockingIOError:\n"  # EAGAIN: pids.max reached
        "        pass\n"
        "print('started', flush=True); time.sleep(60)\n"
    )
    with cgroups.run(f"run-{os.getpid()}-pids", limits) as group:  # ours: never reaped as orphan
        proc = subprocess.Popen(
            [*GATE, "/usr/bin/python3", "-c", script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        group.add(proc.pid)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"\n")
        proc.stdin.close()
        assert proc.stdout.readline() == b"started\n"
        [pids] = [path for path in _run_dirs(cgroups) if (path / "pids.max").exists()]
        assert len((pids / "cgroup.procs").read_text().split()) == 10
        assert (pids / "pids.events").read_text().split() != ["max", "0"]

    assert proc.wait(timeout=10) < 0  # killed with its children when the run ended
    proc.stdout.close()
    assert _run_dirs(cgroups) == []


def test_leftovers_of_a_dead_worker_are_reaped_at_the_next_start(cgroups: Cgroups) -> None:
    orphan = f"run-{_dead_pid()}-leftover"
    limits = CgroupLimits(memory_bytes=64 * MB, processes=4)
    manager = cgroups.run(orphan, limits)
    manager.__enter__()  # a worker that died mid-run never leaves the block

    assert cgroups.reap() >= 1  # this one, and any other dead worker's
    assert _run_dirs(cgroups, orphan) == []


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")
def test_a_worker_that_exits_leaves_the_shared_parent_to_the_hosts_other_workers(
    cgroups: Cgroups,
) -> None:
    # Another sandbox worker of this host starts, finds the same parent, and exits.
    other_worker = (
        "from tests.app.test_sandbox_cgroup_host import _settings\n"
        "from app.tools.sandbox.executor import check_sandbox\n"
        "check_sandbox(_settings())\n"
    )
    subprocess.run([sys.executable, "-c", other_worker], check=True, timeout=60)

    assert all(parent.is_dir() for parent in _parents(cgroups))
    with cgroups.run(f"run-{os.getpid()}-after", CgroupLimits(memory_bytes=64 * MB, processes=4)):
        assert len(_run_dirs(cgroups)) == len(_parents(cgroups))
    assert _run_dirs(cgroups) == []


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_auto_off_or_an_explicit_directory_wins(tmp_path: Path) -> None:
    assert run_cgroups(_settings(sandbox_cgroup_auto=False)) is None
    explicit = run_cgroups(_settings(sandbox_cgroup=str(tmp_path)))
    assert explicit is not None and Path(explicit.base) == tmp_path  # type: ignore[attr-defined]


def test_no_hierarchy_means_no_cgroup(tmp_path: Path) -> None:
    assert run_cgroups(_settings(), root=tmp_path) is None
    with pytest.raises(CgroupUnavailableError, match="no cgroup v2 nor cgroup v1"):
        find_cgroups(tmp_path)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")
def test_worker_without_a_cgroup_says_once_that_runs_have_no_total_cap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="app.tools.sandbox.executor"):
        check_sandbox(_settings(sandbox_cgroup_auto=False))

    [record] = [r for r in caplog.records if "NO total cap" in r.getMessage()]
    assert "ANTWORT_SANDBOX_CGROUP_AUTO is off" in record.getMessage()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")
def test_worker_with_a_cgroup_starts_silently_and_reaps_a_dead_workers_runs(
    cgroups: Cgroups, caplog: pytest.LogCaptureFixture
) -> None:
    limits = CgroupLimits(memory_bytes=MB, processes=4)
    leftover = cgroups.run(f"run-{_dead_pid()}-leftover", limits)
    with leftover, caplog.at_level(logging.INFO):
        check_sandbox(_settings())

    assert not any("NO total cap" in r.getMessage() for r in caplog.records)
    assert any("dead worker" in r.getMessage() for r in caplog.records)
