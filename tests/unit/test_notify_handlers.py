"""Identifier handlers (headwater.notify.handlers). Cases marked `aviso:` are ported from the
unit tests in ecmwf/aviso-server aviso-validators/src/<handler>.rs: same inputs, same outputs."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.notify.errors import FieldError
from headwater.notify.handlers import (
    canonical_date,
    canonical_enum,
    canonical_expver,
    canonical_float,
    canonical_int,
    canonical_string,
    canonical_time,
    canonicalize,
    parse_point,
    parse_polygon,
    polygon_coordinates,
    scalar_text,
    validate_polygon,
)
from headwater.notify.numbers import parse_rust_f64
from headwater.notify.schema import FieldRule, Handler

pytestmark = pytest.mark.unit


def rejects(fn: object, *args: object) -> FieldError:
    with pytest.raises(FieldError) as info:
        fn(*args)  # type: ignore[operator]
    return info.value


# --- StringHandler (aviso: string.rs) --------------------------------------------------------


def test_string_valid_and_unchanged() -> None:  # aviso: test_valid_string
    assert canonical_string("field", "test", 10) == "test"


def test_string_empty_fails() -> None:  # aviso: test_empty_string_fails
    assert "cannot be empty" in rejects(canonical_string, "field", "", 10).message


def test_string_too_long_fails() -> None:  # aviso: test_too_long_string_fails
    err = rejects(canonical_string, "field", "toolong", 5)
    assert err.message == "Field 'field' exceeds maximum length of 5 characters, got: 7"


def test_string_no_length_limit() -> None:  # aviso: test_no_length_limit
    assert canonical_string("field", "very long string", None) == "very long string"


def test_string_length_counts_utf8_bytes_like_rust() -> None:
    assert canonical_string("class", "od", 2) == "od"
    assert "got: 2" in rejects(canonical_string, "class", "é", 1).message


# --- IntHandler (aviso: int.rs) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "bounds", "expected"),
    [
        ("42", None, "42"),  # aviso: test_valid_positive_integer
        ("-42", None, "-42"),  # aviso: test_valid_negative_integer
        ("0", (-10, 10), "0"),  # aviso: test_valid_zero
        ("50", (0, 100), "50"),  # aviso: test_valid_integer_within_range
        ("0", (0, 100), "0"),  # aviso: test_valid_integer_at_range_boundaries
        ("100", (0, 100), "100"),  # aviso: test_valid_integer_at_range_boundaries
        ("0042", None, "42"),  # aviso: test_leading_zeros_canonicalized
        ("9223372036854775807", None, "9223372036854775807"),  # aviso: test_large_integer
        ("007", None, "7"),  # aviso docs: schema-guide IntHandler
        ("+5", None, "5"),
    ],
)
def test_int_canonical(value: str, bounds: tuple[int, int] | None, expected: str) -> None:
    assert canonical_int("step", value, bounds) == expected


@pytest.mark.parametrize(
    ("value", "bounds"),
    [
        ("-5", (0, 100)),  # aviso: test_integer_below_minimum
        ("150", (0, 100)),  # aviso: test_integer_above_maximum
        ("abc", None),  # aviso: test_invalid_integer_format
        ("42.5", None),  # aviso: test_decimal_number_rejected
        ("-1", (0, 100)),  # aviso docs: schema-guide IntHandler
        (" 1", None),
        ("9223372036854775808", None),
    ],
)
def test_int_rejects(value: str, bounds: tuple[int, int] | None) -> None:
    rejects(canonical_int, "step", value, bounds)


def test_int_error_wording() -> None:
    err = rejects(canonical_int, "step", "abc", None)
    assert err.message == "Field 'step' must be a valid integer, got: 'abc'"
    assert err.details == "invalid digit found in string"
    err = rejects(canonical_int, "step", "150", (0, 100))
    assert err.message == err.details == "Field 'step' value 150 is outside allowed range [0, 100]"


# --- FloatHandler (aviso: float.rs) ----------------------------------------------------------


def test_float_valid_without_range() -> None:  # aviso: valid_float_without_range
    assert canonical_float("severity", "12.5", None) == "12.5"


def test_float_valid_with_range() -> None:  # aviso: valid_float_with_range
    assert canonical_float("level", "3.4", (1.0, 7.0)) == "3.4"


@pytest.mark.parametrize(
    ("value", "bounds"),
    [
        ("abc", None),  # aviso: invalid_float_format
        ("9.1", (1.0, 7.0)),  # aviso: float_outside_range
        ("NaN", None),  # aviso: rejects_nan
        ("inf", None),  # aviso: rejects_positive_infinity
        ("-inf", None),  # aviso: rejects_negative_infinity
        ("1e400", None),  # overflows to infinity
    ],
)
def test_float_rejects(value: str, bounds: tuple[float, float] | None) -> None:
    rejects(canonical_float, "level", value, bounds)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("3.14", "3.14"),
        ("1.0", "1"),
        ("1.50", "1.5"),
        ("1e3", "1000"),
        ("-0.0", "-0"),
        ("1e-7", "0.0000001"),
    ],
)
def test_float_shortest_rust_form(value: str, expected: str) -> None:
    assert canonical_float("x", value, None) == expected


def test_float_error_wording() -> None:
    assert rejects(canonical_float, "x", "NaN", None).message == (
        "Field 'x' must be a finite number, got: 'NaN'"
    )
    err = rejects(canonical_float, "x", "9.1", (1.0, 7.0))
    assert err.message == "Field 'x' value 9.1 is outside allowed range [1, 7]"
    err = rejects(canonical_float, "x", "1,5", None)
    assert (err.message, err.details) == (
        "Field 'x' must be a valid number, got: '1,5'",
        "invalid float literal",
    )


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_float_canonical_is_stable_and_exact(value: float) -> None:
    canonical = canonical_float("x", repr(value), None)
    assert parse_rust_f64(canonical) == value
    assert canonical_float("x", canonical, None) == canonical


# --- EnumHandler (aviso: enum_handler.rs) ----------------------------------------------------


def test_enum_exact_case() -> None:  # aviso: test_valid_enum_value_exact_case
    assert canonical_enum("status", "active", ("active", "inactive", "pending")) == "active"


def test_enum_different_case() -> None:  # aviso: test_valid_enum_value_different_case
    assert canonical_enum("status", "ACTIVE", ("active", "inactive")) == "active"


def test_enum_mixed_case_allowed_values() -> None:  # aviso: test_valid_enum_value_mixed_case
    assert canonical_enum("status", "active", ("Active", "InActive")) == "active"


def test_enum_invalid_value() -> None:  # aviso: test_invalid_enum_value
    err = rejects(canonical_enum, "status", "unknown", ("active", "inactive"))
    assert err.message == "Field 'status' has invalid value 'unknown'. Allowed: [active, inactive]"


def test_enum_large_allowed_list() -> None:  # aviso: test_large_allowed_values_list
    rejects(canonical_enum, "field", "unknown", tuple(f"value{i}" for i in range(20)))


# --- DateHandler (aviso: date.rs) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "fmt", "expected"),
    [
        ("2025-12-25", "%Y%m%d", "20251225"),  # aviso: test_iso_8601_format
        ("20251225", "%Y-%m-%d", "2025-12-25"),  # aviso: test_compact_format
        ("2025-359", "%Y%m%d", "20251225"),  # aviso: test_day_of_year_format
        ("2024-02-29", "%Y%m%d", "20240229"),  # aviso: test_leap_year_handling
        ("1999-12-31", "%Y%m%d", "19991231"),  # aviso: test_date_boundary_conditions
        ("2000-01-01", "%Y%m%d", "20000101"),  # aviso: test_date_boundary_conditions
        ("2025-001", "%Y%m%d", "20250101"),  # aviso: test_day_of_year_edge_cases
        ("2025-365", "%Y%m%d", "20251231"),  # aviso: test_day_of_year_edge_cases
        ("2024-366", "%Y%m%d", "20241231"),  # aviso: test_day_of_year_edge_cases
        ("2025-1-5", "%Y%m%d", "20250105"),  # chrono: one or two digits per field
        ("2025125", "%Y-%m-%d", "2025-12-05"),  # chrono: %m%d read greedily
        ("+2025-07-06", "%Y%m%d", "20250706"),
        (" 2025-07-06", "%Y%m%d", "20250706"),  # chrono skips spaces before a number
        ("-0001-01-01", "%Y%m%d", "-00010101"),  # years outside 0..=9999 carry a sign
        ("+12345-01-01", "%Y-%m-%d", "+12345-01-01"),
    ],
)
def test_date_canonical(value: str, fmt: str, expected: str) -> None:
    assert canonical_date("date", value, fmt) == expected


@pytest.mark.parametrize(
    "value",
    [
        "2025-02-30",  # aviso: test_invalid_date
        "2023-02-29",  # aviso: test_leap_year_handling
        "2025-13-01",  # aviso: test_invalid_dates_comprehensive
        "2025-01-32",
        "2025-04-31",
        "2025-366",  # aviso: test_day_of_year_edge_cases
        "2025-000",
        # aviso: test_malformed_input_formats
        "2025/12/25",
        "2025.12.25",
        "2025",
        "2025-12-25T00:00:00",
        "25-12-2025",
        "not-a-date",
        "",
        "2025-",
        "abc-def-ghi",
        "+ 2025-07-06",  # chrono: digits must follow the sign
        "+262144-01-01",  # beyond chrono's NaiveDate range
    ],
)
def test_date_rejects(value: str) -> None:
    err = rejects(canonical_date, "date", value, "%Y%m%d")
    assert err.message == "Failed to parse date value for field 'date'"
    assert err.details == (
        f"Field 'date' contains invalid date '{value}'. Expected: YYYY-MM-DD, YYYYMMDD, or YYYY-DDD"
    )


def test_date_formats_agree() -> None:  # aviso: test_format_consistency
    forms = {canonical_date("date", v, "%Y%m%d") for v in ("2025-12-25", "20251225", "2025-359")}
    assert forms == {"20251225"}


@given(st.dates(min_value=dt.date(1, 1, 1), max_value=dt.date(9999, 12, 31)))
def test_date_every_form_of_a_real_day_agrees(day: dt.date) -> None:
    iso = f"{day.year:04d}-{day.month:02d}-{day.day:02d}"
    compact = f"{day.year:04d}{day.month:02d}{day.day:02d}"
    ordinal = f"{day.year:04d}-{day.timetuple().tm_yday:03d}"
    for text in (iso, compact, ordinal):
        assert canonical_date("d", text, "%Y%m%d") == compact
        assert canonical_date("d", text, "%Y-%m-%d") == iso


# --- TimeHandler (aviso: time.rs) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    # aviso: test_single_digit_hours, test_double_digit_hours_with_leading_zeros,
    # test_double_digit_hours
    [(str(h), f"{h:02d}00") for h in range(10)]
    + [(f"{h:02d}", f"{h:02d}00") for h in range(24)]
    + [
        # aviso: test_hh_mm_format_single_digit_hours / _double_digit_hours / _boundaries
        ("0:00", "0000"),
        ("1:15", "0115"),
        ("9:30", "0930"),
        ("9:05", "0905"),
        ("10:00", "1000"),
        ("14:30", "1430"),
        ("23:59", "2359"),
        ("00:00", "0000"),
        ("12:00", "1200"),
        ("0:59", "0059"),
        # aviso: test_hhmm_format
        ("0000", "0000"),
        ("0100", "0100"),
        ("0905", "0905"),
        ("1430", "1430"),
        ("2359", "2359"),
    ],
)
def test_time_canonical(value: str, expected: str) -> None:
    assert canonical_time("time", value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "24", "25", "99",  # aviso: test_invalid_hours
        "24:00", "25:30", "12:60", "12:99", "12:5", "1:2",  # aviso: test_invalid_hh_mm_format
        "2400", "2500", "1260", "1299", "123", "12345",  # aviso: test_invalid_hhmm_format
        "", "invalid", "abc", "12:ab", "ab:30", "12.30", "12-30",  # aviso: test_invalid_formats
        " 12", "12 ", " 12:30", "12:30 ", "1a", "a1",  # aviso: test_edge_cases
        "12:30\n",  # Rust's `$` does not match before a trailing newline
        "١٢:٣٠",  # other scripts' digits pass \d but not the integer parse
    ],
)  # fmt: skip
def test_time_rejects(value: str) -> None:
    rejects(canonical_time, "time", value)


def test_time_error_wording() -> None:
    assert rejects(canonical_time, "time", "24").message == (
        "Field 'time' has invalid hours: 24. Hours must be 0-23 in 24-hour format"
    )
    assert rejects(canonical_time, "time", "12:60").message == (
        "Field 'time' has invalid minutes: 60. Minutes must be 0-59"
    )
    assert rejects(canonical_time, "time", "abc").message == (
        "Field 'time' has invalid time format 'abc'. Expected: H, HH, HH:MM, or HHMM"
    )
    err = rejects(canonical_time, "time", "١٢:٣٠")
    assert (err.message, err.details) == (
        "Invalid hours '١٢' in field 'time'",
        "invalid digit found in string",
    )


# --- ExpverHandler (aviso: expver.rs) --------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "default", "expected"),
    [
        ("1", None, "0001"),  # aviso: test_numeric_expver_single_digit
        ("42", None, "0042"),  # aviso: test_numeric_expver_multiple_digits
        ("9999", None, "9999"),  # aviso: test_numeric_expver_four_digits
        ("PROD", None, "prod"),  # aviso: test_string_expver_uppercase
        ("Test", None, "test"),  # aviso: test_string_expver_mixed_case
        ("", "42", "0042"),  # aviso: test_empty_with_numeric_default
        ("", "PROD", "prod"),  # aviso: test_empty_with_string_default
        ("dev-v2.1", None, "dev-v2.1"),  # aviso: test_alphanumeric_string
        ("99999", None, "99999"),  # u32 with more than four digits: no truncation
        ("00001", None, "0001"),
        ("4294967296", None, "4294967296"),  # beyond u32: kept as a string
        ("-1", None, "-1"),
    ],
)
def test_expver_canonical(value: str, default: str | None, expected: str) -> None:
    assert canonical_expver("expver", value, default) == expected


def test_expver_empty_without_default() -> None:  # aviso: test_empty_without_default
    assert "cannot be empty" in rejects(canonical_expver, "expver", "", None).message


# --- PolygonHandler (aviso: polygon.rs) ------------------------------------------------------

BERLIN = "(52.5,13.4,52.6,13.5,52.5,13.6,52.4,13.5,52.5,13.4)"


@pytest.mark.parametrize(
    "value",
    [
        BERLIN,  # aviso: test_validate_and_canonicalize_valid_polygon
        "( 52.5 , 13.4 , 52.6 , 13.5 , 52.5 , 13.6 , 52.4 , 13.5 , 52.5 , 13.4 )",  # with_spaces
        "(52.5200,13.4050,52.5200,13.4500,52.4800,13.4500,52.4800,13.4050,52.5200,13.4050)",
        "(90.0,-180.0,89.0,-180.0,89.0,-179.0,90.0,-180.0)",  # aviso: accepts_exact_boundary_...
        "52.5,13.4,52.6,13.5,52.5,13.6,52.5,13.4",  # parentheses are optional
    ],
)
def test_polygon_kept_exactly_as_sent(value: str) -> None:
    assert validate_polygon("polygon", value) == value


def test_polygon_parse_keeps_lat_lon_order_and_precision() -> None:
    coords = parse_polygon(
        "(52.123456789,13.987654321,52.2,13.8,52.3,13.7,52.123456789,13.987654321)"
    )
    assert coords[0] == (52.123456789, 13.987654321)  # aviso: test_precision_handling
    assert parse_polygon("(52.5,13.4,52.6,13.5,52.5,13.4)") == (
        (52.5, 13.4),
        (52.6, 13.5),
        (52.5, 13.4),
    )


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("(52.5,13.4,52.6,13.5,52.5,13.6,52.4,13.5)", "must be closed"),  # not_closed
        ("(52.5,13.4,52.6,13.5)", "at least 4 coordinate pairs"),  # too_few_points
        ("(0,0,1,0,0,0)", "at least 4 coordinate pairs"),  # aviso: rejects_three_pair_...
        ("", "is empty"),  # aviso: test_validate_and_canonicalize_empty_string
        ("()", "empty between parentheses"),  # aviso: ..._empty_parentheses
        ("(52.5,13.4,52.6)", "odd number of values"),  # aviso: ..._odd_number
        ("(invalid,13.4,52.6,13.5,52.5,13.4)", "could not parse latitude 'invalid'"),
        ("(52.5,invalid,52.6,13.5,52.5,13.4)", "could not parse longitude 'invalid'"),
        ("(50.0,10.0,52.0,10.0,52.0,12.0,50.0,12.0,50.0,10.0", "missing the closing"),
        ("50.0,10.0,52.0,10.0,52.0,12.0,50.0,12.0,50.0,10.0)", "missing the opening"),
        ("(50.0,10.0),52.0,10.0,52.0,12.0,50.0,12.0,50.0,10.0)", "nested"),
        ("(91.0,10.0,50.0,10.0,50.0,11.0,91.0,10.0)", "latitude 91 is outside the valid range"),
        ("(-90.5,10.0,50.0,10.0,50.0,11.0,-90.5,10.0)", "latitude -90.5"),
        ("(50.0,181.0,50.0,10.0,50.0,11.0,50.0,181.0)", "longitude 181 is outside the valid"),
        ("(50.0,-180.5,50.0,10.0,50.0,11.0,50.0,-180.5)", "longitude -180.5"),
        ("(NaN,10.0,50.0,10.0,50.0,11.0,NaN,10.0)", "latitude NaN"),
        ("(inf,10.0,50.0,10.0,50.0,11.0,inf,10.0)", "latitude inf"),
        ("(-inf,10.0,50.0,10.0,50.0,11.0,-inf,10.0)", "latitude -inf"),
    ],
)  # fmt: skip
def test_polygon_rejects_with_field_and_reason(value: str, reason: str) -> None:
    err = rejects(validate_polygon, "polygon", value)
    # aviso: validate_and_canonicalize_wraps_errors_with_field_name_and_validation_marker
    assert err.message.startswith("field 'polygon' must be a valid polygon: ")
    assert reason in err.message


def test_polygon_range_messages_name_the_range() -> None:
    err = rejects(validate_polygon, "polygon", "(91.0,10.0,50.0,10.0,50.0,11.0,91.0,10.0)")
    assert err.message.endswith("latitude 91 is outside the valid range [-90, 90]")
    err = rejects(validate_polygon, "polygon", "(50.0,181.0,50.0,10.0,50.0,11.0,50.0,181.0)")
    assert err.message.endswith("longitude 181 is outside the valid range [-180, 180]")


def test_polygon_coordinates_for_storage() -> None:
    assert len(polygon_coordinates("polygon", BERLIN)) == 5


# --- point (aviso: point.rs) -----------------------------------------------------------------


def test_point_basic_and_parenthesized() -> None:
    # aviso: parse_point_coordinates_accepts_basic_format / _parenthesized_format
    assert parse_point("52.55,13.5") == (52.55, 13.5)
    assert parse_point("(52.55,13.5)") == (52.55, 13.5)
    assert parse_point(" ( 52.55 , 13.5 ) ") == (52.55, 13.5)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("52.55", "Point must be in 'lat,lon' format"),  # aviso: ..._rejects_bad_format
        ("52.55,13.5,1.0", "Point must contain exactly two values: 'lat,lon'"),
        ("91,13.5", "Latitude out of range [-90, 90]: 91"),  # aviso: ..._rejects_out_of_range
        ("52.5,181", "Longitude out of range [-180, 180]: 181"),
        ("", "Point coordinate string cannot be empty"),
        ("invalid-point", "Point must be in 'lat,lon' format"),
        ("x,1", "Invalid latitude value: x"),
        ("1,y", "Invalid longitude value: y"),
    ],
)
def test_point_rejects(value: str, reason: str) -> None:
    assert rejects(parse_point, value).message == reason


# --- dispatch and JSON scalars ---------------------------------------------------------------


def test_canonicalize_dispatches_on_the_handler() -> None:
    rule = FieldRule(name="step", handler=Handler.INT, required=False, int_range=(0, 10))
    assert canonicalize(rule, "007") == "7"
    rule = FieldRule(name="when", handler=Handler.DATE, required=False, canonical_format="%Y-%m-%d")
    assert canonicalize(rule, "20250706") == "2025-07-06"


@pytest.mark.parametrize(
    ("value", "text"),
    [("od", "od"), (4, "4"), (12.5, "12.5"), (1.0, "1.0"), (1e21, "1e21"), (True, "true")],
)
def test_scalar_text_matches_serde(value: object, text: str) -> None:
    assert scalar_text("f", value) == text


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "Field 'f' cannot be null"),
        ([1], "Field 'f' must be a scalar value or constraint object, got array"),
        ({"eq": 1}, "Field 'f' constraint object is not allowed in this operation"),
    ],
)
def test_scalar_text_rejects(value: object, message: str) -> None:
    assert rejects(scalar_text, "f", value).message == message


def test_nan_never_reaches_a_canonical_value() -> None:
    assert math.isnan(parse_rust_f64("nan"))
    rejects(canonical_float, "x", "nan", None)
