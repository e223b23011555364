"""``truncation: "auto"``: a prompt the model server refuses as longer than its context is sent
again without its oldest turns, then its last turn's oldest exchanges (OpenAI: "dropping items
from the beginning")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

from app.config import Settings
from app.errors import CONTEXT_LENGTH_EXCEEDED, UpstreamError
from app.protocol.items import item_id
from app.providers.chunks import Chunk
from app.providers.translate import ModelRequest, to_chat_messages
from app.run import (
    LEFT_OUT_EXTRA,
    RunDeps,
    _left_out_before,
    advance_response,
    without_oldest,
)
from app.store import ResponseStore
from tests.app.test_loop import Loop, internal
from tests.app.test_run import WEATHER_TOOL, answer, create
from tests.support.dispatch import RecordingDispatcher
from tests.support.model import calls, text


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


def ask(store: ResponseStore, settings: Settings, model: SmallContext, **body: Any) -> Any:
    """``body``'s response (instructions "Be brief.", input "Five?" unless it says), as run."""
    body = {"model": "m", "instructions": "Be brief.", "input": "Five?", **body}
    response_id = create(store, settings, RecordingDispatcher(), **body)
    advance_response(RunDeps(store=store, provider=model, settings=settings), response_id, 0)
    return store.get(response_id).response


