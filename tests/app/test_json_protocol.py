"""The JSON tool protocol: directive validation, the manifest, repairs, and runs through it."""

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.config import Settings
from app.errors import InvalidRequestError, ModelBehaviorError
from app.progress import step_title
from app.protocol.items import item_id, turn_tag_of
from app.protocol.response import ResponseObject
from app.providers.chunks import (
    Chunk,
    Exchange,
    Finish,
    PlanUpdate,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from app.providers.json_protocol import (
    PROTOCOL_HEADER,
    RESULT_PREFIX,
    AnswerFormat,
    JsonToolProtocol,
    ProtocolViolation,
    build_manifest,
    parse_directive,
    protocol_of,
    render_transcript,
)
from app.providers.openai_chat import ChatCompletionsProvider
from app.providers.translate import ModelRequest, to_chat_messages
from app.responses import create_response, parse_request
from app.run import RunDeps, advance_response
from app.store import ResponseStore
from app.tools.registry import KINDS
from programs.simulator.behaviour import AnswerPlan, SimConfig, plan_answer
from tests.support.dispatch import RecordingDispatcher

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather of a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
CLOCK = {"type": "function", "name": "clock", "parameters": {"type": "object", "properties": {}}}
JSON_MODE = {"antwort_tool_protocol": "json"}
FORECAST = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "summary": {"type": "string"}},
    "required": ["city", "summary"],
    "additionalProperties": False,
}
FORECAST_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "Forecast", "schema": FORECAST, "strict": True},
}


class ScriptedModel:
    """Answers each call with the next scripted text; records the requests."""

    def __init__(self, *answers: str):
        self.answers = list(answers)
        self.said = list(answers)
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest) -> Iterator[Chunk]:
        self.requests.append(request)
        text = self.answers.pop(0)
        yield TextDelta(text=text[:3])
        yield TextDelta(text=text[3:])
        yield Finish(reason="stop")


def model_request(
    *tools: dict[str, Any], tool_choice: Any = "auto", text: str = "hi"
) -> ModelRequest:
    return ModelRequest(
        model="m",
        instructions="Be brief.",
        items=[{"type": "message", "role": "user", "content": text}],
        tools=list(tools),
        tool_choice=tool_choice,
    )


def run(wrapper: JsonToolProtocol, request: ModelRequest) -> list[Chunk]:
    return list(wrapper.stream(request))


# -- directives ---------------------------------------------------------------------------------


def problem(text: str, *tools: dict[str, Any], must_plan: bool = False, **kw: Any) -> str:
    with pytest.raises(ProtocolViolation) as caught:
        parse_directive(text, build_manifest(model_request(*tools, **kw)), must_plan=must_plan)
    return caught.value.message


def test_parse_directive_accepts_each_type_and_fenced_json() -> None:
    manifest = build_manifest(model_request(WEATHER))
    plan = parse_directive('{"type": "plan", "steps": ["a"]}', manifest, must_plan=True)
    assert plan.steps == ["a"]
    fenced = '```json\n{"type": "reply", "message": "hi"}\n```'
    assert parse_directive(fenced, manifest, must_plan=False).message == "hi"
    call = parse_directive(
        '{"type": "tool_request", "tool": {"name": "get_weather", "args": {"city": "Oslo"}}}',
        manifest,
        must_plan=False,
    )
    assert call.tool is not None and call.tool.args == {"city": "Oslo"}
    assert parse_directive('{"type": "cancel"}', manifest, must_plan=True).type == "cancel"


