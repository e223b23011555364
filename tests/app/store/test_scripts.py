"""Every Lua file is run through a typed call, and every call names what its file declares."""

import dataclasses
import importlib
import pkgutil
import re
from importlib import resources
from types import ModuleType
from typing import Any

import pytest
import redis

import app.lease
import app.store
from app.protocol.response import ResponseStatus
from app.store.events import END_LINE
from app.store.scripts import (
    LuaScript,
    ScriptOperandsError,
    declared_operands,
    key,
    lua_source,
)

_LUA = resources.files("app.store").joinpath("lua")


def _modules() -> list[ModuleType]:
    names = [f"app.store.{m.name}" for m in pkgutil.iter_modules(app.store.__path__)]
    return [app.lease, app.store, *(importlib.import_module(name) for name in names)]


def _declared_scripts() -> list[LuaScript[Any]]:
    return [
        value
        for module in _modules()
        for value in vars(module).values()
        if isinstance(value, LuaScript)
    ]


def test_every_lua_file_is_run_by_a_script_and_every_include_is_used() -> None:
    scripts = {script.name for script in _declared_scripts()}
    files = {path.name[:-4] for path in _LUA.iterdir() if path.name.endswith(".lua")}
    includes = {p.name[:-4] for p in _LUA.joinpath("include").iterdir() if p.name.endswith(".lua")}

    assert scripts == files
    used = {
        name
        for script in scripts
        for name in re.findall(
            r"^--- @include (\w+)$", _LUA.joinpath(f"{script}.lua").read_text(), re.M
        )
    }
    assert used == includes


def test_every_script_loads_on_redis_with_its_operands_named_as_its_call(
    redis_client: redis.Redis,
) -> None:
    for script in _declared_scripts():
        bound = script.bind(redis_client)  # checks the declared operands against the call
        assert bound is not None
        assert "@include" not in script.source
        assert redis_client.script_load(script.source)  # compiles


def test_a_script_whose_call_names_other_operands_is_refused() -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class WrongCall:
        lease: str = key()
        watch: str = key()
        lease_ms: int  # renew_lease.lua takes the token first
        token: str
        deadline: float
        member: str

    with pytest.raises(ScriptOperandsError, match="renew_lease"):
        _ = LuaScript("renew_lease", WrongCall).source


def test_includes_are_expanded_once_per_script() -> None:
    source = lua_source("write")

    assert source.count("local function counted_list(") == 1
    assert source.count("local function append(") == 1


def test_no_script_names_a_status_or_the_end_line() -> None:
    for path in [*_LUA.iterdir(), *_LUA.joinpath("include").iterdir()]:
        if not path.name.endswith(".lua"):
            continue
        source = path.read_text()
        for status in ResponseStatus:
            assert f"'{status}'" not in source, (path.name, status)
        assert END_LINE not in source, path.name


def test_operands_are_numbered_in_order_and_lists_follow_the_last_argument() -> None:
    assert declared_operands(
        "local a = KEYS[1]\nlocal b = ARGV[1]\nlocal c, at = counted_list(2)\n"
        "local d = counted_list(at)\n"
    ) == [("a", "KEYS"), ("b", "ARGV"), ("c", "list"), ("d", "list")]
    for wrong in (
        "local a = KEYS[2]\n",
        "local b = ARGV[1]\nlocal c = counted_list(3)\n",
        "local c, at = counted_list(1)\nlocal d = counted_list(2)\n",
    ):
        with pytest.raises(ScriptOperandsError):
            declared_operands(wrong)
