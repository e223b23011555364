"""A cgroup v2 per sandbox run (``ANTWORT_SANDBOX_CGROUP``): one cap on all of a run's processes.

rlimits bound each process; a run of many processes could take the per-process memory many
times over. With ``ANTWORT_SANDBOX_CGROUP`` naming a cgroup v2 directory delegated to the worker
(``memory``, ``pids`` and ``cpu`` enabled in its ``cgroup.subtree_control``, e.g. a systemd unit
with ``Delegate=yes``), each run gets a child cgroup ``run-<slot>`` with ``memory.max`` (and no
swap), ``pids.max`` and ``cpu.max`` set before any of its code runs: the run is started behind a
gate (``sh`` waiting for a line on its stdin), moved into the cgroup, then let through. A run the
kernel killed for memory is reported as such. Set but unusable (cgroup v1, a controller missing,
not writable): the sandbox worker refuses to start, saying which. Unset (the default): the worker
finds a hierarchy of its own (:mod:`.cgroup_host`; cgroup v1 in :mod:`.cgroup_v1`).

Runs are named ``run-<worker pid>-<random>``, so a worker starting up can tell the leftovers of
a dead worker (``reap``) from the runs of live ones sharing the parent.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

logger = logging.getLogger(__name__)

CONTROLLERS = ("memory", "pids", "cpu")

GATE = ["/bin/sh", "-c", 'read -r _ && exec "$@"', "sh"]
"""Prefix of a command that waits for one line on stdin before it runs (``RunCgroup.add``)."""


class CgroupUnavailableError(RuntimeError):
    """No usable cgroup for the runs: the message says why."""


class RunGroup(Protocol):
    """The cgroup (or cgroups, one per v1 hierarchy) of one run."""

    def add(self, pid: int) -> None:
        """Move process ``pid`` (and so what it starts afterwards) into the cgroup."""

    def oom_kills(self) -> int:
        """How many processes of the run the kernel killed for its memory limit."""


class Cgroups(Protocol):
    """Where runs get their cgroups: a cgroup v2 directory or cgroup v1 hierarchies."""

    def check(self) -> None:
        """Raise ``CgroupUnavailableError`` when runs cannot get their caps here."""

    def run(self, name: str, limits: CgroupLimits) -> contextlib.AbstractContextManager[RunGroup]:
        """A fresh cgroup with ``limits`` for one run; its processes are killed at the end."""

    def reap(self) -> int:
        """Remove the run cgroups of dead workers (killing what is left in them); how many."""


def run_name(token: str) -> str:
    """The cgroup name of a run of this process."""
    return f"run-{os.getpid()}-{token}"


def is_orphan(name: str) -> bool:
    """A run cgroup whose worker process is gone."""
    parts = name.split("-")
    if len(parts) != 3 or parts[0] != "run" or not parts[1].isdigit():
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@dataclass(frozen=True, slots=True, kw_only=True)
class CgroupLimits:
    """What one run may take, all its processes together."""

    memory_bytes: int
    processes: int
    cpu_period_us: int = 100_000
    cpus: float = 1.0
    """CPUs' worth of time per period (``cpu.max``)."""


@dataclass(frozen=True, slots=True)
class RunCgroup:
    """The cgroup of one run."""

    path: Path

    def add(self, pid: int) -> None:
        """Move process ``pid`` (and so what it starts afterwards) into the cgroup."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def oom_kills(self) -> int:
        """How many processes of the run the kernel killed for its memory limit."""
        with contextlib.suppress(OSError):
            for line in (self.path / "memory.events").read_text().splitlines():
                name, _, count = line.partition(" ")
                if name == "oom_kill":
                    return int(count)
        return 0


class RunCgroups:
    """Per-run cgroups under a delegated cgroup v2 directory."""

    def __init__(self, base: str):
        self.base = Path(base)

    def check(self) -> None:
        """Refuse a directory runs cannot get their caps in.

        Raises:
            CgroupUnavailableError: not cgroup v2, a controller not enabled for children, or
                not writable by this worker.
        """
        controllers = self.base / "cgroup.controllers"
        if not controllers.is_file():
            raise CgroupUnavailableError(
                f"ANTWORT_SANDBOX_CGROUP {str(self.base)!r} is not a cgroup v2 directory "
                "(no cgroup.controllers); unset it to run with per-process limits only."
            )
        enabled = set((self.base / "cgroup.subtree_control").read_text().split())
        missing = [name for name in CONTROLLERS if name not in enabled]
        if missing:
            raise CgroupUnavailableError(
                f"ANTWORT_SANDBOX_CGROUP {str(self.base)!r} does not enable "
                f"{', '.join(missing)} for its children (cgroup.subtree_control)."
            )
        if not os.access(self.base, os.W_OK):
            raise CgroupUnavailableError(
                f"ANTWORT_SANDBOX_CGROUP {str(self.base)!r} is not writable by this worker."
            )

    @contextlib.contextmanager
    def run(self, name: str, limits: CgroupLimits) -> Iterator[RunCgroup]:
        """A fresh cgroup with ``limits`` for one run; its processes are killed at the end."""
        group = RunCgroup(self.base / name)
        group.path.mkdir(exist_ok=True)
        quota = int(limits.cpus * limits.cpu_period_us)
        (group.path / "memory.max").write_text(str(limits.memory_bytes))
        (group.path / "pids.max").write_text(str(limits.processes))
        (group.path / "cpu.max").write_text(f"{quota} {limits.cpu_period_us}")
        swap = group.path / "memory.swap.max"
        if swap.exists():  # absent without swap accounting
            swap.write_text("0")
        try:
            yield group
        finally:
            _remove(group.path)

    def reap(self) -> int:
        """Remove the run cgroups of dead workers; how many."""
        orphans = [path for path in self.base.glob("run-*") if is_orphan(path.name)]
        for path in orphans:
            _remove(path)
        return len(orphans)


def _remove(path: Path) -> None:
    kill = path / "cgroup.kill"  # Linux 5.14+; else the uid slot's sweep ends stragglers
    with contextlib.suppress(OSError):
        if kill.exists():
            kill.write_text("1")
    try:
        path.rmdir()
    except OSError as exc:  # still busy: the next run of the slot reuses it (mkdir exist_ok)
        logger.warning("could not remove the sandbox cgroup %s: %s", path, exc)
