"""``cancel_response`` with every kind of call item in flight (issue 17, section 6)."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import Response

from app.errors import NotFoundError
from app.responses import cancel_response
from app.store import ResponseStore
from tests.support.dispatch import RecordingDispatcher
from tests.support.responses import stored_response

IN_FLIGHT: dict[str, dict[str, Any]] = {
    "function_call": {
        "id": "fc_1",
        "type": "function_call",
        "status": "completed",
        "call_id": "call_fn",
        "name": "get_weather",
        "arguments": "{}",
    },
    "internal": {  # an internal tool's call before its function_call_output
        "id": "fc_2",
        "type": "function_call",
        "status": "completed",
        "call_id": "call_calc",
        "name": "calculator",
        "arguments": '{"expression": "6*7"}',
    },
    "mcp_call": {
        "id": "mcp_1",
        "type": "mcp_call",
        "status": "in_progress",
        "server_label": "local",
        "name": "slow",
        "arguments": '{"seconds": 30}',
        "output": None,
        "error": None,
    },
    "mcp_approval_request": {
        "id": "mcpr_1",
        "type": "mcp_approval_request",
        "server_label": "local",
        "name": "echo",
        "arguments": "{}",
    },
    "code_interpreter_call": {
        "id": "ci_1",
        "type": "code_interpreter_call",
        "status": "interpreting",
        "code": "import time; time.sleep(30)",
        "container_id": "cntr_1",
        "outputs": None,
    },
    "custom_tool_call": {
        "id": "ctc_1",
        "type": "custom_tool_call",
        "call_id": "call_custom",
        "name": "math",
        "input": "6*7",
        "namespace": "calc",
    },
    "apply_patch_call": {
        "id": "apc_1",
        "type": "apply_patch_call",
        "status": "completed",
        "call_id": "call_patch",
        "operation": {"type": "delete_file", "path": "a.txt"},
    },
    "shell_call": {
        "id": "sh_1",
        "type": "shell_call",
        "status": "completed",
        "call_id": "call_shell",
        "action": {"commands": ["ls"]},
    },
    "local_shell_call": {
        "id": "lsh_1",
        "type": "local_shell_call",
        "status": "completed",
        "call_id": "call_local",
        "action": {"type": "exec", "command": ["ls"], "env": {}},
    },
    "computer_call": {
        "id": "cu_1",
        "type": "computer_call",
        "status": "completed",
        "call_id": "call_screen",
        "pending_safety_checks": [],
        "action": {"type": "screenshot"},
    },
}
"""A call item of each kind as it stands while its call runs, by name."""

EXPECTED_CALL_ID = {
    "function_call": "call_fn",
    "internal": "call_calc",
    "mcp_call": "mcp_1",
    "mcp_approval_request": "mcpr_1",
    "code_interpreter_call": "ci_1",
    "custom_tool_call": "call_custom",
    "apply_patch_call": "call_patch",
    "shell_call": "call_shell",
    "local_shell_call": "call_local",
    "computer_call": "call_screen",
}


@pytest.mark.parametrize("kind", sorted(IN_FLIGHT))
def test_cancel_response_with_a_call_in_flight(
    store: ResponseStore, kind: str, dispatcher: RecordingDispatcher
) -> None:
    item = IN_FLIGHT[kind]
    Response.model_validate(  # the item is as the SDK knows it
        {**_response_fields(), "output": [item]}
    )
    response = stored_response(store, background=True, output=[item])

    cancelled = cancel_response(store, dispatcher, response.id)

    assert cancelled.status == "cancelled"
    assert store.get(response.id).response.status == "cancelled"
    assert dispatcher.revoked_calls == [EXPECTED_CALL_ID[kind]]


def test_cancel_response_of_a_paused_response_is_unchanged(
    store: ResponseStore, dispatcher: RecordingDispatcher
) -> None:
    response = stored_response(
        store, background=True, status="requires_action", output=[IN_FLIGHT["function_call"]]
    )

    again = cancel_response(store, dispatcher, response.id)

    assert again.status == "requires_action"
    assert dispatcher.revoked == []


@pytest.fixture
def dispatcher() -> RecordingDispatcher:
    return RecordingDispatcher()


def _response_fields() -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": "m",
        "tools": [],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
    }


def test_cancel_response_of_a_finished_unstored_response_is_not_found(
    store: ResponseStore, dispatcher: RecordingDispatcher
) -> None:
    """Gone for HTTP clients, as ``retrieve`` has it: a cancel does not hand back its output
    (a response that is not a background one: that is a 404 before it is a 400)."""
    response = stored_response(store, store=False, status="completed")

    with pytest.raises(NotFoundError) as caught:
        cancel_response(store, dispatcher, response.id)

    assert caught.value.param == "response_id"
    assert dispatcher.revoked == []


def test_cancel_response_of_a_finished_unstored_background_response_is_unchanged(
    store: ResponseStore, dispatcher: RecordingDispatcher
) -> None:
    """A background ``store: false`` response is polled for its answer while it lives, so a
    cancel after its end gets it as ``retrieve`` does."""
    response = stored_response(store, background=True, store=False, status="completed")

    assert cancel_response(store, dispatcher, response.id).status == "completed"


def test_cancel_response_of_a_running_unstored_response_cancels_it(
    store: ResponseStore, dispatcher: RecordingDispatcher
) -> None:
    response = stored_response(store, background=True, store=False)

    assert cancel_response(store, dispatcher, response.id).status == "cancelled"
    assert store.get(response.id).response.status == "cancelled"
