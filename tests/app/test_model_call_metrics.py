"""Every model call the fleet makes is counted in the token metrics, by model and by tenant:
a response's turns, but also a compaction's summary, a token count's prefill, and the call
that measures a prompt against ``compact_threshold``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client import REGISTRY

from app.compaction import run_compaction, start_compaction
from app.config import Settings
from app.jobs import wait_for_result
from app.limits import Caller
from app.run import RunDeps
from app.store import ResponseStore
from app.tenancy import Tenant
from app.token_count import run_count, start_count
from tests.app.test_context_compaction import PROMPT, asked, compacting
from tests.app.test_run import USAGE, answer
from tests.app.test_token_count import counted
from tests.support.dispatch import RecordingJobQueue

CONVERSATION = [
    {"role": "user", "content": "When do we launch?"},
    {"role": "assistant", "content": "On Tuesday."},
]
Counts = dict[tuple[str, str], float]


def token_counts(model: str, tenant: str) -> Counts:
    """The model's and the tenant's token counters, by direction; and the model's timed calls."""
    counts = {}
    for direction in ("input", "output"):
        counts["model", direction] = REGISTRY.get_sample_value(
            "antwort_model_tokens_total", {"model": model, "direction": direction}
        )
        counts["tenant", direction] = REGISTRY.get_sample_value(
            "antwort_tenant_tokens_total", {"tenant": tenant, "direction": direction}
        )
    counts["timed", "calls"] = REGISTRY.get_sample_value(
        "antwort_model_time_to_first_token_seconds_count", {"model": model}
    )
    return {key: value or 0.0 for key, value in counts.items()}


def added(before: Counts, after: Counts) -> Counts:
    return {key: after[key] - before[key] for key in after}


def moved(*, input_tokens: int, output_tokens: int, timed: int) -> Counts:
    return {
        ("model", "input"): input_tokens,
        ("model", "output"): output_tokens,
        ("tenant", "input"): input_tokens,
        ("tenant", "output"): output_tokens,
        ("timed", "calls"): timed,
    }


def test_a_compaction_jobs_summary_call_is_counted_for_its_tenant(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings, queue = make_settings(), RecordingJobQueue()
    before = token_counts("m-compact", "team-c")

    compaction_id = start_compaction(
        store,
        queue,
        settings,
        {"model": "m-compact", "input": CONVERSATION},
        caller=Caller(Tenant(name="team-c")),
    )
    deps = RunDeps(store=store, provider=answer("On Tuesday."), settings=settings)
    assert run_compaction(deps, compaction_id) == "completed"
    result = wait_for_result(store, "compaction", compaction_id, timeout_seconds=5)

    assert result["usage"]["input_tokens"] == USAGE.input_tokens
    assert added(before, token_counts("m-compact", "team-c")) == moved(
        input_tokens=USAGE.input_tokens, output_tokens=USAGE.output_tokens, timed=1
    )


@pytest.mark.parametrize("tenant", ["team-n", ""])
def test_a_token_counts_call_is_counted_for_its_tenant(
    store: ResponseStore, make_settings: Callable[..., Settings], tenant: str
) -> None:
    settings, queue = make_settings(), RecordingJobQueue()
    before = token_counts("m-count", tenant or "open")

    job_id = start_count(
        store,
        queue,
        settings,
        {"model": "m-count", "input": "How many tokens is this?"},
        caller=Caller(Tenant(name=tenant)),
    )
    assert run_count(RunDeps(store=store, provider=counted(57), settings=settings), job_id)
    assert wait_for_result(store, "input_tokens", job_id, timeout_seconds=5)["input_tokens"] == 57

    # its prefill, and its one token; not timed (one token says nothing of the model's speed)
    assert added(before, token_counts("m-count", tenant or "open")) == moved(
        input_tokens=57, output_tokens=1, timed=0
    )


def test_a_responses_measure_and_summary_calls_are_counted_beside_its_turn(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    before = token_counts("m-context", "open")

    turn = asked(store, make_settings(), model="m-context", context_management=compacting(PROMPT))

    assert len(turn.model.requests) == 3  # the measure, the summary, the answer
    # the open tenant's also count the chain's first response (model "m")
    assert added(before, token_counts("m-context", "open")) == {
        ("model", "input"): 3 * USAGE.input_tokens,
        ("model", "output"): 3 * USAGE.output_tokens,
        ("tenant", "input"): 4 * USAGE.input_tokens,
        ("tenant", "output"): 4 * USAGE.output_tokens,
        ("timed", "calls"): 2,  # the summary and the answer: the measure is one token
    }
