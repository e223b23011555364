"""The gateway's side of a job (``/v1/responses/compact``, ``/v1/responses/input_tokens``)."""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from gateway import jobs


def test_a_job_s_request_holds_none_of_its_decoded_body_while_it_waits(
    web: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway waits for a job's answer, minutes maybe (a compaction's model call), holding
    none of its request's items: they are in the job. Before, the body's name outlived the
    job's start."""
    held: list[int] = []

    def answered_once_looked(*_: Any, **__: Any) -> dict[str, Any]:
        held.append(
            sum(
                isinstance(o, dict) and "input" in o and o.get("model") == "probe-job-body"
                for o in gc.get_objects()
            )
        )
        return {"object": "response.input_tokens", "input_tokens": 1}

    monkeypatch.setattr(jobs, "wait_for_answer", answered_once_looked)
    body = json.dumps({"model": "probe-job-body", "input": [{"role": "user", "content": "hi"}]})

    answer = web.post("/v1/responses/input_tokens", data=body, content_type="application/json")

    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert held == [0]
