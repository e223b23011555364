"""Built-in internal tools that are safe to offer any model.

- ``calculator``: arithmetic on an AST whitelist (no names but constants, no attributes).
- ``unit_convert``: a value between units of one dimension (length, mass, time, volume, data,
  speed, energy, pressure, area, temperature).
- ``http_fetch``: GET a page from an operator's allowlist (``ANTWORT_FETCH_ALLOWED_HOSTS``),
  with redirects re-checked against it, a timeout, a size cap and text bodies only.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from app.config import Settings
from app.keepalive import KEEPALIVE_EXPIRY_SECONDS
from app.tools.base import ToolCall, ToolDefinition, ToolKind, ToolResult

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., float]] = {
    "sqrt": math.sqrt, "log": math.log, "exp": math.exp, "sin": math.sin, "cos": math.cos,
    "tan": math.tan, "abs": abs, "round": round, "min": min, "max": max,
}  # fmt: skip
_CONSTANTS = {"pi": math.pi, "e": math.e}
_MAX_EXPONENT = 10_000
_MAX_LENGTH = 500
_MAX_RESULT_BITS = 1 << 17
"""Largest integer result (about 39,000 digits): big-integer work holds the GIL while it runs,
so its size is estimated before it is done, never bounded by a timeout afterwards."""


def evaluate(expression: str) -> float | int:
    """Evaluate arithmetic safely: numbers, + - * / // % **, a few math functions."""
    if len(expression) > _MAX_LENGTH:
        raise ValueError(f"expression longer than {_MAX_LENGTH} characters")
    value: float | int = _eval(ast.parse(expression, mode="eval").body)
    return value


def _eval(node: ast.AST) -> Any:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        _check_result_size(node.op, left, right)
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        return _FUNCTIONS[node.func.id](*(_eval(arg) for arg in node.args))
    raise ValueError(f"unsupported expression element: {ast.dump(node)[:60]}")


def _check_result_size(op: ast.operator, left: Any, right: Any) -> None:
    """Refuse a power or product whose integer result would be too large to compute at once."""
    if isinstance(op, ast.Pow) and abs(right) > _MAX_EXPONENT:
        raise ValueError("exponent too large")
    if not (isinstance(left, int) and isinstance(right, int)):
        return  # floats overflow to an OverflowError by themselves, at no cost
    if isinstance(op, ast.Pow) and right > 0:
        bits = left.bit_length() * right
    elif isinstance(op, ast.Mult):
        bits = left.bit_length() + right.bit_length()
    else:
        return
    if bits > _MAX_RESULT_BITS:
        raise ValueError(f"the result would have about {bits * 0.30103:.0f} digits; too large")


class Calculator:
    """``calculator``: exact, safe arithmetic for the model."""

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name="calculator",
            kind=ToolKind.INTERNAL,
            description="Evaluate arithmetic: + - * / // % **, sqrt, log, sin, pi, e …",
            parameters={
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "e.g. 2*(3+4)**2"}},
                "required": ["expression"],
            },
            timeout_seconds=5.0,
        )

    def initialize(self) -> None:
        """Nothing to set up."""

    def shutdown(self) -> None:
        """Nothing to release."""

    def execute(self, call: ToolCall) -> ToolResult:
        try:
            expression = str(call.parsed_arguments()["expression"])
            return ToolResult(call_id=call.id, output=str(evaluate(expression)))
        except (
            ValueError,
            KeyError,
            TypeError,
            ZeroDivisionError,
            OverflowError,
            SyntaxError,
        ) as exc:
            return ToolResult(call_id=call.id, output=f"Error: {exc}", is_error=True)


