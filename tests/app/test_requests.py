import time
from collections.abc import Callable
from typing import Any, get_args

import pytest

from app.config import Settings
from app.errors import InvalidRequestError, NotFoundError, PreviousResponseNotFoundError
from app.keys import Keys
from app.progress import PROGRESS_INCLUDE
from app.protocol.items import (
    MessageItem,
    input_of_item,
    item_id,
    response_of_item,
    turn_tag,
)
from app.protocol.request import Includable
from app.responses import (
    check_input_items_query,
    create_response,
    list_input_items,
    normalise_input,
    parse_request,
)
from app.store import ResponseStore
from app.tools.mcp.requests import check_approval_responses
from tests.support.dispatch import RecordingDispatcher
from tests.support.round_trips import CountingConnection, counting_client

WEATHER_TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
JSON_SCHEMA = {
    "type": "json_schema",
    "name": "event",
    "schema": {"type": "object", "properties": {"title": {"type": "string"}}},
    "strict": True,
}


def rejection(body: Any) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as caught:
        parse_request(body)
    return caught.value


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": "m", "input": "hi", "foo": 1}, "foo", "unknown_parameter"),
        ({"model": "m", "temperature": "hot"}, "temperature", "invalid_type"),
        ({"model": "m", "temperature": 3}, "temperature", "invalid_value"),
        ({"model": "m", "stream": "sometimes"}, "stream", "invalid_type"),
        ({"model": "m", "input": 5}, "input", "invalid_type"),
        (
            {"model": "m", "input": [{"role": "robot", "content": "hi"}]},
            "input.0.role",
            "invalid_value",
        ),
        (
            {"model": "m", "input": [{"role": "user", "content": "hi", "foo": 1}]},
            "input.0.foo",
            "unknown_parameter",
        ),
        (
            {"model": "m", "input": [{"type": "message", "role": "user"}]},
            "input.0.content",
            "missing_required_parameter",
        ),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text"}]}]},
            "input.0.content.0.text",
            "missing_required_parameter",
        ),
        ({"model": "m", "input": [{"type": "telepathy"}]}, "input.0", "invalid_value"),
        ({"model": "m", "tool_choice": "sometimes"}, "tool_choice", "invalid_value"),
        (
            {"model": "m", "tool_choice": {"type": "function"}},
            "tool_choice.name",
            "missing_required_parameter",
        ),
        (
            {"model": "m", "tools": [{"type": "function", "name": "bad name"}]},
            "tools.0.name",
            "invalid_value",
        ),
        (
            {"model": "m", "tools": [{"type": "function", "name": "f", "strict": "perhaps"}]},
            "tools.0.strict",
            "invalid_type",
        ),
        ({"model": "m", "reasoning": {"effort": "extreme"}}, "reasoning.effort", "invalid_value"),
        (
            {
                "model": "m",
                "input": [
                    {"type": "function_call_output", "call_id": "c", "output": "x", "caller": {}}
                ],
            },
            "input.0.caller.type",
            "missing_required_parameter",
        ),
        (
            {"model": "m", "include": ["reasoning.encrypted_content", "everything"]},
            "include.1",
            "invalid_value",
        ),
        (
            {"model": "m", "text": {"format": {"type": "json_schema", "schema": {}}}},
            "text.format.name",
            "missing_required_parameter",
        ),
        (
            {"model": "m", "text": {"format": {"type": "json_schema", "name": "event"}}},
            "text.format.schema",
            "missing_required_parameter",
        ),
        (
            {"model": "m", "text": {"format": {**JSON_SCHEMA, "name": "an event"}}},
            "text.format.name",
            "invalid_value",
        ),
        (
            {"model": "m", "text": {"format": {**JSON_SCHEMA, "schema": ["object"]}}},
            "text.format.schema",
            "invalid_type",
        ),
        (
            {"model": "m", "text": {"format": {"type": "json_object", "schema": {}}}},
            "text.format.schema",
            "unknown_parameter",
        ),
        ({"model": "m", "text": {"format": {"type": "xml"}}}, "text.format", "invalid_value"),
        (
            {
                "model": "m",
                "tools": [{"type": "custom", "name": "c", "format": {"type": "grammar"}}],
            },
            "tools.0.format.syntax",
            "missing_required_parameter",
        ),
    ],
)
def test_parse_request_names_the_offending_param(
    body: dict[str, Any], param: str, code: str
) -> None:
    error = rejection(body)

    assert (error.param, error.code) == (param, code)
    assert error.status == 400
    assert error.type == "invalid_request_error"
    assert param in error.message


