"""Unprivileged uids for sandbox runs: one per concurrent run on a host, held with a lock file.

``RLIMIT_NPROC`` does not bind root (nor a uid mapped to root), and it counts per uid: a root
worker therefore runs each sandbox as a uid of its own. The uid also names everything a run
started, so a run that ended abnormally (or whose worker died) is swept by uid.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_SLOT_WAIT_SECONDS = 10.0
_SWEEP_SECONDS = 10.0
"""How long a sweep waits for a uid's killed processes to be gone."""


@dataclass(slots=True)
class Slot:
    """A uid held for one run."""

    uid: int | None
    """None: the worker is not root, and runs sandboxes as itself."""
    is_clean: bool = False
    """The run ended by itself: its pid namespace took every process along, no sweep needed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UidSlots:
    """The uids ``uid_base … uid_base + uid_count - 1``, locked under ``lock_dir``."""

    uid_base: int
    uid_count: int
    lock_dir: Path
    is_root: bool

    @contextlib.contextmanager
    def take(self) -> Iterator[Slot]:
        """Hold a free uid for one run (waiting a little when all are busy).

        Raises:
            TimeoutError: every uid stayed busy.
        """
        if not self.is_root:
            yield Slot(uid=None)  # an unprivileged worker: its own uid binds RLIMIT_NPROC
            return
        self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        deadline = time.monotonic() + _SLOT_WAIT_SECONDS
        while True:
            for offset in random.sample(range(self.uid_count), self.uid_count):
                uid = self.uid_base + offset
                fd = os.open(self.lock_dir / f"{uid}.lock", os.O_CREAT | os.O_RDWR, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                # the last holder died mid-run, or its sweep did not finish: sweep what is left
                if os.pread(fd, 5, 0) != b"clean" and not kill_uid(uid):
                    os.close(fd)  # a uid still in use is no slot for a new run
                    continue
                slot = Slot(uid=uid)
                try:
                    os.pwrite(fd, b"busy!", 0)
                    yield slot
                finally:
                    # "clean" only when nothing of the run is alive: else the next holder sweeps
                    if slot.is_clean or kill_uid(uid):
                        os.pwrite(fd, b"clean", 0)
                    os.close(fd)
                return
            if time.monotonic() > deadline:
                raise TimeoutError("every sandbox uid is busy")
            time.sleep(0.05)


def kill_uid(uid: int, seconds: float | None = None) -> bool:
    """SIGKILL every process of ``uid`` (a sandbox slot's own uid) until none is alive.

    A killed process is alive until the kernel has torn it down (a pid namespace's init waits
    for all its namespace's processes), which on a loaded host takes more than a few
    milliseconds; a fork bomb makes new ones meanwhile. Returns whether none was left within
    ``seconds`` (default ``_SWEEP_SECONDS``).
    """
    deadline = time.monotonic() + (_SWEEP_SECONDS if seconds is None else seconds)
    pause = 0.005
    while pids := processes_of(uid):
        if time.monotonic() > deadline:
            return False
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(pause)
        pause = min(2 * pause, 0.1)
    return True


def processes_of(uid: int) -> list[int]:
    """Pids of the live (not zombie) processes whose real uid is ``uid``."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        if fields.get("Uid", "").split("\t")[0] == str(uid) and not fields.get(
            "State", ""
        ).startswith("Z"):
            found.append(int(entry.name))
    return found
