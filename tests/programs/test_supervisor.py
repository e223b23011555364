"""The supervisor of ``antwort up``: which children it plans to start."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import redis

from app.config import Settings
from app.fleet import make_redis
from app.keys import Keys
from app.tenancy import KeyStore
from programs.supervisor import auth_notice, embedded_redis_argv, free_port, plan
from tests.conftest import delete_prefix
from tests.support.cluster import LocalCluster


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


def test_antwort_up_reads_the_keys_of_a_cluster_store(
    redis_cluster: LocalCluster, redis_url: str, key_prefix: str
) -> None:
    # it read them with redis-py's from_url, which takes no cluster (or Sentinel) URL: antwort up
    # stopped the fleet it had just started
    settings = Settings(key_prefix=key_prefix, broker_url=redis_url)
    assert "AUTH IS OFF" in auth_notice(settings, redis_cluster.url)
    fleet = settings.model_copy(update={"redis_url": redis_cluster.url})
    with make_redis(fleet) as client:
        KeyStore(client, fleet.keys).create("c")
        try:
            assert "auth on — 1 tenant(s)" in auth_notice(settings, redis_cluster.url)
        finally:
            delete_prefix(client, key_prefix)


def test_antwort_up_shows_the_redis_url_without_its_password(
    redis_url: str, key_prefix: str
) -> None:
    user, password = f"antwort-test-{uuid.uuid4().hex[:8]}", "s3cret-pw"
    with redis.Redis.from_url(redis_url) as admin:
        admin.acl_setuser(
            user, enabled=True, passwords=[f"+{password}"], keys=["*"], commands=["+@all"]
        )
        try:
            url = redis_url.replace("://", f"://{user}:{password}@", 1)
            notice = auth_notice(Settings(key_prefix=key_prefix), url)
        finally:
            admin.acl_deluser(user)
    assert "AUTH IS OFF" in notice
    assert password not in notice and f"{user}:***@" in notice


def test_the_embedded_redis_frees_deleted_and_expired_values_outside_its_main_thread(
    tmp_path: Path,
) -> None:
    """A long conversation's expiry (or a ``DEL``) held Redis for everyone: 450,000 items 270 ms."""
    port = free_port()
    server = subprocess.Popen(embedded_redis_argv(port, str(tmp_path)), stdout=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port, decode_responses=True)
        for _ in range(100):
            with contextlib.suppress(redis.ConnectionError):
                client.ping()
                break
            time.sleep(0.05)
        found = client.config_get("lazyfree-lazy-*")
        assert {
            found[f"lazyfree-lazy-{name}"] for name in ("expire", "server-del", "user-del")
        } == {"yes"}
        client.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
