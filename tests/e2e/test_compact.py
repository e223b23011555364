"""``POST /v1/responses/compact`` against the fleet: the summary turn runs on a worker."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import openresponses_types
import pytest
from openai.types.responses import ResponseCompactionItem

from app.sealing import SUMMARY_HEADER
from app.summary import SUMMARY_REQUEST
from programs.supervisor import free_port
from tests.e2e.conftest import Fleet, wait_ready
from tests.e2e.helpers import assert_error_body
from tests.support.model_proxy import ModelProxy, model_proxy
from tests.support.recording import Recorder

CONVERSATION = [
    {"role": "user", "content": "We agreed to launch on Tuesday."},
    {"role": "assistant", "content": "Understood: Tuesday."},
]


def post_compact(fleet: Fleet, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{fleet.base_url}/v1/responses/compact", json=body, timeout=60)


def compacted(fleet: Fleet, **body: Any) -> dict[str, Any]:
    response = post_compact(fleet, {"model": "antwort-sim", **body})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    openresponses_types.CompactResource.model_validate(result)
    # The SDK types ``output`` as output items (assistant messages only), although OpenAI's own
    # compaction output holds the user messages: check the compaction item with the SDK's type.
    ResponseCompactionItem.model_validate(result["output"][-1])
    return result


def test_compact_returns_user_messages_and_one_sealed_compaction_item(fleet: Fleet) -> None:
    result = compacted(fleet, input=CONVERSATION, prompt_cache_key="k", instructions="Keep dates.")

    assert set(result) == {
        *("id", "object", "output", "created_at", "usage"),
        *("safety_identifier", "service_tier"),
    }
    assert result["object"] == "response.compaction"
    *messages, item = result["output"]
    assert [(m["role"], m["content"][0]["text"]) for m in messages] == [
        ("user", "We agreed to launch on Tuesday.")
    ]
    assert item["type"] == "compaction" and item["id"].startswith("cmp_")
    assert "Tuesday" not in item["encrypted_content"]
    assert result["usage"]["output_tokens"] > 0


def test_compact_with_the_openai_sdk(client: openai.OpenAI, fleet: Fleet) -> None:
    response = client.responses.create(input="Remember: the codeword is papaya.")

    raw = client.responses.with_raw_response.compact(
        model="antwort-sim",
        previous_response_id=response.id,
        service_tier="fast",  # the SDK's other compact parameters: taken, not acted on
        prompt_cache_retention="24h",
        prompt_cache_options={"mode": "implicit"},
        image={"context_compression": "auto"},
        safety_identifier="user-7",  # openai 3.60's, echoed with the tier as a response does
    )
    result = raw.parse()

    assert result.object == "response.compaction"
    assert [item.type for item in result.output] == ["message", "compaction"]
    assert (result.safety_identifier, result.service_tier) == ("user-7", "fast")
    plain = client.responses.compact(model="antwort-sim", input="Hi")
    assert (plain.safety_identifier, plain.service_tier) == (None, "default")
    openresponses_types.CompactResource.model_validate(raw.http_response.json())


def test_compact_without_model_is_a_400(fleet: Fleet) -> None:
    error = assert_error_body(post_compact(fleet, {"input": CONVERSATION}), 400)

    assert (error["code"], error["param"]) == ("missing_required_parameter", "model")


def test_compact_bad_requests_are_openai_errors(fleet: Fleet) -> None:
    unknown = assert_error_body(post_compact(fleet, {"model": "antwort-sim", "tools": []}), 400)
    missing = assert_error_body(
        post_compact(fleet, {"model": "antwort-sim", "previous_response_id": "resp_x"}), 400
    )
    not_json = httpx.post(f"{fleet.base_url}/v1/responses/compact", content=b"model=x", timeout=10)

    assert (unknown["code"], unknown["param"]) == ("unknown_parameter", "tools")
    assert missing["code"] == "previous_response_not_found"
    assert_error_body(not_json, 415)


def test_compact_output_starts_a_new_chain_the_model_continues_from(
    client: openai.OpenAI, fleet: Fleet
) -> None:
    output = compacted(fleet, input=CONVERSATION)["output"]
    question = {"role": "user", "content": "When do we launch?"}

    with_summary = client.responses.create(input=[*output, question])
    without = client.responses.create(input=[*output[:-1], question])
    follow_up = client.responses.create(input="And then?", previous_response_id=with_summary.id)

    assert with_summary.status == "completed" and with_summary.previous_response_id is None
    # The model saw one more message: the summary the compaction item stands for.
    assert with_summary.usage and without.usage and follow_up.usage
    assert with_summary.usage.input_tokens > without.usage.input_tokens + 1
    assert follow_up.usage.input_tokens > with_summary.usage.input_tokens
    items = client.responses.input_items.list(with_summary.id, order="asc").data
    assert [item.type for item in items] == ["message", "compaction", "message"]


def test_tampered_compaction_item_is_a_400(fleet: Fleet) -> None:
    *messages, item = compacted(fleet, input=CONVERSATION)["output"]
    token = item["encrypted_content"]
    forged = {
        **item,
        "encrypted_content": token[:-6] + ("AAAAAA" if token[-6:] != "AAAAAA" else "BBBBBB"),
    }
    body = {"input": [*messages, forged, {"role": "user", "content": "go on"}]}

    created = httpx.post(f"{fleet.base_url}/v1/responses", json=body, timeout=30)
    compacting = post_compact(fleet, {"model": "antwort-sim", **body})

    for response in (created, compacting):
        error = assert_error_body(response, 400)
        assert (error["code"], error["param"]) == (
            "invalid_encrypted_content",
            "input.1.encrypted_content",
        )


def streamed_text(sse: str) -> str:
    chunks = [json.loads(line[6:]) for line in sse.splitlines() if line.startswith("data: {")]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


@pytest.fixture(scope="module")
def recorded(fleet: Fleet, sim_url: str) -> Iterator[tuple[str, ModelProxy]]:
    """A gateway and an inference worker of their own whose model calls are recorded."""
    port = free_port()
    env = {"ANTWORT_KEY_PREFIX": fleet.env["ANTWORT_KEY_PREFIX"] + "recorded:"}
    with model_proxy(sim_url) as model:
        fleet.spawn(
            "gateway-recorded",
            [sys.executable, "-m", "programs.cli", "gateway"],
            ANTWORT_PORT=str(port),
            **env,
        )
        fleet.spawn(
            "worker-recorded",
            [sys.executable, "-m", "workers.main", "--queues=inference", "--loglevel=WARNING"],
            ANTWORT_LLM_BASE_URL=model.url,
            **env,
        )
        base_url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(base_url)
            yield base_url, model
        finally:
            fleet.stop("gateway-recorded")
            fleet.stop("worker-recorded")


def test_compact_summary_written_by_the_model_is_what_the_model_sees_next(
    recorded: tuple[str, ModelProxy],
) -> None:
    base_url, model = recorded
    compacting = httpx.post(
        f"{base_url}/v1/responses/compact",
        json={"model": "antwort-sim", "input": CONVERSATION},
        timeout=60,
    )
    assert compacting.status_code == 200, compacting.text
    [(summary_request, summary_answer)] = model.exchanges
    summary = streamed_text(summary_answer)
    question = {"role": "user", "content": "When do we launch?"}

    created = httpx.post(
        f"{base_url}/v1/responses",
        json={"input": [*compacting.json()["output"], question]},
        timeout=60,
    )

    assert created.status_code == 200 and created.json()["status"] == "completed", created.text
    assert [m["role"] for m in summary_request["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
    ]
    assert summary_request["messages"][-1]["content"] == SUMMARY_REQUEST
    assert summary.startswith("Simulated answer to:")
    [(continuation, _)] = model.exchanges[1:]
    assert continuation["messages"] == [
        {"role": "user", "content": "We agreed to launch on Tuesday."},
        {"role": "assistant", "content": f"{SUMMARY_HEADER}\n{summary}"},
        {"role": "user", "content": "When do we launch?"},
    ]


def test_compact_shows_the_model_the_mcp_calls_of_the_chain(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    """The summary turn reads an MCP call and its result as any turn does (it read neither)."""
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    response = client.responses.create(
        model="antwort-sim",
        input=f"{marker} use echo",
        tools=[{"type": "mcp", "server_label": "local", "require_approval": "never"}],
    )
    [call] = [item for item in response.output if item.type == "mcp_call"]
    assert call.output

    client.responses.compact(model="antwort-sim", previous_response_id=response.id)

    summary_request = sent[-1]["messages"]
    assert summary_request[-1]["content"] == SUMMARY_REQUEST
    [asked] = [m for m in summary_request if m.get("tool_calls")]
    assert asked["tool_calls"][0]["function"]["name"] == "echo"
    [answer] = [m for m in summary_request if m["role"] == "tool"]
    assert answer == {
        "role": "tool",
        "tool_call_id": asked["tool_calls"][0]["id"],
        "content": call.output,
    }


def test_a_compaction_trigger_streams_one_compaction_item_the_next_request_continues_from(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    """OpenAI's compaction in ``/v1/responses``: the input ends with ``compaction_trigger``."""
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    history: Any = [{"role": "user", "content": f"{marker} We launch on Tuesday."}]

    with client.responses.stream(
        model="antwort-sim", input=[*history, {"type": "compaction_trigger"}], store=False
    ) as stream:
        done = [event.item for event in stream if event.type == "response.output_item.done"]
        compacted = stream.get_final_response()

    assert [item.type for item in done] == ["compaction"]
    assert [item.type for item in compacted.output] == ["compaction"]
    assert sent[0]["messages"][-1]["content"] == SUMMARY_REQUEST
    after = client.responses.create(
        model="antwort-sim",
        input=[*history, compacted.output[0].model_dump(), {"role": "user", "content": "When?"}],
        store=False,
    )
    assert after.status == "completed"
    assert sent[1]["messages"][1]["content"].startswith(SUMMARY_HEADER)