def test_parse_request_accepts_openais_include_values_and_the_progress_extension() -> None:
    include = [
        "reasoning.encrypted_content",
        "message.output_text.logprobs",
        "code_interpreter_call.outputs",
        "antwort:progress",
    ]
    assert parse_request({"model": "m", "include": include}).include == include


def test_includable_is_the_sdks_set_plus_the_progress_extension() -> None:
    """Checked against the official SDK's ``ResponseIncludable``, not a copy of it."""
    from openai.types.responses import ResponseIncludable

    assert set(get_args(Includable)) == {*get_args(ResponseIncludable), PROGRESS_INCLUDE}


def test_parse_request_refuses_a_body_that_is_not_an_object() -> None:
    error = rejection(["model", "m"])

    assert error.status == 400
    assert error.param is None


def test_parse_request_input_item_without_type_is_a_message() -> None:
    request = parse_request(
        {"model": "m", "input": [{"role": "developer", "content": "Be terse."}]}
    )

    assert isinstance(request.input, list)
    [item] = request.input
    assert isinstance(item, MessageItem)
    assert (item.type, item.role, item.content) == ("message", "developer", "Be terse.")


def test_create_response_without_model_or_default_is_refused(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    dispatcher = RecordingDispatcher()

    with pytest.raises(InvalidRequestError) as caught:
        create_response(store, dispatcher, make_settings(default_model=None), {"input": "hi"})

    assert (caught.value.param, caught.value.code) == ("model", "missing_required_parameter")
    assert dispatcher.turns == []


def test_create_response_uses_the_default_model(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    dispatcher = RecordingDispatcher()

    response, _ = create_response(store, dispatcher, make_settings(), {"input": "hi"})

    assert response.model == "antwort-sim"
    assert response.status == "queued"
    assert dispatcher.turns == [(response.id, 0)]
    assert store.get(response.id).response == response


def test_create_response_refuses_tool_choice_of_an_unknown_function(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    body = {
        "model": "m",
        "input": "hi",
        "tools": [WEATHER_TOOL],
        "tool_choice": {"type": "function", "name": "get_time"},
    }

    with pytest.raises(InvalidRequestError) as caught:
        create_response(store, RecordingDispatcher(), make_settings(), body)

    assert (caught.value.param, caught.value.code) == ("tool_choice", "invalid_value")
    assert "get_time" in caught.value.message


def test_create_response_refuses_required_tool_choice_without_tools(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        create_response(
            store, RecordingDispatcher(), make_settings(), {"model": "m", "tool_choice": "required"}
        )

    assert caught.value.param == "tool_choice"


def test_create_response_with_unknown_previous_response_is_refused(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    dispatcher = RecordingDispatcher()
    body = {"model": "m", "input": "hi", "previous_response_id": "resp_nope"}

    with pytest.raises(PreviousResponseNotFoundError) as caught:
        create_response(store, dispatcher, make_settings(), body)

    error = caught.value
    assert (error.param, error.code, error.status) == (
        "previous_response_id",
        "previous_response_not_found",
        400,
    )
    assert "resp_nope" in error.message
    assert dispatcher.turns == []


def test_create_response_cannot_chain_on_an_unstored_response(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    unstored, _ = create_response(
        store, RecordingDispatcher(), settings, {"input": "hi", "store": False}
    )

    with pytest.raises(PreviousResponseNotFoundError):
        create_response(
            store,
            RecordingDispatcher(),
            settings,
            {"input": "hi", "previous_response_id": unstored.id},
        )


def test_normalise_input_gives_every_item_an_id() -> None:
    request = parse_request(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": "Weather?"},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": "Let me look.",
                    "id": "msg_keep",
                },
                {
                    "type": "function_call",
                    "call_id": "c1",
                    "name": "get_weather",
                    "arguments": "{}",
                },
                {  # the SDK's newer fields, as a response.steer.pending stub carries them
                    "type": "function_call_output",
                    "call_id": "c1",
                    "output": "rain",
                    "name": "get_weather",
                    "namespace": None,
                    "caller": {"type": "direct"},
                },
                {"type": "reasoning", "summary": []},
            ],
        }
    )

    items = normalise_input(request)

    assert [item["id"][: item["id"].index("_")] for item in items] == [
        "msg",
        "msg",
        "fc",
        "fco",
        "rs",
    ]
    assert items[1]["id"] == "msg_keep"
    assert len({item["id"] for item in items}) == 5
    assert items[0]["type"] == "message"
    assert items[0]["status"] == "completed"
    assert items[0]["content"] == [{"type": "input_text", "text": "Weather?"}]
    assert items[1]["content"] == [
        {"type": "output_text", "text": "Let me look.", "annotations": [], "logprobs": []}
    ]


def test_an_input_item_without_an_id_is_given_one_naming_its_response_and_place() -> None:
    response_id = "resp_" + "ab" * 24
    request = parse_request(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": "Weather?", "id": "msg_keep"},
                {"role": "user", "content": "In Oslo."},
                {"type": "function_call_output", "call_id": "c1", "output": "rain"},
            ],
        }
    )

    kept, placed, result = normalise_input(request, response_id=response_id)

    assert kept["id"] == "msg_keep"
    assert (placed["id"], result["id"]) == ("msg_00000001" + "ab" * 24, "fco_00000002" + "ab" * 24)
    assert input_of_item(placed["id"]) == (response_id, 1)
    assert turn_tag(placed["id"]) is None  # names no model turn
    assert response_of_item(placed["id"]) is None  # not an output item
    assert input_of_item(item_id("msg", response_id, 0, 1)) is None
    # a response id not of the fleet's making (a test's own): random ids, as without one
    [own] = normalise_input(parse_request({"model": "m", "input": "hi"}), response_id="resp_x")
    assert input_of_item(own["id"]) is None


def test_normalise_input_turns_a_string_into_a_user_message() -> None:
    [item] = normalise_input(parse_request({"model": "m", "input": "hello"}))

    assert item["id"].startswith("msg_")
    assert {k: v for k, v in item.items() if k != "id"} == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "hello"}],
        "status": "completed",
    }


