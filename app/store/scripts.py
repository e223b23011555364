"""Lua scripts: one file each in ``app/store/lua/``, run through a typed call.

A script file opens with a comment saying what it does and returns, then names its operands in
order — ``local record = KEYS[1]`` …, ``local channel = ARGV[1]`` …, then any counted lists
(``local inputs, at = counted_list(15)``: a length, then the items). Its Python side is a frozen
dataclass with the same names in the same order: fields made with :func:`key` go to ``KEYS``,
the others to ``ARGV``, and fields made with :func:`counted` (tuples of strings) go last, each
as a counted list. :class:`LuaScript` checks the two against each other when it first reads the
file, so a renamed or reordered operand fails at once rather than in production.

``--- @include <name>`` pulls in ``lua/include/<name>.lua`` (local functions shared by several
scripts) at that line, once per script. Scripts run with redis-py's ``register_script``:
``EVALSHA``, and ``EVAL`` when the server does not know the script yet.
"""

from __future__ import annotations

import dataclasses
import re
from functools import cached_property
from importlib import resources
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import redis
from redis.cluster import ClusterPipeline

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    CallT = TypeVar("CallT", bound=DataclassInstance)
else:
    CallT = TypeVar("CallT")

_KIND = "lua_operand"
_INCLUDE = re.compile(r"^--- @include (\w+)$", re.MULTILINE)
_DECLARED = re.compile(
    r"^local (\w+)(?:, at)? = (?:(KEYS|ARGV)\[(\d+)\]|counted_list\((\d+|at)\))$", re.MULTILINE
)


def key() -> Any:
    """A call field that is one of the script's ``KEYS``."""
    return dataclasses.field(metadata={_KIND: "KEYS"})


def counted() -> Any:
    """A call field passed as a counted list at the end of ``ARGV`` (its length, its items)."""
    return dataclasses.field(metadata={_KIND: "list"})


class ScriptOperandsError(TypeError):
    """A script's declared operands differ from its call's fields."""


def lua_source(name: str) -> str:
    """The text of ``lua/<name>.lua`` with its includes expanded."""
    return _expand(_read(f"{name}.lua"), included=set())


def _read(path: str) -> str:
    return resources.files(__package__).joinpath("lua", path).read_text(encoding="utf-8")


def _expand(text: str, *, included: set[str]) -> str:
    def include(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in included:
            return ""
        included.add(name)
        return _expand(_read(f"include/{name}.lua"), included=included)

    return _INCLUDE.sub(include, text)


def declared_operands(source: str) -> list[tuple[str, str]]:
    """A script's named operands in order: (name, ``KEYS`` / ``ARGV`` / ``list``)."""
    declared: list[tuple[str, str]] = []
    for name, kind, index, list_start in _DECLARED.findall(source):
        if kind:
            expected = 1 + sum(1 for _, other in declared if other == kind)
            if int(index) != expected:
                raise ScriptOperandsError(f"{name} is {kind}[{index}], expected {expected}")
        elif any(other == "list" for _, other in declared):
            if list_start != "at":
                raise ScriptOperandsError(f"counted list {name} must start where the last ends")
        elif list_start != str(1 + sum(1 for _, other in declared if other == "ARGV")):
            raise ScriptOperandsError(f"counted list {name} must start after the last ARGV")
        declared.append((name, kind or "list"))
    return declared


class LuaScript(Generic[CallT]):
    """One script file and the dataclass that names its operands."""

    def __init__(self, name: str, call: type[CallT]):
        self.name = name
        self.call = call
        fields = dataclasses.fields(call)
        self._operands = [(f.name, f.metadata.get(_KIND, "ARGV")) for f in fields]
        self._keys = [name for name, kind in self._operands if kind == "KEYS"]
        self._args = [name for name, kind in self._operands if kind == "ARGV"]
        self._lists = [name for name, kind in self._operands if kind == "list"]

    @cached_property
    def source(self) -> str:
        """The script's text (includes expanded), checked against the call's fields.

        Raises:
            ScriptOperandsError: the file names other operands than the call's fields.
        """
        source = lua_source(self.name)
        declared = declared_operands(source)
        in_script_order = [
            *[o for o in declared if o[1] == "KEYS"],
            *[o for o in declared if o[1] == "ARGV"],
            *[o for o in declared if o[1] == "list"],
        ]
        in_call_order = [
            *[(n, "KEYS") for n in self._keys],
            *[(n, "ARGV") for n in self._args],
            *[(n, "list") for n in self._lists],
        ]
        if in_script_order != in_call_order:
            raise ScriptOperandsError(
                f"{self.name}.lua declares {in_script_order}; "
                f"{self.call.__name__} has {in_call_order}"
            )
        return source

    def bind(self, client: redis.Redis) -> BoundScript[CallT]:
        """The script ready to run on ``client``."""
        return BoundScript(self, client.register_script(self.source))

    def operands(self, call: CallT) -> tuple[list[Any], list[Any]]:
        """``KEYS`` and ``ARGV`` for ``call``."""
        keys = [getattr(call, name) for name in self._keys]
        args = [_arg(getattr(call, name)) for name in self._args]
        for name in self._lists:
            items: tuple[str, ...] = getattr(call, name)
            args.append(len(items))
            args.extend(items)
        return keys, args


class BoundScript(Generic[CallT]):
    """A :class:`LuaScript` registered with a client: call it with the script's call."""

    def __init__(self, script: LuaScript[CallT], registered: Any):
        self._script = script
        self._registered = registered

    def __call__(self, call: CallT, *, client: Any = None) -> Any:
        """Run the script (``EVALSHA``, falling back to ``EVAL``); its raw reply.

        ``client``: a pipeline to queue the script on instead (its reply comes with the
        pipeline's ``execute()``). A cluster's pipeline takes no script object (redis-py blocks
        ``evalsha`` on it): the script goes as a plain ``EVAL`` with its text, routed by its
        keys' slot (no ``NOSCRIPT`` to recover from inside a pipeline when a node restarted or
        a replica took over; the server caches the script by its digest all the same).
        """
        keys, args = self._script.operands(call)
        if isinstance(client, ClusterPipeline) or getattr(client, "is_cluster_pipeline", False):
            return client.execute_command("EVAL", self._script.source, len(keys), *keys, *args)
        return self._registered(keys=keys, args=args, client=client)


def _arg(value: Any) -> Any:
    """A scalar operand: flags as ``1``/``0``, absent values as ``""`` (str, int, float as is)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if value is None:
        return ""
    return value
