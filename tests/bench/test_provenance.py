"""``bench.run.provenance``: every benchmark's figures carry the command, date, machine, fleet."""

from __future__ import annotations

import shlex

import pytest

from bench.fleet import Fleet
from bench.run import provenance


def test_provenance_names_the_command_and_the_fleet_s_commands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("sys.argv", ["soak.py", "--minutes", "30"])
    fleet = Fleet()

    found = provenance("bench.soak", fleet=fleet)

    assert found["command"] == ".venv/bin/python -m bench.soak --minutes 30"
    assert found["fleet"] == {role: shlex.join(argv) for role, argv in fleet.commands().items()}
    assert {"date", "machine"} <= set(found)
    given = provenance("bench.ratio", argv=["--rounds", "2"])
    assert given["command"] == ".venv/bin/python -m bench.ratio --rounds 2"
    assert "fleet" not in given
