from typing import Any

import pytest

from app.providers.translate import (
    UNANSWERED,
    ModelRequest,
    build_chat_body,
    chat_params,
    reasoning_effort_param,
    response_format_param,
    to_chat_messages,
    to_chat_tool,
    to_chat_tool_choice,
)

IMAGE_URL = "data:image/png;base64,iVBORw0KGgo="


def call(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def chat_call(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_to_chat_messages_maps_roles_and_content() -> None:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": "Use metric units."},
        {"role": "user", "content": "plain string, no type"},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Hello "},
                {"type": "input_text", "text": "there"},
            ],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Hi!", "annotations": [], "logprobs": []}],
        },
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": []},
    ]

    assert to_chat_messages("Be kind.", items) == [
        {"role": "system", "content": "Be kind."},
        {"role": "system", "content": "Use metric units."},
        {"role": "user", "content": "plain string, no type"},
        {"role": "user", "content": "Hello there"},
        {"role": "assistant", "content": "Hi!"},
    ]


def test_to_chat_messages_sends_images_as_image_url_parts() -> None:
    items = [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is this?"},
                {"type": "input_image", "image_url": IMAGE_URL, "detail": "low"},
                {"type": "input_image", "image_url": "https://example.test/cat.jpg"},
            ],
        }
    ]

    assert to_chat_messages(None, items) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": IMAGE_URL, "detail": "low"}},
                {
                    "type": "image_url",
                    "image_url": {"url": "https://example.test/cat.jpg", "detail": "auto"},
                },
            ],
        }
    ]


def test_to_chat_messages_groups_consecutive_function_calls() -> None:
    items = [
        {"role": "user", "content": "Weather in Oslo and Rome?"},
        call("call_1", "get_weather", '{"city": "Oslo"}'),
        call("call_2", "get_weather", '{"city": "Rome"}'),
        {"type": "function_call_output", "call_id": "call_1", "output": "rain"},
        {
            "type": "function_call_output",
            "call_id": "call_2",
            "output": [{"type": "input_text", "text": "sun"}],
        },
        {"type": "message", "role": "assistant", "content": "Checking once more."},
        call("call_3", "get_weather", '{"city": "Oslo"}'),
    ]

    assert to_chat_messages(None, items) == [
        {"role": "user", "content": "Weather in Oslo and Rome?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                chat_call("call_1", "get_weather", '{"city": "Oslo"}'),
                chat_call("call_2", "get_weather", '{"city": "Rome"}'),
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
        {"role": "tool", "tool_call_id": "call_2", "content": "sun"},
        {
            "role": "assistant",
            "content": "Checking once more.",
            "tool_calls": [chat_call("call_3", "get_weather", '{"city": "Oslo"}')],
        },
    ]


def test_to_chat_messages_answers_calls_the_history_left_unanswered() -> None:
    # the client went on without the outputs (the Agents SDK's stop_on_first_tool does)
    items = [
        {"role": "user", "content": "Weather in Oslo and Rome?"},
        call("call_1", "get_weather", '{"city": "Oslo"}'),
        call("call_2", "get_weather", '{"city": "Rome"}'),
        {"type": "function_call_output", "call_id": "call_2", "output": "sun"},
        {"role": "user", "content": "And Lima?"},
        call("call_3", "get_weather", '{"city": "Lima"}'),
        {"role": "user", "content": "Never mind."},
    ]

    assert to_chat_messages(None, items)[1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                chat_call("call_1", "get_weather", '{"city": "Oslo"}'),
                chat_call("call_2", "get_weather", '{"city": "Rome"}'),
            ],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": "sun"},
        {"role": "tool", "tool_call_id": "call_1", "content": UNANSWERED},
        {"role": "user", "content": "And Lima?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [chat_call("call_3", "get_weather", '{"city": "Lima"}')],
        },
        {"role": "tool", "tool_call_id": "call_3", "content": UNANSWERED},
        {"role": "user", "content": "Never mind."},
    ]


