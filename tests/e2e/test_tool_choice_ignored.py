"""tool_choice ``none`` is enforced by the engine, not left to the model.

The session's inference worker is swapped for one whose model server ignores ``tool_choice``
(``tests.support.model_proxy``): the model calls tools although told not to, and the fleet
returns those calls without running them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
import redis

from tests.e2e.conftest import Fleet
from tests.support.model_proxy import model_proxy, without_tool_choice


@pytest.fixture(scope="module")
def disobedient_fleet(fleet: Fleet, sim_url: str) -> Iterator[Fleet]:
    """The fleet, its inference worker talking to a model that ignores ``tool_choice``."""
    with model_proxy(sim_url) as proxy, fleet.inference_worker_on(proxy.url):
        proxy.behave(request=without_tool_choice)
        yield fleet


def _internal(*names: str) -> list[Any]:
    return [{"type": "internal", "name": name} for name in names]


@pytest.mark.parametrize(
    "choice",
    ["none", {"type": "allowed_tools", "mode": "none", "tools": _internal("fast_echo")}],
    ids=["none", "allowed_tools-none"],
)
def test_tool_choice_none_returns_the_calls_the_model_makes_anyway_unexecuted(
    disobedient_fleet: Fleet, client: openai.OpenAI, choice: Any
) -> None:
    response = client.responses.create(
        model="antwort-sim",
        input="counted_slow and fast_echo",
        tools=_internal("counted_slow", "fast_echo"),
        tool_choice=choice,
    )

    assert response.status == "completed"
    assert [item.type for item in response.output] == ["function_call", "function_call"]
    assert [item.name for item in response.output] == ["counted_slow", "fast_echo"]  # type: ignore[union-attr]
    # Nothing ran: the counting tool never started.
    call_id = response.output[0].call_id  # type: ignore[union-attr]
    prefix = disobedient_fleet.env["ANTWORT_KEY_PREFIX"]
    counter = redis.Redis.from_url(disobedient_fleet.env["ANTWORT_REDIS_URL"])
    try:
        assert counter.get(f"{prefix}test:runs:{call_id}:started") is None
    finally:
        counter.close()
