"""The whole create body of today's clients (issue 17, section 1): every SDK field accepted."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import pytest
from openai.types.responses import Response, response_create_params
from openai.types.responses.service_tier import ServiceTier

from app.config import Settings
from app.errors import InvalidRequestError
from app.protocol.request import CreateResponseRequest
from app.responses import create_response
from app.store import ResponseStore
from tests.support.dispatch import RecordingDispatcher

CODEX_REQUEST = Path(__file__).parents[1] / "support" / "codex_request.json"
"""Codex CLI 0.169's first request (``codex exec``), captured; long instructions cut."""
WINDOW = "background_options.completion_window"

CreateResponse = Callable[[dict[str, Any]], Response]


@pytest.fixture
def create(store: ResponseStore, make_settings: Callable[..., Settings]) -> CreateResponse:
    """Create a response from ``body`` (``model`` and ``input`` added); the SDK's view of it."""

    def create(body: dict[str, Any]) -> Response:
        response, _ = create_response(
            store, RecordingDispatcher(), make_settings(), {"model": "m", "input": "hi", **body}
        )
        return Response.model_validate(response.wire())

    return create


def test_create_request_knows_every_field_of_the_sdks_create_params() -> None:
    sdk = {*response_create_params.ResponseCreateParamsBase.__annotations__, "stream"}

    missing = sdk - set(CreateResponseRequest.model_fields)

    assert missing <= {"conversation"}  # issue 17 section 4 (Conversations API) adds it


@pytest.mark.parametrize(
    ("field", "value", "echoed"),
    [
        ("prompt_cache_key", "thread-1", "thread-1"),
        ("safety_identifier", "user-42", "user-42"),
        ("service_tier", "flex", "flex"),
        ("truncation", "auto", "auto"),
        ("top_logprobs", 5, 5),
        ("user", "legacy-user", "legacy-user"),
        ("prompt_cache_retention", "24h", "24h"),
        ("access_programs", {"cyber": "standard"}, {"cyber": "standard"}),
    ],
)
def test_create_response_echoes_an_option(
    create: CreateResponse, field: str, value: Any, echoed: Any
) -> None:
    response = create({field: value})

    shown = getattr(response, field)
    assert (
        shown.model_dump(exclude_none=True) if hasattr(shown, "model_dump") else shown
    ) == echoed


@pytest.mark.parametrize("tier", [t for t in get_args(get_args(ServiceTier)[0]) if t])
def test_create_response_takes_every_service_tier_of_the_sdk(
    create: CreateResponse, tier: str
) -> None:
    assert create({"service_tier": tier}).service_tier == tier


def test_create_response_echoes_text_verbosity(create: CreateResponse) -> None:
    response = create({"text": {"verbosity": "low"}})

    assert response.text is not None and response.text.verbosity == "low"


@pytest.mark.parametrize(
    "text_format",
    [
        {"type": "text"},
        {"type": "json_object"},
        {"type": "json_schema", "name": "event", "schema": {"type": "object"}},
        {
            "type": "json_schema",
            "name": "Event_2",
            "description": "a calendar event",
            "schema": {"type": "object", "properties": {"title": {"type": "string"}}},
            "strict": True,
        },
    ],
)
def test_create_response_echoes_the_text_format_as_sent(
    create: CreateResponse, text_format: dict[str, Any]
) -> None:
    response = create({"text": {"format": text_format}})  # validated by the SDK's own model

    assert response.text is not None and response.text.format is not None
    assert response.text.format.model_dump(by_alias=True, exclude_none=True) == text_format


