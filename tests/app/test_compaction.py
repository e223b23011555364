import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openresponses_types
import pytest
from openai.types.responses.response_compact_params import ResponseCompactParams

from app.aead import MissingSecretError
from app.compaction import COMPACT_FIELDS, run_compaction, start_compaction
from app.config import Settings
from app.errors import (
    InvalidRequestError,
    PreviousResponseNotFoundError,
    ServerError,
    UpstreamError,
)
from app.jobs import wait_for_result
from app.limits import Caller
from app.providers.json_protocol import RESULT_PREFIX
from app.providers.translate import to_chat_messages
from app.responses import create_response
from app.run import RunDeps, advance_response
from app.sealing import (
    SUMMARY_HEADER,
    CompactedState,
    InvalidCompactionError,
    Sealer,
    load_sealer,
)
from app.store import ResponseStore
from app.summary import DEFAULT_INSTRUCTIONS, SUMMARY_REQUEST
from app.tenancy import Tenant
from tests.app.test_run import FakeModel, answer
from tests.support.dispatch import RecordingDispatcher, RecordingJobQueue

STATE = CompactedState(summary="We launch on Tuesday.", model="antwort-sim", created_at=1)
CONVERSATION = [
    {"role": "user", "content": "When do we launch?"},
    {"role": "assistant", "content": "On Tuesday."},
]


def compact(
    store: ResponseStore, settings: Settings, model: FakeModel, **body: Any
) -> dict[str, Any]:
    """The whole round trip: gateway side, worker side, gateway side."""
    queue = RecordingJobQueue()
    body.setdefault("model", "antwort-sim")
    compaction_id = start_compaction(store, queue, settings, body)
    assert queue.jobs == [compaction_id]
    assert run_compaction(RunDeps(store=store, provider=model, settings=settings), compaction_id)
    return wait_for_result(store, "compaction", compaction_id, timeout_seconds=5)


def tamper(token: str) -> str:
    middle = len(token) // 2
    return token[:middle] + ("A" if token[middle] != "A" else "B") + token[middle + 1 :]


def test_sealer_opens_what_it_sealed() -> None:
    sealer = Sealer(b"k" * 32)

    token = sealer.seal(STATE)

    assert token.startswith("ac1.")
    assert "Tuesday" not in token
    assert sealer.open(token) == STATE
    assert sealer.seal(STATE) != token  # a fresh nonce each time


@pytest.mark.parametrize(
    "mangle",
    [
        tamper,
        lambda token: token[:-2],
        lambda token: "ac2." + token[4:],
        lambda token: "ac1.!!!",
        lambda token: "",
        lambda token: Sealer(b"x" * 32).seal(STATE),
    ],
)
def test_sealer_refuses_altered_or_foreign_content(mangle: Callable[[str], str]) -> None:
    sealer = Sealer(b"k" * 32)

    with pytest.raises(InvalidCompactionError) as raised:
        sealer.open(mangle(sealer.seal(STATE)), param="input.0.encrypted_content")

    assert raised.value.status == 400
    assert raised.value.code == "invalid_encrypted_content"
    assert raised.value.param == "input.0.encrypted_content"


def test_load_sealer_shares_one_generated_key_through_the_secrets_file(tmp_path: Path) -> None:
    secrets_file = str(tmp_path / "secrets.key")
    token = load_sealer(None, secrets_file).seal(STATE)

    assert load_sealer(None, secrets_file).open(token) == STATE
    assert oct(os.stat(secrets_file).st_mode & 0o777) == "0o600"
    with pytest.raises(InvalidCompactionError):
        load_sealer("a configured secret", secrets_file).open(token)
    configured = load_sealer("a configured secret", None).seal(STATE)
    assert load_sealer("a configured secret", None).open(configured) == STATE
    with pytest.raises(MissingSecretError, match="ANTWORT_COMPACTION_KEY"):
        load_sealer(None, None)


