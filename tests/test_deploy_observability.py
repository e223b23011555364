"""deploy/: the Prometheus config, alerts and Grafana dashboard read the metrics the fleet has."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY

import app.telemetry.metrics  # noqa: F401 - registers the fleet's metrics

_NAME = re.compile(r"\bantwort_[a-z_]+")
_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


def _known() -> set[str]:
    names = {sample_family.name for sample_family in REGISTRY.collect()}
    return names | {"antwort_queue_depth", "antwort_live_workers"}  # read from Redis at scrape


def _base(name: str) -> str:
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _exprs(repo_root: Path) -> list[str]:
    dashboard = json.loads((repo_root / "deploy/grafana/dashboards/antwort.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    alerts = yaml.safe_load((repo_root / "deploy/alerts.yml").read_text())
    return exprs + [rule["expr"] for group in alerts["groups"] for rule in group["rules"]]


def test_dashboard_and_alerts_query_only_metrics_the_fleet_exports(repo_root: Path) -> None:
    used = {_base(name) for expr in _exprs(repo_root) for name in _NAME.findall(expr)}
    assert used, "no antwort_ metric in the dashboard"
    assert used - _known() == set()


def test_prometheus_scrapes_the_gateway_and_every_worker_service(repo_root: Path) -> None:
    config = yaml.safe_load((repo_root / "deploy/prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["antwort-gateway"]["static_configs"][0]["targets"] == ["gateway:8080"]
    [workers] = jobs["antwort-workers"]["dns_sd_configs"]
    compose = yaml.safe_load((repo_root / "compose.yaml").read_text())
    services = {name for name in compose["services"] if name.startswith("worker-")}
    assert set(workers["names"]) == services
    assert str(workers["port"]) == compose["x-antwort-env"]["ANTWORT_METRICS_PORT"]


def test_compose_observability_profile_adds_prometheus_and_grafana(repo_root: Path) -> None:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed")
    argv = [binary, "-f", "compose.yaml", "--profile", "observability", "config", "--services"]
    done = subprocess.run(argv, cwd=repo_root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert {"prometheus", "grafana"} <= set(done.stdout.split())
