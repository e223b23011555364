from __future__ import annotations

import openai


def test_create_returns_completed_answer(client: openai.OpenAI) -> None:
    response = client.responses.create(model="antwort-sim", input="hello there")
    assert response.status == "completed"
    assert response.output_text.startswith("Simulated answer to: hello there")