def test_compaction_summarises_on_the_worker_and_seals_the_summary(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    model = answer("We launch on Tuesday.")

    result = compact(store, settings, model, input=CONVERSATION, prompt_cache_key="k")

    openresponses_types.CompactResource.model_validate(result)
    assert result["object"] == "response.compaction"
    assert result["id"].startswith("resp_")
    *messages, item = result["output"]
    assert [m["content"] for m in messages] == [
        [{"type": "input_text", "text": "When do we launch?"}]
    ]
    assert set(item) == {"id", "type", "encrypted_content"}
    sealed = load_sealer(None, settings.secrets_file).open(item["encrypted_content"])
    assert sealed.summary == "We launch on Tuesday."
    assert result["usage"]["total_tokens"] == 14
    [request] = model.requests
    assert request.instructions == DEFAULT_INSTRUCTIONS
    assert [i.get("role") for i in request.items] == ["user", "assistant", "user"]
    assert request.items[-1]["content"] == SUMMARY_REQUEST
    assert request.tools == ()


def test_compaction_of_a_chain_with_an_earlier_compaction_sees_its_summary(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    first = compact(store, settings, answer("Launch Tuesday."), input=CONVERSATION)
    model = answer("Launch Tuesday, support first.")

    second = compact(
        store,
        settings,
        model,
        input=[*first["output"], {"role": "user", "content": "Tell support first."}],
        instructions="Keep dates.",
    )

    [request] = model.requests
    assert request.instructions == "Keep dates."
    summaries = [i for i in request.items if i.get("role") == "assistant"]
    assert summaries[0]["content"][0]["text"] == f"{SUMMARY_HEADER}\nLaunch Tuesday."
    assert [i["type"] for i in second["output"]] == ["message", "message", "compaction"]


def test_compaction_from_previous_response_id(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    response, _ = create_response(store, RecordingDispatcher(), settings, {"input": "Hi there"})
    advance_response(
        RunDeps(store=store, provider=answer("Hello!"), settings=settings), response.id, 0
    )
    model = answer("They greeted.")

    result = compact(store, settings, model, previous_response_id=response.id)

    assert [i["type"] for i in result["output"]] == ["message", "compaction"]
    [request] = model.requests
    assert [i.get("role") for i in request.items] == ["user", "assistant", "user"]


def test_compaction_shows_the_model_every_kind_of_tool_call_and_its_result(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """The calls whose items are not ``function_call`` (an MCP call, a custom tool's call, a
    file search made at OpenAI) reach the summary turn as calls and results, as on any turn."""
    history = [
        {"role": "user", "content": "Echo papaya, then run the grammar tool."},
        {
            "type": "mcp_call",
            "id": "mcp_1",
            "server_label": "local",
            "name": "echo",
            "arguments": '{"text": "papaya"}',
            "output": "papaya!",
            "status": "completed",
        },
        {"type": "custom_tool_call", "call_id": "call_c", "name": "math", "input": "6*7"},
        {"type": "custom_tool_call_output", "call_id": "call_c", "output": "42"},
        {
            "type": "file_search_call",
            "id": "fs_1",
            "status": "completed",
            "queries": ["launch"],
            "results": [{"filename": "plan.md", "text": "Launch on Tuesday."}],
        },
    ]
    model = answer("Echoed papaya; 6*7 is 42; the plan says Tuesday.")

    compact(store, make_settings(), model, input=history)

    [request] = model.requests
    seen = [(i["type"], i.get("name"), i.get("output")) for i in request.items[1:-1]]
    assert seen == [
        ("function_call", "echo", None),
        ("function_call_output", None, "papaya!"),
        ("function_call", "math", None),
        ("function_call_output", None, "42"),
        ("function_call", "file_search", None),
        ("function_call_output", None, "From plan.md:\nLaunch on Tuesday."),
    ]
    roles = [m["role"] for m in to_chat_messages(request.instructions, request.items)]
    assert roles == ["system", "user", *["assistant", "tool"] * 3, "user"]


def test_compaction_for_a_model_on_the_json_tool_protocol_sends_plain_messages(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """Its server takes no tool messages: the calls read as the directives the model wrote."""
    history = [
        {"role": "user", "content": "Echo papaya."},
        {"type": "function_call", "call_id": "call_1", "name": "echo", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "papaya!"},
    ]
    model = answer("Echoed papaya.")

    compact(store, make_settings(tool_protocols="antwort-sim=json"), model, input=history)

    [request] = model.requests
    messages = to_chat_messages(request.instructions, request.items)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "user"]
    assert json.loads(messages[2]["content"])["tool"] == {"name": "echo", "args": {}}
    assert messages[3]["content"] == f"{RESULT_PREFIX}echo (call_1):\npapaya!"


def test_compaction_takes_every_parameter_of_the_sdks_compact(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    assert set(ResponseCompactParams.__annotations__) <= COMPACT_FIELDS
    options = {
        "prompt_cache_options": {"mode": "implicit", "ttl": "30m"},
        "prompt_cache_retention": "24h",
        "service_tier": "fast",
        "image": {"context_compression": "auto"},
        "safety_identifier": "user-7",
    }

    result = compact(store, make_settings(), answer("Tuesday."), input=CONVERSATION, **options)

    assert result["object"] == "response.compaction"
    assert (result["safety_identifier"], result["service_tier"]) == ("user-7", "fast")
    with pytest.raises(InvalidRequestError) as long_id:
        compact(store, make_settings(), answer("x"), input=CONVERSATION, safety_identifier="x" * 65)
    assert long_id.value.param == "safety_identifier"
    with pytest.raises(InvalidRequestError) as refused:
        compact(store, make_settings(), answer("x"), input=CONVERSATION, service_tier="slow")
    assert refused.value.param == "service_tier"


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"input": "x"}, "missing_required_parameter", "model"),
        ({"model": "m", "input": "x", "stream": True}, "unknown_parameter", "stream"),
        ({"model": "m"}, "missing_required_parameter", "input"),
        (
            {"model": "m", "input": [{"type": "compaction"}]},
            "missing_required_parameter",
            "input.0.encrypted_content",
        ),
        (
            {"model": "m", "input": [{"type": "compaction", "encrypted_content": "ac1.AAAA"}]},
            "invalid_encrypted_content",
            "input.0.encrypted_content",
        ),
    ],
)
def test_start_compaction_refuses_bad_requests(
    store: ResponseStore,
    make_settings: Callable[..., Settings],
    body: dict[str, Any],
    code: str,
    param: str,
) -> None:
    queue = RecordingJobQueue()

    with pytest.raises(InvalidRequestError) as raised:
        start_compaction(store, queue, make_settings(), body)

    assert (raised.value.code, raised.value.param) == (code, param)
    assert queue.jobs == []


def test_start_compaction_needs_a_stored_previous_response(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    with pytest.raises(PreviousResponseNotFoundError):
        start_compaction(
            store,
            RecordingJobQueue(),
            make_settings(),
            {"model": "m", "previous_response_id": "x"},
        )


def test_compaction_model_failure_reaches_the_gateway(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    model = FakeModel(UpstreamError("the model server is down"))

    with pytest.raises(UpstreamError) as raised:
        compact(store, make_settings(), model, input="x")

    assert raised.value.message == "the model server is down"


def test_compaction_on_a_worker_without_a_key_says_which_to_set(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(secrets_file=None)  # nor ANTWORT_COMPACTION_KEY
    compaction_id = start_compaction(
        store, RecordingJobQueue(), settings, {"model": "m", "input": CONVERSATION}
    )
    deps = RunDeps(store=store, provider=answer("sum"), settings=settings)

    assert run_compaction(deps, compaction_id) == "failed"  # an answer, not a crash
    with pytest.raises(ServerError) as raised:
        wait_for_result(store, "compaction", compaction_id, timeout_seconds=5)

    assert raised.value.status == 500 and raised.value.code == "secret_key_missing"
    assert "set ANTWORT_COMPACTION_KEY (or ANTWORT_SECRETS_FILE)" in raised.value.message


def test_compaction_task_redelivered_after_its_answer_does_nothing(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    compaction_id = start_compaction(
        store, RecordingJobQueue(), settings, {"model": "m", "input": "x"}
    )
    deps = RunDeps(store=store, provider=answer("sum"), settings=settings)

    assert run_compaction(deps, compaction_id) == "completed"
    assert run_compaction(deps, compaction_id) == "skipped"
    assert store.redis.llen(store.keys.job_result("compaction", compaction_id)) == 1
    wait_for_result(store, "compaction", compaction_id, timeout_seconds=5)
    assert run_compaction(deps, compaction_id) == "skipped"


def test_response_after_compaction_gives_the_model_the_summary(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    compacted = compact(store, settings, answer("We launch on Tuesday."), input=CONVERSATION)
    body = {"input": [*compacted["output"], {"role": "user", "content": "When again?"}]}
    response, _ = create_response(store, RecordingDispatcher(), settings, body)
    model = answer("Tuesday.")

    assert advance_response(
        RunDeps(store=store, provider=model, settings=settings), response.id, 0
    ) == ("completed")

    [request] = model.requests
    texts = [json.dumps(item["content"]) for item in request.items]
    assert [item["role"] for item in request.items] == ["user", "assistant", "user"]
    assert "We launch on Tuesday." in texts[1]
    assert "encrypted_content" not in json.dumps(request.items)
    stored_inputs = store.inputs(response.id)
    assert [i["type"] for i in stored_inputs] == ["message", "compaction", "message"]
    assert "Tuesday" not in json.dumps(stored_inputs[1])


def test_create_response_refuses_a_tampered_compaction_item(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    compacted = compact(store, settings, answer("Summary."), input=CONVERSATION)
    *messages, item = compacted["output"]
    item = {**item, "encrypted_content": tamper(item["encrypted_content"])}

    with pytest.raises(InvalidCompactionError) as raised:
        create_response(store, RecordingDispatcher(), settings, {"input": [*messages, item]})

    assert raised.value.param == "input.1.encrypted_content"


def test_compaction_item_belongs_to_the_tenant_that_compacted(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    queue = RecordingJobQueue()
    body = {"model": "antwort-sim", "input": CONVERSATION}
    compaction_id = start_compaction(
        store, queue, settings, body, caller=Caller(Tenant(name="team-a"))
    )
    run_compaction(
        RunDeps(store=store, provider=answer("Tuesday."), settings=settings), compaction_id
    )
    output = wait_for_result(store, "compaction", compaction_id, timeout_seconds=5)["output"]
    then = {"input": [*output, {"role": "user", "content": "And then?"}]}

    with pytest.raises(InvalidCompactionError):
        create_response(
            store, RecordingDispatcher(), settings, then, caller=Caller(Tenant(name="team-b"))
        )
    create_response(
        store, RecordingDispatcher(), settings, then, caller=Caller(Tenant(name="team-a"))
    )
