"""Sandbox uid slots: a sweep waits until the uid's killed processes are gone."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.tools.sandbox import slots
from app.tools.sandbox.slots import UidSlots, kill_uid

UID = 62009
"""No process runs as this uid: the tests say which "processes" it has."""


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """A process of this test's own to kill."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_sweep_waits_for_killed_processes_to_be_gone(
    victim: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a loaded host a killed process stays alive a while (a pid namespace's init tears its
    namespace down first): the sweep is done when none is left, not after a few tries."""
    gone_at = time.monotonic() + 0.5
    monkeypatch.setattr(
        slots, "processes_of", lambda uid: [victim.pid] if time.monotonic() < gone_at else []
    )

    assert kill_uid(UID) is True
    assert time.monotonic() >= gone_at
    assert victim.wait(timeout=5) == -9


def test_a_slot_whose_sweep_did_not_finish_is_swept_by_its_next_holder(
    victim: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(slots, "_SWEEP_SECONDS", 0.2)
    monkeypatch.setattr(slots, "_SLOT_WAIT_SECONDS", 0.5)
    alive = [victim.pid]
    monkeypatch.setattr(slots, "processes_of", lambda uid: list(alive))
    uid_slots = UidSlots(uid_base=UID, uid_count=1, lock_dir=tmp_path, is_root=True)
    lock = tmp_path / f"{UID}.lock"
    lock.write_bytes(b"clean")

    with uid_slots.take() as slot:
        assert slot.uid == UID  # the run ends abnormally: its slot is swept
    assert lock.read_bytes() == b"busy!"  # …and its process would not die: not clean

    with pytest.raises(TimeoutError), uid_slots.take():  # a uid not swept takes no new run
        pass

    alive.clear()  # gone at last: the next holder's sweep finishes, and the run is clean
    with uid_slots.take() as slot:
        slot.is_clean = True
    assert lock.read_bytes() == b"clean"
