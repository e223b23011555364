"""The supervisor of ``antwort up``: which children it plans to start."""

from __future__ import annotations

import shutil

import pytest
import redis

from app.config import Settings
from app.keys import Keys
from app.tenancy import KeyStore
from programs.supervisor import auth_notice, plan


def test_antwort_up_runs_the_fleet_without_a_sandbox_worker_when_bwrap_is_missing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = Settings(
        redis_url="redis://127.0.0.1:1/0",
        llm_base_url="http://127.0.0.1:1/v1",
        sandbox_bwrap="/nonexistent/bwrap",
    )
    names = [child.name for child in plan(settings, {}, "/tmp")]
    assert "worker[tools.sandbox]" not in names and "worker[inference]" in names
    assert "apt-get install bubblewrap" in capsys.readouterr().err
    if shutil.which("bwrap"):
        names = [
            child.name
            for child in plan(settings.model_copy(update={"sandbox_bwrap": None}), {}, "/tmp")
        ]
        assert "worker[tools.sandbox]" in names


def test_antwort_up_says_when_auth_is_off(redis_url: str, key_prefix: str) -> None:
    settings = Settings(key_prefix=key_prefix)
    assert "AUTH IS OFF" in auth_notice(settings, redis_url)
    assert f"ANTWORT_REDIS_URL={redis_url}" in auth_notice(settings, redis_url)

    on = auth_notice(settings.model_copy(update={"api_keys": "a:k1,a:k2,b:k3"}), redis_url)
    assert on.startswith("antwort: auth on — 2 tenant(s)")
    client = redis.Redis.from_url(redis_url)
    KeyStore(client, Keys(key_prefix)).create("c")
    assert "auth on — 1 tenant(s)" in auth_notice(settings, redis_url)
    client.close()


def test_antwort_up_keeps_the_generated_key_in_its_state_directory_not_in_redis() -> None:
    settings = Settings(redis_url="redis://127.0.0.1:1/0", llm_base_url="http://127.0.0.1:1/v1")
    env: dict[str, str] = {}

    plan(settings, env, "/state")

    assert env["ANTWORT_SECRETS_FILE"] == "/state/secrets.key"
    configured: dict[str, str] = {}
    plan(settings.model_copy(update={"secrets_file": "/elsewhere.key"}), configured, "/state")
    assert "ANTWORT_SECRETS_FILE" not in configured  # the operator's own stays
