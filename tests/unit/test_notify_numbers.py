"""Rust/serde number text used by the aviso-compatible surface (headwater.notify.numbers)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.notify.numbers import (
    RustParseError,
    parse_rust_f64,
    parse_rust_int,
    rust_display_f64,
    ryu_f64,
    serde_number_text,
    wire_json,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", 42),
        ("-42", -42),
        ("+7", 7),
        ("0042", 42),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
    ],
)
def test_rust_i64_accepts(text: str, expected: int) -> None:
    assert parse_rust_int(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "cannot parse integer from empty string"),
        ("+", "invalid digit found in string"),
        ("-", "invalid digit found in string"),
        (" 1", "invalid digit found in string"),
        ("1_000", "invalid digit found in string"),
        ("٣", "invalid digit found in string"),  # Arabic-Indic digit: int() would accept it
        ("42.5", "invalid digit found in string"),
        ("9223372036854775808", "number too large to fit in target type"),
        ("-9223372036854775809", "number too small to fit in target type"),
        # overflow is found before the bad digit that follows it, as in core::num
        ("99999999999999999999x", "number too large to fit in target type"),
    ],
)
def test_rust_i64_rejects_with_rusts_reason(text: str, reason: str) -> None:
    with pytest.raises(RustParseError, match=reason):
        parse_rust_int(text)


def test_rust_unsigned_rejects_minus_and_overflow() -> None:
    assert parse_rust_int("+5", signed=False, bits=32) == 5
    with pytest.raises(RustParseError):
        parse_rust_int("-0", signed=False, bits=32)
    with pytest.raises(RustParseError, match="too large"):
        parse_rust_int("4294967296", signed=False, bits=32)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("3.14", 3.14), ("1.", 1.0), (".5", 0.5), ("1e3", 1000.0), ("-2.5E-3", -0.0025)],
)
def test_rust_f64_accepts(text: str, expected: float) -> None:
    assert parse_rust_f64(text) == expected


@pytest.mark.parametrize("text", ["NaN", "nan", "inf", "-Infinity", "+inf"])
def test_rust_f64_reads_non_finite_words(text: str) -> None:
    assert not math.isfinite(parse_rust_f64(text))


@pytest.mark.parametrize("text", ["", " 1", "1 ", "1_0", "0x10", ".", "e5", "1e", "abc", "١"])
def test_rust_f64_rejects_what_python_float_might_accept(text: str) -> None:
    with pytest.raises(RustParseError):
        parse_rust_f64(text)


@pytest.mark.parametrize(
    ("value", "display", "ryu"),
    [
        (1.0, "1", "1.0"),
        (0.1, "0.1", "0.1"),
        (12.5, "12.5", "12.5"),
        (1e21, "1000000000000000000000", "1e21"),
        (1e16, "10000000000000000", "10000000000000000.0"),
        (1e-7, "0.0000001", "1e-7"),
        (1.5e-7, "0.00000015", "1.5e-7"),
        (1e-6, "0.000001", "0.000001"),
        (-0.0, "-0", "-0.0"),
        (123456.789, "123456.789", "123456.789"),
    ],
)
def test_display_and_ryu_forms(value: float, display: str, ryu: str) -> None:
    assert rust_display_f64(value) == display
    assert ryu_f64(value) == ryu


def test_display_of_non_finite() -> None:
    assert [rust_display_f64(v) for v in (math.nan, math.inf, -math.inf)] == ["NaN", "inf", "-inf"]


finite = st.floats(allow_nan=False, allow_infinity=False)


@given(finite)
def test_rust_display_round_trips_and_never_uses_exponents(value: float) -> None:
    text = rust_display_f64(value)
    assert "e" not in text and "E" not in text
    assert parse_rust_f64(text) == value
    assert math.copysign(1, float(text)) == math.copysign(1, value)
    # shortest: as many significant digits as Python's repr, no trailing zeros after a point
    if "." in text:
        assert not text.endswith("0")


@given(finite)
def test_ryu_round_trips_and_is_json(value: float) -> None:
    text = ryu_f64(value)
    assert json.loads(text) == value
    assert "+" not in text  # ryu writes 1e21, never 1e+21


@given(st.integers(min_value=-(2**63), max_value=2**64 - 1))
def test_serde_number_text_keeps_64_bit_integers(value: int) -> None:
    assert serde_number_text(value) == str(value)


def test_serde_number_text_turns_huge_integers_into_floats() -> None:
    # beyond u64 serde_json holds an f64; ryu writes it positionally up to 21 digits
    assert serde_number_text(2**64) == "18446744073709552000.0"
    assert serde_number_text(10**22) == "1e22"


def test_wire_json_sorts_keys_compacts_and_keeps_unicode() -> None:
    value = {"b": [1, 2.0, None, True], "a": {"z": 'é\n"', "y": 1e21}}
    assert wire_json(value) == '{"a":{"y":1e21,"z":"é\\n\\""},"b":[1,2.0,null,true]}'


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | finite | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_wire_json_is_json_for_the_same_value(value: object) -> None:
    assert json.loads(wire_json(value)) == value