_DIMENSIONS: dict[str, dict[str, float]] = {
    "length": {"m": 1, "km": 1e3, "cm": 1e-2, "mm": 1e-3, "um": 1e-6, "nm": 1e-9,
               "mi": 1609.344, "yd": 0.9144, "ft": 0.3048, "in": 0.0254, "nmi": 1852},
    "mass": {"kg": 1, "g": 1e-3, "mg": 1e-6, "t": 1e3, "lb": 0.45359237, "oz": 0.028349523125,
             "st": 6.35029318},
    "time": {"s": 1, "ms": 1e-3, "us": 1e-6, "min": 60, "h": 3600, "d": 86400, "week": 604800,
             "year": 31557600},
    "volume": {"m3": 1, "l": 1e-3, "ml": 1e-6, "cl": 1e-5, "gal": 3.785411784e-3,
               "qt": 9.46352946e-4, "pt": 4.73176473e-4, "floz": 2.95735295625e-5},
    "data": {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 1024, "mib": 1024**2,
             "gib": 1024**3, "tib": 1024**4, "bit": 0.125},
    "speed": {"m/s": 1, "km/h": 1 / 3.6, "mph": 0.44704, "kn": 1852 / 3600, "ft/s": 0.3048},
    "energy": {"j": 1, "kj": 1e3, "cal": 4.184, "kcal": 4184, "wh": 3600, "kwh": 3.6e6,
               "ev": 1.602176634e-19},
    "pressure": {"pa": 1, "kpa": 1e3, "bar": 1e5, "atm": 101325, "psi": 6894.757293168,
                 "mmhg": 133.322387415},
    "area": {"m2": 1, "km2": 1e6, "cm2": 1e-4, "ha": 1e4, "acre": 4046.8564224,
             "ft2": 0.09290304, "mi2": 2589988.110336},
}  # fmt: skip
_TEMPERATURE: dict[str, tuple[Callable[[float], float], Callable[[float], float]]] = {
    # to kelvin, from kelvin
    "c": (lambda v: v + 273.15, lambda k: k - 273.15),
    "f": (lambda v: (v - 32) * 5 / 9 + 273.15, lambda k: (k - 273.15) * 9 / 5 + 32),
    "k": (lambda v: v, lambda k: k),
}


def convert_units(value: float, from_unit: str, to_unit: str) -> float:
    """``value`` in ``from_unit`` expressed in ``to_unit`` (case-insensitive symbols).

    Raises:
        ValueError: an unknown unit, or units of different dimensions.
    """
    source, target = from_unit.strip().lower(), to_unit.strip().lower()
    if source in _TEMPERATURE and target in _TEMPERATURE:
        kelvin: float = _TEMPERATURE[source][0](value)
        converted: float = _TEMPERATURE[target][1](kelvin)
        return converted
    for dimension, units in _DIMENSIONS.items():
        if source in units and target in units:
            return value * units[source] / units[target]
        if source in units or target in units:
            raise ValueError(f"cannot convert {from_unit!r} to {to_unit!r} ({dimension} unit)")
    raise ValueError(f"unknown unit {from_unit!r} or {to_unit!r}")


class UnitConverter:
    """``unit_convert``: exact conversions between units of one dimension."""

    def definition(self) -> ToolDefinition:
        known = ", ".join(u for units in _DIMENSIONS.values() for u in units)
        return ToolDefinition(
            name="unit_convert",
            kind=ToolKind.INTERNAL,
            description=f"Convert a value between units. Units: {known}, C, F, K.",
            parameters={
                "type": "object",
                "properties": {
                    "value": {"type": "number"},
                    "from_unit": {"type": "string", "description": "e.g. km"},
                    "to_unit": {"type": "string", "description": "e.g. mi"},
                },
                "required": ["value", "from_unit", "to_unit"],
            },
            timeout_seconds=5.0,
        )

    def initialize(self) -> None:
        """Nothing to set up."""

    def shutdown(self) -> None:
        """Nothing to release."""

    def execute(self, call: ToolCall) -> ToolResult:
        try:
            args = call.parsed_arguments()
            source, target = str(args["from_unit"]), str(args["to_unit"])
            value = convert_units(float(args["value"]), source, target)
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            return ToolResult(call_id=call.id, output=f"Error: {exc}", is_error=True)
        return ToolResult(call_id=call.id, output=f"{value:.10g} {target}")


