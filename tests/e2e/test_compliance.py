"""The Open Responses compliance suite (llm-comply), run against the fleet."""

from __future__ import annotations

import warnings
from pathlib import Path

import llm_comply
import llm_comply.result as comply_result
from llm_comply import ComplianceConfig, SpecLoader
from llm_comply.tests import get_tests

from tests.e2e.conftest import Fleet

# Module attributes, not imported names: pytest would try to collect ``Test*`` classes.
FAILED = comply_result.TestStatus.FAILED
SKIPPED = comply_result.TestStatus.SKIPPED


def _describe(result: comply_result.TestResult) -> str:
    lines = [f"{result.id} ({result.name}): {result.status.value}"]
    lines += [f"  error: {error}" for error in result.errors]
    lines += [f"  warning: {warning}" for warning in result.warnings]
    if result.status is FAILED:
        lines.append(f"  request: {result.request!r:.500}")
        lines.append(f"  response: {result.response!r:.1500}")
    return "\n".join(lines)


def test_compliance_open_responses_suite_passes(fleet: Fleet) -> None:
    """The whole suite, through a gateway of the fleet that has no default model.

    The suite's ``error-handling`` test sends a request without ``model`` and expects a 400; a
    gateway with ``ANTWORT_DEFAULT_MODEL`` (the session's, and ``make run``'s) answers it with
    that model instead. So the suite talks to a second gateway process on the same Redis and
    workers, started with an empty default model.
    """
    with fleet.extra_gateway("gateway-no-default-model", ANTWORT_DEFAULT_MODEL="") as base_url:
        spec = Path(llm_comply.__file__).parent / "specs" / "openresponses.json"
        config = ComplianceConfig(base_url=f"{base_url}/v1", api_key="x", model="antwort-sim")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # jsonschema's, in llm-comply
            runner = llm_comply.TestRunner(
                config, get_tests("open-responses"), SpecLoader(str(spec))
            )
            suite = runner.run_all()

    report = "\n".join(_describe(result) for result in suite.results)
    failed = [r.id for r in suite.results if r.status is FAILED]
    assert failed == [], f"compliance failures: {failed}\n{report}"
    # The compaction tests are advisory: a 404 passes them with warnings. Ours must pass clean
    # (an output with a compaction item, an object naming it).
    compaction = {r.id: r for r in suite.results if r.id.startswith("compact-")}
    assert set(compaction) == {"compact-response", "compact-missing-model"}, report
    assert all(not r.warnings and not r.errors for r in compaction.values()), report
    skipped = {r.id for r in suite.results if r.status is SKIPPED}
    # Only the reasoning test skips, on the model's name alone (it wants o-series/gpt-5 names).
    assert skipped <= {"reasoning-summary"}, report
    assert suite.passed + len(skipped) >= suite.total, report
    assert {r.id for r in suite.results} >= {
        "basic-response",
        "streaming-response",
        "error-handling",
    }