def test_a_chain_compacted_by_a_trigger_is_shown_from_its_compaction_on(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    """OpenAI's rule: the latest compaction item carries what came before it (a chain too)."""
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    first = client.responses.create(
        model="antwort-sim",
        input=f"{marker} use echo",
        tools=[{"type": "mcp", "server_label": "local", "require_approval": "never"}],
    )
    assert [item.type for item in first.output].count("mcp_call") == 1
    compacted = client.responses.create(
        model="antwort-sim",
        input=[{"type": "compaction_trigger"}],  # type: ignore[list-item]
        previous_response_id=first.id,
    )
    assert [item.type for item in compacted.output] == ["compaction"]

    after = client.responses.create(
        model="antwort-sim", input="What did echo say?", previous_response_id=compacted.id
    )

    assert after.status == "completed"
    seen = sent[-1]["messages"]
    assert [m["role"] for m in seen] == ["user", "assistant", "user"]
    assert seen[0]["content"] == f"{marker} use echo"
    assert seen[1]["content"].startswith(SUMMARY_HEADER)
    assert not [m for m in seen if m["role"] == "tool" or m.get("tool_calls")]


def test_context_management_compacts_a_long_context_before_the_models_turn(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    """Server-side compaction: the prompt, counted by the model server, crossed the threshold."""
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    first = client.responses.create(model="antwort-sim", input=f"{marker} We launch on Tuesday.")

    with client.responses.stream(
        model="antwort-sim",
        input="When do we launch?",
        previous_response_id=first.id,
        context_management=[{"type": "compaction", "compact_threshold": 5}],
    ) as stream:
        done = [event.item for event in stream if event.type == "response.output_item.done"]
        compacted = stream.get_final_response()

    assert [item.type for item in done] == ["compaction", "message"]
    assert [item.type for item in compacted.output] == ["compaction", "message"]
    measured, summary, answered = sent[1:]
    assert measured["max_tokens"] == 1
    assert summary["messages"][-1]["content"] == SUMMARY_REQUEST
    assert [m["role"] for m in answered["messages"]] == ["user", "user", "assistant"]
    assert answered["messages"][-1]["content"].startswith(SUMMARY_HEADER)
    after = client.responses.create(
        model="antwort-sim", input="Thanks.", previous_response_id=compacted.id
    )
    assert after.status == "completed"
    shown = [m["content"] for m in sent[-1]["messages"]]  # the chain, from the compaction on
    assert first.output_text not in shown and compacted.output_text in shown
    assert len(shown) == 5  # two user messages, the summary, the answer, "Thanks."