def test_auto_leaves_out_the_oldest_turns_one_then_twice_as_many_until_it_fits(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    previous = chain_of(store, settings, "One?", "Two?", "Three?", "Four?")
    model = SmallContext(limit=4)  # the instructions, one turn, the question

    response = ask(store, settings, model, previous_response_id=previous, truncation="auto")

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

    response = ask(store, settings, model, previous_response_id=previous)

    assert response.status == "failed" and response.error is not None
    assert response.error.code == CONTEXT_LENGTH_EXCEEDED
    assert len(model.asked) == 1


def test_auto_fails_when_the_last_turn_alone_does_not_fit(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    previous = chain_of(store, settings, "One?", "Two?")
    model = SmallContext(limit=1)

    response = ask(store, settings, model, previous_response_id=previous, truncation="auto")

    assert response.status == "failed" and response.error is not None
    assert response.error.code == CONTEXT_LENGTH_EXCEEDED
    assert [len(messages) for messages in model.asked] == [6, 4, 2]


def test_without_oldest_keeps_what_comes_before_the_first_turn_and_the_last_turn() -> None:
    system = {"type": "message", "role": "system", "content": "s"}
    turns = [
        [{"type": "message", "role": "user", "content": str(n)}, {"type": "reasoning"}]
        for n in range(3)
    ]
    items = [system, *turns[0], *turns[1], *turns[2]]

    assert without_oldest(items, 1) == [system, *turns[1], *turns[2]]
    assert without_oldest(items, 2) == [system, *turns[2]]
    assert without_oldest(items, 5) == [system, *turns[2]]
    assert without_oldest([system, *turns[0]], 1) is None


def call(n: int, *, turn: int | None = None) -> list[dict[str, Any]]:
    """A ``get_weather`` call and its answer; with ``turn``, the call's id as the fleet makes it."""
    made = {"id": item_id("fc", "resp_1", turn, n)} if turn is not None else {}
    return [
        {"type": "function_call", **made, "call_id": f"c{n}", "name": "get_weather",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"c{n}", "output": f"{n} degrees"},
    ]  # fmt: skip


def test_auto_leaves_out_the_oldest_exchanges_of_a_long_run_on_one_request(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """An agent's many tool rounds on one user message: its oldest rounds go, not its task."""
    settings = make_settings()
    model = SmallContext(limit=4)  # the instructions, the task, the last call and its answer
    task = {"role": "user", "content": "Weather in three cities?"}

    response = ask(
        store,
        settings,
        model,
        input=[task, *call(1), *call(2), *call(3)],
        tools=[WEATHER_TOOL],
        truncation="auto",
    )

    assert response.status == "completed"
    assert [len(messages) for messages in model.asked] == [8, 6, 4]  # none, 1, 2 rounds out
    last = model.asked[-1]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool"]
    assert last[1]["content"] == "Weather in three cities?" and last[3]["content"] == "3 degrees"


def test_without_oldest_leaves_out_turns_then_the_last_turn_s_exchanges() -> None:
    system = {"type": "message", "role": "system", "content": "s"}
    first = [{"type": "message", "role": "user", "content": "0"}, {"type": "reasoning"}]
    task = {"type": "message", "role": "user", "content": "1"}
    items = [system, *first, task, *call(1), *call(2), *call(3)]

    assert without_oldest(items, 1) == [system, task, *call(1), *call(2), *call(3)]
    assert without_oldest(items, 2) == [system, task, *call(2), *call(3)]
    assert without_oldest(items, 3) == [system, task, *call(3)]
    assert without_oldest(items, 8) == [system, task, *call(3)]  # the last exchange stays
    assert without_oldest([system, task, *call(1)], 1) is None


def test_an_exchange_is_one_model_turn_s_items_even_without_answers() -> None:
    """A server tool's calls (MCP) have no answer items: the fleet's ids name their turns."""
    task = {"type": "message", "role": "user", "content": "go"}
    mcp = [
        {"type": "mcp_call", "id": item_id("mcp", "resp_1", turn, 0), "output": str(turn)}
        for turn in range(3)
    ]
    said = {"type": "message", "role": "assistant", "id": item_id("msg", "resp_1", 2, 1)}

    assert without_oldest([task, *mcp, said], 1) == [task, mcp[1], mcp[2], said]
    assert without_oldest([task, *mcp, said], 2) == [task, mcp[2], said]
    parallel = [call(1, turn=0)[0], call(2, turn=0)[0], call(1)[1], call(2)[1]]
    assert without_oldest([task, *parallel, *call(3, turn=1)], 1) == [task, *call(3, turn=1)]


def test_an_answer_whose_call_was_left_out_goes_with_it() -> None:
    task = {"type": "message", "role": "user", "content": "go"}
    late = call(1)[1]  # the first call's answer, sent after the second round's call
    items = [task, call(1)[0], *call(0), call(2)[0], late, call(2)[1]]

    assert without_oldest(items, 1) == [task, call(2)[0], call(2)[1]]


class SmallScriptedContext:
    """A model server whose context holds ``limit`` chat messages; each call that fits is
    answered by the next of ``turns`` (the last repeats)."""

    def __init__(self, limit: int, *turns: list[Chunk]) -> None:
        self.limit, self.turns = limit, list(turns)
        self.asked: list[int] = []
        self.answered = 0

    def stream(self, request: ModelRequest) -> Iterator[Chunk]:
        messages = to_chat_messages(request.instructions, request.items)
        self.asked.append(len(messages))
        if len(messages) > self.limit:
            raise UpstreamError("maximum context length exceeded", code=CONTEXT_LENGTH_EXCEEDED)
        self.answered += 1
        yield from self.turns[min(self.answered, len(self.turns)) - 1]


def test_the_next_turn_of_a_run_starts_from_what_the_turn_before_left_out(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """A run's prompt grows turn by turn: each turn asks again from the parts the turn before
    left out, not from none (each refusal is a call the model server must read)."""
    settings = make_settings(internal_tool_modules="tests.support.tools")
    model = SmallScriptedContext(5, calls(("call_a", "fast_echo", "{}")), text("Done."))
    loop = Loop(store=store, settings=settings, model=model)  # type: ignore[arg-type]
    task = {"role": "user", "content": "Weather in three cities?"}
    rid = loop.create(
        input=[task, *call(1), *call(2), *call(3)],
        tools=[WEATHER_TOOL, *internal("fast_echo")],
        truncation="auto",
    )

    assert loop.drive(rid) == "completed"

    # turn 0: 7 messages, one round out; turn 1 (9): from one round out, then two
    assert model.asked == [7, 5, 7, 5]
    assert store.get(rid).extra[LEFT_OUT_EXTRA] == [2, 9]


def test_a_prompt_with_fewer_items_than_the_turn_before_s_starts_from_none() -> None:
    """A compaction between two turns shortens the prompt: what was left out no longer applies."""
    state: Any = SimpleNamespace(extra={LEFT_OUT_EXTRA: [3, 9]})
    items = [{"type": "message", "role": "user", "content": str(n)} for n in range(9)]

    def prompt(count: int) -> ModelRequest:
        return ModelRequest(model="m", instructions=None, items=items[:count])

    assert _left_out_before(state, prompt(9)) == 3
    assert _left_out_before(state, prompt(8)) == 0
    assert _left_out_before(SimpleNamespace(extra={}), prompt(9)) == 0  # type: ignore[arg-type]


def test_a_turn_that_fit_whole_forgets_what_the_turn_before_left_out(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """Else a prompt that grew back past that turn's after a compaction would leave out parts
    it need not."""
    settings = make_settings()
    response_id = create(store, settings, RecordingDispatcher(), model="m", truncation="auto")
    extra = store.get(response_id).extra
    store.set_extra(response_id, {**extra, LEFT_OUT_EXTRA: [5, 100]})  # a longer prompt's
    model = SmallContext(limit=10)

    advance_response(RunDeps(store=store, provider=model, settings=settings), response_id, 0)

    assert store.get(response_id).response.status == "completed"
    assert LEFT_OUT_EXTRA not in store.get(response_id).extra


def test_a_compaction_s_summary_is_never_left_out() -> None:
    """A compacted run's summary stands for its earlier steps: its later rounds go first."""
    task = {"type": "message", "role": "user", "content": "go"}
    earlier = {"type": "message", "role": "user", "content": "before"}
    summary = {"type": "compaction", "id": "cmp_1", "encrypted_content": "s"}
    items = [task, summary, *call(1), *call(2), *call(3)]

    assert without_oldest(items, 1) == [task, summary, *call(2), *call(3)]
    assert without_oldest(items, 5) == [task, summary, *call(3)]
    assert without_oldest([earlier, summary, task, *call(1)], 1) == [summary, task, *call(1)]