def test_parse_directive_says_exactly_what_is_wrong() -> None:
    assert problem("{not json").startswith("your answer is not valid JSON (")
    # Python's parser takes NaN and Infinity; JSON does not, nor would a client reading the
    # call's arguments in JavaScript
    nan_args = '{"type": "tool_request", "tool": {"name": "get_weather", "args": {"t": NaN}}}'
    assert problem(nan_args, WEATHER) == "your answer is not valid JSON (NaN is not JSON)"
    assert "not an object" in problem("[1, 2]")
    schema = problem('{"type": "tool_request", "message": "x"}')
    assert 'a "tool_request" needs "tool"' in schema
    assert "extra" in problem('{"type": "reply", "message": "x", "mood": "happy"}').lower()
    assert "type" in problem('{"type": "shout", "message": "x"}')
    unknown = problem('{"type": "tool_request", "tool": {"name": "nope"}}', WEATHER)
    assert unknown == "there is no tool named 'nope'; the tools are: get_weather"
    bad = problem(
        '{"type": "tool_request", "tool": {"name": "get_weather", "args": {"city": 5}}}', WEATHER
    )
    assert (
        bad
        == "the args for 'get_weather' do not match its schema at 'city': 5 is not of type 'string'"
    )
    missing = problem('{"type": "tool_request", "tool": {"name": "get_weather"}}', WEATHER)
    assert "'city' is a required property" in missing
    first = problem('{"type": "reply", "message": "x"}', must_plan=True)
    assert first == 'your first answer must be a "plan" (with "steps"), not a "reply"'
    required = problem('{"type": "reply", "message": "x"}', WEATHER, tool_choice="required")
    assert required.startswith("a tool must be called now")


def test_manifest_follows_tool_choice_and_allowed_tools() -> None:
    assert list(build_manifest(model_request(WEATHER, CLOCK)).tools) == ["get_weather", "clock"]
    assert build_manifest(model_request(WEATHER, tool_choice="none")).tools == {}
    allowed = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "clock"}],
    }
    request = model_request(WEATHER, CLOCK, tool_choice=allowed)
    manifest = build_manifest(request, allowed=KINDS.allowed_names(allowed))
    assert list(manifest.tools) == ["clock"] and manifest.is_required
    forced = build_manifest(
        model_request(WEATHER, CLOCK, tool_choice={"type": "function", "name": "get_weather"})
    )
    assert list(forced.tools) == ["get_weather"] and forced.is_required
    assert forced.tools["get_weather"].wire() == {
        "kind": "function",
        "name": "get_weather",
        "description": "The weather of a city",
        "parameters": WEATHER["parameters"],
    }


def test_render_transcript_shows_calls_as_directives_and_results_as_notes() -> None:
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Looking."}],
        },
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "get_weather",
            "arguments": '{"city": "Oslo"}',
        },
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "reasoning", "summary": []},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Sunny."}],
        },
    ]
    rendered = render_transcript(items)
    assert [m["role"] for m in rendered] == ["user", "assistant", "user", "assistant"]
    assert json.loads(rendered[1]["content"]) == {
        "type": "tool_request",
        "message": "Looking.",
        "step_title": "get_weather: city=Oslo",
        "tool": {"name": "get_weather", "args": {"city": "Oslo"}},
    }
    assert rendered[2]["content"] == f"{RESULT_PREFIX}get_weather (c1):\nsunny"
    assert json.loads(rendered[3]["content"]) == {"type": "reply", "message": "Sunny."}


def test_render_transcript_keeps_the_images_of_a_result_on_its_note() -> None:
    image = {"type": "input_image", "image_url": "data:image/png;base64,iVBO", "detail": "low"}
    items = [
        {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [{"type": "input_text", "text": "cat.png"}, image],
        },
    ]

    rendered = render_transcript(items)

    note = f"{RESULT_PREFIX}view_image (c1):\ncat.png"
    assert rendered[1] == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": note}, image],
    }
    assert to_chat_messages(None, rendered)[1]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": image["image_url"], "detail": "low"},
    }


def test_render_transcript_replays_a_kept_exchange_verbatim() -> None:
    said = {"type": "message", "role": "assistant", "id": item_id("msg", "resp_a", 0, 0)}
    call = {
        "type": "function_call",
        "id": item_id("fc", "resp_a", 0, 1),
        "call_id": "c1",
        "name": "get_weather",
        "arguments": '{"city": "Oslo"}',
    }
    items = [
        {"type": "message", "role": "user", "content": "hi"},
        {**said, "content": [{"type": "output_text", "text": "Checking.\n\nOn it."}]},
        call,
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    ]
    exchange = [
        {"type": "message", "role": "assistant", "content": '{"type":"plan","steps":["Look"]}'},
        {"type": "message", "role": "user", "content": "[antwort] Plan noted. …"},
        {"type": "message", "role": "assistant", "content": '{"type":"reply","more":true,…}'},
        {"type": "message", "role": "user", "content": "[antwort] Go on."},
        {"type": "message", "role": "assistant", "content": '{"type":"tool_request",…}'},
    ]

    rendered = render_transcript(items, {turn_tag_of("resp_a", 0): exchange})

    assert rendered == [
        items[0],
        *exchange,
        {"type": "message", "role": "user", "content": f"{RESULT_PREFIX}get_weather (c1):\nsunny"},
    ]


