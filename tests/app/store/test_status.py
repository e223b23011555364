"""The status table is what the scripts enforce: every (status, transition, new status)."""

import itertools

import pytest

from app.protocol.response import ResponseStatus
from app.store import ResponseStore
from app.store.status import (
    ACTIVE_STATUSES,
    START,
    TERMINAL_STATUSES,
    TRANSITIONS,
    Transition,
    is_allowed,
)
from tests.app.store.support import make_response

WRITES = [t for t in TRANSITIONS if t.is_write]
CASES = [
    (current, transition, new)
    for current, transition in itertools.product(ResponseStatus, WRITES)
    for new in sorted(transition.target)
]


@pytest.mark.parametrize(
    ("current", "transition", "new"),
    CASES,
    ids=[f"{c}-{t.name}-{n}" for c, t, n in CASES],
)
def test_store_write_happens_exactly_when_the_table_allows_it(
    store: ResponseStore, current: ResponseStatus, transition: Transition, new: ResponseStatus
) -> None:
    response = make_response(current)
    store.create(response, inputs=[], extra={}, events=[])

    result = store.write(response.model_copy(update={"status": new}), transition=transition)

    assert result.ok == (current in transition.source)
    assert store.status(response.id) == (new if result.ok else current)


@pytest.mark.parametrize("current", sorted(TERMINAL_STATUSES))
def test_a_terminal_record_refuses_every_write(current: ResponseStatus) -> None:
    assert not any(is_allowed(current, new) for new in ResponseStatus)


def test_only_a_runs_first_read_starts_a_queued_response(store: ResponseStore) -> None:
    assert [t for t in TRANSITIONS if t.allows("queued", "in_progress")] == [START]
    assert not START.is_write
    response = make_response("queued")
    store.create(response, inputs=[], extra={}, events=[])
    started = response.model_copy(update={"status": ResponseStatus.IN_PROGRESS})

    with pytest.raises(ValueError, match="no write makes the start"):
        store.write(started, transition=START)
    for transition in WRITES:
        if ResponseStatus.IN_PROGRESS in transition.target:
            assert not store.write(started, transition=transition).ok
    assert store.status(response.id) == "queued"

    store.load_turn(response.id, 0)
    assert store.status(response.id) == "in_progress"


def test_a_write_to_a_status_outside_its_transition_is_a_bug(store: ResponseStore) -> None:
    response = make_response("in_progress")
    store.create(response, inputs=[], extra={}, events=[])

    for transition in WRITES:
        for new in set(ResponseStatus) - transition.target:
            with pytest.raises(ValueError):
                store.write(response.model_copy(update={"status": new}), transition=transition)


def test_every_status_but_a_terminal_one_has_a_way_on() -> None:
    sources = set().union(*(t.source for t in TRANSITIONS))
    assert sources == set(ACTIVE_STATUSES)
    assert sources.isdisjoint(TERMINAL_STATUSES)
