"""``bench.soak``'s account of memory: growth after the warm-up, as a slope in MB an hour."""

from __future__ import annotations

import pytest

from bench.soak import slope_mb_per_hour, summary


def test_slope_is_the_least_squares_growth_in_mb_an_hour() -> None:
    assert slope_mb_per_hour([(0, 100.0), (1800, 101.0), (3600, 102.0)]) == 2.0
    assert slope_mb_per_hour([(0, 100.0), (60, 103.0), (120, 100.0)]) == 0.0  # a bump, no trend
    assert slope_mb_per_hour([(0, 100.0)]) == 0.0


def test_summary_leaves_out_the_warm_up() -> None:
    samples = [
        (1000.0, {"worker": 50.0}),  # starting up
        (1060.0, {"worker": 90.0}),
        (1120.0, {"worker": 90.0}),
        (1180.0, {"worker": 90.0, "worker child 1": 30.0}),  # a child that came later
    ]

    found = summary(samples, warmup_s=60)

    assert found["worker"] == {
        "after_warmup_mb": 90.0,
        "end_mb": 90.0,
        "peak_mb": 90.0,
        "slope_mb_per_hour": 0.0,
    }
    assert found["worker child 1"]["after_warmup_mb"] is None
    assert found["worker child 1"]["end_mb"] == 30.0
    assert found["worker child 1"]["slope_mb_per_hour"] == pytest.approx(0.0)
