"""The gateway's request metric labels a method a client made up as ``other``."""

from __future__ import annotations

from flask.testing import FlaskClient
from prometheus_client import REGISTRY

from tests.gateway.conftest import error_of

METRIC = "antwort_http_request_duration_seconds_count"


def test_a_made_up_method_is_counted_as_other(web: FlaskClient) -> None:
    labels = {"route": "unmatched", "status": "405"}
    before = REGISTRY.get_sample_value(METRIC, {"method": "other", **labels}) or 0.0

    for method in ("BREW", "BREW2", "PROPFIND"):
        error_of(web.open("/v1/responses", method=method), 405)

    assert REGISTRY.get_sample_value(METRIC, {"method": "other", **labels}) == before + 3
    assert REGISTRY.get_sample_value(METRIC, {"method": "BREW", **labels}) is None