def test_to_chat_messages_puts_a_result_sent_after_other_items_in_its_call_s_place() -> None:
    # the AI SDK in a conversation: the step after its tool resends the question, then the result
    items = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "Look it up."}]},
        call("call_1", "get_weather", '{"city": "Oslo"}'),
        call("call_2", "get_weather", '{"city": "Rome"}'),
        {"role": "user", "content": "Weather in Oslo?"},
        {"type": "function_call_output", "call_id": "call_2", "output": "rain"},
        {"role": "user", "content": "Weather in Oslo?"},  # and at its next step, the same again
        {"type": "function_call_output", "call_id": "call_2", "output": "rain"},
        {"type": "function_call_output", "call_id": "call_3", "output": "not called"},
    ]

    assert to_chat_messages(None, items) == [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                chat_call("call_1", "get_weather", '{"city": "Oslo"}'),
                chat_call("call_2", "get_weather", '{"city": "Rome"}'),
            ],
            "reasoning_content": "Look it up.",
        },
        {"role": "tool", "tool_call_id": "call_1", "content": UNANSWERED},
        {"role": "tool", "tool_call_id": "call_2", "content": "rain"},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "tool", "tool_call_id": "call_3", "content": "not called"},  # as before
    ]


def test_to_chat_messages_leaves_out_a_result_repeated_after_a_prepared_prefix() -> None:
    question = {"role": "user", "content": "Weather in Oslo?"}
    result = {"type": "function_call_output", "call_id": "call_1", "output": "rain"}
    prefix = to_chat_messages(None, [question, call("call_1", "get_weather"), result])

    assert to_chat_messages(None, [question, result], after=prefix) == [
        {"role": "user", "content": "Weather in Oslo?"}
    ]
    changed = {**result, "output": "snow"}  # not the same: the model is shown it, as before
    assert to_chat_messages(None, [question, changed], after=prefix)[1]["content"] == "snow"


def test_to_chat_messages_answers_a_turn_s_unanswered_calls_before_the_next_turn_s() -> None:
    items = [
        {"role": "user", "content": "Go."},
        call("call_1", "step"),
        call("call_2", "step"),
        {"type": "function_call_output", "call_id": "call_1", "output": "done"},
        call("call_3", "step"),  # the model's next turn: call_2 was never answered
        {"type": "function_call_output", "call_id": "call_3", "output": "done"},
    ]

    assert [(m["role"], m.get("tool_call_id")) for m in to_chat_messages(None, items)] == [
        ("user", None),
        ("assistant", None),
        ("tool", "call_1"),
        ("tool", "call_2"),
        ("assistant", None),
        ("tool", "call_3"),
    ]


def test_to_chat_messages_shows_tool_output_images_after_the_tool_results() -> None:
    # Codex's view_image: a chat tool message holds text only, so the image follows it in a
    # user message, after the last result of the turn; "original" is no chat detail.
    image = {"type": "input_image", "image_url": IMAGE_URL, "detail": "original"}
    items = [
        {"role": "user", "content": "What is in cat.png, and the weather?"},
        call("call_1", "view_image", '{"path": "cat.png"}'),
        call("call_2", "get_weather", '{"city": "Oslo"}'),
        {"type": "function_call_output", "call_id": "call_1", "output": [image]},
        {"type": "function_call_output", "call_id": "call_2", "output": "rain"},
        {"type": "message", "role": "assistant", "content": "A cat; rain."},
    ]

    assert to_chat_messages(None, items) == [
        {"role": "user", "content": "What is in cat.png, and the weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                chat_call("call_1", "view_image", '{"path": "cat.png"}'),
                chat_call("call_2", "get_weather", '{"city": "Oslo"}'),
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "[image returned: see the next user message]",
        },
        {"role": "tool", "tool_call_id": "call_2", "content": "rain"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "From the result of view_image (call_1):"},
                {"type": "image_url", "image_url": {"url": IMAGE_URL, "detail": "high"}},
            ],
        },
        {"role": "assistant", "content": "A cat; rain."},
    ]


def test_to_chat_messages_keeps_tool_output_text_beside_its_images_and_files() -> None:
    items = [
        call("call_1", "render"),
        {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": [
                {"type": "input_text", "text": "Rendered "},
                {"type": "input_text", "text": "two pages."},
                {"type": "input_image", "image_url": IMAGE_URL, "detail": "low"},
                {
                    "type": "input_file",
                    "file_data": "data:application/pdf;base64,JVBE",
                    "filename": "pages.pdf",
                },
                {"type": "input_image", "file_id": "file_1"},
            ],
        },
        call("call_2", "render"),
    ]

    messages = to_chat_messages(None, items)

    assert messages[1:] == [
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "Rendered two pages.\n"
            "[image returned: see the next user message]\n"
            "[file pages.pdf returned: see the next user message]\n"
            "[image returned: see the next user message]",
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "From the result of render (call_1):"},
                {"type": "image_url", "image_url": {"url": IMAGE_URL, "detail": "low"}},
                {
                    "type": "file",
                    "file": {
                        "file_data": "data:application/pdf;base64,JVBE",
                        "filename": "pages.pdf",
                    },
                },
                {"type": "image_url", "image_url": {"url": "file_1", "detail": "auto"}},
            ],
        },
        {"role": "assistant", "content": None, "tool_calls": [chat_call("call_2", "render")]},
    ]