def test_step_title_is_derived_from_tool_and_arguments() -> None:
    assert step_title("calculator", '{"expression": "6*7"}') == "calculator: expression=6*7"
    assert step_title("clock", "{}") == "clock"
    assert step_title("clock", "not json") == "clock"
    assert step_title("echo", json.dumps({"note": "x" * 200})) == "echo: note=" + "x" * 39 + "…"
    many = step_title("echo", json.dumps({f"k{i}": "v" * 30 for i in range(5)}))
    assert len(many) == 80 and many.endswith("…")


# -- the wrapper --------------------------------------------------------------------------------


def test_answer_format_holds_a_final_reply_to_its_schema() -> None:
    manifest = build_manifest(model_request())
    forecast = AnswerFormat.of(FORECAST_FORMAT)
    assert forecast is not None and forecast.name == "Forecast"

    def message(text: str, answer_format: AnswerFormat | None = forecast) -> Any:
        return parse_directive(text, manifest, must_plan=False, answer_format=answer_format).message

    def problem(text: str, answer_format: AnswerFormat | None = forecast) -> str:
        with pytest.raises(ProtocolViolation) as caught:
            message(text, answer_format)
        return caught.value.message

    oslo = '{"city": "Oslo", "summary": "wet"}'
    # The value itself, or the same as a string (fenced too): the answer's text is the JSON.
    assert message('{"type": "reply", "message": ' + oslo + "}") == oslo
    assert message(json.dumps({"type": "reply", "message": oslo})) == oslo
    assert message(json.dumps({"type": "reply", "message": f"```json\n{oslo}\n```"})) == oslo
    assert problem('{"type": "reply", "message": {"city": 5, "summary": "wet"}}') == (
        "the \"message\" of your reply does not match the answer format at 'city': "
        "5 is not of type 'string'"
    )
    assert "'summary' is a required property" in problem(
        '{"type": "reply", "message": {"city": "Oslo"}}'
    )
    assert problem('{"type": "reply", "message": "It rains."}').startswith(
        'the "message" of your reply is not JSON ('
    )
    infinite = json.dumps({"type": "reply", "message": '{"city": "Oslo", "summary": Infinity}'})
    assert problem(infinite) == (
        'the "message" of your reply is not JSON (Infinity is not JSON): the answer format asks '
        "for a JSON value that matches its schema"
    )
    # Interim messages are text; json_object asks for an object; no format, no JSON values.
    assert message('{"type": "reply", "message": "Looking.", "more": true}') == "Looking."
    assert problem('{"type": "reply", "message": {"a": 1}, "more": true}') == (
        'the "message" of a "reply" must be a string'
    )
    json_object = AnswerFormat.of({"type": "json_object"})
    assert message('{"type": "reply", "message": {"a": 1}}', json_object) == '{"a": 1}'
    assert "is not of type 'object'" in problem('{"type": "reply", "message": [1]}', json_object)
    assert problem('{"type": "reply", "message": {"a": 1}}', None) == (
        'the "message" of a "reply" must be a string'
    )
    assert AnswerFormat.of({"type": "text"}) is None and AnswerFormat.of(None) is None


def test_wrapper_shows_only_the_formatted_answer_and_repairs_a_mismatch() -> None:
    model = ScriptedModel(
        '{"type": "plan", "steps": ["Answer"], "message": "Let me see."}',
        '{"type": "reply", "message": "Still looking.", "more": true}',
        '{"type": "reply", "message": {"city": 5, "summary": "wet"}}',
        '{"type": "reply", "message": {"city": "Oslo", "summary": "wet"}}',
    )
    request = model_request()
    request.params["response_format"] = FORECAST_FORMAT
    chunks = run(JsonToolProtocol(model, needs_plan=True), request)

    texts = [c.text for c in chunks if isinstance(c, TextDelta)]
    assert texts == ['{"city": "Oslo", "summary": "wet"}']
    assert chunks[-1] == Finish(reason="stop")
    # The model server is not given the format (the protocol's JSON is its answer), the prompt is.
    assert all("response_format" not in r.params for r in model.requests)
    instructions = model.requests[0].instructions or ""
    assert '# Answer format\nThe "message" of your final "reply" must be JSON' in instructions
    assert f"<format>\n{json.dumps(FORECAST, indent=1)}\n</format>" in instructions
    assert instructions.index("# Answer format") < instructions.index("# Instructions")
    repair = model.requests[3].items[-1]["content"]
    assert "does not match the answer format at 'city': 5 is not of type 'string'" in repair


