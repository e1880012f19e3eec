"""`from_date` for watch/replay: the six accepted forms, normalized to UTC.

RFC 3339 (`Z` or an offset), space-separated with an offset, naive (taken as UTC, with `T` or a
space, optional fraction), unix seconds (up to 11 significant digits) and unix milliseconds (12
or more). Same rules and wording as aviso (chrono), within Python's datetime range.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from headwater.notify.numbers import RustParseError, parse_rust_int, rust_trim

_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))"
)
# chrono's generic items: 1-4 digit year (or signed), 1-2 digit fields, whitespace allowed
# before each number, optional `.fraction` after the seconds
_DATE = r"\s*([+-]?[0-9]+)-\s*([0-9]{1,2})-\s*([0-9]{1,2})"
_TIME = r"\s*([0-9]{1,2}):\s*([0-9]{1,2}):\s*([0-9]{1,2})(?:\.([0-9]+))?"
_SPACE_OFFSET = re.compile(_DATE + " " + _TIME + r"\s*([+-])([0-9]{2})[:\s]*([0-9]{2})")
_NAIVE = re.compile(_DATE + "[T ]" + _TIME)

_FAILURE = (
    "expected ISO-8601 datetime (RFC3339/space-separated with optional timezone) "
    "or unix epoch seconds/milliseconds"
)


class FromDateError(ValueError):
    pass


def _year(text: str) -> int:
    digits = text.lstrip("+-")
    if text[0] not in "+-" and len(digits) > 4:
        raise ValueError(text)
    return int(text)


def _assemble(
    year: int,
    month: int,
    day: int,
    hour: int,
    minute: int,
    second: int,
    fraction: str | None,
    offset_minutes: int,
) -> datetime:
    leap = second == 60  # chrono keeps a leap second; here it is the next second
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    moment = datetime(year, month, day, hour, minute, 59 if leap else second, micros, tzinfo=UTC)
    return moment + timedelta(seconds=1 if leap else 0, minutes=-offset_minutes)


def _offset(sign: str, hours: str, minutes: str) -> int:
    hh, mm = int(hours), int(minutes)
    if mm > 59 or hh > 23:
        raise ValueError("offset out of range")
    return (hh * 60 + mm) * (-1 if sign == "-" else 1)


def _unix(text: str) -> datetime:
    significant = text.lstrip("0")
    digit_count = len(significant) or 1
    try:
        value = parse_rust_int(text)
    except RustParseError as exc:
        raise FromDateError(f"failed to parse unix timestamp '{text}': {exc}") from None
    try:
        if digit_count <= 11:
            return datetime.fromtimestamp(value, UTC)
        return datetime.fromtimestamp(value // 1000, UTC) + timedelta(milliseconds=value % 1000)
    except (OverflowError, OSError, ValueError):
        unit = "seconds" if digit_count <= 11 else "milliseconds"
        raise FromDateError(f"invalid unix {unit} timestamp '{text}'") from None


def parse_from_date(text: str) -> datetime:
    """UTC datetime, or FromDateError with aviso's inner reason."""
    trimmed = rust_trim(text)
    if (
        trimmed.startswith("-")
        and len(trimmed) > 1
        and trimmed[1:].isascii()
        and trimmed[1:].isdigit()
    ):
        raise FromDateError(f"negative unix timestamps are not supported: '{trimmed}'")
    unsigned = trimmed[1:] if trimmed.startswith("+") else trimmed
    if unsigned and unsigned.isascii() and unsigned.isdigit():
        return _unix(unsigned)
    try:
        if match := _RFC3339.fullmatch(trimmed):
            y, mo, d, h, mi, s, frac, zulu, sign, oh, om = match.groups()
            offset = 0 if zulu else _offset(sign, oh, om)
            return _assemble(int(y), int(mo), int(d), int(h), int(mi), int(s), frac, offset)
        if match := _SPACE_OFFSET.fullmatch(trimmed):
            y, mo, d, h, mi, s, frac, sign, oh, om = match.groups()
            return _assemble(
                _year(y), int(mo), int(d), int(h), int(mi), int(s), frac, _offset(sign, oh, om)
            )
        if match := _NAIVE.fullmatch(trimmed):
            y, mo, d, h, mi, s, frac = match.groups()
            return _assemble(_year(y), int(mo), int(d), int(h), int(mi), int(s), frac, 0)
    except (ValueError, OverflowError):
        pass
    raise FromDateError(_FAILURE)
