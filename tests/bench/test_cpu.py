"""``bench.cpu``'s account of what Redis did for the measured responses."""

from __future__ import annotations

from importlib import resources

import redis

from app.store.scripts import lua_source
from bench.cpu import RedisAccount, command_costs, script_names

SLOWLOG = ("slowlog-log-slower-than", "slowlog-max-len")


def test_script_names_are_the_shas_redis_knows_the_stores_scripts_by(
    redis_client: redis.Redis,
) -> None:
    names = script_names()

    files = [p.name for p in (resources.files("app.store") / "lua").iterdir()]
    assert sorted(names.values()) == sorted(f[:-4] for f in files if f.endswith(".lua"))
    for name in ("write", "emit", "load_turn"):
        registered = redis_client.register_script(lua_source(name))
        assert names[registered.sha] == name


def test_command_costs_count_calls_and_time_a_response_between_two_readings() -> None:
    before = {"cmdstat_get": {"calls": 10, "usec": 20}, "cmdstat_del": {"calls": 1, "usec": 1}}
    after = {
        "cmdstat_get": {"calls": 30, "usec": 60},
        "cmdstat_del": {"calls": 1, "usec": 1},  # not called while measuring: left out
        "cmdstat_xadd": {"calls": 40, "usec": 200},  # first called while measuring
    }

    assert command_costs(before, after, responses=10) == {
        "xadd": {"calls": 4.0, "usec": 20.0},
        "get": {"calls": 2.0, "usec": 4.0},
    }


def test_the_account_splits_scripts_and_puts_redis_settings_back(
    redis_client: redis.Redis,
) -> None:
    settings = {name: redis_client.config_get(name)[name] for name in SLOWLOG}
    script = redis_client.register_script("return 'bench.cpu test'")  # no other caller sends it
    script()  # loaded before: a first EVALSHA fails (NOSCRIPT), is logged, and is sent again
    account = RedisAccount(redis_client, with_scripts=True)

    account.start()
    for _ in range(4):
        redis_client.echo("bench.cpu test")
        script()
    account.stop()

    figures = account.figures(responses=2)
    assert figures["commands"]["echo"]["calls"] == 2.0
    assert figures["scripts"][script.sha]["calls"] == 2.0  # not one of the store's: its SHA
    assert figures["scripts"][script.sha]["usec"] > 0
    assert {name: redis_client.config_get(name)[name] for name in SLOWLOG} == settings