def test_wrapper_takes_the_last_interim_reply_as_the_formatted_answer() -> None:
    more = '{"type": "reply", "message": "Working.", "more": true}'
    model = ScriptedModel(*[more] * 5, '{"type": "reply", "message": {"a": 1}, "more": true}')
    request = model_request()
    request.params["response_format"] = {"type": "json_object"}
    chunks = run(JsonToolProtocol(model, needs_plan=False), request)
    # The fifth interim reply is taken as final, so it is held to the format and repaired.
    assert "is not JSON" in model.requests[5].items[-1]["content"]
    assert [c.text for c in chunks if isinstance(c, TextDelta)] == ['{"a": 1}']


def test_wrapper_sends_no_native_tools_and_a_manifest_each_call() -> None:
    model = ScriptedModel(
        '{"type": "plan", "steps": ["Check the weather"]}',
        '{"type": "tool_request", "step_title": "Check the weather", "message": "Checking.",'
        ' "tool": {"name": "get_weather", "args": {"city": "Oslo"}}}',
    )
    chunks = run(JsonToolProtocol(model, needs_plan=True), model_request(WEATHER))

    assert [r.tools for r in model.requests] == [(), ()]
    first, second = model.requests
    assert first.instructions is not None and first.instructions.startswith(PROTOCOL_HEADER)
    assert '"name": "get_weather"' in first.instructions
    assert first.instructions.endswith("# Instructions\nBe brief.")
    assert 'must be a "plan"' in first.instructions
    assert 'must be a "plan"' not in (second.instructions or "")
    assert [m["role"] for m in second.items] == ["user", "assistant", "user"]
    assert second.items[2]["content"].startswith("[antwort] Plan noted.")
    assert chunks[:3] == [
        PlanUpdate(steps=("Check the weather",)),
        TextDelta(text="Checking."),
        ToolCallDelta(
            index=0, name="get_weather", arguments='{"city": "Oslo"}', title="Check the weather"
        ),
    ]
    # The turn as the model wrote it, for later turns to replay (no repair in it).
    tool_request = {"type": "message", "role": "assistant", "content": model.said[1]}
    assert chunks[3] == Exchange(messages=(*second.items[1:], tool_request))
    assert isinstance(chunks[4], UsageReport)
    assert chunks[5] == Finish(reason="tool_calls")


def test_wrapper_repairs_once_telling_the_model_what_was_wrong() -> None:
    model = ScriptedModel(
        '{"type": "plan"',
        '{"type": "plan", "steps": ["Answer"]}',
        '{"type": "reply", "message": "Hi!"}',
    )
    chunks = run(JsonToolProtocol(model, needs_plan=True), model_request())

    assert len(model.requests) == 3
    repair = model.requests[1].items
    assert repair[-2] == {"type": "message", "role": "assistant", "content": '{"type": "plan"'}
    assert repair[-1]["content"].startswith(
        "[antwort] Your last answer broke the protocol: your answer is not valid JSON ("
    )
    assert TextDelta(text="Hi!") in chunks and chunks[-1] == Finish(reason="stop")


def test_wrapper_fails_after_a_second_broken_answer() -> None:
    model = ScriptedModel('{"type": "plan"', '{"type": "tool_request", "tool": {"name": "nope"}}')
    with pytest.raises(ModelBehaviorError) as caught:
        run(JsonToolProtocol(model, needs_plan=False), model_request(WEATHER))
    message = caught.value.message
    assert message.startswith("The model did not follow the JSON tool protocol")
    assert "First answer: your answer is not valid JSON" in message
    assert "Second answer: there is no tool named 'nope'; the tools are: get_weather." in message


