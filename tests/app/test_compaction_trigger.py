"""A response whose input ends with ``compaction_trigger``: its one output is a ``compaction``
item (OpenAI's compaction in ``/v1/responses``; Codex CLI compacts this way with its own OpenAI
provider)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pydantic
import pytest
from openai.types.responses import ResponseOutputItem, ResponseStreamEvent

from app.config import Settings
from app.errors import InvalidRequestError
from app.protocol.items import since_compaction
from app.providers.translate import to_chat_messages
from app.responses import create_response
from app.sealing import SUMMARY_HEADER, load_sealer
from app.store import ResponseStore
from app.summary import DEFAULT_INSTRUCTIONS, SUMMARY_REQUEST
from tests.app.test_client_kinds import GRAMMAR_TOOL, Run, run  # noqa: F401 - the fixture
from tests.app.test_run import answer
from tests.support.dispatch import RecordingDispatcher

OUTPUT_ITEM: pydantic.TypeAdapter[ResponseOutputItem] = pydantic.TypeAdapter(ResponseOutputItem)
STREAM_EVENT: pydantic.TypeAdapter[ResponseStreamEvent] = pydantic.TypeAdapter(ResponseStreamEvent)
CONVERSATION = [
    {"role": "user", "content": "We launch on Tuesday."},
    {"role": "assistant", "content": "Noted: Tuesday."},
]
TRIGGER = {"type": "compaction_trigger"}


def test_a_trigger_makes_the_response_one_compaction_item(
    run: Run,  # noqa: F811 - the fixture
    make_settings: Callable[..., Settings],
) -> None:
    turn = run(answer("Launch on Tuesday."), input=[*CONVERSATION, TRIGGER], tools=[GRAMMAR_TOOL])

    [item] = turn.output
    OUTPUT_ITEM.validate_python(item)
    assert item["type"] == "compaction" and item["id"].startswith("cmp_")
    sealed = load_sealer(None, make_settings().secrets_file).open(item["encrypted_content"])
    assert (sealed.summary, sealed.model) == ("Launch on Tuesday.", "m")
    kinds = [event["type"] for event in turn.events]
    assert kinds[-3:] == [
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    for event in turn.events:
        STREAM_EVENT.validate_python(event)
    assert turn.events[-1]["response"]["usage"]["output_tokens"] > 0
    [request] = turn.model.requests
    assert request.instructions == DEFAULT_INSTRUCTIONS and request.tools == ()
    assert [m["role"] for m in to_chat_messages(None, request.items)] == [
        "user",
        "assistant",
        "user",
    ]
    assert request.items[-1]["content"] == SUMMARY_REQUEST


def test_the_compaction_item_carries_the_conversation_on(run: Run) -> None:  # noqa: F811
    compacted = run(answer("Launch on Tuesday."), input=[*CONVERSATION, TRIGGER], store=False)
    [item] = compacted.output

    after = run(
        answer("Tuesday."),
        input=[CONVERSATION[0], item, {"role": "user", "content": "When?"}],
        store=False,
    )

    seen = to_chat_messages(None, after.model.requests[0].items)
    assert seen[1] == {"role": "assistant", "content": f"{SUMMARY_HEADER}\nLaunch on Tuesday."}


def test_a_trigger_summarises_the_chain_before_it(run: Run) -> None:  # noqa: F811
    first = run(answer("Noted: Tuesday."), input=CONVERSATION[0]["content"])

    compacted = run(
        answer("Launch on Tuesday."), input=[TRIGGER], previous_response_id=first.response_id
    )

    [item] = compacted.output
    assert item["type"] == "compaction"
    seen = to_chat_messages(None, compacted.model.requests[0].items)
    assert [m["role"] for m in seen] == ["user", "assistant", "user"]
    assert seen[0]["content"] == "We launch on Tuesday."


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": [TRIGGER, {"role": "user", "content": "hi"}]}, "input.0"),  # not the last
        ({"input": [TRIGGER], "instructions": "Be brief."}, "input"),  # nothing to compact
    ],
)
def test_a_trigger_before_another_item_or_with_nothing_before_it_is_a_400(
    store: ResponseStore, make_settings: Callable[..., Settings], body: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        create_response(store, RecordingDispatcher(), make_settings(), {"model": "m", **body})

    assert (refused.value.param, refused.value.code) == (param, "invalid_value")


def test_a_chain_after_its_compaction_shows_the_summary_not_what_it_covers(
    run: Run,  # noqa: F811 - the fixture
) -> None:
    first = run(answer("Noted: Tuesday."), input="We launch on Tuesday.")
    compacted = run(
        answer("Launch: Tuesday."), input=[TRIGGER], previous_response_id=first.response_id
    )

    after = run(answer("Tuesday."), input="When?", previous_response_id=compacted.response_id)

    seen = to_chat_messages(None, after.model.requests[0].items)
    assert seen == [
        {"role": "user", "content": "We launch on Tuesday."},
        {"role": "assistant", "content": f"{SUMMARY_HEADER}\nLaunch: Tuesday."},
        {"role": "user", "content": "When?"},
    ]


def test_a_second_compaction_summarises_from_the_first_on(run: Run) -> None:  # noqa: F811
    first = run(answer("Noted: Tuesday."), input="We launch on Tuesday.")
    once = run(answer("Launch: Tuesday."), input=[TRIGGER], previous_response_id=first.response_id)
    more = run(answer("In Oslo."), input="Where?", previous_response_id=once.response_id)

    twice = run(answer("Tuesday, Oslo."), input=[TRIGGER], previous_response_id=more.response_id)

    seen = to_chat_messages(None, twice.model.requests[0].items)
    assert [m["content"] for m in seen] == [
        "We launch on Tuesday.",
        f"{SUMMARY_HEADER}\nLaunch: Tuesday.",
        "Where?",
        "In Oslo.",
        SUMMARY_REQUEST,
    ]


def test_a_stateless_history_with_a_compaction_item_is_shown_from_it_on(
    run: Run,  # noqa: F811 - the fixture
) -> None:
    compacted = run(answer("Launch: Tuesday."), input=[*CONVERSATION, TRIGGER], store=False)
    [item] = compacted.output
    call = {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"}
    result = {"type": "function_call_output", "call_id": "c1", "output": "Tuesday"}
    history = [
        {"role": "developer", "content": "Be brief."},
        *CONVERSATION,
        call,
        result,
        item,
        {"role": "user", "content": "When?"},
    ]

    after = run(answer("Tuesday."), input=history, store=False)

    seen = to_chat_messages(None, after.model.requests[0].items)
    assert [m["role"] for m in seen] == ["system", "user", "assistant", "user"]
    assert seen[2]["content"] == f"{SUMMARY_HEADER}\nLaunch: Tuesday."


def test_since_compaction_keeps_what_is_not_the_models_before_the_latest_one() -> None:
    user, system = {"role": "user", "content": "u"}, {"role": "system", "content": "s"}
    answer_item = {"type": "message", "role": "assistant", "content": "a"}
    reasoning = {"type": "reasoning", "summary": []}
    first, latest = {"type": "compaction", "id": "1"}, {"type": "compaction", "id": "2"}
    items = [system, user, reasoning, answer_item, first, user, answer_item, latest, answer_item]

    assert since_compaction(items) == [system, user, user, latest, answer_item]
    assert since_compaction(items[:4]) == items[:4]
    assert since_compaction([]) == []
