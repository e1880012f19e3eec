"""Sentiment items (docs/dashboard.md "Sentiment items"): check_item names the bad field,
parse_item is lenient (None), canonical form and timestamps. Expected values are written out
by hand."""

from __future__ import annotations

import json
from typing import Any

import pytest

from headwater.dashboard.items import (
    Item,
    ItemError,
    canonical_ticker,
    check_item,
    iso_ms,
    parse_item,
    parse_timestamp,
)

pytestmark = pytest.mark.unit

NOW = 1_764_671_400_250  # 2025-12-02T10:30:00.250Z


def good(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "ticker": "AAPL",
        "score": 0.85,
        "label": "positive",
        "confidence": 0.92,
        "source": "tiingo",
        "timestamp": "2025-12-02T10:30:00.000Z",
    }
    d.update(over)
    return d


def bad_field(data: object) -> str:
    with pytest.raises(ItemError) as exc:
        check_item(data, NOW)
    assert parse_item(data, NOW) is None
    assert exc.value.message
    return exc.value.field


def test_the_spec_example() -> None:
    it = check_item(good(), NOW)
    assert it == Item("AAPL", 0.85, "positive", 0.92, "tiingo", "2025-12-02T10:30:00.000Z")
    assert json.dumps(it.as_json(), separators=(",", ":")) == (
        '{"ticker":"AAPL","score":0.85,"label":"positive","confidence":0.92,'
        '"source":"tiingo","timestamp":"2025-12-02T10:30:00.000Z"}'
    )
    assert parse_item(good(), NOW) == it


def test_booleans_are_not_numbers() -> None:
    assert bad_field(good(score=True)) == "score"
    assert bad_field(good(score=False)) == "score"
    assert bad_field(good(confidence=True)) == "confidence"


def test_non_finite_numbers() -> None:
    # NaN cannot come from JSON, but inf can reach the check as a float (e.g. 1e400).
    assert json.loads("1e400") == float("inf")
    for v in (float("inf"), float("-inf"), float("nan")):
        assert bad_field(good(score=v)) == "score"
        assert bad_field(good(confidence=v)) == "confidence"


@pytest.mark.parametrize("score", [-1, -1.0, 0, 1, 1.0, 0.999999])
def test_score_bounds_inclusive(score: float) -> None:
    assert check_item(good(score=score), NOW).score == score


@pytest.mark.parametrize("score", [-1.0000001, 1.0000001, 2, "1", None, [1]])
def test_score_out_of_range_or_wrong_type(score: Any) -> None:
    assert bad_field(good(score=score)) == "score"


@pytest.mark.parametrize("conf", [0, 0.0, 1, 0.5])
def test_confidence_bounds(conf: float) -> None:
    assert check_item(good(confidence=conf), NOW).confidence == conf


@pytest.mark.parametrize("conf", [-0.0001, 1.0001, -1])
def test_confidence_out_of_range(conf: float) -> None:
    assert bad_field(good(confidence=conf)) == "confidence"


@pytest.mark.parametrize("label", ["Positive", "POSITIVE", "neutral ", "bullish", "", None, 1])
def test_label_is_exact_lower_case(label: Any) -> None:
    assert bad_field(good(label=label)) == "label"


@pytest.mark.parametrize(
    ("raw", "canon"),
    [
        ("aapl", "AAPL"),
        ("BRK.B", "BRK.B"),
        ("brk-b", "BRK-B"),
        ("a_1", "A_1"),
        ("9", "9"),
        ("A" * 16, "A" * 16),
        ("x.-_", "X.-_"),
    ],
)
def test_valid_tickers(raw: str, canon: str) -> None:
    assert canonical_ticker(raw) == canon
    assert check_item(good(ticker=raw), NOW).ticker == canon


@pytest.mark.parametrize(
    "raw", ["", "A" * 17, ".A", "-A", "_A", "AA PL", "AAPL\n", "ÄPFEL", "A/B", "A$", 5, None]
)
def test_invalid_tickers(raw: Any) -> None:
    assert canonical_ticker(raw) is None
    assert bad_field(good(ticker=raw)) == "ticker"


def test_source_rules() -> None:
    assert check_item(good(source="x" * 64), NOW).source == "x" * 64
    for src in ("", "  ", "x" * 65, None, 3):
        assert bad_field(good(source=src)) == "source"


@pytest.mark.parametrize(
    ("raw", "rendered"),
    [
        ("2025-12-02T10:30:00Z", "2025-12-02T10:30:00.000Z"),
        ("2025-12-02t10:30:00z", "2025-12-02T10:30:00.000Z"),
        ("2025-12-02T10:30:00.1234Z", "2025-12-02T10:30:00.123Z"),
        ("2025-12-02T12:30:00.5+02:00", "2025-12-02T10:30:00.500Z"),
        ("2025-12-02T05:00:00-05:30", "2025-12-02T10:30:00.000Z"),
        ("2025-12-02T10:30:00+00:00", "2025-12-02T10:30:00.000Z"),
        ("2025-12-03T00:30:00+14:00", "2025-12-02T10:30:00.000Z"),
        ("1970-01-01T00:00:00Z", "1970-01-01T00:00:00.000Z"),
        ("9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999Z"),
    ],
)
def test_timestamps_render_in_utc_with_milliseconds(raw: str, rendered: str) -> None:
    assert check_item(good(timestamp=raw), NOW).timestamp == rendered


@pytest.mark.parametrize(
    "raw",
    [
        "2025-12-02T10:30:00",  # no zone
        "2025-12-02T10:30:00.000",
        "2025-12-02",
        "10:30:00Z",
        "not a date",
        "2025-13-02T10:30:00Z",
        "1969-12-31T23:59:59.999Z",  # before 1970
        "0001-01-01T00:00:00+01:00",  # overflows to year 0
        "",
    ],
)
def test_bad_timestamps(raw: str) -> None:
    assert bad_field(good(timestamp=raw)) == "timestamp"


def test_timestamp_type_and_absence() -> None:
    assert bad_field(good(timestamp=1764671400000)) == "timestamp"
    d = good()
    del d["timestamp"]
    assert check_item(d, NOW).timestamp == "2025-12-02T10:30:00.250Z"
    assert check_item(good(timestamp=None), NOW).timestamp == "2025-12-02T10:30:00.250Z"


def test_missing_fields_and_non_objects() -> None:
    for name in ("ticker", "score", "label", "confidence", "source"):
        d = good()
        del d[name]
        assert bad_field(d) == name
    for data in ([good()], "AAPL", None, 3):
        assert bad_field(data) == ""


def test_first_bad_field_is_named_and_extra_fields_ignored() -> None:
    assert bad_field(good(ticker="", score=5, label="x")) == "ticker"
    assert bad_field(good(score=5, label="x")) == "score"
    it = check_item(good(extra=1, ticker="msft"), NOW)
    assert it.as_json() == {**good(), "ticker": "MSFT"}


def test_iso_ms_and_parse_timestamp() -> None:
    assert iso_ms(0) == "1970-01-01T00:00:00.000Z"
    assert iso_ms(NOW) == "2025-12-02T10:30:00.250Z"
    assert iso_ms(NOW + 999) == "2025-12-02T10:30:01.249Z"
    assert parse_timestamp("2025-12-02T10:30:00.250Z") == NOW
    assert parse_timestamp(" 2025-12-02T11:30:00.250+01:00 ") == NOW