def test_wrapper_refuses_a_second_plan_and_ends_on_cancel() -> None:
    model = ScriptedModel(
        '{"type": "plan", "steps": ["a"]}',
        '{"type": "plan", "steps": ["b"]}',
        '{"type": "reply", "message": "Working.", "more": true}',
        '{"type": "cancel", "message": "Cannot do that."}',
    )
    chunks = run(JsonToolProtocol(model, needs_plan=True), model_request())
    assert "you already made a plan" in model.requests[2].items[-1]["content"]
    texts = [c.text for c in chunks if isinstance(c, TextDelta)]
    assert texts == ["Working.", "\n\nCannot do that."]
    assert chunks[-1] == Finish(reason="cancelled")


def test_protocol_comes_from_metadata_then_settings(make_settings: Callable[..., Settings]) -> None:
    def response(model: str, metadata: dict[str, str]) -> ResponseObject:
        return ResponseObject(
            id="resp_1", created_at=0, status="queued", model=model, metadata=metadata
        )

    settings = make_settings(tool_protocols="small-llm=json, big-llm=native")
    assert protocol_of(settings, response("small-llm", {})) == "json"
    assert protocol_of(settings, response("big-llm", {})) == "native"
    assert protocol_of(settings, response("big-llm", JSON_MODE)) == "json"
    assert protocol_of(make_settings(tool_protocols="*=json"), response("any", {})) == "json"
    assert protocol_of(make_settings(), response("any", {})) == "native"
    with pytest.raises(ValueError, match="model=native"):
        make_settings(tool_protocols="small-llm=xml")
    with pytest.raises(InvalidRequestError) as caught:
        parse_request({"model": "m", "metadata": {"antwort_tool_protocol": "xml"}})
    assert caught.value.param == "metadata"


# -- the simulator in JSON mode -----------------------------------------------------------------


def sim_text(messages: list[dict[str, Any]]) -> str:
    plan = plan_answer({"messages": messages}, SimConfig())
    assert isinstance(plan, AnswerPlan)
    return "".join(plan.content)


def sim_conversation(text: str, *tools: dict[str, Any]) -> list[dict[str, Any]]:
    request = model_request(*tools, text=text)
    from app.providers.json_protocol import system_prompt

    system = system_prompt(build_manifest(request), None, needs_plan=True)
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


def test_simulator_plans_calls_named_tools_then_replies_with_results() -> None:
    messages = sim_conversation("weather please: get_weather city=Oslo", WEATHER)
    plan = json.loads(sim_text(messages))
    assert plan == {"type": "plan", "steps": ["Run get_weather", "Write the answer"]}
    messages += [
        {"role": "assistant", "content": json.dumps(plan)},
        {"role": "user", "content": "[antwort] Plan noted."},
    ]
    call = json.loads(sim_text(messages))
    assert call == {
        "type": "tool_request",
        "step_title": "Run get_weather",
        "tool": {"name": "get_weather", "args": {"city": "Oslo"}},
    }
    messages += [
        {"role": "assistant", "content": json.dumps(call)},
        {"role": "user", "content": f"{RESULT_PREFIX}get_weather (c1):\nsunny"},
    ]
    assert json.loads(sim_text(messages)) == {"type": "reply", "message": "Tool results: sunny"}
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}
    note = {"type": "text", "text": f"{RESULT_PREFIX}get_weather (c1):\nsunny map"}
    messages[-1] = {"role": "user", "content": [note, image]}  # a result with an image
    reply = {"type": "reply", "message": "Tool results: sunny map"}
    assert json.loads(sim_text(messages)) == reply
    native = [{"role": "user", "content": "get_weather city=Oslo"}]
    assert "Simulated answer" in sim_text(native)  # without the protocol: the old rules


def test_simulator_makes_scripted_mistakes_once_per_listing() -> None:
    messages = sim_conversation("[json_fault=bad_json,bad_json] hi")
    first = sim_text(messages)
    assert first.startswith('{"type": "plan"') and "sim-fault" in first
    messages += [
        {"role": "assistant", "content": first},
        {"role": "user", "content": "[antwort] Your last answer broke the protocol: ..."},
    ]
    assert "sim-fault" in sim_text(messages)
    once = sim_conversation("[json_fault=unknown_tool] get_weather", WEATHER)
    once += [
        {"role": "assistant", "content": '{"type": "plan", "steps": ["x"]}'},
        {"role": "user", "content": "[antwort] Plan noted."},
    ]
    wrong = json.loads(sim_text(once))
    assert wrong["tool"]["name"] == "sim_fault_tool"
    once += [
        {"role": "assistant", "content": json.dumps(wrong)},
        {"role": "user", "content": "[antwort] Your last answer broke the protocol: ..."},
    ]
    assert json.loads(sim_text(once))["tool"]["name"] == "get_weather"