def test_to_chat_messages_without_instructions_has_no_system_message() -> None:
    assert to_chat_messages(None, []) == []
    assert to_chat_messages("", [{"role": "user", "content": "hi"}]) == [
        {"role": "user", "content": "hi"}
    ]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        (
            {"type": "function", "name": "get_weather"},
            {"type": "function", "function": {"name": "get_weather"}},
        ),
        (
            {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [{"type": "function", "name": "a"}],
            },
            "required",
        ),
        ({"type": "allowed_tools", "tools": [{"type": "function", "name": "a"}]}, "auto"),
        ({"type": "mcp", "server_label": "docs"}, "required"),
        ({"type": "code_interpreter"}, "required"),
    ],
)
def test_to_chat_tool_choice_maps_every_form(choice: Any, expected: Any) -> None:
    assert to_chat_tool_choice(choice) == expected


def test_to_chat_tool_keeps_description_and_strict_and_defaults_parameters() -> None:
    assert to_chat_tool(
        {"type": "function", "name": "ping", "description": None, "strict": None}
    ) == {
        "type": "function",
        "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}},
    }
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    assert to_chat_tool(
        {
            "type": "function",
            "name": "search",
            "description": "Find.",
            "parameters": schema,
            "strict": True,
        }
    ) == {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": schema,
            "description": "Find.",
            "strict": True,
        },
    }


def test_chat_params_maps_names_and_drops_unset_values() -> None:
    assert chat_params(
        temperature=0.0,
        top_p=None,
        presence_penalty=0.5,
        frequency_penalty=None,
        max_output_tokens=64,
    ) == {"temperature": 0.0, "presence_penalty": 0.5, "max_tokens": 64}


def test_response_format_param_maps_text_formats_to_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}

    assert response_format_param(None) == {}
    assert response_format_param({"type": "text"}) == {}
    assert response_format_param({"type": "json_object"}) == {
        "response_format": {"type": "json_object"}
    }
    assert response_format_param(
        {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}
    ) == {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema, "strict": True},
        }
    }
    assert response_format_param({"type": "json_schema", "schema": schema}) == {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": schema},
        }
    }


def test_build_chat_body_streams_with_usage_and_sends_tools_only_when_declared() -> None:
    plain = build_chat_body(
        ModelRequest(model="m", instructions=None, items=[], params={"temperature": 0.2})
    )
    assert plain == {
        "model": "m",
        "messages": [],
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.2,
    }

    with_tools = build_chat_body(
        ModelRequest(
            model="m",
            instructions="sys",
            items=[{"role": "user", "content": "hi"}],
            tools=[{"type": "function", "name": "f"}],
            tool_choice={"type": "function", "name": "f"},
            parallel_tool_calls=False,
        )
    )
    assert with_tools["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
    ]
    assert with_tools["tools"] == [to_chat_tool({"type": "function", "name": "f"})]
    assert with_tools["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert with_tools["parallel_tool_calls"] is False


VLLM_EFFORTS = ("low", "medium", "high")


@pytest.mark.parametrize(
    ("effort", "accepted", "sent"),
    [
        ("high", VLLM_EFFORTS, "high"),
        ("xhigh", VLLM_EFFORTS, "high"),
        ("minimal", VLLM_EFFORTS, "low"),
        ("none", VLLM_EFFORTS, "low"),
        ("none", ("none", *VLLM_EFFORTS), "none"),
        ("medium", ("low", "high"), "low"),  # the lower of two as near
        ("minimal", ("none", "xhigh"), "none"),
        ("high", (), None),  # a model server that takes no effort gets none
        (None, VLLM_EFFORTS, None),
    ],
)
def test_reasoning_effort_goes_as_the_nearest_the_server_takes(
    effort: str | None, accepted: tuple[str, ...], sent: str | None
) -> None:
    expected = {} if sent is None else {"reasoning_effort": sent}
    assert reasoning_effort_param(effort, accepted) == expected
