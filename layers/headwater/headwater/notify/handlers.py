"""Identifier values: validate and canonicalize one value per handler, exactly as aviso does.

Every rejection is a `FieldError` carrying aviso's wording: `message` is the outer line of
aviso's error chain, `details` the root cause (the two fields of its error body).
"""

from __future__ import annotations

import re
from typing import Any

from headwater.notify.errors import FieldError
from headwater.notify.numbers import (
    RUST_WHITESPACE,
    RustParseError,
    parse_rust_f64,
    parse_rust_int,
    rust_display_f64,
    rust_trim,
    serde_number_text,
)
from headwater.notify.schema import FieldRule, Handler

LatLon = tuple[float, float]


def scalar_text(field: str, value: Any) -> str:
    """A JSON identifier value as the string aviso validates (numbers as serde_json prints)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return serde_number_text(value)
    if value is None:
        raise FieldError(f"Field '{field}' cannot be null")
    if isinstance(value, list):
        raise FieldError(f"Field '{field}' must be a scalar value or constraint object, got array")
    raise FieldError(f"Field '{field}' constraint object is not allowed in this operation")


def canonicalize(rule: FieldRule, value: str) -> str:
    """The canonical form of `value` for `rule`, or `FieldError`."""
    name = rule.name
    match rule.handler:
        case Handler.STRING:
            return canonical_string(name, value, rule.max_length)
        case Handler.DATE:
            return canonical_date(name, value, rule.canonical_format)
        case Handler.ENUM:
            return canonical_enum(name, value, rule.values)
        case Handler.EXPVER:
            return canonical_expver(name, value, rule.default)
        case Handler.INT:
            return canonical_int(name, value, rule.int_range)
        case Handler.FLOAT:
            return canonical_float(name, value, rule.float_range)
        case Handler.TIME:
            return canonical_time(name, value)
        case Handler.POLYGON:
            return validate_polygon(name, value)
    raise AssertionError(rule.handler)  # pragma: no cover


# --- StringHandler, EnumHandler, ExpverHandler --------------------------------------------


def canonical_string(name: str, value: str, max_length: int | None) -> str:
    if value == "":
        raise FieldError(f"Field '{name}' cannot be empty")
    size = len(value.encode("utf-8"))  # Rust's str::len counts bytes
    if max_length is not None and size > max_length:
        raise FieldError(
            f"Field '{name}' exceeds maximum length of {max_length} characters, got: {size}"
        )
    return value


def canonical_enum(name: str, value: str, allowed: tuple[str, ...]) -> str:
    lowered = value.lower()
    if any(option.lower() == lowered for option in allowed):
        return lowered
    raise FieldError(f"Field '{name}' has invalid value '{value}'. Allowed: [{', '.join(allowed)}]")


def _expver_form(value: str) -> str:
    try:
        return f"{parse_rust_int(value, signed=False, bits=32):04d}"
    except RustParseError:
        return value.lower()


def canonical_expver(name: str, value: str, default: str | None) -> str:
    if value == "":
        if default is None:
            raise FieldError(f"Field '{name}' cannot be empty")
        return _expver_form(default)
    return _expver_form(value)


# --- IntHandler, FloatHandler ---------------------------------------------------------------


def canonical_int(name: str, value: str, bounds: tuple[int, int] | None) -> str:
    try:
        parsed = parse_rust_int(value)
    except RustParseError as exc:
        raise FieldError(
            f"Field '{name}' must be a valid integer, got: '{value}'", str(exc)
        ) from None
    if bounds is not None and not bounds[0] <= parsed <= bounds[1]:
        raise FieldError(
            f"Field '{name}' value {parsed} is outside allowed range [{bounds[0]}, {bounds[1]}]"
        )
    return str(parsed)


def canonical_float(name: str, value: str, bounds: tuple[float, float] | None) -> str:
    try:
        parsed = parse_rust_f64(value)
    except RustParseError as exc:
        raise FieldError(
            f"Field '{name}' must be a valid number, got: '{value}'", str(exc)
        ) from None
    if parsed != parsed or parsed in (float("inf"), float("-inf")):
        raise FieldError(f"Field '{name}' must be a finite number, got: '{value}'")
    if bounds is not None and not bounds[0] <= parsed <= bounds[1]:
        raise FieldError(
            f"Field '{name}' value {rust_display_f64(parsed)} is outside allowed range "
            f"[{rust_display_f64(bounds[0])}, {rust_display_f64(bounds[1])}]"
        )
    return rust_display_f64(parsed)


# --- TimeHandler ----------------------------------------------------------------------------

# \d is Unicode-aware in both Rust's regex crate and Python's re; the ASCII-only integer parse
# that follows is what rejects other scripts' digits, as in aviso.
_COLON_TIME = re.compile(r"(\d{1,2}):(\d{2})")
_COMPACT_TIME = re.compile(r"(\d{2})(\d{2})")


def _time_part(name: str, label: str, text: str) -> int:
    try:
        return parse_rust_int(text, signed=False, bits=32)
    except RustParseError as exc:
        raise FieldError(f"Invalid {label} '{text}' in field '{name}'", str(exc)) from None


def _checked_hhmm(name: str, hours: int, minutes: int) -> str:
    if hours > 23:
        raise FieldError(
            f"Field '{name}' has invalid hours: {hours}. Hours must be 0-23 in 24-hour format"
        )
    if minutes > 59:
        raise FieldError(f"Field '{name}' has invalid minutes: {minutes}. Minutes must be 0-59")
    return f"{hours:02d}{minutes:02d}"


def canonical_time(name: str, value: str) -> str:
    size = len(value.encode("utf-8"))
    if value and size <= 2 and all("0" <= c <= "9" for c in value):
        return _checked_hhmm(name, int(value), 0)
    if ":" in value:
        match = _COLON_TIME.fullmatch(value)
        if match is None:
            raise FieldError(
                f"Field '{name}' has invalid HH:MM format '{value}'. "
                "Expected format: HH:MM (e.g., 14:30, 9:05)"
            )
        hours = _time_part(name, "hours", match[1])
        return _checked_hhmm(name, hours, _time_part(name, "minutes", match[2]))
    if size == 4:
        match = _COMPACT_TIME.fullmatch(value)
        if match is None:
            raise FieldError(
                f"Field '{name}' has invalid HHMM format '{value}'. "
                "Expected format: HHMM with exactly 4 digits (e.g., 1430, 0905)"
            )
        hours = _time_part(name, "hours", match[1])
        _checked_hhmm(name, hours, _time_part(name, "minutes", match[2]))
        return value
    raise FieldError(
        f"Field '{name}' has invalid time format '{value}'. Expected: H, HH, HH:MM, or HHMM"
    )


# --- DateHandler (chrono's NaiveDate::parse_from_str, three formats) ------------------------

MIN_YEAR, MAX_YEAR = -262144, 262143  # chrono's NaiveDate range


class _DateParseError(Exception):
    pass


def _scan_number(text: str, pos: int, width: int) -> tuple[int, int]:
    """chrono: skip leading whitespace, then 1..width ASCII digits."""
    while pos < len(text) and text[pos] in RUST_WHITESPACE:
        pos += 1
    end = pos
    while end < len(text) and end - pos < width and "0" <= text[end] <= "9":
        end += 1
    if end == pos:
        raise _DateParseError
    return int(text[pos:end]), end


def _scan_year(text: str, pos: int) -> tuple[int, int]:
    while pos < len(text) and text[pos] in RUST_WHITESPACE:
        pos += 1
    if pos < len(text) and text[pos] in "+-":
        sign = -1 if text[pos] == "-" else 1
        if not text[pos + 1 : pos + 2].isascii() or not text[pos + 1 : pos + 2].isdigit():
            raise _DateParseError  # digits must follow the sign directly
        value, end = _scan_number(text, pos + 1, 10**6)
        return sign * value, end
    return _scan_number(text, pos, 4)


def _literal(text: str, pos: int, char: str) -> int:
    if text[pos : pos + 1] != char:
        raise _DateParseError
    return pos + 1


def is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def month_length(year: int, month: int) -> int:
    return 29 if month == 2 and is_leap(year) else _MONTH_DAYS[month - 1]


def _ymd(year: int, month: int, day: int) -> tuple[int, int, int]:
    if not (MIN_YEAR <= year <= MAX_YEAR and 1 <= month <= 12):
        raise _DateParseError
    if not 1 <= day <= month_length(year, month):
        raise _DateParseError
    return year, month, day


def _parse_date_format(text: str, fmt: str) -> tuple[int, int, int]:
    year, pos = _scan_year(text, 0)
    if fmt == "%Y-%m-%d":
        pos = _literal(text, pos, "-")
        month, pos = _scan_number(text, pos, 2)
        pos = _literal(text, pos, "-")
        day, pos = _scan_number(text, pos, 2)
    elif fmt == "%Y%m%d":
        month, pos = _scan_number(text, pos, 2)
        day, pos = _scan_number(text, pos, 2)
    else:  # %Y-%j
        pos = _literal(text, pos, "-")
        ordinal, pos = _scan_number(text, pos, 3)
        if pos != len(text) or not 1 <= ordinal <= (366 if is_leap(year) else 365):
            raise _DateParseError
        month = 1
        while ordinal > month_length(year, month):
            ordinal -= month_length(year, month)
            month += 1
        return _ymd(year, month, ordinal)
    if pos != len(text):
        raise _DateParseError
    return _ymd(year, month, day)


def parse_date(value: str) -> tuple[int, int, int]:
    """(year, month, day) from `YYYY-MM-DD`, `YYYYMMDD` or `YYYY-DDD`, tried in that order."""
    for fmt in ("%Y-%m-%d", "%Y%m%d", "%Y-%j"):
        try:
            return _parse_date_format(value, fmt)
        except _DateParseError:
            continue
    raise _DateParseError


def format_date(year: int, month: int, day: int, fmt: str) -> str:
    # chrono writes years outside 0..=9999 with an explicit sign
    year_text = f"{year:04d}" if 0 <= year <= 9999 else f"{year:+05d}"
    sep = "-" if fmt == "%Y-%m-%d" else ""
    return f"{year_text}{sep}{month:02d}{sep}{day:02d}"


def canonical_date(name: str, value: str, fmt: str) -> str:
    try:
        year, month, day = parse_date(value)
    except _DateParseError:
        raise FieldError(
            f"Failed to parse date value for field '{name}'",
            f"Field '{name}' contains invalid date '{value}'. "
            "Expected: YYYY-MM-DD, YYYYMMDD, or YYYY-DDD",
        ) from None
    if fmt not in ("%Y%m%d", "%Y-%m-%d"):
        raise FieldError(f"Unsupported date format '{fmt}' for field '{name}'")
    return format_date(year, month, day, fmt)


# --- PolygonHandler and the point filter ----------------------------------------------------


def parse_polygon(text: str) -> tuple[LatLon, ...]:
    """`lat,lon,...` pairs (optionally inside one pair of parentheses); raises FieldError with
    aviso's reason (not yet prefixed with the field name)."""
    raw = rust_trim(text)
    if raw == "":
        raise FieldError("polygon coordinate string is empty")
    opens, closes = raw.startswith("("), raw.endswith(")")
    if opens and closes:
        inner = raw[1:-1]
    elif opens:
        raise FieldError("polygon coordinate string has opening '(' but is missing the closing ')'")
    elif closes:
        raise FieldError("polygon coordinate string has closing ')' but is missing the opening '('")
    else:
        inner = raw
    if "(" in inner or ")" in inner:
        raise FieldError(
            "polygon coordinate string must have at most one outer pair of parentheses; "
            "nested '(' or ')' are not allowed"
        )
    inner = rust_trim(inner)
    if inner == "":
        raise FieldError("polygon coordinate string is empty between parentheses")
    parts = inner.split(",")
    if len(parts) % 2:
        raise FieldError(
            "polygon coordinates must be in lat,lon pairs (got an odd number of values)"
        )
    coordinates: list[LatLon] = []
    for i in range(0, len(parts), 2):
        lat_text, lon_text = rust_trim(parts[i]), rust_trim(parts[i + 1])
        try:
            lat = parse_rust_f64(lat_text)
        except RustParseError:
            raise FieldError(f"could not parse latitude '{lat_text}' as a number") from None
        try:
            lon = parse_rust_f64(lon_text)
        except RustParseError:
            raise FieldError(f"could not parse longitude '{lon_text}' as a number") from None
        if not -90.0 <= lat <= 90.0:  # also rejects NaN and infinities
            raise FieldError(
                f"latitude {rust_display_f64(lat)} is outside the valid range [-90, 90]"
            )
        if not -180.0 <= lon <= 180.0:
            raise FieldError(
                f"longitude {rust_display_f64(lon)} is outside the valid range [-180, 180]"
            )
        coordinates.append((lat, lon))
    return tuple(coordinates)