# -- whole turns through the simulator ------------------------------------------------------------


_PROVIDERS: list[ChatCompletionsProvider] = []


@pytest.fixture(autouse=True)
def _close_providers() -> Iterator[None]:
    yield
    while _PROVIDERS:  # their pooled keep-alive connections to the simulator
        _PROVIDERS.pop().close()


def start(
    store: ResponseStore, settings: Settings, prompt: str, **body: Any
) -> tuple[str, RunDeps]:
    body = {"input": prompt, "metadata": JSON_MODE, "background": True, **body}
    response, _ = create_response(store, RecordingDispatcher(), settings, body)
    provider = ChatCompletionsProvider(base_url=str(settings.llm_base_url), max_retries=0)
    _PROVIDERS.append(provider)
    return response.id, RunDeps(store=store, provider=provider, settings=settings)


def events(store: ResponseStore, rid: str) -> list[dict[str, Any]]:
    return [json.loads(e.data) for e in store.events_after(rid, -1)]


def test_turn_on_json_protocol_pauses_on_a_call_with_progress_events(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    rid, deps = start(
        store, settings, "get_weather city=Oslo", tools=[WEATHER], include=["antwort:progress"]
    )
    assert advance_response(deps, rid, 0) == "completed"
    [call] = store.get(rid).response.output
    assert (call["name"], json.loads(call["arguments"])) == ("get_weather", {"city": "Oslo"})
    vendor = [e for e in events(store, rid) if e["type"].startswith("antwort:")]
    assert vendor[0] == {
        "type": "antwort:plan",
        "steps": ["Run get_weather", "Write the answer"],
        "sequence_number": vendor[0]["sequence_number"],
    }
    assert vendor[1]["type"] == "antwort:step.started"
    assert (vendor[1]["title"], vendor[1]["call_id"]) == ("Run get_weather", call["call_id"])
    assert store.get(rid).extra["plan"] == ["Run get_weather", "Write the answer"]


def test_later_turns_are_reminded_of_the_plan() -> None:
    model = ScriptedModel('{"type": "reply", "message": "Done."}')
    run(JsonToolProtocol(model, needs_plan=False, plan=["Look", "Answer"]), model_request())
    instructions = model.requests[0].instructions or ""
    assert "Your plan, made earlier (the results so far follow below):\n1. Look\n2. Answer" in (
        instructions
    )
    assert 'must be a "plan"' not in instructions


def test_set_extra_does_not_bring_back_a_deleted_response(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    rid, _ = start(store, make_settings(), "hi")
    store.set_extra(rid, {"plan": ["a"]})
    assert store.get(rid).extra == {"plan": ["a"]}
    store.delete(rid)
    store.set_extra(rid, {"plan": ["b"]})
    assert not store.redis.exists(store.keys.record(rid))


def test_turn_without_include_emits_only_standard_events(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    rid, deps = start(store, settings, "get_weather city=Oslo", tools=[WEATHER])
    advance_response(deps, rid, 0)
    assert not [e for e in events(store, rid) if not e["type"].startswith(("response.", "error"))]


def test_cancel_directive_ends_the_response_cancelled_with_its_message(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    rid, deps = start(store, settings, "[json_fault=cancel] get_weather", tools=[WEATHER])
    assert advance_response(deps, rid, 0) == "cancelled"
    response = store.get(rid).response
    assert response.status == "cancelled"
    assert response.output[0]["content"][0]["text"] == "The simulator gives up, as scripted."


def test_twice_broken_answers_fail_the_response_with_the_reason(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    rid, deps = start(store, settings, "[json_fault=bad_schema,bad_schema] hi")
    assert advance_response(deps, rid, 0) == "failed"
    error = store.get(rid).response.error
    assert error is not None and "did not follow the JSON tool protocol" in error.message
    assert 'a "tool_request" needs "tool"' in error.message


class OneCall:
    """A native model that calls one tool."""

    def stream(self, request: ModelRequest) -> Iterator[Chunk]:
        yield ToolCallDelta(index=0, call_id="call_x", name="nope", arguments='{"a": 1}')
        yield Finish(reason="tool_calls")


def test_native_rejected_call_is_a_failed_step(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    body = {"input": "hi", "tools": [WEATHER], "include": ["antwort:progress"]}
    response, _ = create_response(store, RecordingDispatcher(), settings, body)
    deps = RunDeps(
        store=store, provider=OneCall(), settings=settings, dispatcher=RecordingDispatcher()
    )
    assert advance_response(deps, response.id, 0) == "continuing"
    vendor = [e for e in events(store, response.id) if e["type"].startswith("antwort:")]
    assert [(e["type"], e.get("title"), e.get("status")) for e in vendor] == [
        ("antwort:step.started", "nope: a=1", None),
        ("antwort:step.completed", None, "failed"),
    ]
    output = store.get(response.id).response.output
    assert vendor[1]["item_id"] == output[1]["id"] and vendor[1]["output_index"] == 1


class Recording:
    """A model on the JSON protocol that plans, then replies; it keeps what it was sent."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest) -> Iterator[Chunk]:
        self.requests.append(request)
        directive = {"type": "plan", "steps": ["a"]} if len(self.requests) == 1 else {
            "type": "reply", "message": "ok"}  # fmt: skip
        yield TextDelta(text=json.dumps(directive))
        yield Finish(reason="stop")


def test_turn_lists_only_the_tools_allowed_tools_lets_run(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    allowed = {
        "type": "allowed_tools",
        "mode": "auto",
        "tools": [{"type": "function", "name": "clock"}],
    }
    body = {"input": "hi", "metadata": JSON_MODE, "tools": [WEATHER, CLOCK], "tool_choice": allowed}
    settings = make_settings()
    response, _ = create_response(store, RecordingDispatcher(), settings, body)
    model = Recording()

    assert (
        advance_response(RunDeps(store=store, provider=model, settings=settings), response.id, 0)
        == "completed"
    )

    system = model.requests[0].instructions or ""
    assert '"clock"' in system and '"get_weather"' not in system


def test_text_format_on_json_protocol_makes_the_answer_the_schema_s_json(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    forecast = {"format": {"type": "json_schema", "name": "Forecast", "schema": FORECAST}}
    rid, deps = start(
        store, make_settings(), "[json_fault=bad_format] city=Oslo summary=wet", text=forecast
    )
    assert advance_response(deps, rid, 0) == "completed"
    response = store.get(rid).response
    [message] = response.output
    assert json.loads(message["content"][0]["text"]) == {"city": "Oslo", "summary": "wet"}


def test_a_twice_unformatted_answer_fails_the_response_with_the_reason(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    json_object = {"format": {"type": "json_object"}}
    rid, deps = start(
        store, make_settings(), "[json_fault=bad_format,bad_format] hi", text=json_object
    )
    assert advance_response(deps, rid, 0) == "failed"
    error = store.get(rid).response.error
    assert error is not None and 'the "message" of your reply is not JSON' in error.message


def test_a_stateless_continuation_after_a_client_call_is_not_a_new_request(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """A client that sends the whole history (the Agents SDK's default) continues after its
    function's result: the request was planned for already, so no second plan is asked for."""
    history = [
        {"type": "message", "role": "user", "content": "get_weather city=Oslo"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "rain"},
    ]
    rid, deps = start(store, make_settings(), "", input=history, tools=[WEATHER])
    assert advance_response(deps, rid, 0) == "completed"
    [message] = store.get(rid).response.output
    assert message["content"][0]["text"] == "Tool results: rain"
    # A new question after an answered one is a new request: it is planned for.
    history += [
        {"type": "message", "role": "assistant", "content": "It rains."},
        {"type": "message", "role": "user", "content": "get_weather city=Bergen"},
    ]
    rid, deps = start(store, make_settings(), "", input=history, tools=[WEATHER])
    assert advance_response(deps, rid, 0) == "completed"
    assert store.get(rid).extra["plan"] == ["Run get_weather", "Write the answer"]
