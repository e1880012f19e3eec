"""Request parsers on hostile values (issue 23, item 3): each refuses with its own client
error where it used to raise RecursionError, UnicodeEncodeError, OverflowError or a bare
ValueError (each of which was a 500)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from starlette.requests import Request

from headwater.dashboard.items import ItemError, check_item
from headwater.durable.offsets import encode_offset
from headwater.durable.schema import SchemaError, apply_update, empty_registry, validate
from headwater.errors import InvalidRequest, PayloadTooLarge
from headwater.flags.errors import FlagError, LintFailed
from headwater.flags.lint import check
from headwater.flags.manifest import parse_json_body
from headwater.flags.snapshot import parse_closure_query
from headwater.http.bodies import read_body
from headwater.notify.requests import MAX_DEPTH, load_json
from headwater.settings import Limits
from headwater.v0.parse import decode_cursor, parse_append, parse_diff, parse_match

pytestmark = pytest.mark.unit

ITEM = {"ticker": "AAPL", "score": 0.5, "label": "positive", "confidence": 0.9, "source": "s"}


# --- numbers ---------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["score", "confidence"])
@pytest.mark.parametrize("value", [10**400, -(10**400)])
def test_item_integers_beyond_float_range_are_item_errors(field: str, value: int) -> None:
    assert check_item({**ITEM, "score": -1, "confidence": 1}, 0).score == -1  # ints are numbers
    with pytest.raises(ItemError) as caught:
        check_item({**ITEM, field: value}, 0)
    assert caught.value.field == field


# --- notify JSON: serde_json's rules ---------------------------------------------------------
def test_notify_json_nests_as_deep_as_serde_json() -> None:
    assert load_json("[" * MAX_DEPTH + "]" * MAX_DEPTH) == _nest(MAX_DEPTH - 1)
    for depth in (MAX_DEPTH + 1, 10_000):
        with pytest.raises(
            ValueError, match=f"recursion limit exceeded at line 1 column {MAX_DEPTH + 1}"
        ):
            load_json("[" * depth + "]" * depth)
    with pytest.raises(ValueError, match=f"line 3 column {5 * (MAX_DEPTH - 1) + 1}"):
        load_json("{\n\n" + '{"a":' * MAX_DEPTH + "1" + "}" * (MAX_DEPTH + 1))


def _nest(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("escape", ["\\udc00", "\\udfff", "a\\uDFFFb"])
def test_notify_json_refuses_low_lone_surrogates_too(escape: str) -> None:
    with pytest.raises(ValueError, match="lone surrogate"):
        load_json(f'{{"a": "{escape}"}}')
    assert load_json('"\\ud83d\\ude42"') == "\U0001f642"  # a pair is one character


# --- /v0 bodies ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        {"records": [{"data": 1, "tag": "\ud800"}]},
        {"records": [{"data": 1, "node": "\udfff"}]},
        {"records": [{"data": 1}], "node": "\ud800"},
        {"records": [{"data": 1}], "idempotency_key": "k\ud800"},
    ],
)
def test_append_names_with_lone_surrogates_are_invalid_requests(body: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest, match="lone surrogates"):
        parse_append(body, Limits(), None, "t")


def test_diff_nodes_and_match_values_with_lone_surrogates_are_invalid_requests() -> None:
    for node in ("\ud800", ["a", "\ud800"]):
        with pytest.raises(InvalidRequest, match="lone surrogates"):
            parse_diff({"node": node}, Limits())
    for match in ("\ud800", ["tag", "Eq", "\ud800"], ["tag", "Glob", "\ud800*"]):
        with pytest.raises(InvalidRequest, match="lone surrogates"):
            parse_match(match)


def test_a_cursor_holding_deep_json_is_malformed_not_a_crash() -> None:
    import base64

    token = base64.urlsafe_b64encode(b"[" * 5000 + b"]" * 5000).decode()
    with pytest.raises(InvalidRequest, match="malformed cursor"):
        decode_cursor(token)


@pytest.mark.parametrize("declared", ["\u00b2", "9" * 5000])
def test_odd_content_lengths_are_not_crashes(declared: str) -> None:
    request = _request({"content-length": declared}, b"{}")
    if declared.isascii():
        with pytest.raises(PayloadTooLarge):
            asyncio.run(read_body(request, 1000))
    else:
        assert asyncio.run(read_body(request, 1000)) == b"{}"  # not a length: the body decides


def _request(headers: dict[str, str], body: bytes) -> Request:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        assert not sent
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    raw = [(k.encode(), v.encode("latin-1")) for k, v in headers.items()]
    return Request({"type": "http", "method": "POST", "headers": raw, "path": "/"}, receive)


# --- flags -----------------------------------------------------------------------------------
def test_a_closure_version_of_thousands_of_digits_is_an_invalid_request() -> None:
    with pytest.raises(FlagError) as caught:
        parse_closure_query({"version": "9" * 5000, "subscription": "Kg"})
    assert caught.value.status == 400


def test_a_deep_manifest_body_is_an_invalid_request() -> None:
    for body in (b'{"files":' + b"[" * 10_000 + b"]" * 10_000 + b"}", b"[" * 100_000):
        with pytest.raises(FlagError) as caught:
            parse_json_body(body)
        assert caught.value.status == 400


def test_deep_toml_is_a_lint_finding() -> None:
    tree = {"namespace.toml": ("a = " + "[" * 3000 + "]" * 3000).encode()}
    with pytest.raises(LintFailed) as caught:
        check(tree)
    details = caught.value.details
    assert isinstance(details, list)
    assert details[0]["code"] == "invalid_toml"


# --- Durable Streams schemas -----------------------------------------------------------------
def test_a_deep_schema_is_a_schema_error() -> None:
    deep: Any = "object"
    for _ in range(1000):
        deep = [deep]
    with pytest.raises(SchemaError, match="nested too deeply"):
        apply_update(
            empty_registry("s"),
            {"schema": {"type": deep}},
            stream_is_empty=True,
            end_offset=encode_offset(0, 0),
        )


def test_a_deep_value_against_a_recursive_schema_is_a_schema_error() -> None:
    schema = {"type": "array", "items": {"$ref": "#"}}
    registry = apply_update(
        empty_registry("s"),
        {"schema": schema},
        stream_is_empty=True,
        end_offset=encode_offset(0, 0),
    )
    validate(registry, json.loads("[[[]]]"))
    with pytest.raises(SchemaError, match="nested too deeply"):
        validate(registry, _nest(900))
