"""Summary statistics of the benchmarks."""

from __future__ import annotations

from collections.abc import Sequence


def percentiles(values_ms: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99 of a sample (nearest rank), rounded to 0.01."""
    ordered = sorted(values_ms)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50": round(pick(0.5), 2), "p90": round(pick(0.9), 2), "p99": round(pick(0.99), 2)}
