"""What a client picks (a method, a model's name, an MCP server's tool names) makes no series
past a bound: a scrape stays small whatever clients send."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from app.telemetry import metrics
from app.telemetry.metrics import OTHER, FirstValues, method_label
from app.tool_calls import run_tool_call
from tests.app.test_tool_calls import Setup, setup  # noqa: F401 (the fixture)


@pytest.mark.parametrize("method", ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
def test_a_standard_method_is_labelled_by_name(method: str) -> None:
    assert method_label(method) == method


@pytest.mark.parametrize("method", ["BREW", "GETX", "PROPFIND", "get", "A" * 20])
def test_any_other_method_is_labelled_other(method: str) -> None:
    assert method_label(method) == OTHER


def test_first_values_keep_their_names_and_later_ones_are_other() -> None:
    label = FirstValues(2)

    assert [label(v) for v in ("a", "b", "c", "a", "b", "d")] == ["a", "b", OTHER, "a", "b", OTHER]


def test_models_past_the_bound_are_counted_as_other(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "model_label", FirstValues(1))
    before = sample("antwort_model_tokens_total", model=OTHER, direction="input") or 0.0

    metrics.count_model_tokens("label-probe-1", "", input_tokens=3, output_tokens=1)
    metrics.count_model_tokens("label-probe-2", "", input_tokens=5, output_tokens=1)
    timer = metrics.ModelCallTimer("label-probe-3")
    timer.first_chunk()
    timer.done(input_tokens=7, output_tokens=2)

    assert sample("antwort_model_tokens_total", model="label-probe-1", direction="input") == 3
    assert sample("antwort_model_tokens_total", model="label-probe-2", direction="input") is None
    assert sample("antwort_model_tokens_total", model=OTHER, direction="input") == before + 12
    assert sample("antwort_model_time_to_first_token_seconds_count", model="label-probe-3") is None


def test_tool_names_past_the_bound_are_counted_as_other(
    setup: Setup,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics, "tool_name_label", FirstValues(0))
    labels = {"kind": "internal", "outcome": "ok"}
    before = sample("antwort_tool_calls_total", name=OTHER, **labels) or 0.0
    setup.tool.gate.set()

    assert run_tool_call(setup.deps, setup.rid, "call_1") == "ok"

    assert sample("antwort_tool_calls_total", name=OTHER, **labels) == before + 1


def sample(metric: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)
