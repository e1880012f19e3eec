"""The live keys of the touch system (reference ``live_keys.ts``): table, template,
membership, projected-field and watch keys as 64-bit hashes, and template arguments encoded
as the reference encodes them (numbers as JavaScript prints them, RFC 3339 datetimes)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from email.utils import parsedate_to_datetime
from typing import Final

import xxhash

_HEX16 = re.compile(r"[0-9a-f]{16}")
_INT = re.compile(r"-?(0|[1-9][0-9]*)")


class _Absent:
    """A field the record does not have (JavaScript ``undefined``), unlike JSON ``null``."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent()


def _hash(parts: Iterable[bytes]) -> str:
    return f"{xxhash.xxh3_64_intdigest(b''.join(parts)):016x}"


def _tpl(template_id: str) -> bytes:
    return int(template_id, 16).to_bytes(8, "big")


def _args(args: Sequence[str]) -> list[bytes]:
    out: list[bytes] = []
    for a in args:
        out += (b"\0", a.encode())
    return out


def table_key(entity: str) -> str:
    return _hash((b"tbl\0", entity.encode()))


def template_id(entity: str, fields_sorted: Sequence[str]) -> str:
    return _hash((b"tpl\0", entity.encode(), b"\0", b"\0".join(f.encode() for f in fields_sorted)))


def template_key(template: str) -> str:
    return _hash((b"tpl\0", _tpl(template)))


def membership_key(template: str, args: Sequence[str]) -> str:
    return _hash((b"mem\0", _tpl(template), *_args(args)))


def projected_field_key(template: str, field: str, args: Sequence[str]) -> str:
    return _hash((b"fld\0", _tpl(template), b"\0", field.encode(), *_args(args)))


def watch_key(template: str, args: Sequence[str]) -> str:
    return _hash((b"key\0", _tpl(template), *_args(args)))


def key_id(key: str) -> int:
    """The uint32 id of a routing key: the low 32 bits of a 16-hex-digit key, else xxh32."""
    s = key.strip().lower()
    if _HEX16.fullmatch(s):
        return int(s[8:], 16)
    return int(xxhash.xxh32_intdigest(s.encode()))


# ------------------------------------------------------------------- template arguments


def js_number(value: int | float) -> str | None:
    """ECMAScript ``String(number)`` (JSON numbers are doubles there); None if not finite."""
    try:
        x = float(value)
    except OverflowError:
        return None  # JavaScript reads such a literal as Infinity
    if not math.isfinite(x):
        return None
    if x == 0:
        return "0"
    if x.is_integer() and abs(x) < 1e21:
        return str(int(x))
    t = Decimal(repr(abs(x))).as_tuple()
    digits = "".join(map(str, t.digits))
    exp = int(t.exponent)
    stripped = digits.rstrip("0")
    exp += len(digits) - len(stripped)
    digits = stripped
    k, n = len(digits), exp + len(digits)
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = f"{digits[:n]}.{digits[n:]}"
    elif -6 < n <= 0:
        text = "0." + "0" * -n + digits
    else:
        e = f"e{'+' if n - 1 >= 0 else '-'}{abs(n - 1)}"
        text = digits + e if k == 1 else f"{digits[0]}.{digits[1:]}{e}"
    return ("-" if x < 0 else "") + text


_ISO = re.compile(
    r"([+-]\d{6}|\d{4})(?:-(\d{2})(?:-(\d{2}))?)?"
    r"(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?)?\s*([Zz]|[+-]\d{2}:?\d{2})?"
)


def iso_datetime(text: str) -> str | None:
    """``new Date(text).toISOString()`` for ISO 8601 and RFC 2822 dates (None: not a date).
    A date-time without an offset is read as UTC (JavaScript reads it in the server's zone)."""
    m = _ISO.fullmatch(text.strip())
    try:
        if m is not None:
            year, month, day, hh, mm, ss, frac, zone = m.groups()
            tz = UTC
            if zone and zone not in "Zz":
                sign = -1 if zone[0] == "-" else 1
                digits = zone[1:].replace(":", "")
                tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
            ms = int((frac or "0")[:3].ljust(3, "0"))
            dt = datetime(
                int(year),
                int(month or 1),
                int(day or 1),
                int(hh or 0),
                int(mm or 0),
                int(ss or 0),
                ms * 1000,
                tzinfo=tz,
            )
        else:
            dt = parsedate_to_datetime(text)
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=UTC)
        dt = dt.astimezone(UTC)
    except (ValueError, TypeError, OverflowError, IndexError):
        return None
    return (
        f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:"
        f"{dt.second:02d}.{dt.microsecond // 1000:03d}Z"
    )


def encode_arg(value: object, encoding: str) -> str | None:
    """A template argument as the reference encodes it (``encodeTemplateArg``); None when the
    value cannot be encoded (no fine key for it)."""
    if value is None or value is ABSENT:
        return None
    if encoding == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, bool):
            return "true" if value else "false"
        return js_number(value) if isinstance(value, int | float) else None
    if encoding == "int64":
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return js_number(value)
        if isinstance(value, float):
            return js_number(value) if value.is_integer() else None
        if isinstance(value, str) and _INT.fullmatch(value.strip()):
            return value.strip()
        return None
    if encoding == "bool":
        return ("1" if value else "0") if isinstance(value, bool) else None
    if encoding == "datetime":
        return iso_datetime(value) if isinstance(value, str) else None
    if encoding == "bytes":
        return value if isinstance(value, str) else None
    return None
