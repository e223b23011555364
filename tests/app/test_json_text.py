"""Client JSON at the edge: depth and Unicode checked on the text, exactly and at C speed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import InvalidRequestError
from app.protocol.json_text import MAX_DEPTH, load_json


def nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


def depth_of(value: Any) -> int:
    """Nesting of arrays and objects, the slow and obvious way."""
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


def test_the_deepest_nesting_allowed_loads_and_one_more_is_refused() -> None:
    assert load_json(nested(MAX_DEPTH)) == json.loads(nested(MAX_DEPTH))
    with pytest.raises(InvalidRequestError) as caught:
        load_json(nested(MAX_DEPTH + 1))
    assert caught.value.code == "invalid_value"
    assert "deeper than 64 levels" in caught.value.message


@pytest.mark.parametrize(
    "inner",
    [
        '"' + "[" * 100 + '"',  # brackets in a string are text
        '"\\"' + "{" * 100 + '\\""',  # behind an escaped quote too
        '["\\\\", [[1]]]',  # an escaped backslash, then the quote that ends the string
        '{"' + "[" * 100 + '": 1}',  # and in a key
    ],
)
def test_brackets_inside_strings_do_not_count(inner: str) -> None:
    text = nested(MAX_DEPTH - 3, inner)
    assert load_json(text) == json.loads(text)


def test_a_body_in_utf_16_is_measured_as_the_parser_reads_it() -> None:
    deep = nested(MAX_DEPTH + 1, '"\u225b"').encode("utf-16")  # U+225B: the bytes [ and "
    with pytest.raises(InvalidRequestError):
        load_json(deep)
    fine = nested(MAX_DEPTH, '"\u225b\u5b5b"').encode("utf-16")
    assert load_json(fine) == json.loads(fine)


@pytest.mark.parametrize(
    "raw",
    [b'"\\ud800"', b'{"\\udfff": 1}', b'["a", "\\udc00\\ud800"]', b'"\xed\xa0\x80"'],
)
def test_a_lone_surrogate_escaped_or_encoded_is_refused(raw: bytes) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        load_json(raw)
    assert "surrogate" in caught.value.message


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_python_s_non_standard_number_constants_are_not_json(constant: str) -> None:
    # json.loads takes them; JSON (RFC 8259) does not, nor does httpx's encoder, which refused
    # them in the model call a turn makes out of the client's schema
    with pytest.raises(InvalidRequestError) as caught:
        load_json('{"schema": {"maximum": ' + constant + "}}")
    assert caught.value.code == "invalid_json"
    assert load_json('"NaN"') == "NaN"  # text, as ever


def test_a_paired_surrogate_and_an_escaped_backslash_u_are_text() -> None:
    assert load_json(b'"\\ud83d\\ude00"') == "\U0001f600"
    assert load_json(b'"\\\\ud800"') == "\\ud800"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab\u00e9', max_size=8),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(alphabet='[]{}"\\x', max_size=4), children, max_size=3)
    ),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.integers(min_value=0, max_value=MAX_DEPTH + 2))
def test_the_text_s_nesting_is_the_value_s(value: Any, wrap: int) -> None:
    text = nested(wrap, json.dumps(value, ensure_ascii=False))
    if depth_of(json.loads(text)) > MAX_DEPTH:
        with pytest.raises(InvalidRequestError):
            load_json(text.encode())
    else:
        assert load_json(text.encode()) == json.loads(text)
