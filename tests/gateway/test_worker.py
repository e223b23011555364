"""The gateway's gunicorn worker, in-process: what it sets up before it serves."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway.worker import collect_less_often


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    """The collector's thresholds, put back afterwards."""
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


def test_collect_less_often_sets_the_youngest_generations_threshold(
    thresholds: tuple[int, int, int],
) -> None:
    collect_less_often(100_000)

    assert gc.get_threshold() == (100_000, *thresholds[1:])


def test_collect_less_often_zero_leaves_pythons_thresholds(
    thresholds: tuple[int, int, int],
) -> None:
    collect_less_often(0)

    assert gc.get_threshold() == thresholds