def make_listed(
    store: ResponseStore, settings: Settings, count: int, **body: Any
) -> tuple[str, list[str]]:
    items = [{"role": "user", "content": f"item {i}", "id": f"msg_{i}"} for i in range(count)]
    response, _ = create_response(store, RecordingDispatcher(), settings, {"input": items, **body})
    return response.id, [f"msg_{i}" for i in range(count)]


def ids(page: dict[str, Any]) -> list[str]:
    return [item["id"] for item in page["data"]]


def test_list_input_items_pages_newest_first_by_default(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    rid, item_ids = make_listed(store, make_settings(), 5)
    limit, order = check_input_items_query(None, None)

    everything = list_input_items(store, rid, limit=limit, order=order, after=None)
    first = list_input_items(store, rid, limit=2, order="desc", after=None)
    second = list_input_items(store, rid, limit=2, order="desc", after=first["last_id"])
    third = list_input_items(store, rid, limit=2, order="desc", after=second["last_id"])

    assert everything["object"] == "list"
    assert ids(everything) == item_ids[::-1]
    assert everything["has_more"] is False
    assert (ids(first), first["first_id"], first["last_id"], first["has_more"]) == (
        ["msg_4", "msg_3"],
        "msg_4",
        "msg_3",
        True,
    )
    assert (ids(second), second["has_more"]) == (["msg_2", "msg_1"], True)
    assert (ids(third), third["has_more"]) == (["msg_0"], False)


def test_list_input_items_pages_oldest_first_with_asc(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    rid, _ = make_listed(store, make_settings(), 4)

    first = list_input_items(store, rid, limit=3, order="asc", after=None)
    rest = list_input_items(store, rid, limit=3, order="asc", after="msg_2")
    exact = list_input_items(store, rid, limit=4, order="asc", after=None)
    past_end = list_input_items(store, rid, limit=3, order="asc", after="msg_3")

    assert (ids(first), first["has_more"]) == (["msg_0", "msg_1", "msg_2"], True)
    assert (ids(rest), rest["first_id"], rest["last_id"], rest["has_more"]) == (
        ["msg_3"],
        "msg_3",
        "msg_3",
        False,
    )
    assert exact["has_more"] is False
    assert past_end == {
        "object": "list",
        "data": [],
        "first_id": None,
        "last_id": None,
        "has_more": False,
    }


def test_list_input_items_refuses_an_unknown_after(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    rid, _ = make_listed(store, make_settings(), 2)

    with pytest.raises(InvalidRequestError) as caught:
        list_input_items(store, rid, limit=10, order="desc", after="msg_nope")

    assert caught.value.param == "after"


def test_list_input_items_of_an_unknown_response_is_not_found(store: ResponseStore) -> None:
    with pytest.raises(NotFoundError):
        list_input_items(store, "resp_nope", limit=10, order="desc", after=None)


@pytest.mark.parametrize(
    ("limit", "order", "expected"),
    [
        (None, None, (20, "desc")),
        ("1", "asc", (1, "asc")),
        ("100", "desc", (100, "desc")),
    ],
)
def test_check_input_items_query_accepts_bounds(
    limit: str | None, order: str | None, expected: tuple[int, str]
) -> None:
    assert check_input_items_query(limit, order) == expected


@pytest.mark.parametrize(
    ("limit", "order", "param"),
    [
        ("0", None, "limit"),
        ("101", None, "limit"),
        ("-3", None, "limit"),
        ("ten", None, "limit"),
        (None, "sideways", "order"),
    ],
)
def test_check_input_items_query_refuses_out_of_bounds(
    limit: str | None, order: str | None, param: str
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        check_input_items_query(limit, order)

    assert (caught.value.param, caught.value.code) == (param, "invalid_value")


def test_a_counting_clients_new_connection_counts_only_the_command(redis_url: str) -> None:
    """Its handshake (CLIENT SETINFO, SELECT …) is the pool's, not what a test measures."""
    client = counting_client(redis_url)
    try:
        before = CountingConnection.sent
        assert client.ping()  # opens the connection
        assert CountingConnection.sent - before == 1
    finally:
        client.close()


def test_create_response_stores_watches_and_emits_in_one_round_trip(
    redis_url: str, key_prefix: str, make_settings: Callable[..., Settings]
) -> None:
    client = counting_client(redis_url)
    store = ResponseStore(client, keys=Keys(key_prefix), ttl_seconds=3600)
    settings = make_settings(queued_grace_seconds=30)
    create_response(store, RecordingDispatcher(), settings, {"input": "hi"})  # loads the script
    try:
        before = CountingConnection.sent
        started = time.time()
        response, _ = create_response(store, RecordingDispatcher(), settings, {"input": "hi"})

        assert CountingConnection.sent - before == 1
        watch = store.redis.zscore(store.keys.active, response.id)
        assert watch is not None and started + 29 < watch < time.time() + 31
    finally:
        client.close()


def test_a_stateless_clients_history_items_are_taken_as_input() -> None:
    """What the fleet's own output holds comes back as input from a client that sends the
    whole history (the Agents SDK's default): MCP listings, calls and approval requests, web
    search calls, and the SDK's newer call fields."""
    history = [
        {"role": "user", "content": "Echo papaya"},
        {
            "type": "mcp_list_tools",
            "id": "mcpl_1",
            "server_label": "local",
            "tools": [{"name": "echo", "input_schema": {"type": "object"}, "annotations": None}],
            "error": None,
        },
        {
            "type": "mcp_approval_request",
            "id": "mcpr_1",
            "server_label": "local",
            "name": "echo",
            "arguments": "{}",
        },
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
        {
            "type": "mcp_call",
            "id": "mcp_1",
            "server_label": "local",
            "name": "echo",
            "arguments": "{}",
            "output": "papaya",
            "error": None,
            "status": "completed",
            "approval_request_id": "mcpr_1",
            "content": [{"type": "text", "text": "papaya"}],
        },
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search", "query": "papaya"},
            "output": "Papaya is a fruit.",  # the fleet's own field
        },
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "async": False},
    ]

    items = normalise_input(parse_request({"model": "m", "input": history}))

    assert [item["type"] for item in items[1:]] == [entry["type"] for entry in history[1:]]
    assert "async" not in items[-1] and "async_" not in items[-1]  # taken, not kept


def test_mcp_approval_answers_may_follow_their_request_in_the_same_input() -> None:
    request = {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "s", "name": "n"}
    answer = {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}

    check_approval_responses([], [request, answer])  # the whole history, no chain
    with pytest.raises(InvalidRequestError) as refused:
        check_approval_responses([], [answer, request])  # an answer before its request
    assert refused.value.param == "input.0.approval_request_id"


def test_codex_s_labels_on_its_items_are_taken_and_not_kept() -> None:
    """Codex's own OpenAI provider labels every item it sends."""
    labels = {"turn_id": "t1", "create_time": 1795973904.27, "content_item_kinds": ["user.text"]}
    sent = [
        {"type": "message", "id": "msg_01a2-f78d", "role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": "Go."},
        {"type": "function_call", "call_id": "c", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "hi"},
    ]
    labelled = [{**item, "internal_chat_message_metadata_passthrough": labels} for item in sent]

    items = normalise_input(parse_request({"model": "m", "input": labelled}))

    assert [item["type"] for item in items] == [item["type"] for item in sent]
    assert not any("internal_chat_message_metadata_passthrough" in item for item in items)
    assert items[0]["id"] == "msg_01a2-f78d"
