"""A cgroup v1 per sandbox run: the same caps as :mod:`.cgroup`, over one directory per hierarchy.

cgroup v1 has a hierarchy per controller (``/sys/fs/cgroup/memory``, ``…/pids``, ``…/cpu``). A
run gets a directory of the same name in each, under the worker's parent (``antwort-sandbox``):
``memory.limit_in_bytes`` and, where swap accounting is on, ``memory.memsw.limit_in_bytes`` (no
swap beyond the cap), ``pids.max`` and, when the cpu hierarchy is writable, a CFS quota. The
process behind the gate is written to every one before any of the run's code runs. v1 has no
``cgroup.kill``: at the end, whatever is left is killed by pid until the directories are empty,
and then they are removed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from app.tools.sandbox.cgroup import CgroupLimits, CgroupUnavailableError, is_orphan

logger = logging.getLogger(__name__)

_EMPTY_SECONDS = 5.0
"""How long the end of a run waits for its killed processes to leave the cgroup."""


@dataclass(frozen=True, slots=True)
class V1RunGroup:
    """The directories of one run, one per hierarchy (the memory one first)."""

    paths: tuple[Path, ...]

    def add(self, pid: int) -> None:
        """Move process ``pid`` (and so what it starts afterwards) into every hierarchy's group."""
        for path in self.paths:
            (path / "cgroup.procs").write_text(str(pid))

    def oom_kills(self) -> int:
        """How many processes of the run the kernel killed for its memory limit."""
        with contextlib.suppress(OSError):
            for line in (self.paths[0] / "memory.oom_control").read_text().splitlines():
                name, _, count = line.partition(" ")
                if name == "oom_kill":
                    return int(count)
        return 0


class V1RunCgroups:
    """Per-run cgroups under a parent in the memory, pids and (optionally) cpu hierarchies."""

    def __init__(self, *, memory: Path, pids: Path, cpu: Path | None):
        self.parents = (memory, pids) if cpu is None else (memory, pids, cpu)
        """The parent in each hierarchy, created by the worker (``cgroup_host``)."""
        self.has_cpu = cpu is not None

    def check(self) -> None:
        """Refuse parents that are not cgroup v1 directories of the needed controllers.

        Raises:
            CgroupUnavailableError: a parent lacks its controller's files or is not writable.
        """
        probes = ("memory.limit_in_bytes", "pids.max", "cpu.shares")
        for parent, probe in zip(self.parents, probes[: len(self.parents)], strict=True):
            if not (parent / probe).exists() or not os.access(parent, os.W_OK):
                raise CgroupUnavailableError(f"{parent} is not a writable cgroup v1 directory")

    @contextlib.contextmanager
    def run(self, name: str, limits: CgroupLimits) -> Iterator[V1RunGroup]:
        """A fresh group with ``limits`` in each hierarchy; its processes are killed at the end."""
        group = V1RunGroup(tuple(parent / name for parent in self.parents))
        try:
            for path in group.paths:
                path.mkdir(parents=True, exist_ok=True)  # the parent too, if it was removed
            _write_limits(group, limits, has_cpu=self.has_cpu)
            yield group
        finally:
            _remove(group.paths)

    def reap(self) -> int:
        """Remove the run groups of dead workers (killing what is left in them); how many."""
        names = {path.name for parent in self.parents for path in parent.glob("run-*")}
        orphans = sorted(name for name in names if is_orphan(name))
        for name in orphans:
            _remove(tuple(parent / name for parent in self.parents))
        return len(orphans)


def _write_limits(group: V1RunGroup, limits: CgroupLimits, *, has_cpu: bool) -> None:
    memory, pids = group.paths[0], group.paths[1]
    (memory / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
    swap = memory / "memory.memsw.limit_in_bytes"  # absent without swap accounting
    if swap.exists():
        swap.write_text(str(limits.memory_bytes))  # memory + swap: so no swap at all
    (pids / "pids.max").write_text(str(limits.processes))
    if has_cpu:
        cpu = group.paths[2]
        (cpu / "cpu.cfs_period_us").write_text(str(limits.cpu_period_us))
        (cpu / "cpu.cfs_quota_us").write_text(str(int(limits.cpus * limits.cpu_period_us)))


def _remove(paths: tuple[Path, ...]) -> None:
    for path in paths:
        _empty(path)
        try:
            path.rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:  # still busy: the next start of a worker reaps it
            logger.warning("could not remove the sandbox cgroup %s: %s", path, exc)


def _empty(path: Path) -> None:
    """Kill every process in ``path`` until none is left (or a deadline passes)."""
    deadline = time.monotonic() + _EMPTY_SECONDS
    while time.monotonic() < deadline:
        try:
            pids = [int(pid) for pid in (path / "cgroup.procs").read_text().split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)  # the killed leave the cgroup when they exit
