"""``GET /openapi.json``: DESIGN.md's contract lists it; issue 18 brings it."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient


@pytest.mark.xfail(reason="not served yet: the OpenAPI document is issue 18's", strict=True)
def test_openapi_document_describes_the_responses_routes(web: FlaskClient) -> None:
    answer = web.get("/openapi.json")

    assert answer.status_code == 200
    document = answer.json
    assert document is not None and document["openapi"].startswith("3.")
    for path in ("/v1/responses", "/v1/responses/{response_id}", "/v1/models"):
        assert path in document["paths"]
