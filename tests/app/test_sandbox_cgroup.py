"""Per-run cgroups (``ANTWORT_SANDBOX_CGROUP``) against a directory laid out like cgroupfs.

This host has cgroup v1 only, so the kernel's side (the caps biting) cannot run here; what the
worker writes, the gate that holds a run until it is in its cgroup, and the refusals can.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.config import Settings
from app.tools.sandbox.cgroup import CgroupLimits, CgroupUnavailableError, RunCgroups
from app.tools.sandbox.executor import check_sandbox
from app.tools.sandbox.runner import Sandbox, SandboxRequest
from tests.app.test_sandbox_runner import LIMITS, UID_BASE, UID_COUNT


def delegated(tmp_path: Path, enabled: str = "cpu memory pids") -> Path:
    base = tmp_path / "antwort.slice"
    base.mkdir()
    (base / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    (base / "cgroup.subtree_control").write_text(enabled + "\n")
    return base


def test_cgroup_run_writes_the_caps_before_the_run_and_reads_oom_kills(tmp_path: Path) -> None:
    base = delegated(tmp_path)
    limits = CgroupLimits(memory_bytes=256 * 2**20, processes=24, cpus=0.5)

    with RunCgroups(str(base)).run("run-1", limits) as group:
        assert (group.path / "memory.max").read_text() == str(256 * 2**20)
        assert (group.path / "pids.max").read_text() == "24"
        assert (group.path / "cpu.max").read_text() == "50000 100000"
        assert group.oom_kills() == 0
        (group.path / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n")
        assert group.oom_kills() == 2


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ("v1", "not a cgroup v2 directory"),
        ("no-pids", "does not enable pids"),
    ],
)
def test_cgroup_check_refuses_what_cannot_cap_a_run(
    tmp_path: Path, layout: str, message: str
) -> None:
    if layout == "v1":
        base = tmp_path / "memory"
        base.mkdir()
    else:
        base = delegated(tmp_path, enabled="cpu memory")

    with pytest.raises(CgroupUnavailableError, match=message):
        RunCgroups(str(base)).check()


def test_cgroup_check_accepts_a_delegated_directory(tmp_path: Path) -> None:
    RunCgroups(str(delegated(tmp_path))).check()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")
def test_sandbox_run_enters_its_cgroup_through_the_gate(tmp_path: Path) -> None:
    base = delegated(tmp_path)
    sandbox = Sandbox(limits=LIMITS, uid_base=UID_BASE, uid_count=UID_COUNT, cgroup=str(base))

    outcome = sandbox.run(SandboxRequest(code="print('inside')"))

    assert outcome.stdout == "inside\n" and outcome.is_ok
    # A directory is not cgroupfs: the run's cgroup stays behind (rmdir needs it empty).
    [group] = base.glob("run-*")
    assert (group / "cgroup.procs").read_text().isdigit()  # the gate's pid, before bwrap ran
    assert (group / "memory.max").read_text() == str(LIMITS.memory_bytes)
    assert (group / "pids.max").read_text() == str(LIMITS.processes)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")
def test_sandbox_worker_refuses_to_start_on_a_cgroup_v1_directory(tmp_path: Path) -> None:
    v1 = tmp_path / "memory"
    v1.mkdir()

    with pytest.raises(SystemExit, match="not a cgroup v2 directory"):
        check_sandbox(Settings(redis_url="redis://x", sandbox_cgroup=str(v1)))
