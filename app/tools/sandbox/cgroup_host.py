"""Finding where the sandbox worker can give each run a cgroup, with the default settings.

In this order: ``ANTWORT_SANDBOX_CGROUP`` (a delegated cgroup v2 directory) when set; nothing
when ``ANTWORT_SANDBOX_CGROUP_AUTO`` is off; else the host's own hierarchy:

- **cgroup v2** (``/sys/fs/cgroup/cgroup.controllers``): a parent ``antwort-sandbox`` at the
  root, its children given ``memory``, ``pids`` and ``cpu`` (the root must enable them);
- **cgroup v1** (``/sys/fs/cgroup/memory`` and ``…/pids``, ``…/cpu`` if there): a parent
  ``antwort-sandbox`` under the worker's own cgroup in each hierarchy (so a container's caps
  still hold around the runs).

Creating the parent is the test of being allowed to: a worker that is not root, or a read-only
cgroupfs, finds none, and its runs have per-process limits only (the worker says so at start).
The parent is shared by every worker of the host and stays when one of them exits: removing it
then would pull it from under another worker's next run.
"""

from __future__ import annotations

import logging
from pathlib import Path

from app.config import Settings
from app.tools.sandbox.cgroup import CONTROLLERS, Cgroups, CgroupUnavailableError, RunCgroups
from app.tools.sandbox.cgroup_v1 import V1RunCgroups

logger = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "antwort-sandbox"


def run_cgroups(settings: Settings, *, root: Path = CGROUP_ROOT) -> Cgroups | None:
    """Where this worker's runs get their cgroups, or None (per-process limits only)."""
    if settings.sandbox_cgroup is not None:
        return RunCgroups(settings.sandbox_cgroup)
    if not settings.sandbox_cgroup_auto:
        return None
    try:
        found = find_cgroups(root)
    except CgroupUnavailableError as exc:
        logger.debug("no cgroup for sandbox runs: %s", exc)
        return None
    # Each new process (the worker, a prefork pool child replacing a killed one) reaps.
    reaped = found.reap()
    if reaped:
        logger.info("removed the cgroups of %d sandbox runs of dead workers", reaped)
    return found


def find_cgroups(root: Path = CGROUP_ROOT, *, own: Path = Path("/proc/self/cgroup")) -> Cgroups:
    """Create the parent in the host's hierarchy and return it.

    Raises:
        CgroupUnavailableError: no hierarchy this worker can write (the message says why).
    """
    if (root / "cgroup.controllers").is_file():
        return _find_v2(root)
    if (root / "memory").is_dir() and (root / "pids").is_dir():
        return _find_v1(root, _own_paths(own))
    raise CgroupUnavailableError(f"no cgroup v2 nor cgroup v1 memory and pids hierarchy in {root}")


def _find_v2(root: Path) -> Cgroups:
    parent = root / PARENT
    try:
        parent.mkdir(exist_ok=True)
        enable = " ".join(f"+{name}" for name in CONTROLLERS)
        (parent / "cgroup.subtree_control").write_text(enable)
    except OSError as exc:
        raise CgroupUnavailableError(f"cannot create {parent} with {CONTROLLERS}: {exc}") from exc
    cgroups = RunCgroups(str(parent))
    cgroups.check()
    return cgroups


def _find_v1(root: Path, own: dict[str, str]) -> Cgroups:
    parents: dict[str, Path | None] = {}
    for name in ("memory", "pids", "cpu"):
        hierarchy = root / name
        parent = hierarchy / own.get(name, "/").lstrip("/") / PARENT
        try:
            parent.mkdir(exist_ok=True)
        except OSError as exc:
            if name == "cpu":  # a CPU quota is a bonus; memory and pids are the cap
                parents[name] = None
                continue
            raise CgroupUnavailableError(f"cannot create {parent}: {exc}") from exc
        parents[name] = parent
    memory, pids = parents["memory"], parents["pids"]
    assert memory is not None and pids is not None
    cgroups = V1RunCgroups(memory=memory, pids=pids, cpu=parents["cpu"])
    cgroups.check()
    return cgroups


def _own_paths(own: Path) -> dict[str, str]:
    """This process's cgroup in each v1 hierarchy (``/proc/self/cgroup``), by controller."""
    paths: dict[str, str] = {}
    try:
        lines = own.read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            paths[controller] = path
    return paths