@pytest.mark.parametrize(
    "body",
    [
        {"stream_options": {"include_obfuscation": False}, "background": True},
        {"context_management": [{"type": "compaction", "compact_threshold": 20000}]},
        {"client_metadata": {"thread_id": "t1", "turn_id": "u1"}},
        {"include": ["reasoning.encrypted_content"], "store": False},
        {"store": False},
        {"prompt_cache_options": {"ttl": "12h", "mode": "explicit"}},
        {"image": {"context_compression": "auto"}},
        {"moderation": {"model": "omni-moderation-latest", "policy": {"input": {"mode": "block"}}}},
        {"background_options": {"completion_window": "soonest", "continuation_id": "batch-7"}},
        {"background_options": {"completion_window": "8h"}, "background": True},
        {
            "background_options": {"completion_window": "2h"},
            "background": True,
            "stream": False,
            "service_tier": "default",
        },
    ],
)
def test_create_response_accepts_options_the_response_does_not_show(
    create: CreateResponse, body: dict[str, Any]
) -> None:
    response = create(body)

    assert response.status == "queued"
    shown = response.model_dump(exclude_none=True)
    hidden = {
        "client_metadata",
        "prompt_cache_options",
        "image",
        "moderation",
        "background_options",
    }
    assert not hidden & set(shown)
    assert response.store is body.get("store", True)


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"background_options": {"completion_window": "1d"}}, WINDOW, None),
        ({"background_options": {"completion_window": "2h"}}, WINDOW, None),  # not background
        (
            {"background_options": {"completion_window": "8h"}, "background": True, "stream": True},
            WINDOW,
            None,
        ),
        (
            {
                "background_options": {"completion_window": "2h"},
                "background": True,
                "service_tier": "priority",
            },
            WINDOW,
            None,
        ),
        (
            {"background_options": {"window": "2h"}},
            "background_options.window",
            "unknown_parameter",
        ),
        ({"context_management": [{"type": "truncate"}]}, "context_management.0.type", None),
        ({"client_metadata": {"n": 1}}, "client_metadata.n", "invalid_type"),
        ({"prompt_cache_retention": "1y"}, "prompt_cache_retention", None),
        ({"prompt": {"id": "pmpt_1"}}, "prompt", "unsupported_parameter"),
    ],
)
def test_create_response_refuses_what_the_fields_do_not_allow(
    create: CreateResponse, body: dict[str, Any], param: str, code: str | None
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        create(body)

    assert caught.value.param == param
    assert caught.value.code == (code or "invalid_value")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"stream": "yes"}, "stream"),
        ({"stream": 1}, "stream"),
        ({"background": "true"}, "background"),
        ({"store": 0}, "store"),
        ({"parallel_tool_calls": "no"}, "parallel_tool_calls"),
        ({"max_output_tokens": "50"}, "max_output_tokens"),
        ({"max_output_tokens": 50.5}, "max_output_tokens"),
        ({"temperature": "0.5"}, "temperature"),
        ({"top_logprobs": True}, "top_logprobs"),
        ({"stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
        ({"tools": [{"type": "mcp", "server_label": "s", "server_url": 5}]}, "tools.0.server_url"),
    ],
)
def test_create_response_refuses_a_value_of_the_wrong_json_type(
    create: CreateResponse, body: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        create({"input": "hi", **body})

    assert caught.value.param == param
    assert caught.value.code == "invalid_type"


def test_a_value_of_the_wrong_type_is_named_as_openai_does(create: CreateResponse) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        create({"stream": "yes"})

    assert caught.value.message == (
        "Invalid type for 'stream': expected a boolean, but got a string instead."
    )


def test_create_response_takes_a_whole_number_for_a_number(create: CreateResponse) -> None:
    response = create({"input": "hi", "temperature": 1, "top_p": 1})

    assert (response.temperature, response.top_p) == (1.0, 1.0)


def test_create_response_accepts_codexs_first_request(create: CreateResponse) -> None:
    body = json.loads(CODEX_REQUEST.read_text())
    body.pop("model")

    response = create(body)

    assert response.store is False
    assert response.prompt_cache_key == body["prompt_cache_key"]
    assert response.reasoning is not None and response.reasoning.summary == "auto"
    assert "namespace" in [tool.type for tool in response.tools]
    assert "web_search" not in [tool.type for tool in response.tools]  # dropped: unavailable


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": [{"type": "custom"}]}, "tools.0.name"),
        (
            {"tools": [{"type": "namespace", "name": "n", "description": "d", "tools": [{}]}]},
            "tools.0.tools.0",
        ),
        (
            {"tools": [{"type": "computer_use_preview", "display_width": 9}]},
            "tools.0.display_height",
        ),
        ({"tools": [{"type": "acme:bad type"}]}, "tools.0.type"),
        ({"tools": [{"type": "telepathy"}]}, "tools.0"),
        ({"input": [{"type": "shell_call_output", "call_id": "c"}]}, "input.0.output"),
        ({"input": [{"type": "custom_tool_call", "call_id": "c", "name": "n"}]}, "input.0.input"),
        ({"tool_choice": {"type": "custom"}}, "tool_choice.name"),
    ],
)
def test_create_response_names_the_param_of_a_bad_new_shape(
    create: CreateResponse, body: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        create(body)

    assert caught.value.param == param


@pytest.mark.parametrize("body", [{"input": []}, {"input": [], "instructions": ""}, {}])
def test_create_response_refuses_a_request_that_gives_the_model_nothing(
    store: ResponseStore, make_settings: Callable[..., Settings], body: dict[str, Any]
) -> None:
    """The model server would refuse an empty conversation: the client hears it at once, not as
    a failed response with a ``server_error``."""
    with pytest.raises(InvalidRequestError) as caught:
        create_response(store, RecordingDispatcher(), make_settings(), {"model": "m", **body})

    assert (caught.value.param, caught.value.code) == ("input", "empty_array")


def test_create_response_refuses_an_input_of_reasoning_alone(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """Reasoning goes with the assistant message after it: alone, no message is left."""
    body = {"model": "m", "input": [{"type": "reasoning", "id": "rs_1", "summary": []}]}
    with pytest.raises(InvalidRequestError) as caught:
        create_response(store, RecordingDispatcher(), make_settings(), body)

    assert (caught.value.param, caught.value.code) == ("input", "invalid_value")
    assert "reasoning items only" in caught.value.message


@pytest.mark.parametrize(
    "items",
    [
        [{"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "s", "tools": []}],
        [{"type": "additional_tools", "tools": []}, {"type": "reasoning", "summary": []}],
    ],
)
def test_create_response_refuses_an_input_the_model_is_shown_nothing_of(
    store: ResponseStore, make_settings: Callable[..., Settings], items: list[dict[str, Any]]
) -> None:
    """A listing that worked is shown as tools, not as a message. Before, that input reached
    the model server as no message at all: a failed response, and ``input_tokens`` a 502
    ("'messages' must be a non-empty array"; found by a longer schemathesis run)."""
    with pytest.raises(InvalidRequestError) as caught:
        create_response(
            store, RecordingDispatcher(), make_settings(), {"model": "m", "input": items}
        )

    assert (caught.value.param, caught.value.code) == ("input", "invalid_value")
    assert "no item the model is shown" in caught.value.message


def test_create_response_takes_an_input_of_an_item_shown_in_words(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """A failed listing is told to the model; a finished call is shown as call and result."""
    failed = {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "s", "tools": []}
    done = {"type": "mcp_call", "id": "mcp_1", "server_label": "s", "name": "echo"}
    for items in ([failed | {"error": "down"}], [done | {"arguments": "{}", "output": "x"}]):
        response, _ = create_response(
            store, RecordingDispatcher(), make_settings(), {"model": "m", "input": items}
        )
        assert response.status == "queued"


def test_create_response_takes_an_empty_input_with_something_else_for_the_model(
    store: ResponseStore, make_settings: Callable[..., Settings], create: CreateResponse
) -> None:
    assert create({"input": [], "instructions": "Say hello."}).instructions == "Say hello."
    previous = create({"input": "hi"})
    assert create({"input": [], "previous_response_id": previous.id}).status == "queued"
    # A WebSocket's "generate": false only stores state: no model is called.
    response, _ = create_response(
        store, RecordingDispatcher(), make_settings(), {"model": "m"}, generate=False
    )
    assert response.status == "queued"