def check_polygon_shape(coordinates: tuple[LatLon, ...]) -> None:
    if len(coordinates) < 4:
        raise FieldError(
            "polygon must have at least 4 coordinate pairs (3 unique vertices plus a "
            "closing repeat of the first vertex)"
        )
    if coordinates[0] != coordinates[-1]:
        raise FieldError("polygon must be closed (first and last coordinates must be identical)")


def polygon_coordinates(name: str, value: str) -> tuple[LatLon, ...]:
    try:
        coordinates = parse_polygon(value)
        check_polygon_shape(coordinates)
    except FieldError as exc:
        raise FieldError(f"field '{name}' must be a valid polygon: {exc.message}") from None
    return coordinates


def validate_polygon(name: str, value: str) -> str:
    """aviso keeps a valid polygon exactly as sent (no canonical form)."""
    polygon_coordinates(name, value)
    return value


def parse_point(text: str) -> LatLon:
    """`lat,lon` or `(lat,lon)`; FieldError with aviso's reason."""
    trimmed = rust_trim(text)
    if trimmed == "":
        raise FieldError("Point coordinate string cannot be empty")
    inner = trimmed
    if trimmed.startswith("(") and trimmed.endswith(")") and len(trimmed) >= 2:
        inner = trimmed[1:-1]
    parts = [rust_trim(p) for p in rust_trim(inner).split(",")]
    if len(parts) < 2:
        raise FieldError("Point must be in 'lat,lon' format")
    if len(parts) > 2:
        raise FieldError("Point must contain exactly two values: 'lat,lon'")
    try:
        lat = parse_rust_f64(parts[0])
    except RustParseError:
        raise FieldError(f"Invalid latitude value: {parts[0]}") from None
    try:
        lon = parse_rust_f64(parts[1])
    except RustParseError:
        raise FieldError(f"Invalid longitude value: {parts[1]}") from None
    if not -90.0 <= lat <= 90.0:
        raise FieldError(f"Latitude out of range [-90, 90]: {rust_display_f64(lat)}")
    if not -180.0 <= lon <= 180.0:
        raise FieldError(f"Longitude out of range [-180, 180]: {rust_display_f64(lon)}")
    return lat, lon
