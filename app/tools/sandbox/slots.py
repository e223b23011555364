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
                slot = Slot(uid=uid)
                try:
                    if os.pread(fd, 5, 0) != b"clean":
                        kill_uid(uid)  # the last holder died mid-run: sweep what it left
                    os.pwrite(fd, b"busy!", 0)
                    yield slot
                finally:
                    if not slot.is_clean:
                        kill_uid(uid)
                    os.pwrite(fd, b"clean", 0)
                    os.close(fd)
                return
            if time.monotonic() > deadline:
                raise TimeoutError("every sandbox uid is busy")
            time.sleep(0.05)


def kill_uid(uid: int) -> int:
    """SIGKILL every process of ``uid`` (a sandbox slot's own uid); returns how many."""
    killed = 0
    for _ in range(10):
        pids = processes_of(uid)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.01)
    return killed


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
