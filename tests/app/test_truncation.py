"""``truncation: "auto"``: a prompt the model server refuses as longer than its context is sent
again without its oldest turns (OpenAI: "dropping items from the beginning")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from app.config import Settings
from app.errors import CONTEXT_LENGTH_EXCEEDED, UpstreamError
from app.providers.chunks import Chunk
from app.providers.translate import ModelRequest, to_chat_messages
from app.run import RunDeps, advance_response, without_oldest_turns
from app.store import ResponseStore
from tests.app.test_run import answer, create
from tests.support.dispatch import RecordingDispatcher


class SmallContext:
    """A model server whose context holds ``limit`` chat messages; it answers "Fits."."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.asked: list[list[dict[str, Any]]] = []

    def stream(self, request: ModelRequest) -> Iterator[Chunk]:
        messages = to_chat_messages(request.instructions, request.items)
        self.asked.append(messages)
        if len(messages) > self.limit:
            raise UpstreamError(
                "Model server answered 400: This model's maximum context length is 4096 tokens.",
                code=CONTEXT_LENGTH_EXCEEDED,
            )
        yield from answer("Fits.").stream(request)


def chain_of(store: ResponseStore, settings: Settings, *questions: str) -> str:
    """A chain of answered responses, one per question; the last one's id."""
    previous = None
    for question in questions:
        body: dict[str, Any] = {"model": "m", "input": question}
        if previous:
            body["previous_response_id"] = previous
        previous = create(store, settings, RecordingDispatcher(), **body)
        deps = RunDeps(store=store, provider=answer(f"Re: {question}"), settings=settings)
        advance_response(deps, previous, 0)
    assert previous is not None
    return previous


def ask(
    store: ResponseStore, settings: Settings, model: SmallContext, previous: str, **body: Any
) -> Any:
    response_id = create(
        store,
        settings,
        RecordingDispatcher(),
        model="m",
        instructions="Be brief.",
        input="Five?",
        previous_response_id=previous,
        **body,
    )
    advance_response(RunDeps(store=store, provider=model, settings=settings), response_id, 0)
    return store.get(response_id).response


def test_auto_leaves_out_the_oldest_turns_one_then_twice_as_many_until_it_fits(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    previous = chain_of(store, settings, "One?", "Two?", "Three?", "Four?")
    model = SmallContext(limit=4)  # the instructions, one turn, the question

    response = ask(store, settings, model, previous, truncation="auto")

    assert response.status == "completed"
    # none out, then 1, 2, 4 of the 4 turns before the question (at most twice what is needed)
    assert [len(messages) for messages in model.asked] == [10, 8, 6, 2]
    assert [m["content"] for m in model.asked[-1]] == ["Be brief.", "Five?"]


def test_disabled_fails_as_the_server_says(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    previous = chain_of(store, settings, "One?", "Two?")
    model = SmallContext(limit=4)

    response = ask(store, settings, model, previous)

    assert response.status == "failed" and response.error is not None
    assert response.error.code == CONTEXT_LENGTH_EXCEEDED
    assert len(model.asked) == 1


def test_auto_fails_when_the_last_turn_alone_does_not_fit(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    previous = chain_of(store, settings, "One?", "Two?")
    model = SmallContext(limit=1)

    response = ask(store, settings, model, previous, truncation="auto")

    assert response.status == "failed" and response.error is not None
    assert response.error.code == CONTEXT_LENGTH_EXCEEDED
    assert [len(messages) for messages in model.asked] == [6, 4, 2]


def test_without_oldest_turns_keeps_what_comes_before_the_first_turn_and_the_last_turn() -> None:
    system = {"type": "message", "role": "system", "content": "s"}
    turns = [
        [{"type": "message", "role": "user", "content": str(n)}, {"type": "reasoning"}]
        for n in range(3)
    ]
    items = [system, *turns[0], *turns[1], *turns[2]]

    assert without_oldest_turns(items, 1) == [system, *turns[1], *turns[2]]
    assert without_oldest_turns(items, 2) == [system, *turns[2]]
    assert without_oldest_turns(items, 5) == [system, *turns[2]]
    assert without_oldest_turns([system, *turns[0]], 1) is None
