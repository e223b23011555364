"""Holding a value to a client's JSON schema, with regular expressions that cannot backtrack.

A client's schema is someone else's input, run on a worker every tenant shares. ``jsonschema``
runs ``pattern`` and ``patternProperties`` with Python's ``re``, which backtracks: a pattern such as
``^(a+)+$`` against 40 ``a`` and a ``!`` takes longer than the age of the universe, and holds the
worker all that while. Here those keywords run on a linear-time engine (the Rust ``regex`` crate
that pydantic-core ships). A pattern that engine does not take (look-around, back-references)
holds nothing: the value is not checked against it, as with a schema that is itself broken.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cache, lru_cache
from typing import Any

from pydantic_core import SchemaError, SchemaValidator, ValidationError, core_schema

_PATTERN_CACHE_SIZE = 256


@lru_cache(maxsize=_PATTERN_CACHE_SIZE)
def _matcher(pattern: str) -> SchemaValidator | None:
    try:
        return SchemaValidator(core_schema.str_schema(pattern=pattern, regex_engine="rust-regex"))
    except SchemaError:  # not a pattern the linear-time engine takes
        return None


def search(pattern: str, text: str) -> bool | None:
    """Whether ``pattern`` matches anywhere in ``text`` (JSON Schema's sense); None: not known."""
    matcher = _matcher(pattern)
    if matcher is None:
        return None
    try:
        matcher.validate_python(text)
    except ValidationError:
        return False
    return True


def schema_mismatch(schema: Mapping[str, Any], value: object) -> tuple[str, str] | None:
    """Where ``value`` breaks ``schema`` (a ``/`` path, empty at the root) and how.

    None if it fits, or if the schema itself is broken (nothing to hold the model to).
    """
    import jsonschema  # type: ignore[import-untyped]  # no stubs in the lock; ~3 MB, used here only

    try:
        validator_class = jsonschema.validators.validator_for(schema)
        validator_class.check_schema(schema)
    except jsonschema.SchemaError:
        return None
    checked = _linear(validator_class)(_without_regex_bound(schema))
    error = jsonschema.exceptions.best_match(checked.iter_errors(value))
    if error is None:
        return None
    return "/".join(str(part) for part in error.absolute_path), error.message


@cache  # one per JSON Schema draft
def _linear(validator_class: Any) -> Any:
    """``validator_class`` with the keywords that match patterns run on the linear engine."""
    import jsonschema

    return jsonschema.validators.extend(
        validator_class,
        {k: check for k, check in _KEYWORDS.items() if k in validator_class.VALIDATORS},
    )


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema import ValidationError as SchemaMismatch

    if validator.is_type(instance, "string") and search(pattern, instance) is False:
        yield SchemaMismatch(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, item in instance.items():
            if search(pattern, key):
                yield from validator.descend(item, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    from jsonschema import ValidationError as SchemaMismatch

    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    # a key an unreadable pattern might match is not held to be extra
    extras = [
        key
        for key in instance
        if key not in named and not any(search(p, key) is not False for p in patterns)
    ]
    if validator.is_type(additional, "object"):
        for key in extras:
            yield from validator.descend(instance[key], additional, path=key)
    elif additional is False and extras:
        listed = ", ".join(repr(key) for key in sorted(extras))
        yield SchemaMismatch(f"Additional properties are not allowed ({listed} unexpected)")


_KEYWORDS = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}
"""The keywords whose ``jsonschema`` implementations run ``re``, run here on the linear engine."""


def _without_regex_bound(schema: Any) -> Any:
    """``schema`` without ``unevaluatedProperties`` where ``patternProperties`` decide it.

    ``jsonschema`` evaluates ``unevaluatedProperties`` by matching every ``patternProperties``
    below it with ``re``; such a schema is checked without that keyword rather than at that risk.
    """
    if not _has_pattern_properties(schema):
        return schema
    return _strip_unevaluated(schema)


def _has_pattern_properties(node: Any) -> bool:
    if isinstance(node, dict):
        return "patternProperties" in node or any(_has_pattern_properties(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_pattern_properties(v) for v in node)
    return False


def _strip_unevaluated(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_unevaluated(v) for k, v in node.items() if k != "unevaluatedProperties"}
    if isinstance(node, list):
        return [_strip_unevaluated(v) for v in node]
    return node
