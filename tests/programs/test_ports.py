"""Free ports for the processes a program starts: none an outgoing connection can take first."""

from __future__ import annotations

import socket

import pytest

from programs import ports
from programs.ports import LOWEST, ephemeral_range, free_port


def test_a_free_port_lies_below_the_range_outgoing_connections_take_theirs_from() -> None:
    first, _ = ephemeral_range()
    picked = [free_port() for _ in range(50)]
    assert all(LOWEST <= port < first for port in picked)


def test_a_free_port_is_never_handed_out_twice() -> None:
    picked = [free_port() for _ in range(500)]
    assert len(set(picked)) == len(picked)


def test_a_port_something_listens_on_is_not_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        real = ports._random.randrange
        offered: list[int] = []

        def busy_first(start: int, stop: int) -> int:
            offered.append(busy if not offered else real(start, stop))
            return offered[-1]

        monkeypatch.setattr(ports._random, "randrange", busy_first)
        port = free_port()
    assert offered[0] == busy and port == offered[-1] != busy
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_the_ephemeral_range_is_the_kernels_or_the_iana_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text("32768\t60999\n")
    monkeypatch.setattr(ports, "_RANGE_FILE", range_file)
    assert ephemeral_range() == (32768, 60999)
    monkeypatch.setattr(ports, "_RANGE_FILE", tmp_path / "absent")
    assert ephemeral_range() == (49152, 65535)


def test_with_no_room_below_the_ephemeral_range_the_kernel_picks(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text(f"{LOWEST + 10}\t60999\n")
    monkeypatch.setattr(ports, "_RANGE_FILE", range_file)
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
