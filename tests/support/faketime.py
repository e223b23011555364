"""A process whose host's clock is off: Debian's ``libfaketime`` (package ``faketime``)."""

from __future__ import annotations

from pathlib import Path


def libfaketime() -> Path | None:
    """The library, when installed."""
    return next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))), None)


def clock_off(offset: str) -> dict[str, str]:
    """Environment that puts a process's wall clock ``offset`` off (``"+600s"``, ``"-60s"``).

    Preloaded into the process itself (``faketime``'s command forks a child of its own). The
    monotonic clock stays true, as a host's does when its wall clock is off.
    """
    library = libfaketime()
    if library is None:
        raise RuntimeError("libfaketime is not installed (Debian's faketime)")
    return {"LD_PRELOAD": str(library), "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
