"""A history made at OpenAI, sent back as input: the calls of hosted tools the fleet cannot run.

``file_search_call`` and ``image_generation_call`` items are taken as the pinned SDK writes
them, and shown to the model as a call and its result, in words.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from openai.types.responses import ResponseFileSearchToolCall, ResponseItem
from openai.types.responses.response_output_item import ImageGenerationCall

from app.errors import InvalidRequestError
from app.providers.translate import to_chat_messages
from app.responses import normalise_input, parse_request
from app.tools.hosted import view_file_search, view_image_generation
from tests.app.test_client_kinds import Run, run  # noqa: F401 - the fixture
from tests.app.test_run import answer

STORED_ITEM: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseItem)

SEARCH = ResponseFileSearchToolCall(
    id="fs_1",
    type="file_search_call",
    status="completed",
    queries=["refund policy"],
    results=[
        {"file_id": "file-1", "filename": "policy.md", "score": 0.9, "text": "Refunds: 30 days."},
        {"file_id": "file-2", "score": 0.4, "text": "Returns need a receipt.", "attributes": {}},
    ],
).model_dump(mode="json")

IMAGE = ImageGenerationCall(
    id="ig_1",
    type="image_generation_call",
    status="completed",
    result="iVBORw0KGgo=",
    revised_prompt="A red fox in snow",
    size="1024x1024",
    output_format="png",
    quality="high",
    background="opaque",
    action="generate",
).model_dump(mode="json")


def test_an_openai_history_with_file_search_and_image_calls_reaches_the_model_in_words(
    run: Run,  # noqa: F811 - the fixture
) -> None:
    history = [
        {"role": "user", "content": "What is the refund policy? And draw a fox."},
        SEARCH,
        IMAGE,
        {"role": "assistant", "content": "30 days; here is your fox."},
        {"role": "user", "content": "Thanks!"},
    ]

    turn = run(answer("You're welcome."), input=history, store=False)

    assert turn.output[-1]["content"][0]["text"] == "You're welcome."
    messages = to_chat_messages(None, turn.model.requests[0].items)
    assert [m["role"] for m in messages] == [
        "user",
        *["assistant", "tool"] * 2,
        "assistant",
        "user",
    ]
    search_call, search_result, image_call, image_result = messages[1:5]
    assert search_call["tool_calls"] == [
        {
            "id": "fs_1",
            "type": "function",
            "function": {"name": "file_search", "arguments": '{"queries": ["refund policy"]}'},
        }
    ]
    assert search_result == {
        "role": "tool",
        "tool_call_id": "fs_1",
        "content": "From policy.md:\nRefunds: 30 days.\n\nFrom file-2:\nReturns need a receipt.",
    }
    assert image_call["tool_calls"][0]["function"] == {
        "name": "image_generation",
        "arguments": '{"prompt": "A red fox in snow"}',
    }
    assert image_result["content"] == "An image was generated (1024x1024, png)."


def test_the_items_are_kept_as_sent_and_read_back_as_the_sdk_knows_them() -> None:
    items = normalise_input(parse_request({"model": "m", "input": [SEARCH, IMAGE]}))

    assert [STORED_ITEM.validate_python(item).type for item in items] == [
        "file_search_call",
        "image_generation_call",
    ]
    assert items[0]["results"][0]["text"] == "Refunds: 30 days."
    assert items[1]["result"] == "iVBORw0KGgo="


@pytest.mark.parametrize(
    ("item", "said"),
    [
        (
            {**SEARCH, "status": "incomplete", "results": None},
            "The file search did not complete (status: incomplete).",
        ),
        ({**SEARCH, "results": []}, "No results."),
        (
            {
                "id": "ig_2",
                "type": "image_generation_call",
                "status": "failed",
                "result": None,
                "error": {"code": "moderation_blocked", "message": "Blocked.", "param": None},
            },
            "No image was generated (status: failed): Blocked.",
        ),
        (
            {"id": "ig_3", "type": "image_generation_call", "status": "completed", "result": "x"},
            "An image was generated.",
        ),
    ],
)
def test_a_search_or_image_that_did_not_complete_is_told_as_such(
    item: dict[str, Any], said: str
) -> None:
    [stored] = normalise_input(parse_request({"model": "m", "input": [item]}))
    view = view_file_search if stored["type"] == "file_search_call" else view_image_generation

    call, result = view(stored, [stored])

    assert (call["type"], call["call_id"]) == ("function_call", item["id"])
    assert json.loads(call["arguments"]) in ({"queries": ["refund policy"]}, {})
    assert result == {"type": "function_call_output", "call_id": item["id"], "output": said}


def test_a_misspelt_field_of_such_an_item_is_a_400() -> None:
    with pytest.raises(InvalidRequestError) as refused:
        normalise_input(parse_request({"model": "m", "input": [{**SEARCH, "querys": ["x"]}]}))
    assert refused.value.param == "input.0.querys"