_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml")
_MAX_REDIRECTS = 3


def is_allowed_host(host: str, allowed: list[str]) -> bool:
    """``host`` is listed, or under a listed ``*.domain``."""
    host = host.lower().rstrip(".")
    return any(
        host == pattern or (pattern.startswith("*.") and host.endswith(pattern[1:]))
        for pattern in allowed
    )


class HttpFetch:
    """``http_fetch``: GET a text page from an operator's allowlist, bounded in time and size."""

    def __init__(
        self,
        *,
        allowed_hosts: list[str] | None = None,
        max_bytes: int | None = None,
        transport: httpx.BaseTransport | None = None,
    ):
        self.allowed_hosts = allowed_hosts
        self.max_bytes = max_bytes
        self._transport = transport
        self._client: httpx.Client | None = None

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name="http_fetch",
            kind=ToolKind.INTERNAL,
            description="Fetch a web page (text) by URL; only hosts the operator allows.",
            parameters={
                "type": "object",
                "properties": {"url": {"type": "string", "description": "http(s) URL"}},
                "required": ["url"],
            },
            timeout_seconds=20.0,
        )

    def initialize(self) -> None:
        """Read the allowlist (unless given) and open the HTTP client."""
        if self.allowed_hosts is None or self.max_bytes is None:
            settings = Settings()
            if self.allowed_hosts is None:
                self.allowed_hosts = settings.fetch_allowed_host_list
            if self.max_bytes is None:
                self.max_bytes = settings.fetch_max_bytes
        self._client = httpx.Client(
            timeout=httpx.Timeout(10.0, connect=5.0),
            limits=httpx.Limits(  # httpx's default bounds; idle connections dropped early
                max_connections=100,
                max_keepalive_connections=20,
                keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS,
            ),
            follow_redirects=False,
            transport=self._transport,
            headers={"User-Agent": "antwort-http-fetch/1"},
        )

    def shutdown(self) -> None:
        """Close the HTTP client."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def execute(self, call: ToolCall) -> ToolResult:
        try:
            url = str(call.parsed_arguments()["url"])
            return ToolResult(call_id=call.id, output=self._fetch(url))
        except (ValueError, KeyError, TypeError, httpx.HTTPError) as exc:
            return ToolResult(call_id=call.id, output=f"Error: {exc}", is_error=True)

    def _fetch(self, url: str) -> str:
        if self._client is None:
            self.initialize()
        assert self._client is not None
        for _ in range(_MAX_REDIRECTS + 1):
            self._check(url)
            with self._client.stream("GET", url) as response:
                if response.is_redirect and "location" in response.headers:
                    url = urljoin(url, response.headers["location"])
                    continue
                return self._read(url, response)
        raise ValueError(f"more than {_MAX_REDIRECTS} redirects")

    def _check(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"only http(s) URLs can be fetched, not {url!r}")
        if not is_allowed_host(parts.hostname, self.allowed_hosts or []):
            raise ValueError(
                f"host {parts.hostname!r} is not allowed (allowed: "
                f"{', '.join(self.allowed_hosts or []) or 'none; set ANTWORT_FETCH_ALLOWED_HOSTS'})"
            )

    def _read(self, url: str, response: httpx.Response) -> str:
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind and not kind.startswith(_TEXT_TYPES):
            raise ValueError(f"{url} is {kind}, not text")
        limit = self.max_bytes or 0
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > limit:
                break
        text = bytes(body[:limit]).decode(response.encoding or "utf-8", "replace")
        cut = f"\n[cut at {limit} bytes]" if len(body) > limit else ""
        return f"HTTP {response.status_code} {url}\n\n{text}{cut}"


def register_builtins(registry: Any) -> None:
    """Add the built-in tools."""
    registry.register(Calculator())
    registry.register(UnitConverter())
    registry.register(HttpFetch())
